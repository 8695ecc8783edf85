import WorkerCore

/// The local HTTP API of `edgecoder-worker proxy` (docs/reference/proxy-api.md), pure: request bodies in, a
/// worker ask (or a 400 naming the field) out; results and pieces of text in, answers in
/// EdgeCoder's, Ollama's and OpenAI's shapes out.

/// The API a request came in through: it decides the answer's shape.
public enum ProxyDialect: Sendable, Equatable {
    /// EdgeCoder's Mac proxy: `POST /api/generate {prompt, maxTokens}` → `{ok, output,
    /// response, durationMs}`.
    case edgecoder
    /// Ollama's `POST /api/generate`.
    case ollamaGenerate
    /// Also EdgeCoder's IDE router's `{messages, maxTokens, stream: false}`.
    case ollamaChat
    /// OpenAI's `POST /v1/chat/completions`.
    case openAIChat
    /// OpenAI's `POST /v1/completions`.
    case openAICompletion
}

/// A generation request as the proxy understood it.
public struct ProxyCall: Sendable, Equatable {
    public var dialect: ProxyDialect
    /// The model name the client gave (echoed in answers), else `edgecoder-bluetooth`.
    public var model: String
    public var ask: WorkerAsk
    /// Ollama's "load the model" request (a model, no prompt or messages): answered at
    /// once, the worker is not asked.
    public var loadOnly = false
    public var stream: Bool { ask.stream }

    public init(dialect: ProxyDialect, model: String, ask: WorkerAsk, loadOnly: Bool = false) {
        self.dialect = dialect
        self.model = model
        self.ask = ask
        self.loadOnly = loadOnly
    }

    /// `POST /api/generate`: EdgeCoder's shape when there is no `model` (and no `stream:
    /// true`), else Ollama's.
    public static func generate(_ body: [UInt8]) -> Result<ProxyCall, HTTPRefusal> {
        parse(body) { fields throws(HTTPRefusal) in
            let model = try fields.string("model")
            let stream = try fields.bool("stream")
            let edgecoder = model == nil && stream != true
            var ask = WorkerAsk(prompt: try fields.string("prompt") ?? "", maxTokens: BluetoothRequest.defaultMaxTokens)
            if ask.prompt.isEmpty && (edgecoder || fields["prompt"].map({ $0 != .null && $0.stringValue == nil }) == true) {
                throw HTTPRefusal(400, "\"prompt\" must be a non-empty string", field: "prompt")
            }
            ask.stream = edgecoder ? false : (stream ?? true)
            try fields.refuseNonEmpty("images", "images cannot be sent to the worker (text only)")
            try fields.refuseNonEmpty("suffix", "a suffix (fill-in-the-middle) cannot be sent to the worker")
            try fields.refuseNonEmpty("template", "the worker uses its backend's own prompt template")
            try fields.refuseNonEmpty("context", "the deprecated context array cannot be sent to the worker; use /api/chat")
            if try fields.bool("raw") == true {
                throw HTTPRefusal(400, "\"raw\": true cannot be honoured: the worker's backend may apply its own template", field: "raw")
            }
            ask.system = try fields.string("system")
            try ollamaCommon(fields, &ask)
            return ProxyCall(
                dialect: edgecoder ? .edgecoder : .ollamaGenerate, model: model ?? ProxyAnswer.modelName, ask: ask,
                loadOnly: !edgecoder && ask.prompt.isEmpty)
        }
    }

    /// `POST /api/chat`: Ollama's chat; without `model`, EdgeCoder's IDE router's call.
    public static func chat(_ body: [UInt8]) -> Result<ProxyCall, HTTPRefusal> {
        parse(body) { fields throws(HTTPRefusal) in
            let model = try fields.string("model")
            var ask = WorkerAsk(prompt: "", maxTokens: BluetoothRequest.defaultMaxTokens)
            ask.stream = try fields.bool("stream") ?? true
            guard let list = fields["messages"], list != .null else {
                if model == nil { throw HTTPRefusal(400, "\"messages\" must be an array of {role, content}", field: "messages") }
                return ProxyCall(dialect: .ollamaChat, model: model!, ask: ask, loadOnly: true)
            }
            guard let items = list.arrayValue else { throw HTTPRefusal(400, "\"messages\" must be an array of {role, content}", field: "messages") }
            ask.messages = try turns(items, openAI: false)
            try fields.refuseNonEmpty("tools", "tools (function calling) cannot be sent to the worker")
            try ollamaCommon(fields, &ask)
            if ask.messages!.isEmpty {
                if model == nil { throw HTTPRefusal(400, "\"messages\" must not be empty", field: "messages") }
                return ProxyCall(dialect: .ollamaChat, model: model!, ask: ask, loadOnly: true)
            }
            return ProxyCall(dialect: .ollamaChat, model: model ?? ProxyAnswer.modelName, ask: ask)
        }
    }

