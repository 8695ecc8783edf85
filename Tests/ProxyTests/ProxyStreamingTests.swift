import Foundation
import Testing
import Logging
import Posix
import TestSupport
@testable import Proxy
import WorkerCore

/// The proxy's HTTP side over real TCP with `ScriptedUpstream` standing in for the
/// Bluetooth link: streaming as the pieces arrive, the client going away, keep-alive,
/// the browser checks, every route's shape.
@Suite struct ProxyStreamingTests {
    let helper = HTTPTestClient()

    func withServer(
        _ upstream: ScriptedUpstream, guardian: BrowserGuard = BrowserGuard(), wholeHoldMs: Int64 = 10_000, pulseMs: Int64 = 10_000,
        _ body: @escaping @Sendable (UInt16) async throws -> Void
    ) async throws {
        let listener = try LoopbackTCPListener(port: 0)
        let server = ProxyServer(
            listener: listener, upstream: upstream, version: "9.9.9", logger: Logger(label: "t", level: .error),
            requestTimeoutMs: 7_000, guardian: guardian, wholeHoldMs: wholeHoldMs, pulseMs: pulseMs)
        let serving = Task { await server.run() }
        let outcome: Result<Void, any Error>
        do { try await body(listener.port); outcome = .success(()) } catch { outcome = .failure(error) }
        serving.cancel()
        await serving.value
        listener.close()
        try outcome.get()
    }

    /// Nagle's algorithm off on every accepted connection: with it on, a piece written
    /// while the one before is not yet acknowledged waits for the client's delayed ACK
    /// (up to 200 ms on Linux), once per piece of a stream.
    @Test func acceptedConnectionsSendSmallPiecesAtOnce() async throws {
        let listener = try LoopbackTCPListener(port: 0)
        defer { listener.close() }
        let client = try HTTPTestClient.connectBlocking(listener.port)
        defer { close(client) }
        let connection = try await listener.accept()
        defer { connection.close() }
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        #expect(getsockopt(connection.fd, Int32(IPPROTO_TCP), TCP_NODELAY, &value, &length) == 0)
        #expect(value != 0, "TCP_NODELAY on the accepted connection")
    }

