import Foundation
import TestSupport
import Testing
import BlueZ
@testable import Proxy
import Logging
import Posix
import WorkerCore

/// The proxy's HTTP side over real TCP on 127.0.0.1, with a central that has no bus to
/// reach (so no worker is ever connected): every answer here is the server's own.
@Suite struct ProxyServerTests {
    let helper = HTTPTestClient()

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

    @Test func statusAndTagsAnswerWithoutAWorker() async throws {
        try await withServer { port in
            let status = try await helper.exchange(port, helper.http("GET", "/status"))
            #expect(status.hasPrefix("HTTP/1.1 200 OK"))
            #expect(status.contains("\"connected\":false") && status.contains("\"modelState\""))
            let tags = try await helper.exchange(port, helper.http("GET", "/api/tags"))
            #expect(tags.hasPrefix("HTTP/1.1 200") && tags.contains("\"models\":[]"))
        }
    }

    @Test func generateWithoutAWorkerIs503InBothShapes() async throws {
        try await withServer { port in
            let edge = try await helper.exchange(port, helper.http("POST", "/api/generate", body: #"{"prompt":"hi","maxTokens":8}"#))
            #expect(edge.hasPrefix("HTTP/1.1 503") && edge.contains("\"ok\":false") && edge.contains("no worker connected"))
            let ollama = try await helper.exchange(port, helper.http("POST", "/api/generate", body: #"{"model":"m","prompt":"hi","stream":false}"#))
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
            let answer = try await helper.exchange(port, Array(request.utf8))
            #expect(answer.hasPrefix(expected), "\(answer)")
            let after = try await helper.exchange(port, helper.http("GET", "/status"))
            #expect(after.hasPrefix("HTTP/1.1 200"))
        }
    }

    @Test func aSlowClientIsCutOffWith408() async throws {
        try await withServer(readTimeoutMs: 300) { port in
            let answer = try await helper.exchange(port, Array("GET /status HTTP/1.1\r\n".utf8), closeWrite: false)
            #expect(answer.hasPrefix("HTTP/1.1 408"))
        }
    }

    @Test func anEndlessHeadIs431() async throws {
        try await withServer { port in
            let answer = try await helper.exchange(port, Array(("GET /status HTTP/1.1\r\n" + String(repeating: "X-A: b\r\n", count: 4_000)).utf8))
            #expect(answer.hasPrefix("HTTP/1.1 431"))
        }
    }

    @Test func connectionsBeyondTheLimitGet503() async throws {
        try await withServer(readTimeoutMs: 3_000, maxConnections: 1) { port, server in
            // One connection holds the only place (it never finishes its request)…
            let holder = Task { try await helper.exchange(port, Array("GET /status HTTP/1.1\r\n".utf8), closeWrite: false) }
            while await server.openConnections == 0 { try await Task.sleep(nanoseconds: 5_000_000) }
            let refused = try await helper.exchange(port, helper.http("GET", "/status"))
            #expect(refused.hasPrefix("HTTP/1.1 503"))
            #expect(try await holder.value.hasPrefix("HTTP/1.1 408"))
        }
    }
}
