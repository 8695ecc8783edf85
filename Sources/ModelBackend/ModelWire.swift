// The wire format of the model backends (docs/reference/model-backends.md), as pure functions: URLs, request
// bodies, the response cap, and how a status and body decode into an output, an error
// or a readiness. No I/O here, so every hostile answer is tested without a server.

import HTTP
import WorkerCore

/// The configured backend's wire format.
///
/// `backend.url` is the server's address. It may be given as the server root
/// (`http://127.0.0.1:11434`), with a trailing slash, as the API root (`…/v1` for
/// `openai`, `…/api` for `ollama`) or even as a full endpoint URL (`…/v1/chat/completions`,
/// `…/api/generate`): the worker reduces it to the root and appends its own paths. A
/// path before that (a reverse proxy's `https://host/llm`) is kept. A query or fragment
/// makes the URL unusable.
public struct ModelWire: Sendable {
    public let config: WorkerConfig.Backend
    /// `backend.url` reduced to the server root, without a trailing slash.
    public let root: String
    /// Why `backend.url` cannot be used, when it cannot.
    public let urlProblem: String?

    /// Room in an answer beyond its text: the JSON around it and its escapes.
    public static let answerOverheadBytes = 65_536
    /// No answer is ever buffered beyond this, whatever the configuration says.
    public static let maxResponseCap = 64 << 20
    /// Cap on a readiness answer (a model list).
    public static let probeResponseCap = 4 << 20

    public init(config: WorkerConfig.Backend) {
        self.config = config
        self.root = ModelWire.rootURL(of: config.url, kind: config.kind)
        if let problem = HTTPURL.validationProblem(config.url) {
            urlProblem = problem
        } else if config.url.contains("?") || config.url.contains("#") {
            urlProblem = "must be the server's address without a query or fragment, got \"\(ModelText.printable(config.url, limit: 120))\""
        } else {
            urlProblem = nil
        }
    }

    // MARK: - URLs and bodies

    /// `url` without trailing slashes and without the API suffix (`/v1…` or `/api…`) that
    /// the worker appends itself.
    public static func rootURL(of url: String, kind: WorkerConfig.BackendKind) -> String {
        var root = url
        while root.hasSuffix("/") { root.removeLast() }
        // The suffix must lie in the path: "http://api" has no path to strip.
        let schemeEnd = root.firstRange(of: "://").map { root.distance(from: root.startIndex, to: $0.upperBound) } ?? 0
        let pathStart = root.dropFirst(schemeEnd).firstIndex(of: "/").map { root.distance(from: root.startIndex, to: $0) } ?? root.count
        let suffixes: [String]
        switch kind {
        case .openai: suffixes = ["/v1/chat/completions", "/v1/completions", "/v1/models", "/v1"]
        case .ollama: suffixes = ["/api/generate", "/api/tags", "/api"]
        }
        for suffix in suffixes where root.hasSuffix(suffix) && root.count - suffix.count >= pathStart {
            root.removeLast(suffix.count)
            break
        }
        while root.hasSuffix("/") { root.removeLast() }
        return root
    }

    public var generatePath: String {
        switch config.kind {
        case .ollama: return "/api/generate"
        case .openai: return config.openaiEndpoint == .chat ? "/v1/chat/completions" : "/v1/completions"
        }
    }

    public var probePath: String {
        switch config.kind {
        case .ollama: return "/api/tags"
        case .openai: return "/v1/models"
        }
    }

    public var generateURL: String { root + generatePath }
    public var probeURL: String { root + probePath }

    /// Whether `request` goes to the chat API: a chat always does where the backend has
    /// one (never flattened into a prompt). Ollama's generate API takes a system message
    /// and `format` itself; OpenAI's completions API has neither a system message nor
    /// `response_format`, so either means chat there.
    public func usesChat(_ request: ModelRequest) -> Bool {
        switch config.kind {
        case .ollama: return request.messages != nil
        case .openai: return request.isChat || request.format == .json || config.openaiEndpoint == .chat
        }
    }

