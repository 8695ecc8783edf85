import Foundation
import Testing
import WorkerCore
@testable import ModelBackend

// Streaming, chat, options, keys and readiness against REAL servers on loopback: the
// llama.cpp test server (llama-cpp-python), a second one that requires a key, the
// loading phase of llama-server in front of it, and the Ollama fixture.

private func llamaLog(_ url: String) -> String {
    let port = url.split(separator: ":").last.map(String.init) ?? ""
    let cache =
        ProcessInfo.processInfo.environment["EDGECODER_TEST_CACHE"] ?? (ProcessInfo.processInfo.environment["HOME"] ?? "/root")
        + "/.cache/edgecoder-worker"
    return (try? String(contentsOfFile: cache + "/run/llama-\(port).log", encoding: .utf8)) ?? ""
}

/// What the Ollama fixture saw (`GET /_fixture/state`).
private func fixtureState(_ url: String) async throws -> JSONValue {
    let result = try await runCommand(["curl", "-s", "--max-time", "10", url + "/_fixture/state"], timeoutSeconds: 15)
    return try JSON.parse(Array(result.stdout.utf8))
}

/// Reads a stream to its end: the pieces with the time each came, and the output.
private func drain(_ stream: ModelStream) async throws -> (pieces: [(String, Int64)], output: ModelOutput) {
    let start = ContinuousClock.now
    var pieces: [(String, Int64)] = []
    for try await event in stream {
        switch event {
        case .text(let piece): pieces.append((piece, elapsedMs(since: start)))
        case .done(let output): return (pieces, output)
        }
    }
    throw BedError("the stream ended without .done")
}

@Suite(.serialized) struct LlamaCppStreaming {
    @Test(arguments: [WorkerConfig.OpenAIEndpoint.completions, .chat])
    func piecesArriveBeforeTheEndAndJoinToTheAnswer(_ endpoint: WorkerConfig.OpenAIEndpoint) async throws {
        let backend = ModelBackend(config: backendConfig(.openai, url: try await ModelServerBed.shared.llama(), endpoint: endpoint))
        let (pieces, output) = try await drain(backend.stream(ModelRequest(prompt: "x", maxTokens: 300, timeoutMs: 60_000)))
        #expect(pieces.count >= 100, "one piece a token: \(pieces.count)")
        #expect(pieces.map(\.0).joined() == output.text)
        #expect(output.finishReason == "length")
        // The pieces came while the model generated, not all at its end: from the first
        // piece on (the wait before it may be another test's generation on this shared
        // server), they spread over most of the generation.
        let first = try #require(pieces.first?.1), last = try #require(pieces.last?.1)
        #expect(last - first > (output.durationMs - first) / 2, "pieces from \(first) ms to \(last) ms, whole answer at \(output.durationMs) ms")
        #expect(output.firstPieceMs > 0 && output.firstPieceMs <= first + 50)
        // llama-cpp-python sends no usage in a stream (llama.cpp and vLLM do, asked with
        // stream_options); when it comes, it counts the pieces.
        #expect(output.outputTokens == nil || output.outputTokens == 300)
    }

