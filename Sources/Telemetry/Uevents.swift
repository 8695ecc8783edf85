import Posix

/// One kernel uevent: `ACTION@DEVPATH\0KEY=VALUE\0…` as the kernel multicasts it on
/// NETLINK_KOBJECT_UEVENT group 1.
public struct Uevent: Sendable, Equatable {
    /// Larger datagrams are not kernel uevents (the kernel's buffer is 2 KiB of
    /// variables plus the header).
    public static let maxBytes = 8192
    /// More variables than this is garbage; a real uevent has about a dozen.
    public static let maxProperties = 128

    public var action: String
    public var devpath: String
    /// The `KEY=VALUE` variables; a repeated key keeps its last value.
    public var properties: [String: String]

    public init(action: String, devpath: String, properties: [String: String]) {
        self.action = action
        self.devpath = devpath
        self.properties = properties
    }

    public var subsystem: String? { properties["SUBSYSTEM"] }

    /// Parses one datagram; nil for anything that is not a whole kernel uevent: empty,
    /// larger than `maxBytes`, udev's re-broadcasts (they start with `libudev\0`), a
    /// header without `@` or without a `/` path, text that is not UTF-8, or a datagram
    /// whose last variable is not NUL-terminated (truncated). Variables without `=` or
    /// with an empty key are skipped.
    public static func parse(_ datagram: some Collection<UInt8>) -> Uevent? {
        let bytes = Array(datagram)
        guard !bytes.isEmpty, bytes.count <= maxBytes, bytes.last == 0 else { return nil }
        if bytes.starts(with: Array("libudev".utf8) + [0]) { return nil }
        var fields = bytes.dropLast().split(separator: 0, omittingEmptySubsequences: false)
        guard !fields.isEmpty else { return nil }
        let header = fields.removeFirst()
        guard let at = header.firstIndex(of: UInt8(ascii: "@")),
            let action = String(validating: header[header.startIndex..<at], as: UTF8.self),
            let devpath = String(validating: header[(at + 1)...], as: UTF8.self),
            !action.isEmpty, devpath.hasPrefix("/")
        else { return nil }
        guard fields.count <= maxProperties else { return nil }
        var properties: [String: String] = [:]
        for field in fields {
            guard let equals = field.firstIndex(of: UInt8(ascii: "=")), equals > field.startIndex,
                let key = String(validating: field[field.startIndex..<equals], as: UTF8.self),
                let value = String(validating: field[(equals + 1)...], as: UTF8.self)
            else { continue }
            properties[key] = value
        }
        return Uevent(action: action, devpath: devpath, properties: properties)
    }
}

/// The kernel's uevent netlink socket, filtered to one subsystem (`power_supply` by
/// default): plugging and unplugging a charger, a battery's periodic change. A uevent
/// only says "look again": the reader re-reads sysfs, so nothing in it is trusted beyond
/// that (and only a privileged process could send on the kernel's group anyway).
public final class PowerSupplyUevents: Sendable {
    /// What `next()` returns.
    public enum Notice: Sendable, Equatable {
        case event(Uevent)
        /// The kernel dropped events (the socket's buffer overflowed): read everything again.
        case eventsLost
    }

    /// The kernel's multicast group; group 2 is udev's re-broadcast.
    static let kernelGroup: UInt32 = 1

    public let socket: NetlinkSocket
    public let subsystem: String

    /// Opens and binds the socket (non-blocking, close-on-exec). Throws when the kernel
    /// or a sandbox forbids it (systemd's RestrictAddressFamilies= must allow AF_NETLINK).
    public init(subsystem: String = "power_supply") throws(SystemError) {
        self.subsystem = subsystem
        socket = try NetlinkSocket(protocol: NetlinkSocket.kobjectUevent, groups: PowerSupplyUevents.kernelGroup)
    }

    /// Suspends until a uevent of the subsystem arrives (or events were lost), through
    /// the reactor; no thread blocks. Throws CancellationError when the task is cancelled.
    public func next() async throws -> Notice {
        while true {
            try Task.checkCancellation()
            switch try await socket.receive() {
            case .overrun:
                return .eventsLost
            case .datagram(let bytes):
                if let event = Uevent.parse(bytes), event.subsystem == subsystem { return .event(event) }
            }
        }
    }
}