    /// `POST /v1/chat/completions`.
    public static func openAIChat(_ body: [UInt8]) -> Result<ProxyCall, HTTPRefusal> {
        parse(body) { fields throws(HTTPRefusal) in
            let model = try openAIModel(fields)
            guard let items = fields["messages"]?.arrayValue, !items.isEmpty else {
                throw HTTPRefusal(400, "\"messages\" must be a non-empty array of {role, content}", field: "messages")
            }
            var ask = WorkerAsk(prompt: "", maxTokens: BluetoothRequest.defaultMaxTokens)
            ask.messages = try turns(items, openAI: true)
            try fields.refuseNonEmpty("tools", "tools (function calling) cannot be sent to the worker")
            try fields.refuseNonEmpty("functions", "functions cannot be sent to the worker")
            if let choice = fields["tool_choice"], choice != .null, choice != "none", choice != "auto" {
                throw HTTPRefusal(400, "\"tool_choice\" cannot be honoured: the worker has no tools", field: "tool_choice")
            }
            for key in ["audio", "prediction", "reasoning_effort", "web_search_options"] where fields[key] != nil && fields[key] != .null {
                throw HTTPRefusal(400, "\"\(key)\" cannot be honoured by the worker", field: key)
            }
            if let format = fields["response_format"], format != .null {
                switch format["type"]?.stringValue {
                case "text": break
                case "json_object": ask.format = "json"
                default:
                    throw HTTPRefusal(
                        400,
                        "\"response_format\" may be {\"type\": \"text\"} or {\"type\": \"json_object\"}; a JSON schema cannot be sent to the worker",
                        field: "response_format")
                }
            }
            try openAICommon(fields, &ask, tokenKeys: ["max_completion_tokens", "max_tokens"])
            return ProxyCall(dialect: .openAIChat, model: model, ask: ask)
        }
    }

    /// `POST /v1/completions`.
    public static func openAICompletion(_ body: [UInt8]) -> Result<ProxyCall, HTTPRefusal> {
        parse(body) { fields throws(HTTPRefusal) in
            let model = try openAIModel(fields)
            var prompt: String?
            switch fields["prompt"] {
            case .string(let text)?: prompt = text
            case .array(let items)? where items.count == 1: prompt = items[0].stringValue
            default: prompt = nil
            }
            guard let prompt, !prompt.isEmpty else {
                throw HTTPRefusal(
                    400, "\"prompt\" must be a non-empty string (or an array of one; token arrays cannot be sent to the worker)", field: "prompt")
            }
            var ask = WorkerAsk(prompt: prompt, maxTokens: 16)
            ask.maxTokens = BluetoothRequest.defaultMaxTokens
            try fields.refuseNonEmpty("suffix", "a suffix (fill-in-the-middle) cannot be sent to the worker")
            if try fields.bool("echo") == true { throw HTTPRefusal(400, "\"echo\": true cannot be honoured by the worker", field: "echo") }
            if let best = fields["best_of"], best != .null, best.intValue != 1 {
                throw HTTPRefusal(400, "\"best_of\" must be 1: the worker makes one completion", field: "best_of")
            }
            try openAICommon(fields, &ask, tokenKeys: ["max_tokens"])
            return ProxyCall(dialect: .openAICompletion, model: model, ask: ask)
        }
    }

    // MARK: Fields shared by the routes

    static func parse(_ body: [UInt8], _ read: (Fields) throws(HTTPRefusal) -> ProxyCall) -> Result<ProxyCall, HTTPRefusal> {
        let value: JSONValue
        do { value = try JSON.parse(body, maxDepth: 16) } catch {
            return .failure(HTTPRefusal(400, "the body is not valid JSON: \(error)"))
        }
        guard let object = value.objectValue else { return .failure(HTTPRefusal(400, "the body must be a JSON object")) }
        do { return .success(try read(Fields(object: object))) } catch { return .failure(error) }
    }