    @Test func cancellingAStreamStopsTheServersGenerationAndFreesIt() async throws {
        let url = try await ModelServerBed.shared.llama()
        let backend = ModelBackend(config: backendConfig(.openai, url: url))
        let long = ModelRequest(prompt: "x", maxTokens: 480, timeoutMs: 60_000)
        // How long the whole generation takes here, as the yardstick.
        let whole = try await backend.generate(long).durationMs
        let disconnectsBefore = llamaLog(url).components(separatedBy: "Disconnected from client").count
        var seen = 0
        for try await event in backend.stream(long) {
            if case .text = event { seen += 1 }
            if seen == 3 { break }  // dropping the iterator aborts the request
        }
        let start = ContinuousClock.now
        let short = try await backend.generate(ModelRequest(prompt: "x", maxTokens: 4, timeoutMs: 60_000))
        let served = elapsedMs(since: start)
        #expect(!short.text.isEmpty)
        // llama.cpp (llama-cpp-python) serves one generation at a time: had the cancelled one
        // kept running, this one would have waited for most of it.
        #expect(served < max(whole * 2 / 3, 200), "served in \(served) ms; the whole long generation takes \(whole) ms")
        var logged = false
        for _ in 0..<50 where !logged {
            logged = llamaLog(url).components(separatedBy: "Disconnected from client").count > disconnectsBefore
            if !logged { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(logged, "the server saw the client leave and stopped its generation")
    }

    @Test func cancellingTheTaskEndsTheStreamAsCancelled() async throws {
        let backend = ModelBackend(config: backendConfig(.openai, url: try await ModelServerBed.shared.llama()))
        let task = Task { () -> ModelError? in
            do throws(ModelError) {
                var iterator = backend.stream(ModelRequest(prompt: "x", maxTokens: 480, timeoutMs: 60_000)).makeAsyncIterator()
                while let event = try await iterator.nextPiece() {
                    if case .text = event { withUnsafeCurrentTask { $0?.cancel() } }
                }
                return nil
            } catch {
                return error
            }
        }
        let error = await task.value
        #expect(error?.kind == .cancelled, "\(String(describing: error))")
    }

    @Test func aChatCarriesItsSystemMessage() async throws {
        let backend = ModelBackend(config: backendConfig(.openai, url: try await ModelServerBed.shared.llama()))
        let fine = try await backend.generate(
            ModelRequest(messages: [ModelMessage(role: "user", content: "hi")], system: "short", maxTokens: 8, timeoutMs: 60_000))
        #expect(!fine.text.isEmpty)
        // A system message longer than the context proves it reached the model.
        let long = String(repeating: "word ", count: 700)
        let error = await #expect(throws: ModelError.self) {
            try await backend.generate(
                ModelRequest(messages: [ModelMessage(role: "user", content: "hi")], system: long, maxTokens: 8, timeoutMs: 60_000))
        }
        #expect(error?.kind == .rejected(status: 400), "\(error?.message ?? "")")
    }

    @Test func aSeedMakesTheAnswerReproducible() async throws {
        let backend = ModelBackend(config: backendConfig(.openai, url: try await ModelServerBed.shared.llama()))
        func sample(_ seed: Int) async throws -> String {
            var request = ModelRequest(prompt: "Write", maxTokens: 24, timeoutMs: 60_000)
            request.temperature = 1.5
            request.seed = seed
            return try await backend.generate(request).text
        }
        let first = try await sample(7)
        #expect(try await sample(7) == first)
        let others = [try await sample(8), try await sample(9), try await sample(10)]
        #expect(others.contains { $0 != first }, "other seeds give other answers")
    }

    @Test func stopEndsTheAnswerBeforeTheStopText() async throws {
        let backend = ModelBackend(config: backendConfig(.openai, url: try await ModelServerBed.shared.llama()))
        var request = ModelRequest(prompt: "Write", maxTokens: 24, timeoutMs: 60_000)
        request.temperature = 0
        let free = try await backend.generate(request).text
        let words = free.split(separator: " ")
        try #require(words.count >= 4, "\(free)")
        let stopWord = " " + words[3]
        let cutAt = try #require(free.firstRange(of: stopWord)).lowerBound
        request.stop = [stopWord]
        let stopped = try await backend.generate(request)
        #expect(stopped.text == String(free[..<cutAt]), "\(stopped.text) vs \(free)")
        #expect(stopped.finishReason == "stop")
        // The same through the stream.
        let streamed = try await backend.stream(request).collect()
        #expect(streamed.text == stopped.text)
    }

    @Test func formatJSONConstrainsTheAnswer() async throws {
        let backend = ModelBackend(config: backendConfig(.openai, url: try await ModelServerBed.shared.llama()))
        var request = ModelRequest(prompt: "give data", maxTokens: 20, timeoutMs: 60_000)
        request.seed = 1
        let free = try await backend.generate(request).text
        request.format = .json
        let json = try await backend.generate(request).text
        // The tiny model runs to maxTokens, so the object is cut, but it is an object.
        #expect(json.drop { $0.isWhitespace }.first == "{", "\(json)")
        #expect(free.drop { $0.isWhitespace }.first != "{", "\(free)")
    }
}

@Suite struct LlamaCppKeysAndLoading {
    @Test func theProbeFindsAMissingOrWrongKeyAndReadyWithTheRightOne() async throws {
        let url = try await ModelServerBed.shared.llamaWithKey()
        let none = await ModelBackend(config: backendConfig(.openai, url: url)).probe()
        #expect(none.state == .unauthorized)
        #expect(none.detail.contains("sends no API key: set backend.apiKey or the systemd credential backend-api-key"), "\(none.detail)")
        let wrong = await ModelBackend(config: backendConfig(.openai, url: url, apiKey: "not-the-key")).probe()
        #expect(wrong.state == .unauthorized)
        #expect(!wrong.detail.contains("not-the-key"))
        let right = ModelBackend(config: backendConfig(.openai, url: url, apiKey: ModelServerBed.apiKey))
        #expect(await right.probe().state == .ready)
        #expect(try await !right.generate(ModelRequest(prompt: "x", maxTokens: 4, timeoutMs: 60_000)).text.isEmpty)
        let (pieces, _) = try await drain(right.stream(ModelRequest(prompt: "x", maxTokens: 8, timeoutMs: 60_000)))
        #expect(!pieces.isEmpty)
        let refused = await #expect(throws: ModelError.self) {
            try await ModelBackend(config: backendConfig(.openai, url: url)).generate(ModelRequest(prompt: "x", maxTokens: 4, timeoutMs: 60_000))
        }
        #expect(refused?.kind == .rejected(status: 401))
    }

