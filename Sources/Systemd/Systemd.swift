#if canImport(Glibc)
import Glibc
#endif
import CSystemd

/// The service manager's side of the daemon, over libsystemd: readiness, status and
/// watchdog notifications, and the machine's app-specific id. The only file that
/// touches CSystemd's notify and id128 calls.
public enum ServiceManager {
    /// True when started by systemd with a notification socket.
    public static var isNotifyEnabled: Bool {
        guard let value = getenv("NOTIFY_SOCKET") else { return false }
        return value.pointee != 0
    }

    /// Sends `message` (e.g. "READY=1\nSTATUS=…") to $NOTIFY_SOCKET. A missing socket is
    /// not an error; a failure to send is returned for the log.
    @discardableResult
    public static func notify(_ message: String) -> Int32 {
        sd_notify(0, message)
    }

    /// The watchdog interval systemd expects pings within, when it set one for us.
    public static func watchdogMicroseconds() -> UInt64? {
        var usec: UInt64 = 0
        guard sd_watchdog_enabled(0, &usec) > 0, usec > 0 else { return nil }
        return usec
    }

    /// A stable id for this machine and this application, derived by libsystemd from
    /// /etc/machine-id with an HMAC, so the machine id itself never leaves the host.
    /// Returns 32 hex digits, or nil when the machine has no machine-id.
    public static func machineAppSpecificID() -> String? {
        // Our application id: an arbitrary constant, fixed forever.
        var app = sd_id128_t()
        let appBytes: [UInt8] = [0xec, 0x0d, 0x3a, 0x71, 0x5e, 0x42, 0x4b, 0x8f, 0x9d, 0x16, 0x70, 0x2c, 0xa1, 0x5b, 0xe3, 0x04]
        withUnsafeMutableBytes(of: &app) { $0.copyBytes(from: appBytes) }
        var id = sd_id128_t()
        guard sd_id128_get_machine_app_specific(app, &id) == 0 else { return nil }
        let hex: [Character] = Array("0123456789abcdef")
        var out = ""
        withUnsafeBytes(of: &id) { raw in
            for byte in raw {
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0xF)])
            }
        }
        return out
    }
}
