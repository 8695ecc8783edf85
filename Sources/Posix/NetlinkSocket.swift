#if canImport(Glibc)
import Glibc
#endif
import CWorkerShims

/// A netlink socket (rtnetlink, uevents), non-blocking, read through the reactor.
public final class NetlinkSocket: Sendable {
    public static let route: Int32 = 0  // NETLINK_ROUTE
    public static let kobjectUevent: Int32 = 15  // NETLINK_KOBJECT_UEVENT

    public let fd: Int32

    public init(protocol: Int32, groups: UInt32, receiveBuffer: Int32 = 1 << 20) throws(SystemError) {
        let rc = ecw_netlink_open(`protocol`, groups, receiveBuffer)
        if rc < 0 { throw SystemError("netlink socket", errno: -rc, detail: "protocol \(`protocol`)") }
        fd = rc
    }

    deinit { close(fd) }

    /// Sends a request to the kernel.
    public func send(_ bytes: [UInt8]) throws(SystemError) {
        _ = try systemCall("send", "netlink") { bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, 0) } }
    }

    /// What `dump`'s handler says of a reply datagram.
    public enum DumpProgress: Sendable {
        case more
        case done
    }

    /// Sends a dump request and hands every reply datagram to `handle` until it says
    /// `.done`, on the calling thread: for requests the kernel answers at once (sock_diag's
    /// dumps), where a trip through the reactor would cost more than the answer. Waits at
    /// most `timeoutMs` for each datagram and reads at most `maxDatagrams`; throws
    /// ETIMEDOUT or E2BIG past those. After a throw the socket may hold the rest of the
    /// dump: close it rather than send another request on it.
    public func dump(
        _ request: [UInt8], timeoutMs: Int32 = 1_000, maxDatagrams: Int = 4_096,
        handle: ([UInt8]) throws(SystemError) -> DumpProgress
    ) throws(SystemError) {
        try send(request)
        var buffer = [UInt8](repeating: 0, count: 32_768)
        for _ in 0..<maxDatagrams {
            let n = try systemCall("recv", "netlink dump") { () -> Int in
                var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                let polled = Glibc.poll(&ready, 1, timeoutMs)
                if polled == 0 { errno = ETIMEDOUT; return -1 }
                if polled < 0 { return -1 }
                return buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_TRUNC)) }
            }
            if n > buffer.count { throw SystemError("recv", errno: EMSGSIZE, detail: "netlink dump: a reply over \(buffer.count) bytes") }
            if try handle(Array(buffer[0..<n])) == .done { return }
        }
        throw SystemError("recv", errno: E2BIG, detail: "netlink dump: more than \(maxDatagrams) replies")
    }

    public enum Received: Sendable {
        case datagram([UInt8])
        /// The kernel dropped messages (ENOBUFS): whatever state was built from them is stale.
        case overrun
    }

    /// The next datagram, suspending until one arrives. Datagrams larger than the
    /// buffer are truncated by the kernel (MSG_TRUNC tells us), and reported as an overrun.
    public func receive() async throws -> Received {
        do {
            switch try await receiveDatagram(fd, capacity: 65_536, detail: "netlink") {
            case .datagram(let bytes): return .datagram(bytes)
            case .truncated: return .overrun
            }
        } catch let error as SystemError where error.errno == ENOBUFS {
            return .overrun
        }
    }
}

/// One datagram of a non-blocking socket, or how long it was when it did not fit.
public enum ReceivedDatagram: Sendable, Equatable {
    case datagram([UInt8])
    /// Longer than the buffer (the kernel cut it: MSG_TRUNC gives its whole length).
    case truncated(length: Int)
}

/// Reads the next datagram of the non-blocking socket `fd`, suspending on the reactor until
/// one arrives (netlink, the Bluetooth management channel).
public func receiveDatagram(_ fd: Int32, capacity: Int, detail: String) async throws -> ReceivedDatagram {
    var buffer = [UInt8](repeating: 0, count: capacity)
    while true {
        let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_TRUNC)) }
        if n > buffer.count { return .truncated(length: n) }
        if n >= 0 { return .datagram(Array(buffer[0..<n])) }
        switch errno {
        case EAGAIN, EINTR: try await Reactor.shared.waitReadable(fd)
        case let code:
            preconditionErrnoIsNotABug(code, call: "recv (\(detail))")
            throw SystemError("recv", errno: code, detail: detail)
        }
    }
}