    @Test func healthWhileLoadingIsLoadingThenReady() async throws {
        let upstream = try await ModelServerBed.shared.llama()
        let front = try await startLoadingFront(upstream: upstream, loadingMs: 1_500)
        defer { front.stop() }
        let backend = ModelBackend(config: backendConfig(.openai, url: front.url))
        let loading = await backend.probe()
        #expect(loading.state == .loading)
        #expect(loading.detail.contains("/health answered HTTP 503: Loading model"), "\(loading.detail)")
        var ready = loading
        for _ in 0..<60 where ready.state != .ready {
            try await Task.sleep(for: .milliseconds(100))
            ready = await backend.probe()
        }
        #expect(ready.state == .ready, "\(ready.detail)")
        #expect(try await !backend.generate(ModelRequest(prompt: "x", maxTokens: 4, timeoutMs: 60_000)).text.isEmpty)
    }
}

@Suite struct OllamaStreamingThroughToLlamaCpp {
    @Test func theFixtureRelaysLlamaCppsStreamPieceByPiece() async throws {
        let backend = ModelBackend(config: backendConfig(.ollama, url: try await ModelServerBed.shared.upstream()))
        let (pieces, output) = try await drain(backend.stream(ModelRequest(prompt: "x", maxTokens: 40, timeoutMs: 60_000)))
        #expect(pieces.count >= 20, "\(pieces.count) pieces")
        #expect(pieces.map(\.0).joined() == output.text)
        #expect(output.finishReason == "length")
        #expect(output.outputTokens == 40, "eval_count of the last line")
        let chat = try await drain(
            backend.stream(ModelRequest(messages: [ModelMessage(role: "user", content: "hi")], system: "brief", maxTokens: 12, timeoutMs: 60_000)))
        #expect(chat.pieces.count >= 6 && chat.pieces.map(\.0).joined() == chat.output.text)
    }
}

