#if canImport(Glibc)
import Glibc
#endif
import CWorkerShims

/// Fills a sockaddr_un for `path`; paths longer than sun_path are an error (not truncated).
func withUnixAddress<T>(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) throws(SystemError) -> T) throws(SystemError) -> T {
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let bytes = Array(path.utf8)
    let capacity = MemoryLayout.size(ofValue: address.sun_path)
    guard bytes.count < capacity else {
        throw SystemError("socket path", errno: ENAMETOOLONG, detail: "\(path) (\(bytes.count) bytes; at most \(capacity - 1))")
    }
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        raw.copyBytes(from: bytes)
        raw[bytes.count] = 0
    }
    let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + 1)
    return try withUnsafePointer(to: &address) { (pointer) throws(SystemError) -> T in
        try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { (sa) throws(SystemError) -> T in try body(sa, length) }
    }
}

/// A listening Unix stream socket, non-blocking, accepted through the reactor.
public final class UnixListener: Sendable {
    public let fd: Int32
    public let path: String

    /// Binds `path`. A stale socket file left by a crash is replaced; a live one (another
    /// daemon answers on it) is an EADDRINUSE error, so two daemons never share a state.
    public init(path: String, mode: mode_t, group: UInt32?) throws(SystemError) {
        self.path = path
        if fileExists(path) {
            if (try? UnixClient.connect(path: path)) != nil {
                throw SystemError("bind", errno: EADDRINUSE, detail: "\(path) (another edgecoder-worker daemon is listening there)")
            }
            unlink(path)
        }
        fd = try systemCall("socket") {
            socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        }
        do {
            let fd = self.fd
            _ = try withUnixAddress(path) { (address, length) throws(SystemError) in
                try systemCall("bind", path) { bind(fd, address, length) }
            }
            if let group { _ = chown(path, UInt32.max, group) }  // best effort: needs ownership of the group
            try systemCall("chmod", path) { chmod(path, mode) }
            try systemCall("listen", path) { listen(fd, 64) }
        } catch {
            Glibc.close(fd)
            throw error
        }
    }

    /// Accepts the next connection, suspending (not blocking) while there is none.
    public func accept() async throws -> UnixConnection { try await acceptConnection(fd, detail: path) }

    /// Closes the socket and removes its file.
    public func close() {
        Glibc.close(fd)
        unlink(path)
    }
}

/// Accepts the next connection on a listening socket, suspending (not blocking) while
/// there is none.
func acceptConnection(_ fd: Int32, detail: String) async throws -> UnixConnection {
    while true {
        let client = ecw_accept_nonblocking(fd)
        if client >= 0 { return UnixConnection(fd: client) }
        switch errno {
        case EAGAIN, EINTR, ECONNABORTED: try await Reactor.shared.waitReadable(fd)
        case EMFILE, ENFILE, ENOBUFS, ENOMEM:
            // Out of descriptors: wait a little instead of spinning.
            try await Task.sleep(nanoseconds: 100_000_000)
        case let code:
            preconditionErrnoIsNotABug(code, call: "accept4")
            throw SystemError("accept4", errno: code, detail: detail)
        }
    }
}

/// One accepted, non-blocking stream connection (Unix or TCP).
public final class UnixConnection: Sendable {
    public let fd: Int32
    init(fd: Int32) { self.fd = fd }

    public func peerCredentials() throws(SystemError) -> (pid: Int32, uid: UInt32, gid: UInt32, groups: [UInt32]) {
        var pid: Int32 = 0
        var uid: UInt32 = 0
        var gid: UInt32 = 0
        let rc = ecw_peer_credentials(fd, &pid, &uid, &gid)
        if rc < 0 {
            preconditionErrnoIsNotABug(-rc, call: "getsockopt(SO_PEERCRED)")
            throw SystemError("getsockopt(SO_PEERCRED)", errno: -rc)
        }
        var groups = [UInt32](repeating: 0, count: 64)
        var count = ecw_peer_groups(fd, &groups, Int32(groups.count))
        if count > groups.count {
            groups = [UInt32](repeating: 0, count: Int(count))
            count = ecw_peer_groups(fd, &groups, Int32(groups.count))
        }
        // Without SO_PEERGROUPS (old kernels) only the primary group counts.
        return (pid, uid, gid, count > 0 ? Array(groups.prefix(Int(count))) : [])
    }

