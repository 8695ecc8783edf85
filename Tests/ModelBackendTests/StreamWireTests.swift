import Foundation
import Testing
import WorkerCore
@testable import ModelBackend

// The streaming wire, chat bodies, options, keys and readiness decoding, as pure functions.

private func config(
    _ kind: WorkerConfig.BackendKind, endpoint: WorkerConfig.OpenAIEndpoint = .completions,
    maxOutputBytes: Int64 = 262_144, apiKey: String? = nil, think: Bool = false
) -> ModelWire {
    ModelWire(
        config: backendConfig(
            kind, url: "http://127.0.0.1:11434", endpoint: endpoint, maxOutputBytes: maxOutputBytes,
            apiKey: apiKey, think: think))
}

private let prompt = ModelRequest(prompt: "hi", maxTokens: 8, timeoutMs: 1_000)
private let chat = ModelRequest(messages: [ModelMessage(role: "user", content: "hello")], system: "be brief", maxTokens: 8, timeoutMs: 1_000)

/// Feeds `text` in chunks of `size` bytes (splitting lines and characters anywhere).
private func decode(_ wire: ModelWire, _ request: ModelRequest, _ text: String, chunk size: Int = 1) -> (
    pieces: [String], result: Result<ModelOutput, ModelError>
) {
    var decoder = ModelStreamDecoder(wire: wire, request: request)
    var pieces: [String] = []
    let bytes = Array(text.utf8)
    var start = 0
    while start < bytes.count {
        let end = min(bytes.count, start + size)
        let (new, error) = decoder.feed(Array(bytes[start..<end]))
        pieces += new
        if let error { return (pieces, .failure(error)) }
        start = end
    }
    return (pieces, decoder.finish())
}

@Suite struct StreamDecoding {
    static let ollamaStream = #"""
        {"model":"tiny","created_at":"2024-01-01T00:00:00Z","response":"日本","done":false}
        {"model":"tiny","created_at":"2024-01-01T00:00:00Z","response":" 🎉","done":false}
        {"model":"tiny","created_at":"2024-01-01T00:00:00Z","response":"","done":true,"done_reason":"length","prompt_eval_count":3,"eval_count":2}

