import Testing
import WorkerCore
@testable import ModelBackend

// Against REAL servers on loopback: llama.cpp's OpenAI-compatible server with the tiny
// model of IntegrationTests/model-server, and the Ollama API fixture forwarding to it. The tiny model
// never emits its end token, so an answer always runs to maxTokens (finish "length").

private func request(_ prompt: String = "Write a function", maxTokens: Int = 16, timeoutMs: Int64 = 30_000) -> ModelRequest {
    ModelRequest(prompt: prompt, maxTokens: maxTokens, timeoutMs: timeoutMs)
}

private func words(_ text: String) -> Int { text.split(whereSeparator: { $0 == " " || $0 == "\n" }).count }

@Suite struct LlamaCppServer {
    @Test func completionsGiveNonEmptyText() async throws {
        let backend = ModelBackend(config: backendConfig(.openai, url: try await ModelServerBed.shared.llama()))
        let output = try await backend.generate(request())
        #expect(output.text.contains { !$0.isWhitespace }, "\(output.text)")
        #expect(!output.truncated)
        #expect(output.finishReason == "length")
        #expect(output.durationMs >= 0 && output.durationMs < 30_000)
    }

    @Test func chatGivesNonEmptyText() async throws {
        let backend = ModelBackend(config: backendConfig(.openai, url: try await ModelServerBed.shared.llama(), endpoint: .chat))
        let output = try await backend.generate(request())
        #expect(output.text.contains { !$0.isWhitespace }, "\(output.text)")
        #expect(output.finishReason == "length")
    }

    @Test(arguments: [WorkerConfig.OpenAIEndpoint.completions, .chat])
    func maxTokensBoundsTheAnswer(_ endpoint: WorkerConfig.OpenAIEndpoint) async throws {
        let backend = ModelBackend(config: backendConfig(.openai, url: try await ModelServerBed.shared.llama(), endpoint: endpoint))
        let small = try await backend.generate(request(maxTokens: 3))
        let large = try await backend.generate(request(maxTokens: 60))
        // The tiny model emits whole words, one per token.
        #expect(words(small.text) >= 1 && words(small.text) <= 3, "\(small.text)")
        #expect(words(large.text) > 3 * words(small.text), "\(large.text)")
        #expect(large.text.utf8.count > small.text.utf8.count)
    }

    @Test func probeSaysReadyAndThatTheAliasIsListed() async throws {
        let url = try await ModelServerBed.shared.llama()
        let probe = await ModelBackend(config: backendConfig(.openai, url: url)).probe()
        #expect(probe.state == .ready)
        #expect(probe.detail.contains("lists model \"tiny\""), "\(probe.detail)")
        let other = await ModelBackend(config: backendConfig(.openai, url: url, model: "qwen2.5-coder")).probe()
        #expect(other.state == .ready)
        #expect(other.detail.contains("does not list model \"qwen2.5-coder\" (it lists \"tiny\")"), "\(other.detail)")
    }

    @Test func anOutputCapSmallerThanTheAnswerTruncates() async throws {
        let backend = ModelBackend(config: backendConfig(.openai, url: try await ModelServerBed.shared.llama(), maxOutputBytes: 20))
        let output = try await backend.generate(request(maxTokens: 40))
        #expect(output.truncated)
        // ASCII words: the cut lands exactly at the cap, a UTF-8 boundary.
        #expect(output.text.utf8.count == 20, "\(output.text)")
    }

    @Test(arguments: ["", "/", "/v1", "/v1/", "/v1/completions"])
    func acceptsTheServerURLInEveryUsualForm(_ suffix: String) async throws {
        let backend = ModelBackend(config: backendConfig(.openai, url: try await ModelServerBed.shared.llama() + suffix))
        #expect(await backend.probe().state == .ready)
        #expect(try await !backend.generate(request(maxTokens: 2)).text.isEmpty)
    }

    @Test func aPromptBeyondTheContextIsRejectedWithTheServersReason() async throws {
        let backend = ModelBackend(config: backendConfig(.openai, url: try await ModelServerBed.shared.llama()))
        let error = await #expect(throws: ModelError.self) {
            try await backend.generate(request(String(repeating: "word ", count: 700), maxTokens: 16))
        }
        #expect(error?.kind == .rejected(status: 400))
        #expect(error?.message.contains("maximum context length is 512 tokens") == true, "\(error?.message ?? "")")
    }

    @Test func theOllamaKindAgainstAnOpenAIServerSaysCheckTheKind() async throws {
        let backend = ModelBackend(config: backendConfig(.ollama, url: try await ModelServerBed.shared.llama()))
        let probe = await backend.probe()
        #expect(probe.state == .unavailable)
        #expect(probe.detail.contains("HTTP 404 to /api/tags"), "\(probe.detail)")
        #expect(probe.detail.contains("backend.kind"))
        let error = await #expect(throws: ModelError.self) { try await backend.generate(request()) }
        #expect(error?.kind == .rejected(status: 404))
    }
}