    @Test func aStreamedAnswersFirstPieceArrivesLongBeforeItsEnd() async throws {
        let upstream = ScriptedUpstream(
            answer: .answered(ok: true, output: "", error: nil, workerDurationMs: 1), deltas: ["one ", "two ", "three"],
            delayMs: 300)
        try await withServer(upstream) { port in
            let request = helper.http("POST", "/api/generate", body: #"{"model":"m","prompt":"count"}"#)
            let (first, whole, text) = try await helper.onThread { () -> (Double, Double, String) in
                let fd = try HTTPTestClient.connectBlocking(port)
                defer { close(fd) }
                let started = Date()
                HTTPTestClient.send(fd, request)
                var received: [UInt8] = []
                var firstAt: Double?
                var buffer = [UInt8](repeating: 0, count: 4_096)
                while HTTPTestClient.answerEnd(received) == nil {
                    let n = recv(fd, &buffer, buffer.count, 0)
                    if n <= 0 { break }
                    received += buffer[0..<n]
                    if firstAt == nil, String(decoding: received, as: UTF8.self).contains(#""response":"one ""#) {
                        firstAt = Date().timeIntervalSince(started)
                    }
                }
                return (firstAt ?? 99, Date().timeIntervalSince(started), String(decoding: received, as: UTF8.self))
            }
            #expect(text.lowercased().contains("transfer-encoding: chunked"))
            let lines = HTTPTestClient.dechunk(String(text[text.range(of: "\r\n\r\n")!.upperBound...])).split(separator: "\n")
            #expect(lines.count == 4, "three pieces and the done line: \(lines)")
            #expect(first < 0.5 && whole >= 0.85 && whole - first >= 0.5, "first piece after \(first) s, whole after \(whole) s")
        }
        #expect(await upstream.cancelled == 0)
    }

    @Test(arguments: ["/api/generate", "/api/chat", "/v1/chat/completions"])
    func aClientThatGoesAwayMidStreamCancelsItsRequest(path: String) async throws {
        let upstream = ScriptedUpstream(
            answer: .answered(ok: true, output: "", error: nil, workerDurationMs: 1), deltas: Array(repeating: "tok ", count: 50),
            delayMs: 100)
        let body =
            path == "/api/generate"
            ? #"{"model":"m","prompt":"long"}"# : #"{"model":"m","messages":[{"role":"user","content":"long"}],"stream":true}"#
        try await withServer(upstream) { port in
            let request = helper.http("POST", path, body: body)
            try await helper.onThread {
                let fd = try HTTPTestClient.connectBlocking(port)
                HTTPTestClient.send(fd, request)
                var buffer = [UInt8](repeating: 0, count: 4_096)
                var received = ""
                while !received.contains("tok ") {
                    let n = recv(fd, &buffer, buffer.count, 0)
                    if n <= 0 { break }
                    received += String(decoding: buffer[0..<n], as: UTF8.self)
                }
                close(fd)
            }
            var waited = 0
            while await upstream.cancelled == 0 && waited < 300 {
                try await Task.sleep(nanoseconds: 10_000_000)
                waited += 1
            }
            #expect(await upstream.cancelled == 1, "the stand-in saw no cancellation within 3 s")
        }
    }

    @Test func oneConnectionCarriesSeveralRequestsAndPipelinedOnes() async throws {
        let upstream = ScriptedUpstream(answer: .answered(ok: true, output: "ab", error: nil, workerDurationMs: 1), deltas: ["a", "b"])
        try await withServer(upstream) { port in
            let requests = [
                helper.http("GET", "/status"), helper.http("POST", "/api/generate", body: #"{"prompt":"p"}"#),
                helper.http("POST", "/api/chat", body: #"{"model":"m","messages":[{"role":"user","content":"x"}]}"#),
                helper.http("POST", "/v1/completions", body: #"{"model":"m","prompt":"x","stream":true}"#),
            ]
            let answers = try await helper.onThread { () -> [String] in
                let fd = try HTTPTestClient.connectBlocking(port)
                defer { close(fd) }
                var buffer: [UInt8] = []
                var answers: [String] = []
                for request in requests {
                    HTTPTestClient.send(fd, request)
                    answers.append(try HTTPTestClient.readAnswer(fd, &buffer))
                }
                // Two requests in one write: two answers, in order.
                HTTPTestClient.send(fd, requests[0] + requests[1])
                answers.append(try HTTPTestClient.readAnswer(fd, &buffer))
                answers.append(try HTTPTestClient.readAnswer(fd, &buffer))
                return answers
            }
            #expect(answers.count == 6 && answers.allSatisfy { $0.hasPrefix("HTTP/1.1 200") }, "\(answers.map { $0.prefix(40) })")
            #expect(answers.allSatisfy { !$0.contains("Connection: close") })
            #expect(answers[3].contains("text/event-stream") && answers[3].contains("data: [DONE]"))
            #expect(answers[5].contains(#""output":"ab""#))
        }
    }

    @Test func aRequestSentWhileTheLastOneStreamsIsAnsweredNext() async throws {
        let upstream = ScriptedUpstream(
            answer: .answered(ok: true, output: "", error: nil, workerDurationMs: 1), deltas: ["a", "b", "c"], delayMs: 150)
        try await withServer(upstream) { port in
            let first = helper.http("POST", "/api/generate", body: #"{"model":"m","prompt":"p"}"#)
            let second = helper.http("GET", "/api/version")
            let answers = try await helper.onThread { () -> [String] in
                let fd = try HTTPTestClient.connectBlocking(port)
                defer { close(fd) }
                HTTPTestClient.send(fd, first)
                var chunk = [UInt8](repeating: 0, count: 4_096)
                var buffer: [UInt8] = []
                // The first piece is out: the answer is streaming now.
                while !String(decoding: buffer, as: UTF8.self).contains(#""response":"a""#) {
                    let n = recv(fd, &chunk, chunk.count, 0)
                    if n <= 0 { break }
                    buffer += chunk[0..<n]
                }
                HTTPTestClient.send(fd, second)
                return [try HTTPTestClient.readAnswer(fd, &buffer), try HTTPTestClient.readAnswer(fd, &buffer)]
            }
            #expect(answers[0].contains(#""done":true"#), "\(answers[0])")
            #expect(answers[1].hasPrefix("HTTP/1.1 200") && answers[1].contains(#""version":"9.9.9""#), "\(answers[1])")
        }
        #expect(await upstream.cancelled == 0, "bytes of a next request are not the client going away")
    }

    @Test func headersGoOutBeforeALongWholeAnswerAndItsBodyStaysJSON() async throws {
        let upstream = ScriptedUpstream(
            answer: .answered(ok: true, output: "late", error: nil, workerDurationMs: 1), deltas: ["x", "y", "z"], delayMs: 200)
        try await withServer(upstream, wholeHoldMs: 100, pulseMs: 150) { port in
            let request = helper.http("POST", "/api/chat", body: #"{"messages":[{"role":"user","content":"hi"}],"maxTokens":64,"stream":false}"#)
            let (headAt, text) = try await helper.onThread { () -> (Double, String) in
                let fd = try HTTPTestClient.connectBlocking(port)
                defer { close(fd) }
                let started = Date()
                HTTPTestClient.send(fd, request)
                var received: [UInt8] = []
                var headAt: Double?
                var buffer = [UInt8](repeating: 0, count: 4_096)
                while HTTPTestClient.answerEnd(received) == nil {
                    let n = recv(fd, &buffer, buffer.count, 0)
                    if n <= 0 { break }
                    received += buffer[0..<n]
                    if headAt == nil, String(decoding: received, as: UTF8.self).contains("\r\n\r\n") { headAt = Date().timeIntervalSince(started) }
                }
                return (headAt ?? 99, String(decoding: received, as: UTF8.self))
            }
            #expect(headAt < 0.5, "the head came after \(headAt) s")
            let body = HTTPTestClient.dechunk(String(text[text.range(of: "\r\n\r\n")!.upperBound...]))
            let json = try #require(try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any])
            #expect((json["message"] as? [String: Any])?["content"] as? String == "late")
        }
    }

    @Test func browsersAreRefusedUnlessTheirOriginIsAllowed() async throws {
        let guardian = BrowserGuard(allowedOrigins: ["https://app.example.com"])
        try await withServer(ScriptedUpstream(answer: .answered(ok: true, output: "x", error: nil, workerDurationMs: 1)), guardian: guardian) {
            port in
            let rebound = try await helper.exchange(port, helper.http("GET", "/status", host: "attacker.example:11435"))
            #expect(rebound.hasPrefix("HTTP/1.1 403") && rebound.contains("not a loopback name"))
            let foreign = try await helper.exchange(
                port,
                helper.http(
                    "POST", "/api/generate", body: #"{"prompt":"x"}"#, headers: "Origin: https://evil.example\r\nContent-Type: text/plain\r\n"))
            #expect(foreign.hasPrefix("HTTP/1.1 403") && foreign.contains("--allow-origin"))
            let local = try await helper.exchange(port, helper.http("GET", "/api/tags", headers: "Origin: http://localhost:3000\r\n"))
            #expect(local.hasPrefix("HTTP/1.1 200") && local.contains("Access-Control-Allow-Origin: http://localhost:3000"))
            let allowed = try await helper.exchange(
                port,
                helper.http(
                    "OPTIONS", "/api/chat",
                    headers: "Origin: https://app.example.com\r\nAccess-Control-Request-Headers: content-type\r\n"))
            #expect(
                allowed.hasPrefix("HTTP/1.1 204") && allowed.contains("Access-Control-Allow-Origin: https://app.example.com")
                    && allowed.contains("Access-Control-Allow-Headers: content-type"))
            let refusedPreflight = try await helper.exchange(port, helper.http("OPTIONS", "/api/chat", headers: "Origin: https://evil.example\r\n"))
            #expect(refusedPreflight.hasPrefix("HTTP/1.1 403") && !refusedPreflight.contains("Access-Control-Allow-Origin"))
        }
    }

    @Test func theRootAnswersOllamaIsRunningToGetAndHead() async throws {
        try await withServer(ScriptedUpstream(answer: .timedOut(1))) { port in
            let get = try await helper.exchange(port, helper.http("GET", "/"))
            #expect(get.hasPrefix("HTTP/1.1 200") && get.hasSuffix("\r\n\r\nOllama is running"))
            // HEAD's answer has a length but no body: the client reads it to the close.
            let head = try await helper.exchange(port, helper.http("HEAD", "/", headers: "Connection: close\r\n"))
            #expect(head.contains("Connection: close"))
            #expect(head.hasPrefix("HTTP/1.1 200") && head.contains("Content-Length: 17") && head.hasSuffix("\r\n\r\n"))
        }
    }

    @Test func everyRouteAnswersInItsShape() async throws {
        let upstream = ScriptedUpstream(answer: .answered(ok: true, output: "hello", error: nil, workerDurationMs: 1))
        try await withServer(upstream) { port in
            let post = helper.post
            let router = try await post(port, "/api/chat", #"{"messages":[{"role":"user","content":"hi"}],"maxTokens":4096,"stream":false}"#, "")
            #expect(router.head.hasPrefix("HTTP/1.1 200") && (router.json?["message"] as? [String: Any])?["content"] as? String == "hello")
            let chat = try await post(port, "/v1/chat/completions", #"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#, "")
            let choice = (chat.json?["choices"] as? [[String: Any]])?.first
            #expect(chat.json?["object"] as? String == "chat.completion" && (choice?["message"] as? [String: Any])?["content"] as? String == "hello")
            let completion = try await post(port, "/v1/completions", #"{"model":"m","prompt":"hi"}"#, "")
            #expect(((completion.json?["choices"] as? [[String: Any]])?.first?["text"] as? String) == "hello")
            let show = try await post(port, "/api/show", #"{"model":"edgecoder-bluetooth"}"#, "")
            #expect(show.json?["model_info"] != nil && show.json?["capabilities"] != nil)
            let refused = try await post(
                port, "/v1/chat/completions", #"{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]}"#, "")
            #expect(refused.head.hasPrefix("HTTP/1.1 400") && (refused.json?["error"] as? [String: Any])?["param"] as? String == "tools")
            let embeddings = try await post(port, "/api/embed", #"{"model":"m","input":"x"}"#, "")
            #expect(embeddings.head.hasPrefix("HTTP/1.1 400") && (embeddings.json?["error"] as? String)?.contains("embeddings") == true)
            for path in ["/api/ps", "/v1/models", "/api/version"] {
                let answer = try await helper.exchange(port, helper.http("GET", path))
                #expect(answer.hasPrefix("HTTP/1.1 200") && answer.contains("edgecoder-bluetooth") || path == "/api/version", "\(path): \(answer)")
            }
        }
        let asks = await upstream.asks
        #expect(asks.first?.messages == [ChatTurn(role: "user", content: "hi")] && asks.first?.maxTokens == 4096)
    }

    /// Hostile input: a body over the bound, nesting past the parser's depth, wrong types.
    @Test func hostileBodiesAreRefusedWithTheFieldNamedAndTheServerGoesOn() async throws {
        try await withServer(ScriptedUpstream(answer: .answered(ok: true, output: "x", error: nil, workerDurationMs: 1))) { port in
            let post = helper.post
            let huge = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"" + String(repeating: "a", count: 1_100_000) + "\"}]}"
            let tooBig = try await helper.exchange(port, helper.http("POST", "/api/chat", body: huge))
            #expect(tooBig.hasPrefix("HTTP/1.1 413"))
            let deep = try await post(port, "/api/chat", String(repeating: "[", count: 5_000), "")
            #expect(deep.head.hasPrefix("HTTP/1.1 400"))
            let nested = try await post(
                port, "/api/chat",
                "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":" + String(repeating: "[", count: 40)
                    + String(repeating: "]", count: 40) + "}]}", "")
            #expect(nested.head.hasPrefix("HTTP/1.1 400"))
            let badType = try await post(
                port, "/api/chat", #"{"model":"m","messages":[{"role":"user","content":"x"}],"options":{"num_ctx":"big"}}"#, "")
            #expect(badType.head.hasPrefix("HTTP/1.1 400") && (badType.json?["error"] as? String)?.contains("options.num_ctx") == true)
            let after = try await helper.exchange(port, helper.http("GET", "/status"))
            #expect(after.hasPrefix("HTTP/1.1 200"))
        }
    }

    @Test func theIPv6LoopbackListenerServesToo() async throws {
        let listener: LoopbackTCPListener
        do { listener = try LoopbackTCPListener(port: 0, family: .ipv6) } catch {
            // A host with IPv6 disabled: nothing to test (the proxy then serves 127.0.0.1 only).
            return
        }
        let server = ProxyServer(
            listeners: [listener], upstream: ScriptedUpstream(answer: .timedOut(1)), version: "9", logger: Logger(label: "t", level: .error),
            requestTimeoutMs: 1_000)
        let serving = Task { await server.run() }
        let port = listener.port
        let answer = try await helper.onThread { () -> String in
            let fd = socket(AF_INET6, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(fd) }
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = port.bigEndian
            address.sin6_addr = in6addr_loopback
            var timeout = timeval(tv_sec: 10, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            let rc = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
            guard rc == 0 else { return "connect failed" }
            HTTPTestClient.send(fd, Array("GET / HTTP/1.1\r\nHost: [::1]:\(port)\r\n\r\n".utf8))
            var buffer: [UInt8] = []
            return try HTTPTestClient.readAnswer(fd, &buffer)
        }
        serving.cancel()
        await serving.value
        listener.close()
        #expect(answer.hasPrefix("HTTP/1.1 200") && answer.hasSuffix("Ollama is running"))
    }
}
