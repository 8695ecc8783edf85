#if canImport(Glibc)
import Glibc
#endif
import CWorkerShims

/// A TCP listener on a loopback address only, 127.0.0.1 or [::1] (the proxy's HTTP API is
/// for this machine's tools).
public final class LoopbackTCPListener: Sendable {
    /// 127.0.0.1 or [::1].
    public enum Family: Sendable { case ipv4, ipv6 }

    public let fd: Int32
    public let port: UInt16
    public let family: Family

    /// Binds 127.0.0.1:`port` or [::1]:`port` (0: any free port, see `port`).
    public init(port: UInt16, family: Family = .ipv4) throws(SystemError) {
        self.family = family
        let domain = family == .ipv4 ? AF_INET : AF_INET6
        let where_ = family == .ipv4 ? "127.0.0.1:\(port)" : "[::1]:\(port)"
        fd = try systemCall("socket") {
            socket(domain, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        }
        do {
            var one: Int32 = 1
            _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
            let fd = self.fd
            switch family {
            case .ipv4:
                var address = sockaddr_in()
                address.sin_family = sa_family_t(AF_INET)
                address.sin_port = port.bigEndian
                address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
                try withUnsafePointer(to: &address) { pointer throws(SystemError) in
                    try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw throws(SystemError) in
                        _ = try systemCall("bind", where_) { bind(fd, raw, socklen_t(MemoryLayout<sockaddr_in>.size)) }
                    }
                }
            case .ipv6:
                // [::1] only, never the IPv4 side of a dual-stack socket.
                _ = setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(MemoryLayout<Int32>.size))
                var address = sockaddr_in6()
                address.sin6_family = sa_family_t(AF_INET6)
                address.sin6_port = port.bigEndian
                address.sin6_addr = in6addr_loopback
                try withUnsafePointer(to: &address) { pointer throws(SystemError) in
                    try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw throws(SystemError) in
                        _ = try systemCall("bind", where_) { bind(fd, raw, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
                    }
                }
            }
            try systemCall("listen") { listen(fd, 64) }
            var bound = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            _ = withUnsafeMutablePointer(to: &bound) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
            }
            self.port = withUnsafePointer(to: &bound) { pointer in
                family == .ipv4
                    ? pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin_port) }
                    : pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin6_port) }
            }
        } catch {
            Glibc.close(fd)
            throw error
        }
    }

    /// Where it listens, as a URL's host and port (`127.0.0.1:11435`, `[::1]:11435`).
    public var authority: String { family == .ipv4 ? "127.0.0.1:\(port)" : "[::1]:\(port)" }

    /// The next connection, with Nagle's algorithm off: the proxy streams small pieces of
    /// text, each of which must leave at once rather than wait for the peer's delayed ACK
    /// of the one before (as Go's net/http, Ollama's server, does by default).
    public func accept() async throws -> UnixConnection {
        let connection = try await acceptConnection(fd, detail: authority)
        var one: Int32 = 1
        _ = setsockopt(connection.fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        return connection
    }

    public func close() { Glibc.close(fd) }
}