    /// The path `request` is sent to.
    public func path(for request: ModelRequest) -> String {
        switch (config.kind, usesChat(request)) {
        case (.ollama, false): return "/api/generate"
        case (.ollama, true): return "/api/chat"
        case (.openai, false): return "/v1/completions"
        case (.openai, true): return "/v1/chat/completions"
        }
    }

    /// The headers of every request: JSON, and the API key when there is one.
    public func headers(accept: String = "application/json") -> [(String, String)] {
        var headers = [("content-type", "application/json"), ("accept", accept)]
        if let key = config.apiKey { headers.append(("authorization", "Bearer \(key)")) }
        return headers
    }

    /// The messages of a chat request: the system message first, then the chat (a bare
    /// prompt becomes one user message).
    func messages(of request: ModelRequest) -> JSONValue {
        var list: [JSONValue] = []
        if let system = request.system { list.append(["role": "system", "content": .string(system)]) }
        if let messages = request.messages {
            list += messages.map { ["role": .string($0.role), "content": .string($0.content)] }
        } else {
            list.append(["role": "user", "content": .string(request.prompt)])
        }
        return .array(list)
    }

    /// The JSON body of a generation: the prompt or the chat, the options in the API's own
    /// names, and for Ollama `think` and `keep_alive` (re-sent each time, so the model
    /// stays loaded and never thinks unasked).
    public func generateBody(_ request: ModelRequest, stream: Bool = false) -> [UInt8] {
        var body = JSONObject([("model", .string(config.model))])
        let chat = usesChat(request)
        if chat {
            body["messages"] = messages(of: request)
        } else {
            body["prompt"] = .string(request.prompt)
        }
        body["stream"] = .bool(stream)
        switch config.kind {
        case .ollama:
            if !chat, let system = request.system { body["system"] = .string(system) }
            var options = JSONObject([("num_predict", .int(request.maxTokens))])
            if let value = request.temperature { options["temperature"] = .double(value) }
            if let value = request.topP { options["top_p"] = .double(value) }
            if let value = request.topK { options["top_k"] = .int(value) }
            if let value = request.seed { options["seed"] = .int(value) }
            if !request.stop.isEmpty { options["stop"] = .array(request.stop.map { .string($0) }) }
            if let value = request.numCtx { options["num_ctx"] = .int(value) }
            body["options"] = .object(options)
            if request.format == .json { body["format"] = "json" }
            body["think"] = .bool(config.think)
            body["keep_alive"] = config.keepAlive
        case .openai:
            body["max_tokens"] = .int(request.maxTokens)
            if let value = request.temperature { body["temperature"] = .double(value) }
            if let value = request.topP { body["top_p"] = .double(value) }
            if let value = request.topK { body["top_k"] = .int(value) }
            if let value = request.seed { body["seed"] = .int(value) }
            if !request.stop.isEmpty { body["stop"] = .array(request.stop.map { .string($0) }) }
            if request.format == .json { body["response_format"] = ["type": "json_object"] }
            // The counts come in a last chunk only when asked for.
            if stream { body["stream_options"] = ["include_usage": true] }
        }
        return JSONValue.object(body).serializedBytes
    }

    /// The body that makes Ollama load the model and keep it (`keep_alive`): a generate
    /// without a prompt, which Ollama answers with `done_reason: "load"`.
    public var loadBody: [UInt8] {
        JSONValue.object(
            JSONObject([
                ("model", .string(config.model)), ("stream", false),
                ("think", .bool(config.think)), ("keep_alive", config.keepAlive),
            ])
        ).serializedBytes
    }

    /// The largest answer accepted for `request`: three times `backend.maxOutputBytes`
    /// (room for JSON escapes: Go's encoder writes `<` as `\u003c`, Python's non-ASCII as
    /// `\uXXXX`) plus `answerOverheadBytes`; for Ollama also room for `context`, the token
    /// ids of prompt and answer that its older versions return. A text beyond
    /// `maxOutputBytes` that fits is cut (`truncated`); a larger answer is `tooLarge`.
    public func responseCap(for request: ModelRequest) -> Int {
        let output = Int(clamping: max(0, config.maxOutputBytes))
        var cap = 3 * min(output, ModelWire.maxResponseCap) + ModelWire.answerOverheadBytes
        if config.kind == .ollama {
            // Up to 7 bytes a token id ("123456,"); a token is rarely under 4 bytes of prompt.
            cap += 8 * min(max(0, request.maxTokens), 1 << 24) + 2 * request.prompt.utf8.count
        }
        return min(cap, ModelWire.maxResponseCap)
    }

