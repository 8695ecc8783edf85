import Testing
import WorkerCore
@testable import ModelBackend

// The wire format as pure functions: URLs, bodies, caps, and how every kind of answer
// (good, broken, empty, oversized, hostile) decodes. No server involved.

private func wire(
    _ kind: WorkerConfig.BackendKind, endpoint: WorkerConfig.OpenAIEndpoint = .completions,
    model: String = "tiny", url: String = "http://127.0.0.1:11434", maxOutputBytes: Int64 = 262_144
) -> ModelWire {
    ModelWire(config: backendConfig(kind, url: url, model: model, endpoint: endpoint, maxOutputBytes: maxOutputBytes))
}

private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

@Suite struct URLsAndBodies {
    struct RootCase: Sendable, CustomTestStringConvertible {
        var url: String
        var kind: WorkerConfig.BackendKind
        var root: String
        var testDescription: String { "\(kind) \(url)" }
    }

    @Test(arguments: [
        RootCase(url: "http://127.0.0.1:11434", kind: .ollama, root: "http://127.0.0.1:11434"),
        RootCase(url: "http://127.0.0.1:11434/", kind: .ollama, root: "http://127.0.0.1:11434"),
        RootCase(url: "http://127.0.0.1:11434/api", kind: .ollama, root: "http://127.0.0.1:11434"),
        RootCase(url: "http://127.0.0.1:11434/api/", kind: .ollama, root: "http://127.0.0.1:11434"),
        RootCase(url: "http://127.0.0.1:11434/api/generate", kind: .ollama, root: "http://127.0.0.1:11434"),
        RootCase(url: "http://host:8080", kind: .openai, root: "http://host:8080"),
        RootCase(url: "http://host:8080//", kind: .openai, root: "http://host:8080"),
        RootCase(url: "http://host:8080/v1", kind: .openai, root: "http://host:8080"),
        RootCase(url: "http://host:8080/v1/", kind: .openai, root: "http://host:8080"),
        RootCase(url: "http://host:8080/v1/chat/completions", kind: .openai, root: "http://host:8080"),
        RootCase(url: "https://proxy.example/llm/v1", kind: .openai, root: "https://proxy.example/llm"),
        RootCase(url: "https://proxy.example/llm/", kind: .ollama, root: "https://proxy.example/llm"),
        // The suffix must be a path: a host named "api" or "v1" stays.
        RootCase(url: "http://api", kind: .ollama, root: "http://api"),
        RootCase(url: "http://v1/", kind: .openai, root: "http://v1"),
        // Another kind's suffix is a path prefix like any other.
        RootCase(url: "http://host:8080/v1", kind: .ollama, root: "http://host:8080/v1"),
    ])
    func reducesTheConfiguredURLToTheServerRoot(_ c: RootCase) {
        #expect(ModelWire.rootURL(of: c.url, kind: c.kind) == c.root)
    }

    @Test func buildsEndpointURLsPerKind() {
        #expect(wire(.ollama, url: "http://h:1/api/").generateURL == "http://h:1/api/generate")
        #expect(wire(.ollama, url: "http://h:1").probeURL == "http://h:1/api/tags")
        #expect(wire(.openai, url: "http://h:1/v1").generateURL == "http://h:1/v1/completions")
        #expect(wire(.openai, endpoint: .chat, url: "http://h:1/").generateURL == "http://h:1/v1/chat/completions")
        #expect(wire(.openai, url: "http://h:1/v1/").probeURL == "http://h:1/v1/models")
    }

    @Test(arguments: ["http://h:1/?key=x", "http://h:1/#top", "ftp://h:1", "http://", "http://user@h:1"])
    func refusesURLsThatCannotBeUsed(_ url: String) {
        #expect(wire(.ollama, url: url).urlProblem != nil)
    }

    @Test func acceptsAPlainURL() {
        #expect(wire(.openai, url: "https://models.example:8443/base/v1").urlProblem == nil)
    }

