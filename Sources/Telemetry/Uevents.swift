#if canImport(Glibc)
import Glibc
#endif
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
/// that, and messages that do not come from the kernel itself are dropped.
public final class PowerSupplyUevents: Sendable {
    /// What `next()` returns.
    public enum Notice: Sendable, Equatable {
        case event(Uevent)
        /// The socket's buffer overflowed (ENOBUFS): some events were lost, so read
        /// everything again.
        case eventsLost
    }

    /// The netlink protocol number (linux/netlink.h), which Glibc's module does not export.
    static let netlinkKobjectUevent: Int32 = 15
    /// The kernel's multicast group; group 2 is udev's re-broadcast.
    static let kernelGroup: UInt32 = 1
    /// Large enough for a burst of events at plug time.
    static let receiveBufferBytes: Int32 = 1 << 20

    public let fd: Int32
    public let subsystem: String

    /// Opens and binds the socket (non-blocking, close-on-exec). Throws when the kernel
    /// or a sandbox forbids it (systemd's RestrictAddressFamilies= must allow AF_NETLINK).
    public init(subsystem: String = "power_supply") throws(SystemError) {
        self.subsystem = subsystem
        let fd = try systemCall("socket", "AF_NETLINK/NETLINK_KOBJECT_UEVENT") {
            socket(AF_NETLINK, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue),
                   PowerSupplyUevents.netlinkKobjectUevent)
        }
        var size = PowerSupplyUevents.receiveBufferBytes
        // Best effort: the kernel caps it at net.core.rmem_max without CAP_NET_ADMIN.
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        // struct sockaddr_nl { sa_family_t nl_family; unsigned short nl_pad; __u32 nl_pid;
        // __u32 nl_groups; }: not in Glibc's module, so laid out by hand. pid 0 lets the
        // kernel assign the port id.
        var address = [UInt8](repeating: 0, count: 12)
        address.withUnsafeMutableBytes { raw in
            raw.storeBytes(of: UInt16(AF_NETLINK), toByteOffset: 0, as: UInt16.self)
            raw.storeBytes(of: PowerSupplyUevents.kernelGroup, toByteOffset: 8, as: UInt32.self)
        }
        let rc = address.withUnsafeBytes { raw in
            bind(fd, raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(raw.count))
        }
        if rc != 0 {
            let code = errno
            close(fd)
            throw SystemError("bind", errno: code, detail: "NETLINK_KOBJECT_UEVENT group 1")
        }
        self.fd = fd
    }

    deinit { close(fd) }

    /// Suspends until a uevent of the subsystem arrives (or events were lost), through
    /// the reactor; no thread blocks. Throws CancellationError when the task is cancelled.
    public func next() async throws -> Notice {
        var buffer = [UInt8](repeating: 0, count: Uevent.maxBytes + 1)
        var source = [UInt8](repeating: 0, count: 12)
        while true {
            try Task.checkCancellation()
            var sourceLength = socklen_t(source.count)
            let n = buffer.withUnsafeMutableBytes { raw in
                source.withUnsafeMutableBytes { address in
                    recvfrom(fd, raw.baseAddress, raw.count, Int32(MSG_DONTWAIT),
                             address.baseAddress!.assumingMemoryBound(to: sockaddr.self), &sourceLength)
                }
            }
            if n < 0 {
                switch errno {
                case EAGAIN, EINTR: try await Reactor.shared.waitReadable(fd)
                case ENOBUFS: return .eventsLost
                default: throw SystemError("recvfrom", errno: errno, detail: "uevent socket")
                }
                continue
            }
            // The sender's port id is 0 only for the kernel.
            let senderPort = source.withUnsafeBytes { $0.load(fromByteOffset: 4, as: UInt32.self) }
            guard senderPort == 0, n <= Uevent.maxBytes, let event = Uevent.parse(buffer[0..<n]) else { continue }
            if event.subsystem == subsystem { return .event(event) }
        }
    }
}