    // MARK: - Decoding answers

    /// Decodes the answer to a generation. The output's `durationMs` is 0: the caller
    /// measured the call and sets it.
    public func decodeGenerate(status: Int, body: [UInt8], chat: Bool? = nil) -> Result<ModelOutput, ModelError> {
        let chat = chat ?? (config.kind == .openai && config.openaiEndpoint == .chat)
        let generatePath =
            chat ? (config.kind == .ollama ? "/api/chat" : "/v1/chat/completions") : (config.kind == .ollama ? "/api/generate" : "/v1/completions")
        guard (200...299).contains(status) else { return .failure(statusError(status: status, body: body, path: generatePath)) }
        func bad(_ what: String) -> Result<ModelOutput, ModelError> {
            .failure(ModelError(.badAnswer, "\(serverName) answered \(generatePath) with \(what); \(kindHint)"))
        }
        let object: JSONObject
        switch ModelWire.parseObject(body) {
        case .success(let parsed): object = parsed
        case .failure(let what): return bad(what)
        }
        if let error = object["error"], error != .null {
            let text = ModelText.errorText(in: object).map { ModelText.printable($0) } ?? error.typeDescription
            return .failure(ModelError(.badAnswer, "\(serverName) answered \(generatePath) with HTTP \(status) and an error: \(text)"))
        }
        let text: String
        let reason: String?
        var thinking = 0
        switch config.kind {
        case .ollama where chat:
            guard case .object(let message)? = object["message"] else { return bad("an object without a \"message\" object") }
            guard case .string(let value)? = message["content"] else { return bad("\"message\" without a \"content\" string") }
            text = value
            thinking = message["thinking"]?.stringValue?.utf8.count ?? 0
            reason = object["done_reason"]?.stringValue
        case .ollama:
            thinking = object["thinking"]?.stringValue?.utf8.count ?? 0
            guard let response = object["response"] else { return bad("an object without \"response\"") }
            guard case .string(let value) = response else { return bad("\"response\" as \(response.typeDescription), not a string") }
            if let done = object["done"] {
                guard case .bool(let finished) = done else { return bad("\"done\" as \(done.typeDescription), not a boolean") }
                // A non-streaming answer is always finished; false means a stream's first piece.
                if !finished { return bad("an unfinished answer (\"done\": false), as a stream would give") }
            }
            text = value
            reason = object["done_reason"]?.stringValue
        case .openai:
            guard let choices = object["choices"] else { return bad("an object without \"choices\"") }
            guard case .array(let list) = choices else { return bad("\"choices\" as \(choices.typeDescription), not an array") }
            guard let first = list.first else { return bad("an empty \"choices\" array") }
            guard case .object(let choice) = first else { return bad("\"choices[0]\" as \(first.typeDescription), not an object") }
            reason = choice["finish_reason"]?.stringValue
            switch chat ? WorkerConfig.OpenAIEndpoint.chat : .completions {
            case .completions:
                guard let value = choice["text"] else {
                    let hint = choice["message"] != nil ? " (it has \"message\", a chat answer: set backend.openaiEndpoint to \"chat\")" : ""
                    return bad("\"choices[0]\" without \"text\"\(hint)")
                }
                guard case .string(let string) = value else { return bad("\"choices[0].text\" as \(value.typeDescription), not a string") }
                text = string
            case .chat:
                guard let message = choice["message"] else {
                    let hint = choice["text"] != nil ? " (it has \"text\", a completions answer: set backend.openaiEndpoint to \"completions\")" : ""
                    return bad("\"choices[0]\" without \"message\"\(hint)")
                }
                guard case .object(let fields) = message else { return bad("\"choices[0].message\" as \(message.typeDescription), not an object") }
                thinking = (fields["reasoning_content"] ?? fields["reasoning"])?.stringValue?.utf8.count ?? 0
                switch fields["content"] {
                case .string(let string)?: text = string
                // The API allows null content (a refusal, only tool calls): no text.
                case .null?: text = ""
                case nil: return bad("\"choices[0].message\" without \"content\"")
                case let other?: return bad("\"choices[0].message.content\" as \(other.typeDescription), not a string")
                }
            }
        }
        if text.isEmpty && thinking > 0 {
            return .failure(onlyThoughtError(thinkingBytes: thinking, finishReason: reason))
        }
        let cut = ModelText.cutUTF8(text, maxBytes: Int(clamping: max(0, config.maxOutputBytes)))
        return .success(
            ModelOutput(
                text: cut.text, durationMs: 0, truncated: cut.truncated,
                finishReason: reason.map { ModelText.printable($0, limit: 40) }))
    }

