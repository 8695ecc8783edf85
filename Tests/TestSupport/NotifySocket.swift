import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A datagram socket playing systemd's notification socket.
public final class NotifySocket {
    public let path: String
    public let fd: Int32

    public init(path: String) throws {
        self.path = path
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { throw HarnessError("socket: \(errno)") }
        let rc = withUnixAddress(path) { bind(fd, $0, $1) }
        guard rc == 0 else { throw HarnessError("bind \(path): \(errno)") }
    }

    deinit {
        close(fd)
        unlink(path)
    }

    /// The next datagram, or nil after `timeout` seconds.
    public func receive(timeout: Double) -> String? {
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&pfd, 1, Int32(timeout * 1000)) == 1 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = recv(fd, &buffer, buffer.count, 0)
        return n > 0 ? String(decoding: buffer[0..<n], as: UTF8.self) : nil
    }

    /// Waits for a datagram containing `needle`; returns every datagram seen up to it.
    public func waitFor(_ needle: String, timeout: Double) -> [String]? {
        let deadline = Date().addingTimeInterval(timeout)
        var seen: [String] = []
        while Date() < deadline {
            guard let message = receive(timeout: deadline.timeIntervalSinceNow) else { break }
            seen.append(message)
            if message.contains(needle) { return seen }
        }
        return nil
    }
}