    /// `format`, `options`, `maxTokens` (EdgeCoder's name), `think`, `logprobs`.
    static func ollamaCommon(_ fields: Fields, _ ask: inout WorkerAsk) throws(HTTPRefusal) {
        if let format = fields["format"], format != .null, format != "" {
            guard format == "json" else {
                throw HTTPRefusal(400, "\"format\" may be \"json\"; a JSON schema cannot be sent to the worker", field: "format")
            }
            ask.format = "json"
        }
        if let think = fields["think"], think != .null, think != false {
            throw HTTPRefusal(
                400, "\"think\" cannot be honoured: the worker returns no separate thinking (send false or leave it out)", field: "think")
        }
        if try fields.bool("logprobs") == true { throw HTTPRefusal(400, "\"logprobs\" cannot be honoured by the worker", field: "logprobs") }
        if let tokens = fields["maxTokens"], tokens != .null { ask.maxTokens = try maxTokens(tokens, field: "maxTokens", allowUnlimited: false) }
        guard let options = fields["options"], options != .null else { return }
        guard let object = options.objectValue else { throw HTTPRefusal(400, "\"options\" must be an object", field: "options") }
        for member in object.members where member.value != .null {
            let field = "options." + member.key
            let value = member.value
            switch member.key {
            case "temperature": ask.options.temperature = try number(value, field: field, in: 0...100)
            case "top_p": ask.options.topP = try number(value, field: field, in: 0...1)
            case "top_k": ask.options.topK = Int(try integer(value, field: field, in: 0...1_000_000))
            case "seed": ask.options.seed = try integer(value, field: field, in: Int64.min...Int64.max)
            case "num_ctx": ask.options.numCtx = Int(try integer(value, field: field, in: 1...1_048_576))
            case "stop": ask.options.stop = try stops(value, field: field)
            case "num_predict": ask.maxTokens = try maxTokens(value, field: field, allowUnlimited: true)
            case _ where ProxyCall.resourceOptions.contains(member.key):
                // Where and how fast the model runs, not what it answers: the worker's own affair.
                break
            default:
                throw HTTPRefusal(
                    400, "\"\(field)\" is not supported by the worker (it takes temperature, top_p, top_k, seed, stop, num_ctx, num_predict)",
                    field: field)
            }
        }
    }

    /// Ollama options about the machine running the model, which cannot change its answer.
    static let resourceOptions: Set<String> = ["num_thread", "num_gpu", "main_gpu", "use_mmap", "use_mlock", "num_batch", "low_vram", "numa"]

    static func openAIModel(_ fields: Fields) throws(HTTPRefusal) -> String {
        guard let model = try fields.string("model"), !model.isEmpty else {
            throw HTTPRefusal(400, "\"model\" must be a non-empty string (any name: the proxy has one worker)", field: "model")
        }
        return model
    }

    static func openAICommon(_ fields: Fields, _ ask: inout WorkerAsk, tokenKeys: [String]) throws(HTTPRefusal) {
        ask.stream = try fields.bool("stream") ?? false
        for key in tokenKeys {
            if let value = fields[key], value != .null { ask.maxTokens = try maxTokens(value, field: key, allowUnlimited: false); break }
        }
        if let value = fields["temperature"], value != .null { ask.options.temperature = try number(value, field: "temperature", in: 0...2) }
        if let value = fields["top_p"], value != .null { ask.options.topP = try number(value, field: "top_p", in: 0...1) }
        if let value = fields["top_k"], value != .null { ask.options.topK = Int(try integer(value, field: "top_k", in: 0...1_000_000)) }
        if let value = fields["seed"], value != .null { ask.options.seed = try integer(value, field: "seed", in: Int64.min...Int64.max) }
        if let value = fields["stop"], value != .null { ask.options.stop = try stops(value, field: "stop") }
        if let n = fields["n"], n != .null, n.intValue != 1 { throw HTTPRefusal(400, "\"n\" must be 1: the worker makes one answer", field: "n") }
        for key in ["presence_penalty", "frequency_penalty"] {
            if let value = fields[key], value != .null, value.doubleValue != 0 {
                throw HTTPRefusal(400, "\"\(key)\" cannot be passed to the worker (leave it out or 0)", field: key)
            }
        }
        try fields.refuseNonEmpty("logit_bias", "logit_bias cannot be passed to the worker")
        if let value = fields["logprobs"], value != .null, value != false {
            throw HTTPRefusal(400, "\"logprobs\" cannot be honoured by the worker", field: "logprobs")
        }
        if let value = fields["top_logprobs"], value != .null, value.intValue != 0 {
            throw HTTPRefusal(400, "\"top_logprobs\" cannot be honoured by the worker", field: "top_logprobs")
        }
        if let options = fields["stream_options"], options != .null, options.objectValue == nil {
            throw HTTPRefusal(400, "\"stream_options\" must be an object", field: "stream_options")
        }
    }

