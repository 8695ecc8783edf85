#if canImport(Glibc)
import Glibc
#endif
import CBluetooth
import Posix
import WorkerCore

/// The kernel's view of the Bluetooth controllers, through libbluetooth (the only file
/// that imports it) and sysfs: what to tell the operator when bluetoothd has no usable
/// adapter. bluetoothd's own view comes over D-Bus; this one works without it.
public enum AdapterDiagnostics {
    public struct KernelAdapter: Sendable, Equatable {
        public var name: String
        public var address: String?
        public var up: Bool?
        public var softBlocked: Bool?
        public var hardBlocked: Bool?
    }

    public enum KernelView: Sendable, Equatable {
        /// The kernel has no Bluetooth (AF_BLUETOOTH sockets fail).
        case unsupported(String)
        case adapters([KernelAdapter])
    }

    /// Every controller the kernel knows, with its state.
    public static func kernelView(sysfsRoot: String = "") -> KernelView {
        let probe = socket(AF_BLUETOOTH, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue), BTPROTO_HCI)
        if probe < 0 {
            let why = String(cString: strerror(errno))
            return .unsupported(
                "this kernel offers no Bluetooth sockets (AF_BLUETOOTH: \(why)): load the bluetooth module, or use a kernel built with Bluetooth")
        }
        close(probe)
        let names = (listDirectory(sysfsRoot + "/sys/class/bluetooth") ?? []).filter { $0.hasPrefix("hci") && !$0.contains(":") }.sorted()
        return .adapters(
            names.map { name in
                var adapter = KernelAdapter(name: name)
                let id = hci_devid(name)
                if id >= 0 {
                    var info = hci_dev_info()
                    if hci_devinfo(id, &info) == 0 {
                        adapter.up = info.flags & 1 != 0  // bit HCI_UP
                        var text = [CChar](repeating: 0, count: 18)
                        ba2str(&info.bdaddr, &text)
                        adapter.address = String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                    }
                }
                for entry in listDirectory(sysfsRoot + "/sys/class/bluetooth/\(name)") ?? [] where entry.hasPrefix("rfkill") {
                    let base = sysfsRoot + "/sys/class/bluetooth/\(name)/\(entry)/"
                    adapter.softBlocked = readFlag(base + "soft")
                    adapter.hardBlocked = readFlag(base + "hard")
                }
                return adapter
            })
    }

    /// A setup problem the peripheral's machine found, with the kernel's view as advice.
    public static func describe(_ problem: BluetoothSetupProblem) -> String {
        switch problem {
        case .bluezAbsent(let adapter): problem.summary + ": " + advice(for: adapter)
        case .noAdapter(let configured, let known): explain(configured: configured, known: known)
        case .poweredOff(let adapter): problem.summary + ": " + advice(for: adapter)
        }
    }

    /// Why bluetoothd offers no usable adapter, and what to do.
    public static func explain(configured: String?, known: [String]) -> String {
        let kernel = kernelView()
        if case .unsupported(let why) = kernel { return why }
        if let configured {
            if known.isEmpty { return "bluetoothd knows no adapter; \(configured): " + advice(for: configured) }
            return
                "adapter \(configured) (bluetooth.adapter) is not known to bluetoothd, which has \(known.joined(separator: ", ")): fix bluetooth.adapter or leave it out to use the first powered one; \(configured): "
                + advice(for: configured)
        }
        if known.isEmpty { return "bluetoothd knows no adapter: " + advice(for: nil) }
        return "no adapter is powered (\(known.joined(separator: ", "))): power one on (bluetoothctl power on), or check: " + advice(for: nil)
    }

    /// The kernel's state of one adapter (or of all), phrased as advice.
    public static func advice(for name: String?) -> String {
        switch kernelView() {
        case .unsupported(let why):
            return why
        case .adapters(let all):
            let adapters = name.map { wanted in all.filter { $0.name == wanted } } ?? all
            if adapters.isEmpty {
                return name.map { "the kernel has no controller \($0) (ls /sys/class/bluetooth shows \(all.map(\.name).joined(separator: ", ")))" }
                    ?? "the kernel has no Bluetooth controller: plug one in or check dmesg for firmware errors"
            }
            return adapters.map { adapter in
                if adapter.hardBlocked == true {
                    return "\(adapter.name) is hard-blocked by a switch or the firmware (rfkill): turn the radio switch on"
                }
                if adapter.softBlocked == true { return "\(adapter.name) is soft-blocked (rfkill): run 'rfkill unblock bluetooth'" }
                if adapter.up == false {
                    return
                        "\(adapter.name) is down in the kernel: run 'bluetoothctl power on' (or 'btmgmt --index \(adapter.name.dropFirst(3)) power on')"
                }
                return
                    "\(adapter.name) is up in the kernel\(adapter.address.map { " (\($0))" } ?? ""); if bluetoothd is not running: systemctl start bluetooth"
            }.joined(separator: "; ")
        }
    }

    private static func readFlag(_ path: String) -> Bool? {
        guard let text = try? readFile(path, limit: 16) else { return nil }
        switch String(decoding: text, as: UTF8.self).trimmingWhitespace {
        case "1": return true
        case "0": return false
        default: return nil
        }
    }
}

extension AdapterDiagnostics.KernelAdapter {
    init(name: String) { self.init(name: name, address: nil, up: nil, softBlocked: nil, hardBlocked: nil) }
}

private extension String {
    var trimmingWhitespace: String {
        String(unicodeScalars.drop { $0 == " " || $0 == "\n" }.reversed().drop { $0 == " " || $0 == "\n" }.reversed().map(Character.init))
    }
}
