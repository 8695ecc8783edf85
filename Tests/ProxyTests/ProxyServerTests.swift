import Foundation
import Testing
import BlueZ
@testable import Proxy
import Logging
import Posix
import WorkerCore

/// The proxy's HTTP side over real TCP on 127.0.0.1, with a central that has no bus to
/// reach (so no worker is ever connected): every answer here is the server's own.
@Suite struct ProxyServerTests {
    func withServer(
        readTimeoutMs: Int64 = 10_000, maxConnections: Int = 64,
        _ body: @escaping @Sendable (UInt16) async throws -> Void
    ) async throws {
        try await withServer(readTimeoutMs: readTimeoutMs, maxConnections: maxConnections) { port, _ in try await body(port) }
    }

    func withServer(
        readTimeoutMs: Int64 = 10_000, maxConnections: Int = 64,
        _ body: @escaping @Sendable (UInt16, ProxyServer) async throws -> Void
    ) async throws {
        let listener = try LoopbackTCPListener(port: 0)
        var settings = CentralSettings(adapter: nil, device: nil)
        settings.busAddress = "unix:path=/nonexistent/bus"
        let central = GattCentral(settings: settings, logger: Logger(label: "t", level: .error))
        let server = ProxyServer(
            listener: listener, upstream: central, version: "0.1.0", logger: Logger(label: "t", level: .error),
            requestTimeoutMs: 5_000, readTimeoutMs: readTimeoutMs, maxConnections: maxConnections)
        let serving = Task { await server.run() }
        let centralTask = Task { await central.run() }
        let outcome: Result<Void, any Error>
        do { try await body(listener.port, server); outcome = .success(()) } catch { outcome = .failure(error) }
        // Close the socket only once nothing waits on it: a closed descriptor's number is
        // reused at once (by another test's socket).
        serving.cancel()
        centralTask.cancel()
        await serving.value
        await centralTask.value
        listener.close()
        try outcome.get()
    }

    /// Sends raw bytes (and half-closes when asked), reads one whole answer: up to its
    /// Content-Length, its last chunk, or the server's close. Blocking I/O on a thread of
    /// its own: blocking a Swift-concurrency thread would starve the server under test.
    func exchange(_ port: UInt16, _ request: [UInt8], closeWrite: Bool = false) async throws -> String {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try Self.blockingExchange(port, request, closeWrite: closeWrite) }) }.start()
        }
    }

    static func blockingExchange(_ port: UInt16, _ request: [UInt8], closeWrite: Bool) throws -> String {
        let fd = try connectBlocking(port)
        defer { close(fd) }
        _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        if closeWrite { shutdown(fd, Int32(SHUT_WR)) }
        var answer: [UInt8] = []
        return try readAnswer(fd, &answer)
    }

    static func connectBlocking(_ port: UInt16, timeoutSeconds: Int = 20) throws -> Int32 {
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
    static func readAnswer(_ fd: Int32, _ buffer: inout [UInt8]) throws -> String {
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
    static func answerEnd(_ bytes: [UInt8]) -> Int? {
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
    func http(_ method: String, _ path: String, body: String = "", headers: String = "", host: String = "127.0.0.1") -> [UInt8] {
        Array("\(method) \(path) HTTP/1.1\r\nHost: \(host)\r\n\(headers)Content-Length: \(body.utf8.count)\r\n\r\n\(body)".utf8)
    }

    @Test func statusAndTagsAnswerWithoutAWorker() async throws {
        try await withServer { port in
            let status = try await exchange(port, http("GET", "/status"))
            #expect(status.hasPrefix("HTTP/1.1 200 OK"))
            #expect(status.contains("\"connected\":false") && status.contains("\"modelState\""))
            let tags = try await exchange(port, http("GET", "/api/tags"))
            #expect(tags.hasPrefix("HTTP/1.1 200") && tags.contains("\"models\":[]"))
        }
    }

    @Test func generateWithoutAWorkerIs503InBothShapes() async throws {
        try await withServer { port in
            let edge = try await exchange(port, http("POST", "/api/generate", body: #"{"prompt":"hi","maxTokens":8}"#))
            #expect(edge.hasPrefix("HTTP/1.1 503") && edge.contains("\"ok\":false") && edge.contains("no worker connected"))
            let ollama = try await exchange(port, http("POST", "/api/generate", body: #"{"model":"m","prompt":"hi","stream":false}"#))
            #expect(ollama.hasPrefix("HTTP/1.1 503") && ollama.contains("\"error\""))
        }
    }

    @Test(arguments: [
        ("POST /api/generate HTTP/1.1\r\nContent-Length: 3\r\n\r\n{\"p", "HTTP/1.1 400"),
        ("BROKEN\r\n\r\n", "HTTP/1.1 400"),
        ("GET /nowhere HTTP/1.1\r\n\r\n", "HTTP/1.1 404"),
        ("DELETE /status HTTP/1.1\r\n\r\n", "HTTP/1.1 405"),
        ("POST /api/generate HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", "HTTP/1.1 501"),
        ("POST /api/generate HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n", "HTTP/1.1 413"),
    ])
    func malformedRequestsGetAStatusAndTheServerGoesOn(request: String, expected: String) async throws {
        try await withServer { port in
            let answer = try await exchange(port, Array(request.utf8))
            #expect(answer.hasPrefix(expected), "\(answer)")
            let after = try await exchange(port, http("GET", "/status"))
            #expect(after.hasPrefix("HTTP/1.1 200"))
        }
    }

    @Test func aSlowClientIsCutOffWith408() async throws {
        try await withServer(readTimeoutMs: 300) { port in
            let answer = try await exchange(port, Array("GET /status HTTP/1.1\r\n".utf8), closeWrite: false)
            #expect(answer.hasPrefix("HTTP/1.1 408"))
        }
    }

    @Test func anEndlessHeadIs431() async throws {
        try await withServer { port in
            let answer = try await exchange(port, Array(("GET /status HTTP/1.1\r\n" + String(repeating: "X-A: b\r\n", count: 4_000)).utf8))
            #expect(answer.hasPrefix("HTTP/1.1 431"))
        }
    }

    @Test func connectionsBeyondTheLimitGet503() async throws {
        try await withServer(readTimeoutMs: 3_000, maxConnections: 1) { port, server in
            // One connection holds the only place (it never finishes its request)…
            let holder = Task { try await exchange(port, Array("GET /status HTTP/1.1\r\n".utf8), closeWrite: false) }
            while await server.openConnections == 0 { try await Task.sleep(nanoseconds: 5_000_000) }
            let refused = try await exchange(port, http("GET", "/status"))
            #expect(refused.hasPrefix("HTTP/1.1 503"))
            #expect(try await holder.value.hasPrefix("HTTP/1.1 408"))
        }
    }
}