    /// Reads what is available, up to `max` bytes; an empty answer means end of stream.
    public func read(max: Int = 4096) async throws -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: max)
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n >= 0 { return Array(buffer[0..<n]) }
            switch errno {
            case EAGAIN, EINTR: try await Reactor.shared.waitReadable(fd)
            case ECONNRESET: return []
            case let code:
                preconditionErrnoIsNotABug(code, call: "read")
                throw SystemError("read", errno: code)
            }
        }
    }

    /// Writes every byte, suspending while the peer's buffer is full. With
    /// `progressTimeoutMs`, a peer that takes no byte for that long (it stopped reading)
    /// fails the write with ETIMEDOUT: the deadline restarts on every byte sent, so a slow
    /// but reading peer gets its answer however long it is.
    /// `onProgress` hears of every byte sent (a server's record of who is still moving).
    public func write(_ bytes: [UInt8], progressTimeoutMs: Int64? = nil, onProgress: (@Sendable () -> Void)? = nil) async throws {
        var offset = 0
        var lastProgressNs = monotonicNanoseconds()
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            if n >= 0 {
                offset += n
                lastProgressNs = monotonicNanoseconds()
                if n > 0 { onProgress?() }
                continue
            }
            switch errno {
            case EAGAIN, EINTR:
                guard let progressTimeoutMs else {
                    try await Reactor.shared.waitWritable(fd)
                    continue
                }
                let deadlineNs = lastProgressNs + UInt64(max(0, progressTimeoutMs)) * 1_000_000
                let writable = try await Reactor.shared.wait([Reactor.Interest(fd: fd, events: Int16(POLLOUT))], deadlineNs: deadlineNs)
                if !writable, monotonicNanoseconds() >= deadlineNs { throw SystemError("send", errno: ETIMEDOUT) }
            case let code:
                preconditionErrnoIsNotABug(code, call: "send")
                throw SystemError("send", errno: code)
            }
        }
    }

    /// Sends what fits now, never waiting: for a last word to a peer about to be closed,
    /// which must not hold up the caller (an accept loop). True when all of it went.
    @discardableResult
    public func sendNow(_ bytes: [UInt8]) -> Bool {
        let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT)) }
        return n == bytes.count
    }

    /// The peer's IP address as text (IPv4 or IPv6), or "unix" for a Unix socket, or ""
    /// when the peer cannot be named (it is gone already).
    public func peerAddress() -> String {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let rc = withUnsafeMutablePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &length) } }
        guard rc == 0 else { return "" }
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        switch Int32(storage.ss_family) {
        case AF_INET:
            var address = withUnsafePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr } }
            guard inet_ntop(AF_INET, &address, &text, socklen_t(text.count)) != nil else { return "" }
        case AF_INET6:
            var address = withUnsafePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr } }
            guard inet_ntop(AF_INET6, &address, &text, socklen_t(text.count)) != nil else { return "" }
        case AF_UNIX:
            return "unix"
        default:
            return ""
        }
        return String(cString: text)
    }

    public func close() { Glibc.close(fd) }
}

/// A blocking client connection, for the command-line tools (not for the daemon).
public struct UnixClient: ~Copyable {
    public let fd: Int32

    public static func connect(path: String) throws(SystemError) -> UnixClient {
        let fd = try systemCall("socket") { socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        do {
            _ = try withUnixAddress(path) { (address, length) throws(SystemError) in
                try systemCall("connect", path) { Glibc.connect(fd, address, length) }
            }
        } catch {
            Glibc.close(fd)
            throw error
        }
        return UnixClient(fd: fd)
    }

    private init(fd: Int32) { self.fd = fd }
    deinit { Glibc.close(fd) }

    public func send(_ bytes: [UInt8]) throws(SystemError) {
        var offset = 0
        while offset < bytes.count {
            let n = try systemCall("send", "control socket") {
                bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            }
            offset += n
        }
    }

    /// Reads one line (without its newline); nil at end of stream.
    public func readLine(buffer: inout [UInt8], limit: Int) throws(SystemError) -> [UInt8]? {
        while true {
            if let newline = buffer.firstIndex(of: 0x0A) {
                let line = Array(buffer[..<newline])
                buffer.removeSubrange(...newline)
                return line
            }
            if buffer.count > limit { throw SystemError("read", errno: EMSGSIZE, detail: "control socket (line over \(limit) bytes)") }
            var chunk = [UInt8](repeating: 0, count: 65_536)
            let n = try systemCall("read", "control socket") { chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) } }
            if n == 0 { return nil }
            buffer.append(contentsOf: chunk[0..<n])
        }
    }
}