    /// The error for an answer with thinking and no text.
    public func onlyThoughtError(thinkingBytes: Int, finishReason: String?) -> ModelError {
        let why = finishReason.map { " (finish reason \"\(ModelText.printable($0, limit: 40))\")" } ?? ""
        switch config.kind {
        case .ollama:
            let advice =
                config.think
                ? "set backend.think to false, or raise maxTokens"
                : "the model thinks although think is false: raise maxTokens or use a model that answers without thinking"
            return ModelError(
                .onlyThought,
                "model \"\(ModelText.printable(config.model, limit: 120))\" spent the answer thinking (\(thinkingBytes) bytes of thinking, no text\(why)); \(advice)"
            )
        case .openai:
            return ModelError(
                .onlyThought,
                "\(serverName) put the whole answer in reasoning_content (\(thinkingBytes) bytes, no text\(why)); raise maxTokens or turn the model's reasoning off"
            )
        }
    }

    /// The error for a generation answered with a non-2xx status.
    public func statusError(status: Int, body: [UInt8], path: String? = nil) -> ModelError {
        let generatePath = path ?? self.generatePath
        let saying = ModelText.serverError(in: body).map { ": \($0)" } ?? ""
        let model = ModelText.printable(config.model, limit: 120)
        switch status {
        case 404:
            if isModelNotFoundBody(body) {
                switch config.kind {
                case .ollama:
                    return ModelError(
                        .modelNotFound,
                        "model \"\(model)\" is not on the Ollama server at \(root) (HTTP 404\(saying)); pull it there with: ollama pull \(model)")
                case .openai:
                    return ModelError(
                        .modelNotFound,
                        "the model server at \(root) does not serve model \"\(model)\" (HTTP 404\(saying)); set backend.model to a model that \(probeURL) lists"
                    )
                }
            }
            return ModelError(
                .rejected(status: 404),
                "\(serverName) has no \(generatePath) (HTTP 404\(saying)); check backend.url and backend.kind\(config.kind == .openai ? " and backend.openaiEndpoint" : "")"
            )
        case 400, 413, 422:
            return ModelError(
                .rejected(status: status),
                "\(serverName) refused the request (HTTP \(status)\(saying)); a prompt plus maxTokens beyond the model's context is a common cause")
        case 401, 403:
            return ModelError(.rejected(status: status), "\(serverName) refused access (HTTP \(status)\(saying)); \(keyAdvice)")
        case 429:
            return ModelError(.rejected(status: status), "\(serverName) is busy (HTTP 429\(saying)); try again later")
        case 503:
            return ModelError(.rejected(status: status), "\(serverName) is not ready (HTTP 503\(saying)); it may still be loading the model")
        case 500...599:
            return ModelError(.rejected(status: status), "\(serverName) failed (HTTP \(status)\(saying)); its own log says more")
        default:
            return ModelError(.rejected(status: status), "\(serverName) answered HTTP \(status) to \(generatePath)\(saying)")
        }
    }

