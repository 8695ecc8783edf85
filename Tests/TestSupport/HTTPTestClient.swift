import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A raw HTTP/1.1 client over blocking TCP sockets on 127.0.0.1, for testing servers byte
/// by byte: requests as the test writes them, answers read whole (Content-Length, chunked,
/// or up to the close). Blocking I/O runs on threads of its own, never on a
/// Swift-concurrency thread that the server under test needs.
public struct HTTPTestClient: Sendable {
    public init() {}

    /// Runs `body` with a blocking socket on a thread of its own.
    public func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try body() }) }.start()
        }
    }

    public static func send(_ fd: Int32, _ bytes: [UInt8]) {
        _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// Sends raw bytes (and half-closes when asked), reads one whole answer: up to its
    /// Content-Length, its last chunk, or the server's close. Blocking I/O on a thread of
    /// its own: blocking a Swift-concurrency thread would starve the server under test.
    public func exchange(_ port: UInt16, _ request: [UInt8], closeWrite: Bool = false) async throws -> String {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try Self.blockingExchange(port, request, closeWrite: closeWrite) }) }.start()
        }
    }

    public static func blockingExchange(_ port: UInt16, _ request: [UInt8], closeWrite: Bool) throws -> String {
        let fd = try connectBlocking(port)
        defer { close(fd) }
        _ = request.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        if closeWrite { shutdown(fd, Int32(SHUT_WR)) }
        var answer: [UInt8] = []
        return try readAnswer(fd, &answer)
    }

    public static func connectBlocking(_ port: UInt16, timeoutSeconds: Int = 20) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard rc == 0 else { close(fd); throw POSIXError(.ECONNREFUSED) }
        return fd
    }

    /// Reads one answer from `fd`; `buffer` keeps what came after it (the next answer).
    public static func readAnswer(_ fd: Int32, _ buffer: inout [UInt8]) throws -> String {
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            if let end = answerEnd(buffer) {
                let answer = String(decoding: buffer[0..<end], as: UTF8.self)
                buffer.removeFirst(end)
                return answer
            }
            let n = recv(fd, &chunk, chunk.count, 0)
            if n <= 0 {
                let answer = String(decoding: buffer, as: UTF8.self)
                buffer.removeAll()
                return answer
            }
            buffer += chunk[0..<n]
        }
    }

    /// Where a complete answer ends in `bytes`, if one is complete.
    public static func answerEnd(_ bytes: [UInt8]) -> Int? {
        let separator: [UInt8] = [13, 10, 13, 10]
        guard bytes.count >= 4, let headEnd = (0...(bytes.count - 4)).first(where: { Array(bytes[$0..<($0 + 4)]) == separator }) else { return nil }
        let head = String(decoding: bytes[0..<headEnd], as: UTF8.self).lowercased()
        let bodyStart = headEnd + 4
        if head.contains("transfer-encoding: chunked") {
            // Walk the chunks: size line, data, CRLF; a zero size ends the body.
            var at = bodyStart
            while true {
                guard let lineEnd = (at..<max(at, bytes.count - 1)).first(where: { bytes[$0] == 13 && bytes[$0 + 1] == 10 }) else { return nil }
                guard let size = Int(String(decoding: bytes[at..<lineEnd], as: UTF8.self), radix: 16) else { return nil }
                let next = lineEnd + 2 + size + 2
                if size == 0 { return bytes.count >= lineEnd + 4 ? lineEnd + 4 : nil }
                guard bytes.count >= next else { return nil }
                at = next
            }
        }
        if let line = head.split(separator: "\r\n").first(where: { $0.hasPrefix("content-length:") }),
            let length = Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces))
        {
            return bytes.count >= bodyStart + length ? bodyStart + length : nil
        }
        return nil
    }

    /// A request; `headers` are extra lines, each ending in CRLF.
    public func http(_ method: String, _ path: String, body: String = "", headers: String = "", host: String = "127.0.0.1") -> [UInt8] {
        Array("\(method) \(path) HTTP/1.1\r\nHost: \(host)\r\n\(headers)Content-Length: \(body.utf8.count)\r\n\r\n\(body)".utf8)
    }

    public func post(_ port: UInt16, _ path: String, _ body: String, headers: String = "") async throws -> (
        head: String, json: [String: Any]?, body: String
    ) {
        let answer = try await exchange(port, http("POST", path, body: body, headers: headers))
        let parts = answer.components(separatedBy: "\r\n\r\n")
        var payload = parts.dropFirst().joined(separator: "\r\n\r\n")
        if parts.first?.lowercased().contains("transfer-encoding: chunked") == true { payload = Self.dechunk(payload) }
        let json = try? JSONSerialization.jsonObject(with: Data(payload.utf8)) as? [String: Any]
        return (parts.first ?? "", json, payload)
    }

    /// The body of a chunked answer.
    public static func dechunk(_ text: String) -> String {
        var bytes = Array(text.utf8)[...]
        var out: [UInt8] = []
        while let lineEnd = bytes.indices.first(where: { bytes[$0] == 13 }),
            let size = Int(String(decoding: bytes[bytes.startIndex..<lineEnd], as: UTF8.self), radix: 16), size > 0
        {
            let start = lineEnd + 2
            out += bytes[start..<min(bytes.endIndex, start + size)]
            bytes = bytes[min(bytes.endIndex, start + size + 2)...]
        }
        return String(decoding: out, as: UTF8.self)
    }
}