    @Test func ollamaBodyAsksForOneNonStreamingAnswerWithNumPredict() throws {
        let body = try JSON.parse(
            wire(.ollama, model: "qwen2.5-coder:1.5b").generateBody(ModelRequest(prompt: "hi \"you\"\n", maxTokens: 7, timeoutMs: 1_000)))
        #expect(body["model"] == "qwen2.5-coder:1.5b")
        #expect(body["prompt"] == "hi \"you\"\n")
        #expect(body["stream"] == false)
        #expect(body["options"]?["num_predict"] == 7)
        // keep_alive and think go with every Ollama request (docs/reference/model-backends.md: the model stays loaded
        // and never thinks unasked).
        #expect(body["keep_alive"] == "30m")
        #expect(body["think"] == false)
        #expect(body.objectValue?.keys.sorted() == ["keep_alive", "model", "options", "prompt", "stream", "think"])
    }

    @Test func completionsBodyCarriesPromptAndMaxTokens() throws {
        let body = try JSON.parse(wire(.openai).generateBody(ModelRequest(prompt: "日本 🎉", maxTokens: 3, timeoutMs: 1_000)))
        #expect(body["model"] == "tiny")
        #expect(body["prompt"] == "日本 🎉")
        #expect(body["max_tokens"] == 3)
        #expect(body["stream"] == false)
        #expect(body["messages"] == nil)
    }

    @Test func chatBodyCarriesThePromptAsOneUserMessage() throws {
        let body = try JSON.parse(wire(.openai, endpoint: .chat).generateBody(ModelRequest(prompt: "write", maxTokens: 9, timeoutMs: 1_000)))
        #expect(body["messages"] == [["role": "user", "content": "write"]])
        #expect(body["max_tokens"] == 9)
        #expect(body["stream"] == false)
        #expect(body["prompt"] == nil)
    }
}

@Suite struct ResponseCap {
    @Test func allowsThreeTimesTheOutputCapPlusOverhead() {
        let request = ModelRequest(prompt: "p", maxTokens: 10, timeoutMs: 1_000)
        #expect(wire(.openai, maxOutputBytes: 1_024).responseCap(for: request) == 3 * 1_024 + ModelWire.answerOverheadBytes)
        #expect(wire(.openai, maxOutputBytes: 2_048).responseCap(for: request) > wire(.openai, maxOutputBytes: 1_024).responseCap(for: request))
    }

    @Test func leavesOllamaRoomForItsContextTokens() {
        let short = ModelRequest(prompt: "p", maxTokens: 10, timeoutMs: 1_000)
        let long = ModelRequest(prompt: String(repeating: "x", count: 100_000), maxTokens: 10, timeoutMs: 1_000)
        // Two bytes for each of the 99,999 more prompt bytes.
        #expect(wire(.ollama).responseCap(for: long) - wire(.ollama).responseCap(for: short) == 2 * 99_999)
        #expect(wire(.openai).responseCap(for: long) == wire(.openai).responseCap(for: short))
    }

    @Test func neverExceedsTheHardCapEvenForAbsurdRequests() {
        let request = ModelRequest(prompt: "p", maxTokens: .max, timeoutMs: 1_000)
        #expect(wire(.ollama, maxOutputBytes: .max).responseCap(for: request) == ModelWire.maxResponseCap)
        #expect(wire(.openai, maxOutputBytes: -5).responseCap(for: request) == ModelWire.answerOverheadBytes)
    }
}

@Suite struct DecodingGoodAnswers {
    @Test func readsOllamasResponseAndDoneReason() throws {
        let body =
            #"{"model":"tiny","created_at":"2024-01-01T00:00:00Z","response":"Hello there","done":true,"done_reason":"stop","context":[1,2,3],"eval_count":2}"#
        let output = try wire(.ollama).decodeGenerate(status: 200, body: bytes(body)).get()
        #expect(output == ModelOutput(text: "Hello there", durationMs: 0, truncated: false, finishReason: "stop"))
    }