@Suite struct OllamaFixtureRules {
    @Test func readyOnlyOnceLoadedAndLoadingWhileItLoads() async throws {
        // A load long enough that the look during it comes first, even on a loaded machine.
        let fixture = try await OllamaFixture.start(["--load-ms", "4000"])
        defer { fixture.stop() }
        let backend = ModelBackend(config: backendConfig(.ollama, url: fixture.url))
        let before = await backend.probe()
        #expect(before.state == .loading && before.needsLoad, "\(before.detail)")
        #expect(before.detail.contains("pulled but not loaded"))
        let load = Task { try await backend.load() }
        try await Task.sleep(for: .milliseconds(300))
        #expect(await backend.probe().state == .loading, "not in /api/ps while it loads")
        try await load.value
        let after = await backend.probe()
        #expect(after.state == .ready && !after.needsLoad, "\(after.detail)")
        #expect(after.detail.contains("is loaded on the Ollama server"))
        let state = try await fixtureState(fixture.url)
        let loadRequest = state["requests"]?.arrayValue?.first { $0["path"] == "/api/generate" }
        #expect(loadRequest?["body"]?["prompt"] == nil, "the load is a generate without a prompt")
        #expect(loadRequest?["body"]?["keep_alive"] == "30m")
    }

    @Test func keepAliveAndThinkGoWithEveryRequest() async throws {
        let fixture = try await OllamaFixture.start([])
        defer { fixture.stop() }
        var config = backendConfig(.ollama, url: fixture.url)
        config.keepAlive = "2h"
        let backend = ModelBackend(config: config)
        try await backend.load()
        _ = try await backend.generate(ModelRequest(prompt: "a b", maxTokens: 2, timeoutMs: 10_000))
        _ = try await drain(backend.stream(ModelRequest(messages: [ModelMessage(role: "user", content: "c d")], maxTokens: 2, timeoutMs: 10_000)))
        let requests =
            try await fixtureState(fixture.url)["requests"]?.arrayValue?.filter {
                $0["path"]?.stringValue?.hasPrefix("/api/generate") == true || $0["path"] == "/api/chat"
            } ?? []
        #expect(requests.count == 3)
        for request in requests {
            #expect(request["body"]?["keep_alive"] == "2h", "\(request)")
            #expect(request["body"]?["think"] == false, "\(request)")
        }
        #expect(requests.last?["path"] == "/api/chat")
        #expect(try await fixtureState(fixture.url)["loaded"] == ["tiny:latest"])
    }

