#if canImport(Glibc)
import Glibc
#endif
import CWorkerShims

/// A TCP listener on 127.0.0.1 only (the proxy's HTTP API is for this machine's tools).
public final class LoopbackTCPListener: Sendable {
    public let fd: Int32
    public let port: UInt16

    /// Binds 127.0.0.1:`port` (0: any free port, see `port`).
    public init(port: UInt16) throws(SystemError) {
        fd = try systemCall("socket") { socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        do {
            var one: Int32 = 1
            _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
            let fd = self.fd
            try withUnsafePointer(to: &address) { pointer throws(SystemError) in
                try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw throws(SystemError) in
                    _ = try systemCall("bind", "127.0.0.1:\(port)") { bind(fd, raw, socklen_t(MemoryLayout<sockaddr_in>.size)) }
                }
            }
            try systemCall("listen") { listen(fd, 64) }
            var bound = sockaddr_in()
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &bound) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
            }
            self.port = UInt16(bigEndian: bound.sin_port)
        } catch {
            Glibc.close(fd)
            throw error
        }
    }

    public func accept() async throws -> UnixConnection { try await acceptConnection(fd, detail: "127.0.0.1:\(port)") }

    public func close() { Glibc.close(fd) }
}