    /// A 404 that is about a missing model rather than a missing path. Ollama answers an
    /// unknown path in plain text, so its JSON error is about the model. OpenAI-compatible
    /// servers answer JSON for both, so there it takes OpenAI's `model_not_found` code or
    /// an error text that names the configured model (OpenAI, vLLM, LM Studio do).
    func isModelNotFoundBody(_ body: [UInt8]) -> Bool {
        guard case .object(let object)? = try? JSON.parse(body) else { return false }
        switch config.kind {
        case .ollama:
            return object["error"] != nil && object["error"] != .null
        case .openai:
            if object["error"]?["code"]?.stringValue == "model_not_found" { return true }
            guard let text = ModelText.errorText(in: object) else { return false }
            return text.contains(config.model)
        }
    }

    /// Decodes the answer to the readiness probe (`GET /api/tags` or `/v1/models`).
    public func decodeProbe(status: Int, body: [UInt8]) -> (state: ModelState, detail: String) {
        let saying = ModelText.serverError(in: body).map { ": \($0)" } ?? ""
        if status == 503 {
            return (.loading, "\(serverName) is not ready yet (HTTP 503\(saying)); it is probably loading the model")
        }
        if status == 401 || status == 403 {
            return (.unauthorized, unauthorizedDetail(status: status, body: body, path: probePath))
        }
        guard (200...299).contains(status) else {
            return (.unavailable, "\(serverName) answered HTTP \(status) to \(probePath)\(saying); check backend.url and backend.kind")
        }
        let object: JSONObject
        switch ModelWire.parseObject(body) {
        case .success(let parsed): object = parsed
        case .failure(let what): return (.unavailable, "\(serverName) answered \(probePath) with \(what); \(kindHint)")
        }
        let model = ModelText.printable(config.model, limit: 120)
        switch config.kind {
        case .ollama:
            guard case .array(let models)? = object["models"] else {
                return (.unavailable, "\(serverName) answered \(probePath) without a \"models\" list; \(kindHint)")
            }
            var names: [String] = []
            for entry in models {
                for key in ["name", "model"] {
                    if let name = entry[key]?.stringValue, !names.contains(name) { names.append(name) }
                }
            }
            let wanted = ModelWire.ollamaName(config.model)
            if names.contains(where: { ModelWire.ollamaName($0) == wanted }) {
                return (.ready, "model \"\(model)\" is on the Ollama server at \(root)")
            }
            return (
                .unavailable,
                "model \"\(model)\" is not pulled on the Ollama server at \(root) (ollama pull \(model)); it has \(ModelWire.list(names))"
            )
        case .openai:
            guard case .array(let data)? = object["data"] else {
                return (.unavailable, "\(serverName) answered \(probePath) without a \"data\" list; \(kindHint)")
            }
            let ids = data.compactMap { $0["id"]?.stringValue }
            if ids.contains(config.model) {
                return (.ready, "the model server at \(root) lists model \"\(model)\"")
            }
            return (
                .ready,
                "the model server at \(root) answers but does not list model \"\(model)\" (it lists \(ModelWire.list(ids))); llama.cpp serves its one model under any name, other servers refuse an unlisted one"
            )
        }
    }

    /// The configured model's size in billions of parameters from Ollama's `/api/tags`
    /// answer (`details.parameter_size` of its entry); nil when absent or unusable.
    public func ollamaParameterSize(tagsBody body: [UInt8]) -> Double? {
        guard case .success(let object) = ModelWire.parseObject(body), case .array(let models)? = object["models"] else { return nil }
        let wanted = ModelWire.ollamaName(config.model)
        for entry in models where ["name", "model"].contains(where: { entry[$0]?.stringValue.map(ModelWire.ollamaName) == wanted }) {
            return entry["details"]?["parameter_size"]?.stringValue.flatMap(ModelParameterSize.billions)
        }
        return nil
    }

    /// The readiness for a refused key, naming the path that refused it.
    func unauthorizedDetail(status: Int, body: [UInt8], path: String) -> String {
        let saying = ModelText.serverError(in: body).map { ": \($0)" } ?? ""
        return "\(serverName) refused \(path) (HTTP \(status)\(saying)); \(keyAdvice)"
    }