        """#

    @Test(arguments: [1, 2, 3, 7, 1_000])
    func ollamaNDJSONGivesEachPieceWhateverTheChunking(_ size: Int) throws {
        let (pieces, result) = decode(config(.ollama), prompt, StreamDecoding.ollamaStream, chunk: size)
        #expect(pieces == ["日本", " 🎉"])
        let output = try result.get()
        #expect(output.text == "日本 🎉")
        #expect(output.finishReason == "length")
        #expect(output.promptTokens == 3 && output.outputTokens == 2)
    }

    @Test func ollamaChatReadsMessageContent() throws {
        let stream = """
            {"model":"tiny","message":{"role":"assistant","content":"Hel"},"done":false}
            {"model":"tiny","message":{"role":"assistant","content":"lo"},"done":false}
            {"model":"tiny","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop"}
            """
        let (pieces, result) = decode(config(.ollama), chat, stream, chunk: 5)
        #expect(pieces == ["Hel", "lo"])
        #expect(try result.get().text == "Hello")
    }

    @Test(arguments: [1, 4, 64])
    func openAIEventsSkipCommentsAndReadUsageAndDone(_ size: Int) throws {
        let stream =
            ": ping - 2024-01-01\r\n\r\n"
            + #"data: {"choices":[{"text":" one","index":0,"finish_reason":null}]}"# + "\r\n\r\n"
            + "event: message\n"
            + #"data: {"choices":[{"text":" two","index":0,"finish_reason":"length"}]}"# + "\n\n"
            + #"data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2}}"# + "\n\n"
            + "data: [DONE]\n\n"
        let (pieces, result) = decode(config(.openai), prompt, stream, chunk: size)
        #expect(pieces == [" one", " two"])
        let output = try result.get()
        #expect(output.text == " one two")
        #expect(output.finishReason == "length")
        #expect(output.promptTokens == 4 && output.outputTokens == 2)
    }

    @Test func openAIChatReadsDeltaContent() throws {
        let stream =
            #"data: {"choices":[{"delta":{"role":"assistant"},"index":0,"finish_reason":null}]}"# + "\n\n"
            + #"data: {"choices":[{"delta":{"content":"Hi"},"index":0,"finish_reason":null}]}"# + "\n\n"
            + #"data: {"choices":[{"delta":{},"index":0,"finish_reason":"stop"}]}"# + "\n\ndata: [DONE]\n\n"
        let (pieces, result) = decode(config(.openai), chat, stream)
        #expect(pieces == ["Hi"])
        #expect(try result.get().finishReason == "stop")
    }

    @Test func anOpenAIServerThatIgnoresStreamIsReadWhole() throws {
        let body = #"{"choices":[{"text":"whole","index":0,"finish_reason":"stop"}]}"#
        let (pieces, result) = decode(config(.openai), prompt, body, chunk: 3)
        #expect(pieces.isEmpty)
        #expect(try result.get().text == "whole")
    }

    @Test func anErrorInTheMiddleOfTheStreamFailsWithTheServersText() {
        let stream =
            #"{"response":"a","done":false}"# + "\n" + #"{"error":"an error was encountered while running the model: unexpected EOF"}"# + "\n"
        let (pieces, result) = decode(config(.ollama), prompt, stream, chunk: 1_000)
        #expect(pieces == ["a"])
        #expect(result.failure?.kind == .badAnswer)
        #expect(
            result.failure?.message.contains("reported an error in its answer to /api/generate: an error was encountered while running the model")
                == true, "\(result.failure?.message ?? "")")
        let sse = #"data: {"error":{"message":"slot unavailable","type":"server_error"}}"# + "\n\n"
        #expect(decode(config(.openai), prompt, sse).result.failure?.message.contains("slot unavailable") == true)
    }

    @Test func aStreamThatEndsBeforeItsEndIsABadAnswer() {
        let cut = decode(config(.ollama), prompt, #"{"response":"a","done":false}"# + "\n")
        #expect(cut.result.failure?.kind == .badAnswer)
        #expect(
            cut.result.failure?.message.contains("a stream that ended before a line with \"done\": true") == true,
            "\(cut.result.failure?.message ?? "")")
        let empty = decode(config(.openai), prompt, "")
        #expect(empty.result.failure?.message.contains("an empty stream (no data: [DONE])") == true, "\(empty.result.failure?.message ?? "")")
    }

    @Test func aLineThatIsNotJSONIsABadAnswerQuotingIt() {
        let result = decode(config(.ollama), prompt, #"{"model":"tiny","response":"trunc"#).result
        #expect(result.failure?.kind == .badAnswer)
        #expect(result.failure?.message.contains("a line that is not JSON (the JSON ends too early") == true, "\(result.failure?.message ?? "")")
        let sse = decode(config(.openai), prompt, "<html>oops</html>\n").result
        #expect(sse.failure?.message.contains("not a server-sent event") == true, "\(sse.failure?.message ?? "")")
    }

    @Test func thinkingWithoutAnAnswerFailsAsOnlyThought() {
        let stream =
            #"{"response":"","thinking":"Let me","done":false}"# + "\n" + #"{"response":"","thinking":" think","done":true,"done_reason":"length"}"#
            + "\n"
        let (pieces, result) = decode(config(.ollama, think: true), prompt, stream)
        #expect(pieces.isEmpty)
        #expect(result.failure?.kind == .onlyThought)
        #expect(result.failure?.code == "model_only_thought")
        #expect(
            result.failure?.message.contains("spent the answer thinking (12 bytes of thinking, no text (finish reason \"length\"))") == true,
            "\(result.failure?.message ?? "")")
        #expect(result.failure?.message.contains("set backend.think to false") == true)
        let reasoning = #"data: {"choices":[{"delta":{"reasoning_content":"hmm"},"finish_reason":"length"}]}"# + "\n\ndata: [DONE]\n\n"
        let openai = decode(config(.openai), chat, reasoning).result
        #expect(openai.failure?.kind == .onlyThought)
        #expect(openai.failure?.message.contains("reasoning_content") == true)
    }

    @Test func thinkingBeforeAnAnswerIsFine() throws {
        let stream = #"{"response":"","thinking":"hm","done":false}"# + "\n" + #"{"response":"ok","done":true,"done_reason":"stop"}"# + "\n"
        #expect(try decode(config(.ollama), prompt, stream).result.get().text == "ok")
    }

    @Test func aWholeAnswerWithOnlyThinkingFailsToo() {
        let ollama = config(.ollama).decodeGenerate(status: 200, body: Array(#"{"response":"","thinking":"x","done":true}"#.utf8))
        #expect(ollama.failure?.kind == .onlyThought)
        let chatAnswer = config(.openai, endpoint: .chat).decodeGenerate(
            status: 200, body: Array(#"{"choices":[{"message":{"content":"","reasoning_content":"x"},"finish_reason":"length"}]}"#.utf8))
        #expect(chatAnswer.failure?.kind == .onlyThought)
    }

    @Test func textBeyondTheOutputCapIsCutOnACharacterThenDropped() throws {
        let stream = #"{"response":"ab","done":false}"# + "\n" + #"{"response":"c日","done":false}"# + "\n" + #"{"response":"zz","done":true}"# + "\n"
        let (pieces, result) = decode(config(.ollama, maxOutputBytes: 5), prompt, stream)
        #expect(pieces == ["ab", "c"])
        let output = try result.get()
        #expect(output.text == "abc" && output.truncated)
    }

    @Test func textFarBeyondTheCapIsTooLarge() {
        let piece = #"{"response":""# + String(repeating: "x", count: 10_000) + #"","done":false}"# + "\n"
        let (_, result) = decode(config(.ollama, maxOutputBytes: 1_024), prompt, String(repeating: piece, count: 10), chunk: 100_000)
        #expect(result.failure?.kind == .tooLarge)
        #expect(result.failure?.message.contains("raise backend.maxOutputBytes") == true)
    }
}

@Suite struct ChatAndOptions {
    @Test func aChatGoesToTheChatAPIWithTheSystemMessageFirst() throws {
        for wire in [config(.ollama), config(.openai)] {
            let body = try JSON.parse(wire.generateBody(chat, stream: true))
            #expect(body["messages"] == [["role": "system", "content": "be brief"], ["role": "user", "content": "hello"]])
            #expect(body["prompt"] == nil)
            #expect(body["stream"] == true)
        }
        #expect(config(.ollama).path(for: chat) == "/api/chat")
        #expect(config(.openai).path(for: chat) == "/v1/chat/completions")
    }

    @Test func aPromptWithASystemMessageUsesOllamasSystemFieldButOpenAIsChat() throws {
        var request = prompt
        request.system = "terse"
        let ollama = try JSON.parse(config(.ollama).generateBody(request))
        #expect(ollama["system"] == "terse" && ollama["prompt"] == "hi")
        #expect(config(.ollama).path(for: request) == "/api/generate")
        #expect(config(.openai).path(for: request) == "/v1/chat/completions")
        let openai = try JSON.parse(config(.openai).generateBody(request))
        #expect(openai["messages"] == [["role": "system", "content": "terse"], ["role": "user", "content": "hi"]])
    }

    @Test func optionsGoInEachAPIsOwnNames() throws {
        var request = prompt
        request.temperature = 0.5
        request.topP = 0.9
        request.topK = 40
        request.seed = 7
        request.stop = ["\n\n", "END"]
        request.numCtx = 4_096
        request.format = .json
        let ollama = try JSON.parse(config(.ollama, think: true).generateBody(request))
        #expect(
            ollama["options"] == [
                "num_predict": 8, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "seed": 7, "stop": ["\n\n", "END"], "num_ctx": 4_096,
            ])
        #expect(ollama["format"] == "json")
        #expect(ollama["think"] == true)
        let openai = try JSON.parse(config(.openai).generateBody(request, stream: true))
        #expect(openai["temperature"] == 0.5 && openai["top_p"] == 0.9 && openai["top_k"] == 40 && openai["seed"] == 7)
        #expect(openai["stop"] == ["\n\n", "END"])
        #expect(openai["response_format"] == ["type": "json_object"])
        #expect(openai["num_ctx"] == nil && openai["options"] == nil && openai["think"] == nil && openai["keep_alive"] == nil)
        #expect(openai["stream_options"] == ["include_usage": true])
        // response_format is a chat-completions field.
        #expect(config(.openai).path(for: request) == "/v1/chat/completions")
    }

    @Test func keepAliveAndThinkGoWithEveryOllamaRequestAndTheLoad() throws {
        var backend = backendConfig(.ollama, url: "http://h")
        backend.keepAlive = .int(-1)
        let wire = ModelWire(config: backend)
        for body in [wire.generateBody(prompt), wire.generateBody(chat, stream: true), wire.loadBody] {
            let parsed = try JSON.parse(body)
            #expect(parsed["keep_alive"] == -1)
            #expect(parsed["think"] == false)
        }
        let load = try JSON.parse(wire.loadBody)
        #expect(load["prompt"] == nil && load["model"] == "tiny")
    }

    @Test func theKeyGoesAsABearerTokenOnlyWhenThereIsOne() {
        #expect(config(.openai, apiKey: "k-123").headers().contains { $0 == ("authorization", "Bearer k-123") })
        #expect(!config(.openai).headers().contains { $0.0 == "authorization" })
    }
}

@Suite struct Readiness {
    @Test func ollamaIsReadyOnlyWhenTheModelIsInPs() {
        let wire = config(.ollama)
        let loaded = wire.decodeRunning(
            status: 200, body: Array(#"{"models":[{"name":"tiny:latest","model":"tiny:latest","expires_at":"2030-01-01T00:00:00Z"}]}"#.utf8))
        #expect(loaded.state == .ready && !loaded.needsLoad)
        #expect(loaded.detail.contains("is loaded on the Ollama server") && loaded.detail.contains("until 2030-01-01"), "\(loaded.detail)")
        let other = wire.decodeRunning(status: 200, body: Array(#"{"models":[{"name":"qwen:7b","model":"qwen:7b"}]}"#.utf8))
        #expect(other.state == .loading && other.needsLoad)
        #expect(other.detail.contains("pulled but not loaded") && other.detail.contains("loaded: \"qwen:7b\""), "\(other.detail)")
        #expect(wire.decodeRunning(status: 200, body: Array(#"{"models":[]}"#.utf8)).detail.contains("no model is loaded"))
        // An Ollama without /api/ps: its model list is all there is.
        #expect(wire.decodeRunning(status: 404, body: Array("404 page not found".utf8)).state == .ready)
        #expect(wire.decodeRunning(status: 200, body: Array("[]".utf8)).state == .unavailable)
    }

    @Test func llamaCppHealth503IsLoading() {
        let wire = config(.openai)
        let loading = wire.decodeHealth(
            status: 503, body: Array(#"{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}"#.utf8))
        #expect(loading?.state == .loading)
        #expect(loading?.detail.contains("/health answered HTTP 503: Loading model") == true, "\(loading?.detail ?? "")")
        #expect(wire.decodeHealth(status: 200, body: Array(#"{"status":"ok"}"#.utf8)) == nil)
        #expect(wire.decodeHealth(status: 404, body: Array(#"{"detail":"Not Found"}"#.utf8)) == nil)
    }

    @Test func aRefusedKeyIsUnauthorizedAndSaysWhatToSetNeverTheKey() {
        let none = config(.openai).decodeProbe(status: 401, body: Array(#"{"detail":"Invalid API key"}"#.utf8))
        #expect(none.state == .unauthorized)
        #expect(none.detail.contains("HTTP 401: Invalid API key") && none.detail.contains("sends no API key: set backend.apiKey"), "\(none.detail)")
        let wrong = config(.ollama, apiKey: "s3cret-key").decodeProbe(status: 403, body: [])
        #expect(wrong.state == .unauthorized)
        #expect(wrong.detail.contains("is not the server's") && !wrong.detail.contains("s3cret-key"), "\(wrong.detail)")
        let generation = config(.openai, apiKey: "s3cret-key").statusError(status: 401, body: Array(#"{"error":{"message":"Invalid API Key"}}"#.utf8))
        #expect(!generation.message.contains("s3cret-key"))
        #expect(generation.message.contains("is not the server's"))
    }

    @Test func theNewStatesAndCodesAreStable() {
        #expect(ModelState.unauthorized.rawValue == "unauthorized")
        #expect(ModelError(.onlyThought, "x").wireText == "model_only_thought: x")
    }
}

@Suite struct Credential {
    @Test func theKeyComesFromTheCredentialsDirectoryTrimmed() throws {
        let directory = "/tmp/ecw-cred-\(UInt32.random(in: 0...UInt32.max))"
        #expect(ModelBackend.credentialAPIKey(environment: { _ in nil }) == nil)
        try writeFile(directory, "backend-api-key", "  key-from-systemd\n")
        #expect(ModelBackend.credentialAPIKey(environment: { $0 == "CREDENTIALS_DIRECTORY" ? directory : nil }) == "key-from-systemd")
        try writeFile(directory, "backend-api-key", "two words\n")
        #expect(ModelBackend.credentialAPIKey(environment: { $0 == "CREDENTIALS_DIRECTORY" ? directory : nil }) == nil)
        #expect(ModelBackend.credentialAPIKey(environment: { $0 == "CREDENTIALS_DIRECTORY" ? directory + "/none" : nil }) == nil)
    }
}

private func writeFile(_ directory: String, _ name: String, _ text: String) throws {
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    try text.write(toFile: directory + "/" + name, atomically: true, encoding: .utf8)
}