    @Test func aThinkingModelAnswersWithThinkFalseAndFailsWhenItOnlyThought() async throws {
        let fixture = try await OllamaFixture.start(["--model", "thinker", "--thinking-model", "thinker", "--loaded", "--think-words", "6"])
        defer { fixture.stop() }
        let request = ModelRequest(prompt: "one two", maxTokens: 4, timeoutMs: 10_000)
        let plain = try await ModelBackend(config: backendConfig(.ollama, url: fixture.url, model: "thinker")).generate(request)
        #expect(plain.text == "one two one two")
        let thinking = ModelBackend(config: backendConfig(.ollama, url: fixture.url, model: "thinker", think: true))
        for stream in [false, true] {
            let error = await #expect(throws: ModelError.self) {
                stream ? try await thinking.stream(request).collect() : try await thinking.generate(request)
            }
            #expect(error?.kind == .onlyThought, "\(error?.message ?? "")")
            #expect(error?.wireText.hasPrefix("model_only_thought: model \"thinker\" spent the answer thinking") == true, "\(error?.wireText ?? "")")
        }
        // With room to answer after thinking, the answer is the text alone.
        let roomy = try await thinking.generate(ModelRequest(prompt: "one two", maxTokens: 8, timeoutMs: 10_000))
        #expect(roomy.text == "one two")
    }

    @Test func thinkTrueForAModelThatCannotThinkIsRefusedWithOllamasReason() async throws {
        let fixture = try await OllamaFixture.start(["--loaded"])
        defer { fixture.stop() }
        let error = await #expect(throws: ModelError.self) {
            try await ModelBackend(config: backendConfig(.ollama, url: fixture.url, think: true)).generate(
                ModelRequest(prompt: "x", maxTokens: 4, timeoutMs: 10_000))
        }
        #expect(error?.kind == .rejected(status: 400))
        #expect(error?.message.contains("\"tiny\" does not support thinking") == true, "\(error?.message ?? "")")
    }

    @Test func aChatGoesToApiChatWithItsSystemMessage() async throws {
        let fixture = try await OllamaFixture.start(["--loaded"])
        defer { fixture.stop() }
        let backend = ModelBackend(config: backendConfig(.ollama, url: fixture.url))
        var request = ModelRequest(messages: [ModelMessage(role: "user", content: "alpha beta")], system: "be terse", maxTokens: 3, timeoutMs: 10_000)
        request.format = .json
        request.numCtx = 2_048
        let output = try await backend.generate(request)
        #expect(output.text == #"{"echo": "alpha beta alpha"}"#)
        let sent = try await fixtureState(fixture.url)["requests"]?.arrayValue?.last
        #expect(sent?["path"] == "/api/chat")
        #expect(sent?["body"]?["messages"] == [["role": "system", "content": "be terse"], ["role": "user", "content": "alpha beta"]])
        #expect(sent?["body"]?["format"] == "json")
        #expect(sent?["body"]?["options"]?["num_ctx"] == 2_048)
    }

    @Test func streamedPiecesArriveAsProducedAndCancelStopsTheServer() async throws {
        let fixture = try await OllamaFixture.start(["--loaded", "--piece-delay-ms", "60"])
        defer { fixture.stop() }
        let backend = ModelBackend(config: backendConfig(.ollama, url: fixture.url))
        let (pieces, output) = try await drain(backend.stream(ModelRequest(prompt: "a b c d e f", maxTokens: 12, timeoutMs: 20_000)))
        #expect(pieces.count == 12)
        #expect(try #require(pieces.first?.1) < output.durationMs / 3, "\(pieces.map(\.1)) of \(output.durationMs) ms")
        // A long stream, cancelled after two pieces: the fixture sees the client leave.
        let task = Task { () -> Int in
            var seen = 0
            for try await event in backend.stream(ModelRequest(prompt: "a b c d e f", maxTokens: 24, timeoutMs: 20_000)) {
                if case .text = event { seen += 1 }
                if seen == 2 { withUnsafeCurrentTask { $0?.cancel() } }
            }
            return seen
        }
        let result = await task.result
        #expect((result.failure as? ModelError)?.kind == .cancelled, "\(result)")
        var aborted: Int64 = 0
        for _ in 0..<40 where aborted == 0 {
            try await Task.sleep(for: .milliseconds(100))
            aborted = try await fixtureState(fixture.url)["aborted"]?.intValue ?? 0
        }
        #expect(aborted == 1, "the fixture stopped generating when the worker left")
    }

    @Test func aKeyIsSentAndARefusedOneIsUnauthorized() async throws {
        let fixture = try await OllamaFixture.start(["--loaded", "--api-key", "ollama-k"])
        defer { fixture.stop() }
        #expect(await ModelBackend(config: backendConfig(.ollama, url: fixture.url)).probe().state == .unauthorized)
        #expect(await ModelBackend(config: backendConfig(.ollama, url: fixture.url, apiKey: "nope")).probe().state == .unauthorized)
        let right = ModelBackend(config: backendConfig(.ollama, url: fixture.url, apiKey: "ollama-k"))
        #expect(await right.probe().state == .ready)
        #expect(try await right.generate(ModelRequest(prompt: "z", maxTokens: 1, timeoutMs: 10_000)).text == "z")
    }
}