@Suite struct OllamaFixtureForwardingToLlamaCpp {
    @Test func generatesThroughTheOllamaAPI() async throws {
        let backend = ModelBackend(config: backendConfig(.ollama, url: try await ModelServerBed.shared.upstream()))
        let output = try await backend.generate(request(maxTokens: 8))
        #expect(words(output.text) >= 1 && words(output.text) <= 8, "\(output.text)")
        #expect(output.finishReason == "length")
        #expect(!output.truncated)
    }

    @Test(arguments: ["tiny", "tiny:latest", "TINY"])
    func probeIsReadyForAPulledModel(_ model: String) async throws {
        let backend = ModelBackend(config: backendConfig(.ollama, url: try await ModelServerBed.shared.upstream(), model: model))
        // Ready means loaded (in /api/ps): the worker loads it first.
        try await backend.load()
        let probe = await backend.probe()
        #expect(probe.state == .ready, "\(probe.detail)")
    }

    @Test func probeIsUnavailableForAModelThatIsNotPulled() async throws {
        let probe = await ModelBackend(config: backendConfig(.ollama, url: try await ModelServerBed.shared.upstream(), model: "qwen2.5-coder:1.5b"))
            .probe()
        #expect(probe.state == .unavailable)
        #expect(probe.detail.contains("model \"qwen2.5-coder:1.5b\" is not pulled on the Ollama server"), "\(probe.detail)")
        #expect(probe.detail.contains("(ollama pull qwen2.5-coder:1.5b)"))
        #expect(probe.detail.contains("it has \"tiny:latest\""))
    }

    @Test func generatingWithAnUnknownModelIsModelNotFound() async throws {
        let backend = ModelBackend(config: backendConfig(.ollama, url: try await ModelServerBed.shared.upstream(), model: "nosuch"))
        let error = await #expect(throws: ModelError.self) { try await backend.generate(request()) }
        #expect(error?.kind == .modelNotFound)
        #expect(error?.message.contains("model 'nosuch' not found, try pulling it first") == true, "\(error?.message ?? "")")
        #expect(error?.message.contains("ollama pull nosuch") == true)
    }

    @Test(arguments: ["/", "/api", "/api/"])
    func acceptsTheServerURLInEveryUsualForm(_ suffix: String) async throws {
        let backend = ModelBackend(config: backendConfig(.ollama, url: try await ModelServerBed.shared.upstream() + suffix))
        try await backend.load()
        #expect(await backend.probe().state == .ready)
        #expect(try await !backend.generate(request(maxTokens: 2)).text.isEmpty)
    }
}

@Suite struct OllamaFixtureEchoing {
    @Test func cutsAMultibyteAnswerOnAUTF8Boundary() async throws {
        let url = try await ModelServerBed.shared.echo()
        let prompt = "日本 ü 🎉"  // 6 + 1 + 2 + 1 + 4 bytes; the echo cycles the words
        let full = try await ModelBackend(config: backendConfig(.ollama, url: url)).generate(request(prompt, maxTokens: 12))
        #expect(!full.truncated)
        #expect(full.text.hasPrefix("日本 ü 🎉 日本"), "\(full.text)")
        for cap in [1, 2, 5, 8, 11, 12, 13, 14, 15, 17, 19] as [Int64] {
            let output = try await ModelBackend(config: backendConfig(.ollama, url: url, maxOutputBytes: cap)).generate(
                request(prompt, maxTokens: 12))
            #expect(output.truncated)
            #expect(output.text.utf8.count <= Int(cap))
            #expect(full.text.hasPrefix(output.text), "cap \(cap): \(output.text)")
            // At most one character (4 bytes) short of the cap.
            #expect(output.text.utf8.count > Int(cap) - 4, "cap \(cap): \(output.text.utf8.count) bytes")
        }
    }

    @Test func anAnswerLargerThanTheResponseCapIsTooLarge() async throws {
        let url = try await ModelServerBed.shared.echo()
        let backend = ModelBackend(config: backendConfig(.ollama, url: url, maxOutputBytes: 1_024))
        // 100 words of 1000 bytes echo up to 400 words: about 400 KB, beyond the cap.
        let prompt = (0..<100).map { String(repeating: Character(Unicode.Scalar(UInt8(97 + $0 % 26))), count: 1_000) }.joined(separator: " ")
        let error = await #expect(throws: ModelError.self) { try await backend.generate(request(prompt, maxTokens: 400)) }
        #expect(error?.kind == .tooLarge)
        #expect(error?.message.contains("raise backend.maxOutputBytes") == true, "\(error?.message ?? "")")
        // Within the cap, the same kind of answer comes back cut.
        let cut = try await backend.generate(request(prompt, maxTokens: 3))
        #expect(cut.truncated)
        #expect(cut.text.utf8.count == 1_024)
    }
}