    /// Ollama's running models (`GET /api/ps`): `ready` when `backend.model` is loaded,
    /// else `loading` with `needsLoad` (the worker loads it). A server without `/api/ps`
    /// (404, older than 0.1.38) is taken at its model list's word.
    public func decodeRunning(status: Int, body: [UInt8]) -> ModelReadiness {
        let model = ModelText.printable(config.model, limit: 120)
        if status == 401 || status == 403 { return ModelReadiness(.unauthorized, unauthorizedDetail(status: status, body: body, path: "/api/ps")) }
        if status == 404 {
            return ModelReadiness(.ready, "model \"\(model)\" is on the Ollama server at \(root) (it has no /api/ps to say whether it is loaded)")
        }
        guard (200...299).contains(status) else {
            let saying = ModelText.serverError(in: body).map { ": \($0)" } ?? ""
            return ModelReadiness(.unavailable, "\(serverName) answered HTTP \(status) to /api/ps\(saying)")
        }
        let object: JSONObject
        switch ModelWire.parseObject(body) {
        case .success(let parsed): object = parsed
        case .failure(let what): return ModelReadiness(.unavailable, "\(serverName) answered /api/ps with \(what); \(kindHint)")
        }
        guard case .array(let models)? = object["models"] else {
            return ModelReadiness(.unavailable, "\(serverName) answered /api/ps without a \"models\" list; \(kindHint)")
        }
        let wanted = ModelWire.ollamaName(config.model)
        var loaded: [String] = []
        for entry in models {
            let names = ["name", "model"].compactMap { entry[$0]?.stringValue }
            if names.contains(where: { ModelWire.ollamaName($0) == wanted }) {
                let until = entry["expires_at"]?.stringValue.map { " until \(ModelText.printable($0, limit: 40))" } ?? ""
                return ModelReadiness(.ready, "model \"\(model)\" is loaded on the Ollama server at \(root)\(until)")
            }
            if let name = names.first { loaded.append(name) }
        }
        let others = loaded.isEmpty ? "no model is loaded" : "loaded: \(ModelWire.list(loaded))"
        return ModelReadiness(.loading, "model \"\(model)\" is pulled but not loaded on the Ollama server at \(root) (\(others))", needsLoad: true)
    }

    /// llama.cpp's `GET /health`: 503 while it loads its model. Nil when the answer says
    /// nothing against readiness (200, or a server without `/health`).
    public func decodeHealth(status: Int, body: [UInt8]) -> ModelReadiness? {
        if status == 503 {
            let saying = ModelText.serverError(in: body).map { ": \($0)" } ?? ""
            return ModelReadiness(.loading, "\(serverName) is loading its model (/health answered HTTP 503\(saying))")
        }
        if status == 401 || status == 403 { return ModelReadiness(.unauthorized, unauthorizedDetail(status: status, body: body, path: "/health")) }
        return nil
    }

    /// Paths the probe asks, in order, for an OpenAI-compatible server: `/health`, the
    /// model list, then `/props`, which llama.cpp guards with its key while it serves
    /// `/v1/models` and `/health` to anyone (so only it tells a wrong key).
    public static let authCheckPath = "/props"

    /// An Ollama model name as Ollama compares them: lowercase, `:latest` when untagged.
    public static func ollamaName(_ name: String) -> String {
        var normalized = name.lowercased()
        while normalized.hasPrefix(" ") { normalized.removeFirst() }
        while normalized.hasSuffix(" ") { normalized.removeLast() }
        let last = normalized.split(separator: "/", omittingEmptySubsequences: false).last ?? ""
        if !last.contains(":") { normalized += ":latest" }
        return normalized
    }

    static func list(_ names: [String]) -> String {
        if names.isEmpty { return "no models" }
        let shown = names.prefix(10).map { "\"\(ModelText.printable($0, limit: 80))\"" }.joined(separator: ", ")
        return names.count > 10 ? "\(shown) and \(names.count - 10) more" : shown
    }

    /// A body read as a JSON object, or a description of what it is instead.
    enum Parsed {
        case success(JSONObject)
        case failure(String)
    }