    /// Chat turns; OpenAI's `developer` is a system turn and its content may be an array of
    /// text parts.
    static func turns(_ items: [JSONValue], openAI: Bool) throws(HTTPRefusal) -> [ChatTurn] {
        guard items.count <= maxTurns else {
            throw HTTPRefusal(400, "\"messages\" has \(items.count) turns; at most \(maxTurns) go to the worker", field: "messages")
        }
        var turns: [ChatTurn] = []
        for (index, item) in items.enumerated() {
            let at = "messages[\(index)]"
            guard let message = item.objectValue else { throw HTTPRefusal(400, "\"\(at)\" must be an object {role, content}", field: at) }
            let fields = Fields(object: message)
            guard var role = try fields.string("role", at: at + ".role") else {
                throw HTTPRefusal(400, "\"\(at).role\" must be system, user or assistant", field: at + ".role")
            }
            if openAI && role == "developer" { role = "system" }
            guard ["system", "user", "assistant"].contains(role) else {
                throw HTTPRefusal(
                    400, "\"\(at).role\" is \"\(BrowserGuard.printable(role))\": the worker takes system, user and assistant turns (no tools)",
                    field: at + ".role")
            }
            try fields.refuseNonEmpty("images", "images cannot be sent to the worker (text only)", at: at + ".images")
            try fields.refuseNonEmpty("tool_calls", "tool calls cannot be sent to the worker", at: at + ".tool_calls")
            var content = ""
            switch message["content"] {
            case nil, .null?: content = ""
            case .string(let text)?: content = text
            case .array(let parts)? where openAI:
                var texts: [String] = []
                for (partIndex, part) in parts.enumerated() {
                    let where_ = "\(at).content[\(partIndex)]"
                    guard part["type"]?.stringValue == "text", let text = part["text"]?.stringValue else {
                        throw HTTPRefusal(
                            400, "\"\(where_)\" must be a text part {type: \"text\", text}; images, audio and files cannot be sent to the worker",
                            field: where_)
                    }
                    texts.append(text)
                }
                content = texts.joined(separator: "\n")
            default:
                throw HTTPRefusal(400, "\"\(at).content\" must be a string", field: at + ".content")
            }
            turns.append(ChatTurn(role: role, content: content))
        }
        return turns
    }

    /// The most chat turns a request may carry to the worker.
    public static let maxTurns = 512

