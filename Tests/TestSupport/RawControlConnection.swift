import Foundation
#if canImport(Glibc)
import Glibc
#endif
import WorkerCore

/// A raw connection to the control socket, for sending what the CLI never would.
public final class RawControlConnection {
    public let fd: Int32
    private var buffer: [UInt8] = []

    public init(path: String) throws {
        fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        let rc = withUnixAddress(path) { connect(fd, $0, $1) }
        guard rc == 0 else { throw HarnessError("connect \(path): errno \(errno)") }
    }

    deinit { close(fd) }

    public func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw HarnessError("send: errno \(errno)") }
            offset += n
        }
    }

    public func send(_ text: String) throws { try send(Array(text.utf8)) }

    /// The next line as JSON, or nil when the daemon closed the connection or nothing came in time.
    public func receiveJSON(timeout: Double = 5) throws -> JSONValue? {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let newline = buffer.firstIndex(of: 0x0A) {
                let line = Array(buffer[..<newline])
                buffer.removeSubrange(...newline)
                return try JSON.parse(line)
            }
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0, poll(&pfd, 1, Int32(remaining * 1000)) == 1 else { return nil }
            var chunk = [UInt8](repeating: 0, count: 65_536)
            let n = recv(fd, &chunk, chunk.count, 0)
            if n <= 0 { return nil }
            buffer.append(contentsOf: chunk[0..<n])
        }
    }
}