    static func parseObject(_ body: [UInt8]) -> Parsed {
        let value: JSONValue
        do {
            value = try JSON.parse(body)
        } catch {
            if body.allSatisfy(ModelText.isJSONWhitespace) { return .failure("an empty body") }
            if ModelText.looksLikeHTML(Array(body.prefix(ModelText.snippetBytes))) { return .failure(ModelText.describeNonJSON(body)) }
            if case .trailingBytes = error.reason {
                return .failure("more than one JSON value (\(error)), as a stream gives")
            }
            return .failure("a body that is not JSON (\(error)): \(ModelText.describeNonJSON(body))")
        }
        guard case .object(let object) = value else { return .failure("\(value.typeDescription) where an object belongs") }
        return .success(object)
    }

    // MARK: - Transport failures

    /// Which call a transport failure happened in, for its message.
    public enum Call: Sendable { case generate, probe }

    /// The error for a request that got no HTTP answer. `elapsedMs` tells a connect
    /// timeout (nothing accepted the connection: `unavailable`) from a slow answer.
    public func transportError(
        _ error: HTTPError, call: Call, elapsedMs: Int64, timeoutMs: Int64,
        connectTimeoutMs: Int64, cap: Int
    ) -> ModelError {
        let detail = ModelText.printable(error.message, limit: 200)
        let path = call == .generate ? generatePath : probePath
        switch error.kind {
        case .couldNotConnect, .couldNotResolve:
            return ModelError(.unavailable, "cannot reach \(serverName): \(detail); \(startHint)")
        case .tls:
            return ModelError(
                .unavailable, "TLS with \(serverName) failed: \(detail); its certificate must be valid for the host (TLS is always verified)")
        case .timedOut:
            if connectTimeoutMs < timeoutMs && elapsedMs < timeoutMs - (timeoutMs - connectTimeoutMs) / 2 {
                return ModelError(.unavailable, "\(serverName) did not accept a connection within \(connectTimeoutMs) ms: \(detail); \(startHint)")
            }
            switch call {
            case .generate:
                return ModelError(
                    .timedOut,
                    "\(serverName) did not answer \(path) within \(timeoutMs) ms (the request's time, at most backend.timeoutMs \(config.timeoutMs)); a smaller maxTokens or a faster model helps"
                )
            case .probe:
                return ModelError(.timedOut, "\(serverName) did not answer \(path) within \(timeoutMs) ms")
            }
        case .responseTooLarge:
            switch call {
            case .generate:
                return ModelError(
                    .tooLarge,
                    "\(serverName)'s answer to \(path) is larger than \(cap) bytes (backend.maxOutputBytes \(config.maxOutputBytes) plus room for JSON); lower maxTokens or raise backend.maxOutputBytes"
                )
            case .probe:
                return ModelError(.tooLarge, "\(serverName)'s answer to \(path) is larger than \(cap) bytes")
            }
        case .badURL:
            return ModelError(.invalidRequest, "backend.url \"\(ModelText.printable(config.url, limit: 120))\" cannot be used: \(detail)")
        case .transfer:
            return ModelError(.unavailable, "the connection to \(serverName) failed: \(detail); \(startHint)")
        }
    }

    // MARK: - Words for messages

    var serverName: String {
        switch config.kind {
        case .ollama: return "the Ollama server at \(root)"
        case .openai: return "the model server at \(root)"
        }
    }

    var kindHint: String {
        switch config.kind {
        case .ollama: return "is backend.url an Ollama server?"
        case .openai: return "is backend.url an OpenAI-compatible server (llama.cpp, vLLM, LM Studio)?"
        }
    }

    /// What to do about a refused key; never the key itself.
    var keyAdvice: String {
        if config.apiKey != nil {
            return "the API key the worker sends (backend.apiKey or the credential backend-api-key) is not the server's: set the right one"
        }
        return
            "the worker sends no API key: set backend.apiKey or the systemd credential backend-api-key, or serve the model without authentication (on loopback)"
    }

    var startHint: String {
        switch config.kind {
        case .ollama: return "is Ollama running (systemctl status ollama) and backend.url right?"
        case .openai: return "is the model server running and backend.url right?"
        }
    }
}
