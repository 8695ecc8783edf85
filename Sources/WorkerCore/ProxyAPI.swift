/// The local HTTP API of `edgecoder-worker proxy`, pure: request bodies in, answers out.
/// Two request shapes on `POST /api/generate`: EdgeCoder's Mac proxy's `{prompt,
/// maxTokens}` and Ollama's `{model, prompt, stream, options.num_predict}`.

public struct GenerateRequest: Sendable, Equatable {
    public enum Shape: Sendable, Equatable {
        case edgecoder
        /// Ollama's; `stream` true (its default) is answered as a one-line NDJSON stream.
        case ollama(model: String, stream: Bool)
    }

    public var prompt: String
    public var maxTokens: Int
    public var shape: Shape

    public static func parse(_ body: [UInt8]) -> Result<GenerateRequest, HTTPRefusal> {
        let value: JSONValue
        do { value = try JSON.parse(body, maxDepth: 16) } catch {
            return .failure(HTTPRefusal(400, "the body is not valid JSON: \(error)"))
        }
        guard value.objectValue != nil else { return .failure(HTTPRefusal(400, "the body must be a JSON object")) }
        guard let prompt = value["prompt"]?.stringValue, !prompt.isEmpty else {
            return .failure(HTTPRefusal(400, "\"prompt\" must be a non-empty string"))
        }
        let limit = Int64(BluetoothRequest.maxTokensLimit)
        func tokens(_ given: JSONValue?, _ name: String) -> Result<Int, HTTPRefusal> {
            guard let given else { return .success(BluetoothRequest.defaultMaxTokens) }
            guard let n = given.intValue, n >= 1, n <= limit else {
                return .failure(HTTPRefusal(400, "\"\(name)\" must be an integer in 1…\(limit)"))
            }
            return .success(Int(n))
        }
        if let model = value["model"] {
            guard let name = model.stringValue else { return .failure(HTTPRefusal(400, "\"model\" must be a string")) }
            var stream = true
            if let given = value["stream"] {
                guard let flag = given.boolValue else { return .failure(HTTPRefusal(400, "\"stream\" must be true or false")) }
                stream = flag
            }
            if let options = value["options"], options.objectValue == nil, options != .null {
                return .failure(HTTPRefusal(400, "\"options\" must be an object"))
            }
            return tokens(value["options"]?["num_predict"], "options.num_predict").map {
                GenerateRequest(prompt: prompt, maxTokens: $0, shape: .ollama(model: name, stream: stream))
            }
        }
        return tokens(value["maxTokens"], "maxTokens").map { GenerateRequest(prompt: prompt, maxTokens: $0, shape: .edgecoder) }
    }
}

/// What came back from the worker (or why nothing did).
public enum GenerateResult: Sendable, Equatable {
    case answered(ok: Bool, output: String, error: String?, workerDurationMs: Int64)
    /// No worker connected: 503.
    case notConnected(String)
    /// No answer in time: 504.
    case timedOut(Int64)
}

public enum ProxyAnswer {
    /// Status, content type and body of a generate answer.
    public static func generate(_ request: GenerateRequest, _ result: GenerateResult, durationMs: Int64, nowMs: Int64) -> (status: Int, ndjson: Bool, body: JSONValue) {
        switch request.shape {
        case .edgecoder:
            switch result {
            case .answered(let ok, let output, let error, let workerMs):
                // durationMs: the whole exchange as the HTTP client saw it; workerDurationMs:
                // what the worker reported (its model time), so the difference is the link's.
                var object = JSONObject([("ok", .bool(ok)), ("output", .string(output)), ("response", .string(output)), ("durationMs", .int(durationMs)),
                                         ("workerDurationMs", .int(workerMs))])
                if let error { object["error"] = .string(error) }
                return (ok ? 200 : 502, false, .object(object))
            case .notConnected(let why):
                return (503, false, ["ok": false, "output": "", "response": "", "error": .string(why), "durationMs": .int(durationMs)])
            case .timedOut(let ms):
                return (504, false, ["ok": false, "output": "", "response": "", "error": .string("no answer from the worker within \(ms) ms"), "durationMs": .int(durationMs)])
            }
        case .ollama(let model, let stream):
            switch result {
            case .answered(true, let output, _, _):
                let body: JSONValue = ["model": .string(model), "created_at": .string(formatUTC(milliseconds: nowMs)), "response": .string(output),
                                       "done": true, "done_reason": "stop", "total_duration": .int(durationMs * 1_000_000)]
                return (200, stream, body)
            case .answered(false, _, let error, _):
                return (502, false, ["error": .string(error ?? "the worker failed")])
            case .notConnected(let why):
                return (503, false, ["error": .string(why)])
            case .timedOut(let ms):
                return (504, false, ["error": .string("no answer from the worker within \(ms) ms")])
            }
        }
    }