    @Test func readsOllamaWithoutTheOptionalFields() throws {
        let output = try wire(.ollama).decodeGenerate(status: 200, body: bytes(#"{"response":""}"#)).get()
        #expect(output.text == "")
        #expect(output.finishReason == nil)
    }

    @Test func readsTheFirstCompletionChoice() throws {
        let body =
            #"{"id":"c","object":"text_completion","choices":[{"text":" a b","index":0,"finish_reason":"length"},{"text":"other"}],"usage":{}}"#
        let output = try wire(.openai).decodeGenerate(status: 200, body: bytes(body)).get()
        #expect(output.text == " a b")
        #expect(output.finishReason == "length")
    }

    @Test func readsTheFirstChatMessage() throws {
        let body = #"{"choices":[{"index":0,"message":{"role":"assistant","content":"func f() {}\n"},"finish_reason":"stop"}]}"#
        let output = try wire(.openai, endpoint: .chat).decodeGenerate(status: 201, body: bytes(body)).get()
        #expect(output.text == "func f() {}\n")
        #expect(output.finishReason == "stop")
    }

    @Test func takesNullChatContentAsNoText() throws {
        let body = #"{"choices":[{"message":{"role":"assistant","content":null,"refusal":"no"},"finish_reason":"stop"}]}"#
        #expect(try wire(.openai, endpoint: .chat).decodeGenerate(status: 200, body: bytes(body)).get().text == "")
    }

    @Test func cutsTextBeyondTheOutputCapOnAUTF8Boundary() throws {
        // "é" is 2 bytes: the cap of 6 falls inside the fourth one.
        let body = #"{"response":"éééééé","done":true}"#
        let output = try wire(.ollama, maxOutputBytes: 7).decodeGenerate(status: 200, body: bytes(body)).get()
        #expect(output.text == "ééé")
        #expect(output.truncated)
    }

    @Test func cutsAHugeAnswerToTheCap() throws {
        let text = String(repeating: "0123456789", count: 500_000)
        let body = JSONValue.object(JSONObject([("choices", [["text": .string(text)]])])).serializedBytes
        let output = try wire(.openai, maxOutputBytes: 1_024).decodeGenerate(status: 200, body: body).get()
        #expect(output.text.utf8.count == 1_024)
        #expect(output.truncated)
        #expect(text.hasPrefix(output.text))
    }

    @Test func keepsAnAnswerExactlyAtTheCap() throws {
        let output = try wire(.openai, maxOutputBytes: 4).decodeGenerate(status: 200, body: bytes(#"{"choices":[{"text":"abcd"}]}"#)).get()
        #expect(output.text == "abcd")
        #expect(!output.truncated)
    }
}

@Suite struct DecodingBrokenAnswers {
    struct Broken: Sendable, CustomTestStringConvertible {
        var name: String
        var kind: WorkerConfig.BackendKind
        var endpoint: WorkerConfig.OpenAIEndpoint = .completions
        var body: [UInt8]
        /// Words the message must contain (lowercased), naming what was wrong.
        var says: String
        var testDescription: String { name }

        init(_ name: String, _ kind: WorkerConfig.BackendKind, _ body: String, endpoint: WorkerConfig.OpenAIEndpoint = .completions, says: String) {
            self.name = name
            self.kind = kind
            self.endpoint = endpoint
            self.body = Array(body.utf8)
            self.says = says
        }

        init(_ name: String, _ kind: WorkerConfig.BackendKind, bytes: [UInt8], says: String) {
            self.name = name
            self.kind = kind
            self.body = bytes
            self.says = says
        }
    }

    static let cases: [Broken] = [
        Broken("empty body", .ollama, "", says: "an empty body"),
        Broken("only whitespace", .openai, " \n\t ", says: "an empty body"),
        Broken("null", .ollama, "null", says: "null where an object belongs"),
        Broken("an array", .openai, "[]", says: "an array where an object belongs"),
        Broken("a string", .ollama, #""ok""#, says: "a string where an object belongs"),
        Broken("empty object (ollama)", .ollama, "{}", says: "without \"response\""),
        Broken("empty object (openai)", .openai, "{}", says: "without \"choices\""),
        Broken("cut-off JSON (the fixture's --malformed)", .ollama, #"{"model":"tiny","response":"trunc"#, says: "not json"),
        Broken("garbage", .openai, "hello, world", says: "not json"),
        Broken(
            "HTML page", .ollama, "<!DOCTYPE html><html><head><title>Welcome to nginx!</title></head><body>…</body></html>",
            says: "html page titled \"welcome to nginx!\""),
        Broken("HTML without a title", .openai, "<html><body><h1>Bad things</h1></body></html>", says: "html page starting \"bad things"),
        Broken(
            "an NDJSON stream", .ollama, "{\"response\":\"a\",\"done\":false}\n{\"response\":\"b\",\"done\":true}\n", says: "more than one json value"
        ),
        Broken("response is a number", .ollama, #"{"response":5,"done":true}"#, says: "\"response\" as an integer, not a string"),
        Broken("response is null", .ollama, #"{"response":null}"#, says: "\"response\" as null"),
        Broken("done is a string", .ollama, #"{"response":"x","done":"yes"}"#, says: "\"done\" as a string, not a boolean"),
        Broken("done is false", .ollama, #"{"response":"x","done":false}"#, says: "unfinished"),
        Broken("choices is an object", .openai, #"{"choices":{"text":"x"}}"#, says: "\"choices\" as an object, not an array"),
        Broken("choices is empty", .openai, #"{"choices":[]}"#, says: "empty \"choices\""),
        Broken("choice is a number", .openai, #"{"choices":[1]}"#, says: "\"choices[0]\" as an integer"),
        Broken("text is a number", .openai, #"{"choices":[{"text":3}]}"#, says: "\"choices[0].text\" as an integer"),
        Broken(
            "a chat answer to completions", .openai, #"{"choices":[{"message":{"content":"x"}}]}"#, says: "set backend.openaiendpoint to \"chat\""),
        Broken(
            "a completions answer to chat", .openai, #"{"choices":[{"text":"x"}]}"#, endpoint: .chat,
            says: "set backend.openaiendpoint to \"completions\""),
        Broken(
            "message is a string", .openai, #"{"choices":[{"message":"x"}]}"#, endpoint: .chat,
            says: "\"choices[0].message\" as a string, not an object"),
        Broken("content missing", .openai, #"{"choices":[{"message":{"role":"assistant"}}]}"#, endpoint: .chat, says: "without \"content\""),
        Broken("content is an array", .openai, #"{"choices":[{"message":{"content":["x"]}}]}"#, endpoint: .chat, says: "content\" as an array"),
        Broken("a 200 carrying an error", .openai, #"{"error":{"message":"out of memory","type":"server_error"}}"#, says: "an error: out of memory"),
        Broken("duplicate keys", .ollama, #"{"response":"a","response":"b"}"#, says: "duplicate key"),
        Broken("lone surrogate escape", .ollama, #"{"response":"\ud800"}"#, says: "invalid escape"),
        Broken("nested 10000 deep", .openai, String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000), says: "nested deeper"),
        Broken(
            "invalid UTF-8 in the text", .ollama, bytes: Array(#"{"response":""#.utf8) + [0xFF, 0xFE] + Array(#""}"#.utf8), says: "invalid utf-8"),
        Broken("a NUL byte", .ollama, bytes: [0x00], says: "not json"),
    ]

    @Test(arguments: cases)
    func reportsABadAnswerThatSaysWhatIsWrong(_ c: Broken) {
        let result = wire(c.kind, endpoint: c.endpoint).decodeGenerate(status: 200, body: c.body)
        guard case .failure(let error) = result else {
            Issue.record("decoded \(c.name) as \(result)")
            return
        }
        #expect(error.kind == .badAnswer)
        #expect(error.message.lowercased().contains(c.says), "\(error.message)")
        #expect(error.message.contains("http://127.0.0.1:11434"), "names the server: \(error.message)")
        #expect(error.message.utf8.count < 1_000, "bounded: \(error.message.utf8.count) bytes")
    }

    @Test func quotesAHostileBodyOnlyPrintableAndBounded() {
        let hostile = "\u{1B}[2J\u{1B}[31mrm -rf /\u{202E}txt.exe\r\n" + String(repeating: "A", count: 100_000)
        let error = wire(.openai).decodeGenerate(status: 200, body: bytes(hostile)).failure
        #expect(error?.kind == .badAnswer)
        let message = error?.message ?? ""
        #expect(!message.unicodeScalars.contains { $0.value < 0x20 || $0 == "\u{202E}" }, "\(message)")
        #expect(message.contains("?[2J?[31mrm -rf /?txt.exe"))
        #expect(message.utf8.count < 600)
    }
}

@Suite struct DecodingErrorStatuses {
    struct StatusCase: Sendable, CustomTestStringConvertible {
        var name: String
        var kind: WorkerConfig.BackendKind
        var status: Int
        var body: String
        var expected: ModelError.Kind
        var says: [String]
        var testDescription: String { name }
    }

    static let cases: [StatusCase] = [
        StatusCase(
            name: "Ollama: model not pulled", kind: .ollama, status: 404, body: #"{"error":"model 'nosuch' not found, try pulling it first"}"#,
            expected: .modelNotFound, says: ["ollama pull tiny", "model 'nosuch' not found"]),
        StatusCase(
            name: "Ollama: no such path", kind: .ollama, status: 404, body: "404 page not found",
            expected: .rejected(status: 404), says: ["has no /api/generate", "404 page not found", "backend.kind"]),
        StatusCase(
            name: "OpenAI: unknown model", kind: .openai, status: 404,
            body: #"{"error":{"message":"The model `tiny` does not exist","type":"invalid_request_error","code":"model_not_found"}}"#,
            expected: .modelNotFound, says: ["does not serve model \"tiny\"", "does not exist", "/v1/models"]),
        StatusCase(
            name: "vLLM: unknown model", kind: .openai, status: 404,
            body: #"{"object":"error","message":"The model `tiny` does not exist.","type":"NotFoundError","code":404}"#,
            expected: .modelNotFound, says: ["does not exist"]),
        StatusCase(
            name: "llama.cpp: no such path", kind: .openai, status: 404, body: #"{"detail":"Not Found"}"#,
            expected: .rejected(status: 404), says: ["has no /v1/completions", "Not Found", "backend.openaiEndpoint"]),
        StatusCase(
            name: "llama.cpp (C++ server): no such path", kind: .openai, status: 404,
            body: #"{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}"#,
            expected: .rejected(status: 404), says: ["has no /v1/completions", "File Not Found"]),
        StatusCase(
            name: "OpenAI: an unknown model by code only", kind: .openai, status: 404,
            body: #"{"error":{"message":"no such thing","code":"model_not_found"}}"#,
            expected: .modelNotFound, says: ["no such thing"]),
        StatusCase(
            name: "500 with Ollama's error", kind: .ollama, status: 500, body: #"{"error":"llama runner process has terminated"}"#,
            expected: .rejected(status: 500), says: ["HTTP 500", "llama runner process has terminated"]),
        StatusCase(
            name: "500 with an OpenAI error object", kind: .openai, status: 500,
            body: #"{"error":{"message":"CUDA out of memory","type":"server_error"}}"#,
            expected: .rejected(status: 500), says: ["CUDA out of memory"]),
        StatusCase(
            name: "500 with an error object without message", kind: .openai, status: 500, body: #"{"error":{"code":17}}"#,
            expected: .rejected(status: 500), says: [#"{"code":17}"#]),
        StatusCase(
            name: "502 from a proxy", kind: .openai, status: 502,
            body: "<html><head><title>502 Bad Gateway</title></head><body><center>nginx</center></body></html>",
            expected: .rejected(status: 502), says: ["HTTP 502", "HTML page titled \"502 Bad Gateway\""]),
        StatusCase(
            name: "503 while loading", kind: .openai, status: 503,
            body: #"{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}"#,
            expected: .rejected(status: 503), says: ["Loading model", "loading the model"]),
        StatusCase(
            name: "400 context too long", kind: .openai, status: 400,
            body: #"{"error":{"message":"This model's maximum context length is 512 tokens","type":"invalid_request_error"}}"#,
            expected: .rejected(status: 400), says: ["maximum context length is 512", "context"]),
        StatusCase(
            name: "422 FastAPI validation", kind: .openai, status: 422,
            body: #"{"detail":[{"type":"int_parsing","loc":["body","max_tokens"],"msg":"Input should be a valid integer"}]}"#,
            expected: .rejected(status: 422), says: ["Input should be a valid integer"]),
        StatusCase(
            name: "401 needs a key", kind: .openai, status: 401, body: #"{"error":{"message":"Invalid API key"}}"#,
            expected: .rejected(status: 401), says: ["Invalid API key", "without authentication"]),
        StatusCase(
            name: "429 busy", kind: .ollama, status: 429, body: #"{"error":"server busy, please try again.  maximum pending requests exceeded"}"#,
            expected: .rejected(status: 429), says: ["server busy", "try again later"]),
        StatusCase(
            name: "500 with an empty body", kind: .ollama, status: 500, body: "",
            expected: .rejected(status: 500), says: ["failed (HTTP 500)"]),
        StatusCase(
            name: "an odd status", kind: .ollama, status: 302, body: "",
            expected: .rejected(status: 302), says: ["HTTP 302"]),
    ]

    @Test(arguments: cases)
    func mapsTheStatusToAKindAndQuotesTheServer(_ c: StatusCase) {
        let result = wire(c.kind).decodeGenerate(status: c.status, body: bytes(c.body))
        #expect(result.failure?.kind == c.expected)
        for words in c.says {
            #expect(result.failure?.message.contains(words) == true, "\(result.failure?.message ?? "no error") lacks \(words)")
        }
    }

    @Test func boundsAHugeErrorText() {
        let body = #"{"error":""# + String(repeating: "x", count: 1_000_000) + #""}"#
        let error = wire(.ollama).decodeGenerate(status: 500, body: bytes(body)).failure
        #expect(error?.kind == .rejected(status: 500))
        #expect((error?.message.utf8.count ?? .max) < 1_000)
        #expect(error?.message.contains("xxx…") == true)
    }

    @Test func quotesANonJSONErrorPrintably() {
        let error = wire(.ollama).decodeGenerate(status: 500, body: bytes("boom\u{07}\n\n  at line 3")).failure
        #expect(error?.message.contains("boom? at line 3") == true, "\(error?.message ?? "")")
    }
}

@Suite struct DecodingProbes {
    static let tags =
        #"{"models":[{"name":"qwen2.5-coder:1.5b","model":"qwen2.5-coder:1.5b","size":1},{"name":"Llama3:latest","model":"llama3:latest"},{"name":"hf.co/org/repo:Q4_K_M"},{"model":"only-model-key:7b"},5,{"name":3}]}"#

    @Test(arguments: ["qwen2.5-coder:1.5b", "llama3", "llama3:latest", "LLAMA3", "hf.co/org/repo:Q4_K_M", "only-model-key:7b", " llama3 "])
    func ollamaIsReadyWhenTheModelIsListed(_ model: String) {
        let probe = wire(.ollama, model: model).decodeProbe(status: 200, body: bytes(DecodingProbes.tags))
        #expect(probe.state == .ready, "\(probe.detail)")
        #expect(probe.detail.contains("is on the Ollama server"))
    }

    @Test(arguments: ["qwen2.5-coder", "qwen2.5-coder:7b", "llama", "hf.co/org/repo", "tiny"])
    func ollamaIsUnavailableWhenTheModelIsNotPulled(_ model: String) {
        let probe = wire(.ollama, model: model).decodeProbe(status: 200, body: bytes(DecodingProbes.tags))
        #expect(probe.state == .unavailable)
        #expect(probe.detail.contains("model \"\(model)\" is not pulled on the Ollama server"), "\(probe.detail)")
        #expect(probe.detail.contains("(ollama pull \(model))"))
        #expect(probe.detail.contains("\"qwen2.5-coder:1.5b\""), "lists what it has: \(probe.detail)")
    }

    @Test func ollamaWithNoModelsSaysSo() {
        let probe = wire(.ollama).decodeProbe(status: 200, body: bytes(#"{"models":[]}"#))
        #expect(probe.state == .unavailable)
        #expect(probe.detail.hasSuffix("it has no models"))
    }

    @Test func listsAtMostTenModelNames() {
        let models = (1...25).map { #"{"name":"m\#($0)"}"# }.joined(separator: ",")
        let probe = wire(.ollama).decodeProbe(status: 200, body: bytes(#"{"models":[\#(models)]}"#))
        #expect(probe.detail.contains("\"m10:latest\"") == false)
        #expect(probe.detail.contains("\"m10\" and 15 more"), "\(probe.detail)")
    }

    @Test func openAIIsReadyAndSaysWhetherTheModelIsListed() {
        let body = bytes(#"{"object":"list","data":[{"id":"tiny","object":"model"},{"id":"other"}]}"#)
        let listed = wire(.openai).decodeProbe(status: 200, body: body)
        #expect(listed.state == .ready)
        #expect(listed.detail.contains("lists model \"tiny\""))
        let unlisted = wire(.openai, model: "qwen").decodeProbe(status: 200, body: body)
        #expect(unlisted.state == .ready)
        #expect(unlisted.detail.contains("does not list model \"qwen\" (it lists \"tiny\", \"other\")"), "\(unlisted.detail)")
    }

    struct ProbeCase: Sendable, CustomTestStringConvertible {
        var name: String
        var kind: WorkerConfig.BackendKind
        var status: Int
        var body: String
        var state: ModelState
        var says: String
        var testDescription: String { name }
    }

    @Test(arguments: [
        ProbeCase(
            name: "llama.cpp loading", kind: .openai, status: 503, body: #"{"error":{"code":503,"message":"Loading model"}}"#, state: .loading,
            says: "Loading model"),
        ProbeCase(name: "no data list", kind: .openai, status: 200, body: #"{"models":[]}"#, state: .unavailable, says: "without a \"data\" list"),
        ProbeCase(name: "data is an object", kind: .openai, status: 200, body: #"{"data":{}}"#, state: .unavailable, says: "without a \"data\" list"),
        ProbeCase(name: "no models list", kind: .ollama, status: 200, body: #"{"data":[]}"#, state: .unavailable, says: "without a \"models\" list"),
        ProbeCase(
            name: "wrong server kind", kind: .ollama, status: 404, body: #"{"detail":"Not Found"}"#, state: .unavailable,
            says: "HTTP 404 to /api/tags: Not Found; check backend.url and backend.kind"),
        ProbeCase(
            name: "HTML page", kind: .ollama, status: 200, body: "<html><title>Router login</title></html>", state: .unavailable,
            says: "HTML page titled \"Router login\""),
        ProbeCase(name: "malformed", kind: .openai, status: 200, body: #"{"data":["#, state: .unavailable, says: "not JSON"),
        ProbeCase(
            name: "server error", kind: .ollama, status: 500, body: #"{"error":"disk full"}"#, state: .unavailable,
            says: "HTTP 500 to /api/tags: disk full"),
    ])
    func probeFailuresSayWhy(_ c: ProbeCase) {
        let probe = wire(c.kind).decodeProbe(status: c.status, body: bytes(c.body))
        #expect(probe.state == c.state)
        #expect(probe.detail.contains(c.says), "\(probe.detail)")
    }

    @Test(arguments: [
        ("tiny", "tiny:latest"), ("TINY:Latest", "tiny:latest"), ("ns/model", "ns/model:latest"),
        ("host:5000/ns/model", "host:5000/ns/model:latest"), ("m:7b", "m:7b"),
    ])
    func normalizesOllamaNamesAsOllamaDoes(_ name: String, _ normalized: String) {
        #expect(ModelWire.ollamaName(name) == normalized)
    }
}

@Suite struct TextHelpers {
    struct Cut: Sendable, CustomTestStringConvertible {
        var text: String
        var max: Int
        var expected: String
        var truncated: Bool
        var testDescription: String { "\(text) at \(max)" }
        init(_ text: String, _ max: Int, _ expected: String, _ truncated: Bool) {
            self.text = text
            self.max = max
            self.expected = expected
            self.truncated = truncated
        }
    }

    @Test(arguments: [
        Cut("abc", 3, "abc", false),
        Cut("abcd", 3, "abc", true),
        Cut("aé", 2, "a", true),  // é is C3 A9: a cut after C3 steps back
        Cut("aé", 3, "aé", false),
        Cut("日本", 5, "日", true),  // 3-byte characters
        Cut("🎉🎉", 7, "🎉", true),  // 4-byte characters
        Cut("🎉", 3, "", true),
        Cut("x", 0, "", true),
        Cut("", 0, "", false),
    ])
    func cutsOnlyBetweenCharacters(_ c: Cut) {
        let cut = ModelText.cutUTF8(c.text, maxBytes: c.max)
        #expect(cut.text == c.expected)
        #expect(cut.truncated == c.truncated)
        #expect(cut.text.utf8.count <= c.max)
    }

    @Test func printableCollapsesWhitespaceAndReplacesControls() {
        #expect(ModelText.printable("  a\n\n b\tc\u{0}d\u{9B}e\u{200F}f  ") == "a b c?d?e?f")
        #expect(ModelText.printable(String(repeating: "é", count: 10), limit: 4) == "éééé…")
        #expect(ModelText.printable("abcd", limit: 4) == "abcd")
    }

    @Test func errorCodesAreStable() {
        #expect(ModelError(.rejected(status: 500), "").code == "model_rejected_500")
        #expect(ModelError(.timedOut, "").code == "model_timed_out")
        #expect(ModelError(.unavailable, "").code == "model_unavailable")
        #expect(ModelError(.modelNotFound, "").code == "model_not_found")
        #expect(ModelError(.cancelled, "x").description == "x")
    }

    @Test func wireErrorIsTheCodeThenTheDetailSoClientsSplitAtTheFirstColon() {
        let error = ModelError(.rejected(status: 503), "llama.cpp is not ready (HTTP 503: loading); it may still be loading the model")
        #expect(error.wireText == "model_rejected_503: llama.cpp is not ready (HTTP 503: loading); it may still be loading the model")
        #expect(error.wireText.split(separator: ":", maxSplits: 1).first.map(String.init) == error.code)
        #expect(ModelError(.unavailable, "cannot reach").wireText == "model_unavailable: cannot reach")
    }
}

@Suite struct RequestsRefusedBeforeTheNetwork {
    // Port 9 (discard) on loopback: were a request sent, it would fail differently.
    let backend = ModelBackend(config: backendConfig(.ollama, url: "http://127.0.0.1:9"))

    @Test(arguments: [0, -1])
    func refusesMaxTokensBelowOne(_ maxTokens: Int) async {
        await #expect(throws: ModelError(.invalidRequest, "maxTokens must be at least 1, got \(maxTokens)")) {
            try await backend.generate(ModelRequest(prompt: "x", maxTokens: maxTokens, timeoutMs: 1_000))
        }
    }

    @Test(arguments: [0, -50] as [Int64])
    func failsAtOnceWhenNoTimeIsLeft(_ timeoutMs: Int64) async {
        let error = await #expect(throws: ModelError.self) {
            try await backend.generate(ModelRequest(prompt: "x", maxTokens: 1, timeoutMs: timeoutMs))
        }
        #expect(error?.kind == .timedOut)
    }

    @Test func refusesAnUnusableURL() async {
        let backend = ModelBackend(config: backendConfig(.openai, url: "http://127.0.0.1:9/v1?key=secret"))
        let error = await #expect(throws: ModelError.self) {
            try await backend.generate(ModelRequest(prompt: "x", maxTokens: 1, timeoutMs: 1_000))
        }
        #expect(error?.kind == .invalidRequest)
        #expect(error?.message.contains("without a query or fragment") == true)
        let probe = await backend.probe()
        #expect(probe.state == .unavailable)
        #expect(probe.detail.contains("without a query or fragment"))
    }

    @Test func stopsBeforeSendingWhenAlreadyCancelled() async {
        let backend = backend
        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await backend.generate(ModelRequest(prompt: "x", maxTokens: 1, timeoutMs: 1_000))
        }
        let result = await task.result
        #expect((result.failure as? ModelError)?.kind == .cancelled)
    }

    @Test func summaryNamesKindModelAndServer() {
        let backend = ModelBackend(config: backendConfig(.openai, url: "http://h:8080/v1/", model: "qwen", endpoint: .chat))
        #expect(backend.summary == "openai model \"qwen\" at http://h:8080 (/v1/chat/completions)")
    }
}

extension Result {
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}

@Suite struct OllamaParameterSizeTests {
    static let tags =
        #"{"models":[{"name":"qwen2.5-coder:1.5b","details":{"parameter_size":"1.5B"}},{"name":"big:7b","details":{"parameter_size":"7.6B"}},{"name":"odd:1b","details":{"parameter_size":17}},{"name":"none:1b"}]}"#

    @Test func readsTheConfiguredModelsParameterSizeFromTags() {
        #expect(wire(.ollama, model: "qwen2.5-coder:1.5b").ollamaParameterSize(tagsBody: bytes(Self.tags)) == 1.5)
        #expect(wire(.ollama, model: "big:7b").ollamaParameterSize(tagsBody: bytes(Self.tags)) == 7.6)
    }

    @Test(arguments: ["odd:1b", "none:1b", "missing:1b"])
    func aModelWithoutAUsableSizeHasNone(model: String) {
        #expect(wire(.ollama, model: model).ollamaParameterSize(tagsBody: bytes(Self.tags)) == nil)
    }

    @Test(arguments: [
        "", "{", "[]", #"{"models":5}"#, #"{"models":[{"name":"qwen2.5-coder:1.5b","details":"1.5B"}]}"#,
        #"{"models":[{"name":"qwen2.5-coder:1.5b","details":{"parameter_size":"-1.5B"}}]}"#,
    ])
    func hostileTagsGiveNoSize(body: String) {
        #expect(wire(.ollama, model: "qwen2.5-coder:1.5b").ollamaParameterSize(tagsBody: bytes(body)) == nil)
    }
}