@Suite struct FailingServers {
    @Test func malformedJSONIsABadAnswer() async throws {
        let fixture = try await OllamaFixture.start(["--malformed", "--fault-path", "/api/generate"])
        defer { fixture.stop() }
        let backend = ModelBackend(config: backendConfig(.ollama, url: fixture.url))
        let error = await #expect(throws: ModelError.self) { try await backend.generate(request()) }
        #expect(error?.kind == .badAnswer)
        #expect(error?.message.contains("not JSON (the JSON ends too early") == true, "\(error?.message ?? "")")
        #expect(error?.message.contains(#"{"model":"tiny""#) == true, "quotes the start of the body")
    }

    @Test func a500WithAnErrorBodyIsRejectedWithTheServersText() async throws {
        let fixture = try await OllamaFixture.start(["--fail-status", "500"])
        defer { fixture.stop() }
        let backend = ModelBackend(config: backendConfig(.ollama, url: fixture.url))
        let error = await #expect(throws: ModelError.self) { try await backend.generate(request()) }
        #expect(error?.kind == .rejected(status: 500))
        #expect(error?.message.contains("HTTP 500: ollama-fixture: forced status 500") == true, "\(error?.message ?? "")")
        let probe = await backend.probe()
        #expect(probe.state == .unavailable)
        #expect(probe.detail.contains("HTTP 500 to /api/tags"))
    }

    @Test func a404ForAnUnknownPathIsNotModelNotFound() async throws {
        let url = try await ModelServerBed.shared.echo()
        let backend = ModelBackend(config: backendConfig(.ollama, url: url + "/somewhere"))
        let error = await #expect(throws: ModelError.self) { try await backend.generate(request()) }
        #expect(error?.kind == .rejected(status: 404))
        #expect(error?.message.contains("has no /api/generate") == true, "\(error?.message ?? "")")
    }

    @Test func aSlowAnswerTimesOutWithinTheRequestsTime() async throws {
        // --loaded: the model is in /api/ps from the start, so the probe says ready.
        let fixture = try await OllamaFixture.start(["--delay-ms", "5000", "--fault-path", "/api/generate", "--loaded"])
        defer { fixture.stop() }
        let backend = ModelBackend(config: backendConfig(.ollama, url: fixture.url))
        // The probe is not delayed: the server is there, only slow to generate.
        #expect(await backend.probe().state == .ready)
        let start = ContinuousClock.now
        let error = await #expect(throws: ModelError.self) { try await backend.generate(request(timeoutMs: 600)) }
        let elapsed = elapsedMs(since: start)
        #expect(error?.kind == .timedOut, "\(error?.message ?? "")")
        #expect(error?.message.contains("within 600 ms") == true)
        // Under the server's 5 s delay proves the timeout fired; loose enough for a loaded CI.
        #expect(elapsed >= 550 && elapsed < 4_500, "took \(elapsed) ms")
    }

    @Test func backendTimeoutBoundsALongerRequestTime() async throws {
        let fixture = try await OllamaFixture.start(["--delay-ms", "5000", "--fault-path", "/api/generate"])
        defer { fixture.stop() }
        let backend = ModelBackend(config: backendConfig(.ollama, url: fixture.url, timeoutMs: 700))
        let start = ContinuousClock.now
        let error = await #expect(throws: ModelError.self) { try await backend.generate(request(timeoutMs: 60_000)) }
        let elapsed = elapsedMs(since: start)
        #expect(error?.kind == .timedOut)
        #expect(elapsed >= 650 && elapsed < 4_500, "took \(elapsed) ms")
    }

    @Test func cancellingTheTaskEndsAHangingCallPromptly() async throws {
        let fixture = try await OllamaFixture.start(["--hang", "--fault-path", "/api/generate"])
        defer { fixture.stop() }
        let backend = ModelBackend(config: backendConfig(.ollama, url: fixture.url))
        let task = Task { try await backend.generate(request(timeoutMs: 60_000)) }
        try await Task.sleep(for: .milliseconds(300))
        let start = ContinuousClock.now
        task.cancel()
        let result = await task.result
        let elapsed = elapsedMs(since: start)
        let error = result.failure as? ModelError
        #expect(error?.kind == .cancelled, "\(result)")
        #expect(elapsed < 5_000, "took \(elapsed) ms after cancel (the call itself would hang for 60 s)")
    }

    @Test func nothingListeningIsUnavailableWithAClearReason() async throws {
        let port = try freePort()  // bound and released: nothing listens there now
        let url = "http://127.0.0.1:\(port)"
        for kind in [WorkerConfig.BackendKind.ollama, .openai] {
            let backend = ModelBackend(config: backendConfig(kind, url: url))
            let start = ContinuousClock.now
            let error = await #expect(throws: ModelError.self) { try await backend.generate(request()) }
            #expect(error?.kind == .unavailable)
            #expect(error?.message.contains("cannot reach") == true && error?.message.contains(url) == true, "\(error?.message ?? "")")
            #expect(error?.message.contains(kind == .ollama ? "is Ollama running" : "is the model server running") == true)
            #expect(elapsedMs(since: start) < 10_000, "a refused connection fails fast, not after backend.timeoutMs")
            let probe = await backend.probe()
            #expect(probe.state == .unavailable)
            #expect(probe.detail.contains("cannot reach"), "\(probe.detail)")
        }
    }
}