    static func maxTokens(_ value: JSONValue, field: String, allowUnlimited: Bool) throws(HTTPRefusal) -> Int {
        let limit = Int64(BluetoothRequest.maxTokensLimit)
        // Ollama's -1 (no limit) and -2 (fill the context) mean as much as the worker allows;
        // the worker caps it further by its bluetooth.maxTokens.
        if allowUnlimited, let n = value.intValue, n == -1 || n == -2 { return BluetoothRequest.maxTokensLimit }
        guard let n = value.intValue, n >= 1, n <= limit else {
            throw HTTPRefusal(
                400, "\"\(field)\" must be an integer in 1…\(limit)\(allowUnlimited ? " or -1 (the worker's limit)" : "")", field: field)
        }
        return Int(n)
    }

    static func number(_ value: JSONValue, field: String, in range: ClosedRange<Double>) throws(HTTPRefusal) -> Double {
        guard let n = value.doubleValue, n.isFinite, range.contains(n) else {
            throw HTTPRefusal(400, "\"\(field)\" must be a number in \(Self.format(range.lowerBound))…\(Self.format(range.upperBound))", field: field)
        }
        return n
    }

    static func integer(_ value: JSONValue, field: String, in range: ClosedRange<Int64>) throws(HTTPRefusal) -> Int64 {
        guard let n = value.intValue, range.contains(n) else {
            throw HTTPRefusal(
                400, "\"\(field)\" must be an integer\(range == Int64.min...Int64.max ? "" : " in \(range.lowerBound)…\(range.upperBound)")",
                field: field)
        }
        return n
    }

    static func stops(_ value: JSONValue, field: String) throws(HTTPRefusal) -> [String] {
        let list: [JSONValue] = value.stringValue != nil ? [value] : value.arrayValue ?? [.null]
        guard list.count <= 16, list.allSatisfy({ ($0.stringValue?.isEmpty == false) && $0.stringValue!.utf8.count <= 256 }) else {
            throw HTTPRefusal(400, "\"\(field)\" must be a string or an array of at most 16 non-empty strings", field: field)
        }
        return list.compactMap(\.stringValue)
    }

    static func format(_ value: Double) -> String { value == value.rounded() ? String(Int64(value)) : String(value) }
}

/// A request body's members, read with errors that name the field.
struct Fields {
    let object: JSONObject

    subscript(key: String) -> JSONValue? { object[key] }

    /// nil when absent or null.
    func string(_ key: String, at field: String? = nil) throws(HTTPRefusal) -> String? {
        guard let value = object[key], value != .null else { return nil }
        guard let text = value.stringValue else {
            throw HTTPRefusal(400, "\"\(field ?? key)\" must be a string, not \(value.typeDescription)", field: field ?? key)
        }
        return text
    }

    func bool(_ key: String) throws(HTTPRefusal) -> Bool? {
        guard let value = object[key], value != .null else { return nil }
        guard let flag = value.boolValue else { throw HTTPRefusal(400, "\"\(key)\" must be true or false", field: key) }
        return flag
    }

    /// A field the worker cannot honour: fine when absent, null or empty, else a 400.
    func refuseNonEmpty(_ key: String, _ why: String, at field: String? = nil) throws(HTTPRefusal) {
        guard let value = object[key] else { return }
        switch value {
        case .null: return
        case .string(let text) where text.isEmpty: return
        case .array(let items) where items.isEmpty: return
        case .object(let members) where members.isEmpty: return
        default: throw HTTPRefusal(400, "\"\(field ?? key)\": \(why)", field: field ?? key)
        }
    }
}

/// Answers in each dialect's shape.
public enum ProxyAnswer {
    /// The name the worker goes by as a model.
    public static let modelName = "edgecoder-bluetooth"

    /// The status and message of a failed result (nil for success).
    public static func failure(_ result: GenerateResult) -> (status: Int, message: String)? {
        switch result {
        case .answered(true, _, _, _): return nil
        case .answered(false, _, let error, _): return (502, error ?? "the worker failed")
        case .notConnected(let why): return (503, why)
        case .timedOut(let ms): return (504, "no answer from the worker within \(ms) ms")
        }
    }

    /// The body of an error answer in the dialect's shape (`field`: OpenAI's `param`).
    public static func error(_ dialect: ProxyDialect, status: Int, message: String, field: String? = nil) -> JSONValue {
        switch dialect {
        case .edgecoder:
            return ["ok": false, "output": "", "response": "", "error": .string(message)]
        case .ollamaGenerate, .ollamaChat:
            return ["error": .string(message)]
        case .openAIChat, .openAICompletion:
            let type = status == 400 ? "invalid_request_error" : status == 404 ? "not_found_error" : "server_error"
            return ["error": ["message": .string(message), "type": .string(type), "param": .optional(field), "code": .null]]
        }
    }

    /// A whole (not streamed) answer: status and body.
    public static func whole(_ call: ProxyCall, _ result: GenerateResult, durationMs: Int64, nowMs: Int64, id: String) -> (
        status: Int, body: JSONValue
    ) {
        if case .answered(let ok, let output, let error, let workerMs) = result, call.dialect == .edgecoder {
            // durationMs: the whole exchange as the HTTP client saw it; workerDurationMs:
            // what the worker reported (its model time), so the difference is the link's.
            var object = JSONObject([
                ("ok", .bool(ok)), ("output", .string(output)), ("response", .string(output)), ("durationMs", .int(durationMs)),
                ("workerDurationMs", .int(workerMs)),
            ])
            if let error { object["error"] = .string(error) }
            return (ok ? 200 : 502, .object(object))
        }
        if let (status, message) = failure(result) {
            var body = error(call.dialect, status: status, message: message)
            if call.dialect == .edgecoder { body = .object(body.objectValue!.with("durationMs", .int(durationMs))) }
            return (status, body)
        }
        guard case .answered(_, let output, _, _) = result else { return (500, error(call.dialect, status: 500, message: "no result")) }
        let created = formatUTC(milliseconds: nowMs)
        switch call.dialect {
        case .edgecoder, .ollamaGenerate:
            return (
                200,
                [
                    "model": .string(call.model), "created_at": .string(created), "response": .string(output), "done": true,
                    "done_reason": "stop", "total_duration": .int(durationMs * 1_000_000),
                ]
            )
        case .ollamaChat:
            return (
                200,
                [
                    "model": .string(call.model), "created_at": .string(created), "message": ["role": "assistant", "content": .string(output)],
                    "done": true, "done_reason": "stop", "total_duration": .int(durationMs * 1_000_000),
                ]
            )
        case .openAIChat:
            return (
                200,
                [
                    "id": .string(id), "object": "chat.completion", "created": .int(nowMs / 1000), "model": .string(call.model),
                    "choices": [
                        ["index": 0, "message": ["role": "assistant", "content": .string(output)], "finish_reason": "stop", "logprobs": .null]
                    ],
                ]
            )
        case .openAICompletion:
            return (
                200,
                [
                    "id": .string(id), "object": "text_completion", "created": .int(nowMs / 1000), "model": .string(call.model),
                    "choices": [["index": 0, "text": .string(output), "finish_reason": "stop", "logprobs": .null]],
                ]
            )
        }
    }

    /// Ollama's answer to a load request (no prompt): nothing generated.
    public static func loaded(_ call: ProxyCall, nowMs: Int64) -> JSONValue {
        var object = JSONObject([("model", .string(call.model)), ("created_at", .string(formatUTC(milliseconds: nowMs)))])
        if call.dialect == .ollamaChat { object["message"] = ["role": "assistant", "content": ""] } else { object["response"] = "" }
        object["done_reason"] = "load"
        object["done"] = true
        return .object(object)
    }

    /// The content type of a streamed answer.
    public static func streamContentType(_ dialect: ProxyDialect) -> String {
        switch dialect {
        case .openAIChat, .openAICompletion: "text/event-stream"
        default: "application/x-ndjson"
        }
    }

    /// What a stream starts with before any text (OpenAI's chat: the assistant's role).
    public static func streamOpening(_ call: ProxyCall, nowMs: Int64, id: String) -> [UInt8] {
        guard call.dialect == .openAIChat else { return [] }
        return event(chatChunk(call, delta: ["role": "assistant", "content": ""], finish: nil, nowMs: nowMs, id: id))
    }

    /// One piece of text as the dialect streams it: an NDJSON line or a server-sent event.
    public static func piece(_ call: ProxyCall, _ text: String, nowMs: Int64, id: String) -> [UInt8] {
        let created = formatUTC(milliseconds: nowMs)
        switch call.dialect {
        case .edgecoder, .ollamaGenerate:
            return line(["model": .string(call.model), "created_at": .string(created), "response": .string(text), "done": false])
        case .ollamaChat:
            return line([
                "model": .string(call.model), "created_at": .string(created), "message": ["role": "assistant", "content": .string(text)],
                "done": false,
            ])
        case .openAIChat:
            return event(chatChunk(call, delta: ["content": .string(text)], finish: nil, nowMs: nowMs, id: id))
        case .openAICompletion:
            return event(completionChunk(call, text: text, finish: nil, nowMs: nowMs, id: id))
        }
    }

    /// The end of a stream that succeeded.
    public static func streamEnd(_ call: ProxyCall, durationMs: Int64, nowMs: Int64, id: String) -> [UInt8] {
        let created = formatUTC(milliseconds: nowMs)
        switch call.dialect {
        case .edgecoder, .ollamaGenerate:
            return line([
                "model": .string(call.model), "created_at": .string(created), "response": "", "done": true, "done_reason": "stop",
                "total_duration": .int(durationMs * 1_000_000),
            ])
        case .ollamaChat:
            return line([
                "model": .string(call.model), "created_at": .string(created), "message": ["role": "assistant", "content": ""], "done": true,
                "done_reason": "stop", "total_duration": .int(durationMs * 1_000_000),
            ])
        case .openAIChat:
            return event(chatChunk(call, delta: [:], finish: "stop", nowMs: nowMs, id: id)) + done
        case .openAICompletion:
            return event(completionChunk(call, text: "", finish: "stop", nowMs: nowMs, id: id)) + done
        }
    }

    /// A failure once the head went out with 200: in the stream, in the shape its clients
    /// read as an error (Ollama's `{"error"}` line; an OpenAI error event).
    public static func streamError(_ call: ProxyCall, status: Int, message: String) -> [UInt8] {
        switch call.dialect {
        case .openAIChat, .openAICompletion: return event(error(call.dialect, status: status, message: message)) + done
        default: return line(error(.ollamaGenerate, status: status, message: message))
        }
    }

    /// The text still to stream when the result came: an old worker (or a non-streamed
    /// answer) sends all of it in `output`; a streaming one may repeat what came in pieces.
    public static func unsent(output: String, streamed: String) -> String {
        if streamed.isEmpty { return output }
        if output.hasPrefix(streamed) { return String(output.dropFirst(streamed.count)) }
        return ""
    }

    static func chatChunk(_ call: ProxyCall, delta: JSONValue, finish: String?, nowMs: Int64, id: String) -> JSONValue {
        [
            "id": .string(id), "object": "chat.completion.chunk", "created": .int(nowMs / 1000), "model": .string(call.model),
            "choices": [["index": 0, "delta": delta, "finish_reason": .optional(finish), "logprobs": .null]],
        ]
    }

    static func completionChunk(_ call: ProxyCall, text: String, finish: String?, nowMs: Int64, id: String) -> JSONValue {
        [
            "id": .string(id), "object": "text_completion", "created": .int(nowMs / 1000), "model": .string(call.model),
            "choices": [["index": 0, "text": .string(text), "finish_reason": .optional(finish), "logprobs": .null]],
        ]
    }

    static func line(_ value: JSONValue) -> [UInt8] { value.serializedBytes + [10] }
    static func event(_ value: JSONValue) -> [UInt8] { Array("data: ".utf8) + value.serializedBytes + [10, 10] }
    static let done: [UInt8] = Array("data: [DONE]\n\n".utf8)

    // MARK: The worker as a model

    static func details(_ deviceName: String?) -> JSONValue {
        [
            "parent_model": "", "format": "bluetooth", "family": "edgecoder", "families": ["edgecoder"], "parameter_size": "",
            "quantization_level": "",
            "worker": .string(deviceName ?? ""),
        ]
    }

    /// `GET /api/tags`: the nearby worker as one model, so Ollama clients list it.
    public static func tags(connected: Bool, deviceName: String?) -> JSONValue {
        guard connected else { return ["models": []] }
        return [
            "models": [
                [
                    "name": .string(modelName), "model": .string(modelName), "modified_at": "1970-01-01T00:00:00Z", "size": 0, "digest": "",
                    "details": details(deviceName),
                ]
            ]
        ]
    }

    /// `GET /api/ps`: the worker's model counts as loaded while it is connected and ready.
    public static func ps(_ status: ProxyStatus, nowMs: Int64) -> JSONValue {
        guard status.connected, status.modelState == "ready" else { return ["models": []] }
        return [
            "models": [
                [
                    "name": .string(modelName), "model": .string(modelName), "size": 0, "digest": "", "details": details(status.deviceName),
                    "expires_at": .string(formatUTC(milliseconds: nowMs + 300_000)), "size_vram": 0,
                ]
            ]
        ]
    }

    /// `POST /api/show` for any model name (the proxy has one worker).
    public static func show(model: String, status: ProxyStatus) -> JSONValue {
        [
            "modelfile": .string("# edgecoder-worker proxy: the model of the nearby worker \(status.deviceName ?? "(not connected)")\n"),
            "parameters": "", "template": "{{ .Prompt }}", "details": details(status.deviceName),
            "model_info": ["general.architecture": "edgecoder", "general.basename": .string(model)],
            "capabilities": ["completion"], "modified_at": "1970-01-01T00:00:00Z",
        ]
    }

    /// `GET /v1/models`.
    public static func openAIModels(connected: Bool) -> JSONValue {
        ["object": "list", "data": connected ? [openAIModel(modelName)] : []]
    }

    public static func openAIModel(_ name: String) -> JSONValue {
        ["id": .string(name), "object": "model", "created": 0, "owned_by": "edgecoder"]
    }
}

extension JSONObject {
    func with(_ key: String, _ value: JSONValue) -> JSONObject {
        var copy = self
        copy[key] = value
        return copy
    }
}