    /// `GET /api/tags`: the nearby worker as one model, so Ollama clients list it.
    public static func tags(connected: Bool, deviceName: String?) -> JSONValue {
        guard connected else { return ["models": []] }
        return ["models": [[
            "name": .string(modelName), "model": .string(modelName), "modified_at": "1970-01-01T00:00:00Z", "size": 0, "digest": "",
            "details": ["family": "edgecoder", "format": "bluetooth", "parameter_size": "", "quantization_level": "",
                        "worker": .string(deviceName ?? "")],
        ]]]
    }

    public static let modelName = "edgecoder-bluetooth"
}

/// `GET /status`: the keys of EdgeCoder's Mac proxy (`connected`, `scanning`,
/// `modelState`, `lastSeenMs`, `deviceName`, `deviceId`, `batteryPct`, `rssi`), and ours.
public struct ProxyStatus: Sendable, Equatable {
    public var connected = false
    public var scanning = false
    public var modelState = "unknown"
    public var lastSeenMs: Int64 = 0
    public var deviceName: String?
    public var deviceAddress: String?
    public var batteryPct: Int?
    public var rssi: Int?
    public var requestsInFlight = 0
    public var adapter: String?
    public var mtu: Int?
    public var reconnects = 0
    public var problem: String?

    public init() {}

    public var json: JSONValue {
        var object = JSONObject([("connected", .bool(connected)), ("scanning", .bool(scanning)), ("modelState", .string(modelState)),
                                 ("lastSeenMs", .int(lastSeenMs))])
        if let deviceName { object["deviceName"] = .string(deviceName) }
        if let deviceAddress { object["deviceId"] = .string(deviceAddress); object["deviceAddress"] = .string(deviceAddress) }
        if let batteryPct { object["batteryPct"] = .int(Int64(batteryPct)) }
        if let rssi { object["rssi"] = .int(Int64(rssi)) }
        object["requestsInFlight"] = .int(Int64(requestsInFlight))
        object["adapter"] = .optional(adapter)
        object["mtu"] = mtu.map { .int(Int64($0)) } ?? .null
        object["reconnects"] = .int(Int64(reconnects))
        object["problem"] = .optional(problem)
        return .object(object)
    }
}

/// What the proxy asks a worker for: SPEC 6's request and 6.1's extension, without the id
/// (the link gives each request its own).
public struct WorkerAsk: Sendable, Equatable {
    /// Empty when `messages` is set.
    public var prompt: String
    public var messages: [ChatTurn]?
    public var system: String?
    /// `json` or nil.
    public var format: String?
    public var options = GenerationOptions()
    public var maxTokens: Int
    /// Partial messages as the model produces text (SPEC 6.1); false is SPEC 6's exchange.
    public var stream = false

    public init(prompt: String, maxTokens: Int) {
        self.prompt = prompt
        self.maxTokens = maxTokens
    }

    /// The request as written to the worker. Keys of 6.1 go out only when used, so a plain
    /// ask is byte for byte what EdgeCoder's Mac proxy sends.
    public func wire(id: String) -> [UInt8] {
        var object = JSONObject([("id", .string(id))])
        if let messages {
            object["messages"] = .array(messages.map { ["role": .string($0.role), "content": .string($0.content)] })
        } else {
            object["prompt"] = .string(prompt)
        }
        object["maxTokens"] = .int(Int64(maxTokens))
        if let system { object["system"] = .string(system) }
        if let format { object["format"] = .string(format) }
        if stream { object["stream"] = true }
        if !options.isEmpty {
            var wireOptions = JSONObject()
            if let value = options.temperature { wireOptions["temperature"] = .double(value) }
            if let value = options.topP { wireOptions["top_p"] = .double(value) }
            if let value = options.topK { wireOptions["top_k"] = .int(Int64(value)) }
            if let value = options.seed { wireOptions["seed"] = .int(value) }
            if !options.stop.isEmpty { wireOptions["stop"] = .array(options.stop.map { .string($0) }) }
            if let value = options.numCtx { wireOptions["num_ctx"] = .int(Int64(value)) }
            object["options"] = .object(wireOptions)
        }
        return JSONValue.object(object).serializedBytes
    }
}

/// What the proxy's HTTP side needs from a worker link: send a request, get its result,
/// show the link's state. `GattCentral` is the real one; tests of the HTTP side pass their own.
public protocol ProxyUpstream: Sendable {
    /// Sends `ask` and waits for the worker's final message (or the timeout, or the link's
    /// loss). With `ask.stream`, `onDelta` receives each partial's text, in order, before
    /// this returns. Cancelling the calling task cancels the request on the worker (SPEC
    /// 6.1's `cancel`) and returns promptly.
    func generate(_ ask: WorkerAsk, timeoutMs: Int64, onDelta: @escaping @Sendable (String) async -> Void) async -> GenerateResult
    var currentStatus: ProxyStatus { get async }
}
