// The proxy's link to a worker, as the central sees it: what the proxy asks a worker for
// (`WorkerAsk`, protocol-bluetooth §1's request), what came back (`GenerateResult`), the
// link's state (`ProxyStatus`) and the port the proxy's HTTP side calls (`ProxyUpstream`).
// Here, not in the Proxy target, because `CentralMachine` and BlueZ's `GattCentral` speak
// them too, and neither depends on the proxy's HTTP side.

/// What came back from the worker (or why nothing did).
public enum GenerateResult: Sendable, Equatable {
    case answered(ok: Bool, output: String, error: String?, workerDurationMs: Int64)
    /// No worker connected: 503.
    case notConnected(String)
    /// No answer in time: 504.
    case timedOut(Int64)
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
    /// How the worker is chosen: `remembered` (the first one used, kept), `device`
    /// (`--device`) or `any` (the strongest each time).
    public var selection: String?
    /// The one worker the proxy connects to, when `selection` pins one.
    public var pinnedDevice: String?

    public init() {}

    public var json: JSONValue {
        var object = JSONObject([
            ("connected", .bool(connected)), ("scanning", .bool(scanning)), ("modelState", .string(modelState)),
            ("lastSeenMs", .int(lastSeenMs)),
        ])
        if let deviceName { object["deviceName"] = .string(deviceName) }
        if let deviceAddress { object["deviceId"] = .string(deviceAddress); object["deviceAddress"] = .string(deviceAddress) }
        if let batteryPct { object["batteryPct"] = .int(Int64(batteryPct)) }
        if let rssi { object["rssi"] = .int(Int64(rssi)) }
        object["requestsInFlight"] = .int(Int64(requestsInFlight))
        object["adapter"] = .optional(adapter)
        object["mtu"] = mtu.map { .int(Int64($0)) } ?? .null
        object["reconnects"] = .int(Int64(reconnects))
        object["problem"] = .optional(problem)
        if let selection { object["selection"] = .string(selection) }
        object["pinnedDevice"] = .optional(pinnedDevice)
        return .object(object)
    }
}

/// What the proxy asks a worker for: protocol-bluetooth §1's request and protocol-bluetooth §2's extension, without the id
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
    /// Partial messages as the model produces text (protocol-bluetooth §2); false is protocol-bluetooth §1's exchange.
    public var stream = false

    public init(prompt: String, maxTokens: Int) {
        self.prompt = prompt
        self.maxTokens = maxTokens
    }

    /// The request as written to the worker. Keys of protocol-bluetooth §2 go out only when used, so a plain
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
    /// this returns. Cancelling the calling task cancels the request on the worker (protocol-bluetooth
    /// §2's `cancel`) and returns promptly.
    func generate(_ ask: WorkerAsk, timeoutMs: Int64, onDelta: @escaping @Sendable (String) async -> Void) async -> GenerateResult
    var currentStatus: ProxyStatus { get async }
}
