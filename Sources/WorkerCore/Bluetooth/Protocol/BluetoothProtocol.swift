/// The chunked JSON protocol of protocol-bluetooth §1, pure: bytes in, requests and errors out; messages
/// in, notification chunks out. No D-Bus here (the GATT adapter feeds it).

/// A well-formed request from a Bluetooth client: protocol-bluetooth §1's keys and protocol-bluetooth §2's extension.
public struct BluetoothRequest: Sendable, Equatable {
    public var id: String
    /// Empty when `messages` is set.
    public var prompt: String
    public var maxTokens: Int
    /// Partial messages as the model produces text (protocol-bluetooth §2).
    public var stream = false
    /// A chat, run on the backend's chat API.
    public var messages: [ChatTurn]?
    public var system: String?
    /// `json` or nil.
    public var format: String?
    public var options = GenerationOptions()

    public static let defaultMaxTokens = 512
    public static let maxTokensLimit = 32_768
    /// Turns of a chat: enough for any conversation a context window holds, and a bound on
    /// the work one request can cause before it reaches the model.
    public static let maxTurns = 256
    public static let maxStops = 16
    public static let maxStopBytes = 256
    public static let chatRoles: Set<String> = ["system", "user", "assistant"]

    /// The text that stands for the request in logs and the task history: the prompt, or
    /// the chat's last turn.
    public var summaryText: String { messages?.last?.content ?? prompt }
}

/// One turn of a chat (protocol-bluetooth §2 `messages`): `role` is `system`, `user` or `assistant`.
public struct ChatTurn: Sendable, Equatable {
    public var role: String
    public var content: String
    public init(role: String, content: String) {
        self.role = role
        self.content = content
    }
}

/// The generation options a client may pass to the worker's backend (protocol-bluetooth §2 `options`);
/// nil (or empty `stop`) leaves the backend's own default.
public struct GenerationOptions: Sendable, Equatable {
    public var temperature: Double?
    public var topP: Double?
    public var topK: Int?
    public var seed: Int64?
    public var stop: [String] = []
    public var numCtx: Int?
    public init() {}
    public var isEmpty: Bool { self == GenerationOptions() }
}

/// What the assembler makes of a client's bytes.
public enum AssemblerEvent: Sendable, Equatable {
    case request(BluetoothRequest)
    /// `{"id", "cancel": true}` (protocol-bluetooth §2): stop the client's queued or running request `id`.
    case cancel(id: String)
    /// Answered with `ok: false`; `id` when it could be read.
    case rejected(id: String?, error: String)
}

/// Splits a byte stream into JSON objects written across any number of chunks. The end
/// of an object is found by a linear scan that keeps its state between chunks (depth,
/// inside a string, after a backslash), so each byte is looked at once; the object is
/// parsed once, when it is complete. EdgeCoder's phone and proxy re-parse the growing
/// buffer after every chunk, which is quadratic and wedges on one malformed chunk.
/// Shared by the peripheral (requests) and the proxy (responses).
public struct JSONObjectFramer: Sendable {
    public enum Event: Sendable, Equatable {
        case object([UInt8])
        /// An object over `maxBytes`, skipped without being stored.
        case tooLarge
        /// Bytes between objects that cannot start one, reported once per run: the run's
        /// bytes within the write that started it (at most `garbageKeptBytes`), so that
        /// the tail of a request whose first writes were lost can still name its id.
        case garbage([UInt8])
        /// A partial object idle for `idleDropMs`, dropped; its bytes so far.
        case dropped([UInt8])
    }

    public let maxBytes: Int
    public let idleDropMs: Int64
    /// A garbage run's bytes kept for its report: more than one ATT write (512 bytes).
    public static let garbageKeptBytes = 1_024

    private var buffer: [UInt8] = []
    private var depth = 0
    private var inString = false
    private var escaped = false
    private var discarding = false
    private var skippingGarbage = false
    private var lastByteAtMs: Int64 = 0

    public init(maxBytes: Int, idleDropMs: Int64 = 5_000) {
        self.maxBytes = maxBytes
        self.idleDropMs = idleDropMs
    }

    /// Whether a partial object is waiting for more bytes.
    public var isPartial: Bool { depth > 0 || discarding }

    public mutating func feed(_ bytes: some Collection<UInt8>, nowMs: Int64) -> [Event] {
        var events = tick(nowMs: nowMs)
        lastByteAtMs = nowMs
        // The garbage run this write started: reported when it ends here or with the write.
        var run: [UInt8]?
        for byte in bytes {
            if depth == 0 && !discarding {
                // Between objects: whitespace is ignored; anything but '{' is garbage,
                // reported once and skipped up to the next '{'.
                let blank = byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09
                guard byte == UInt8(ascii: "{") else {
                    if !blank && !skippingGarbage {
                        skippingGarbage = true
                        run = []
                    }
                    if let kept = run?.count, kept < Self.garbageKeptBytes { run?.append(byte) }
                    continue
                }
                if let garbage = run {
                    events.append(.garbage(garbage))
                    run = nil
                }
                skippingGarbage = false
                inString = false
                escaped = false
            }
            if !discarding {
                buffer.append(byte)
                if buffer.count > maxBytes {
                    discarding = true
                    buffer.removeAll(keepingCapacity: true)
                }
            }
            scan(byte)
            if depth == 0 {
                if discarding {
                    events.append(.tooLarge)
                    discarding = false
                } else {
                    events.append(.object(buffer))
                    buffer.removeAll(keepingCapacity: true)
                }
            }
        }
        if let garbage = run { events.append(.garbage(garbage)) }
        return events
    }

    private mutating func scan(_ byte: UInt8) {
        if inString {
            if escaped {
                escaped = false
            } else if byte == UInt8(ascii: "\\") {
                escaped = true
            } else if byte == UInt8(ascii: "\"") {
                inString = false
            }
            return
        }
        switch byte {
        case UInt8(ascii: "\""): inString = true
        case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
        case UInt8(ascii: "}"), UInt8(ascii: "]"): depth -= 1
        default: break
        }
    }

    /// Drops a partial object idle for `idleDropMs`.
    public mutating func tick(nowMs: Int64) -> [Event] {
        guard isPartial, nowMs - lastByteAtMs >= idleDropMs else { return [] }
        let partial = buffer
        reset()
        return [.dropped(partial)]
    }

    public mutating func reset() {
        buffer.removeAll(keepingCapacity: false)
        depth = 0
        inString = false
        escaped = false
        discarding = false
        skippingGarbage = false
    }
}

/// Reassembles one client's requests from writes of any size (framing by
/// `JSONObjectFramer`), and checks each request's fields.
public struct RequestAssembler: Sendable {
    public var maxRequestBytes: Int { framer.maxBytes }
    public var idleDropMs: Int64 { framer.idleDropMs }
    private var framer: JSONObjectFramer

    public init(maxRequestBytes: Int = 65_536, idleDropMs: Int64 = 5_000) {
        framer = JSONObjectFramer(maxBytes: maxRequestBytes, idleDropMs: idleDropMs)
    }

    public var isPartial: Bool { framer.isPartial }

    /// How much of a garbage run is searched for an id.
    public static let garbageScanBytes = JSONObjectFramer.garbageKeptBytes

    /// Why a request can arrive broken on Debian 12: bluetoothd before 5.69 refuses a
    /// written value over 508 bytes (ATT error 0x0D), so a client writing 512-byte chunks
    /// (EdgeCoder's Mac proxy) loses every full chunk and only its short tail arrives.
    public static let chunkHint =
        "; if the client writes more than 508 bytes at a time, bluetoothd before 5.69 (Debian 12 has 5.66) refuses those writes and the request arrives with pieces missing: write at most 508 bytes per write"

    /// Feeds one write; returns every request completed (or rejected) by it, in order.
    public mutating func feed(_ bytes: some Collection<UInt8>, nowMs: Int64) -> [AssemblerEvent] {
        framer.feed(bytes, nowMs: nowMs).map(interpret)
    }

    /// Drops a partial request idle for `idleDropMs`; returns the rejection to answer.
    public mutating func tick(nowMs: Int64) -> [AssemblerEvent] {
        framer.tick(nowMs: nowMs).map(interpret)
    }

    public mutating func reset() { framer.reset() }

    private func interpret(_ event: JSONObjectFramer.Event) -> AssemblerEvent {
        switch event {
        case .object(let bytes): return RequestAssembler.decode(bytes)
        case .tooLarge: return .rejected(id: nil, error: "too_large: the request is over \(maxRequestBytes) bytes (bluetooth.maxRequestBytes)")
        case .garbage(let bytes):
            // The tail of a request whose first writes were lost: its id, when the tail
            // carries it, lets the client match the answer (EdgeCoder's proxy drops others).
            return .rejected(
                id: RequestAssembler.partialID(bytes), error: "malformed_request: a request must be a JSON object starting with '{'" + Self.chunkHint)
        case .dropped(let partial):
            return .rejected(
                id: RequestAssembler.partialID(partial),
                error: "incomplete_request: no more bytes for \(idleDropMs) ms; the partial request was dropped" + Self.chunkHint)
        }
    }

    /// Parses a complete object once and checks its fields.
    static func decode(_ bytes: [UInt8]) -> AssemblerEvent {
        let value: JSONValue
        do {
            value = try JSON.parse(bytes, maxDepth: 16)
        } catch {
            let kind = error.reason == .invalidUTF8 ? "invalid_utf8" : "malformed_json"
            return .rejected(id: partialID(bytes), error: "\(kind): \(error)" + chunkHint)
        }
        let id = value["id"]?.stringValue.flatMap { Subtask.isSafeID($0) ? $0 : nil }
        guard let id else { return .rejected(id: nil, error: "missing_id: the request needs an \"id\" string") }
        // JSON null stands for an absent key among protocol-bluetooth §2's (clients serialise nil that way).
        func given(_ key: String) -> JSONValue? {
            // Not `flatMap { … ? nil : $0 }`: JSONValue takes `nil` as a literal for `.null`.
            guard let found = value[key], found != .null else { return Optional.none }
            return found
        }
        if let cancel = given("cancel") {
            guard cancel == .bool(true) else { return .rejected(id: id, error: "bad_cancel: \"cancel\" must be true") }
            return .cancel(id: id)
        }
        var request = BluetoothRequest(id: id, prompt: "", maxTokens: BluetoothRequest.defaultMaxTokens)
        if let messages = given("messages") {
            guard given("prompt") == nil else {
                return .rejected(id: id, error: "prompt_and_messages: send either \"prompt\" or \"messages\", not both")
            }
            switch turns(messages) {
            case .success(let turns): request.messages = turns
            case .failure(let error): return .rejected(id: id, error: error.text)
            }
        } else {
            guard let prompt = value["prompt"]?.stringValue, !prompt.isEmpty else {
                return .rejected(id: id, error: "missing_prompt: the request needs a non-empty \"prompt\" string")
            }
            request.prompt = prompt
        }
        if let given = value["maxTokens"] {
            guard let n = given.intValue, n >= 1, n <= Int64(BluetoothRequest.maxTokensLimit) else {
                return .rejected(id: id, error: "bad_max_tokens: \"maxTokens\" must be an integer in 1…\(BluetoothRequest.maxTokensLimit)")
            }
            request.maxTokens = Int(n)
        }
        if let stream = given("stream") {
            guard let flag = stream.boolValue else { return .rejected(id: id, error: "bad_stream: \"stream\" must be true or false") }
            request.stream = flag
        }
        if let system = given("system") {
            guard let text = system.stringValue else { return .rejected(id: id, error: "bad_system: \"system\" must be a string") }
            request.system = text
        }
        if let format = given("format") {
            guard format == .string("json") else {
                return .rejected(id: id, error: "unsupported_format: \"format\" may only be \"json\"")
            }
            request.format = "json"
        }
        if let options = given("options") {
            switch generationOptions(options) {
            case .success(let parsed): request.options = parsed
            case .failure(let error): return .rejected(id: id, error: error.text)
            }
        }
        return .request(request)
    }

    /// A reason to refuse a request, as its `error` text.
    struct Refusal: Error {
        let text: String
        init(_ text: String) { self.text = text }
    }

    /// 6.1's `messages`: 1…`maxTurns` turns, each a known role and a string content (other
    /// keys of a turn are ignored, like unknown keys of the request).
    static func turns(_ value: JSONValue) -> Result<[ChatTurn], Refusal> {
        let limit = BluetoothRequest.maxTurns
        guard let array = value.arrayValue, (1...limit).contains(array.count) else {
            return .failure(Refusal("bad_messages: \"messages\" must be an array of 1…\(limit) turns"))
        }
        var turns: [ChatTurn] = []
        turns.reserveCapacity(array.count)
        for (index, turn) in array.enumerated() {
            guard let role = turn["role"]?.stringValue, BluetoothRequest.chatRoles.contains(role) else {
                return .failure(Refusal("bad_messages: messages[\(index)].role must be \"system\", \"user\" or \"assistant\""))
            }
            guard let content = turn["content"]?.stringValue else {
                return .failure(Refusal("bad_messages: messages[\(index)].content must be a string"))
            }
            turns.append(ChatTurn(role: role, content: content))
        }
        return .success(turns)
    }

    /// 6.1's `options`: the listed keys, each checked; any other key is named in the refusal.
    static func generationOptions(_ value: JSONValue) -> Result<GenerationOptions, Refusal> {
        guard let object = value.objectValue else { return .failure(Refusal("bad_options: \"options\" must be an object")) }
        var options = GenerationOptions()
        func number(_ value: JSONValue, _ key: String, _ range: ClosedRange<Double>) -> Result<Double, Refusal> {
            guard let n = value.doubleValue, n.isFinite, range.contains(n) else {
                return .failure(Refusal("bad_option: \"options.\(key)\" must be a number in \(range.lowerBound)…\(range.upperBound)"))
            }
            return .success(n)
        }
        func integer(_ value: JSONValue, _ key: String, _ range: ClosedRange<Int64>) -> Result<Int64, Refusal> {
            guard let n = value.intValue, range.contains(n) else {
                return .failure(Refusal("bad_option: \"options.\(key)\" must be an integer in \(range.lowerBound)…\(range.upperBound)"))
            }
            return .success(n)
        }
        for member in object.members where member.value != .null {
            let value = member.value
            do {
                switch member.key {
                case "temperature": options.temperature = try number(value, "temperature", 0...100).get()
                case "top_p": options.topP = try number(value, "top_p", 0...1).get()
                case "top_k": options.topK = Int(try integer(value, "top_k", 0...1_000_000).get())
                case "seed": options.seed = try integer(value, "seed", Int64(Int32.min)...Int64(UInt32.max)).get()
                case "num_ctx": options.numCtx = Int(try integer(value, "num_ctx", 1...1_048_576).get())
                case "stop": options.stop = try stops(value).get()
                default:
                    return .failure(Refusal("unsupported_option: \(String(member.key.unicodeScalars.prefix(64).map(Character.init)))"))
                }
            } catch {
                return .failure(error)
            }
        }
        return .success(options)
    }

    /// `stop`: one string or an array of them (OpenAI allows both), each non-empty and short.
    static func stops(_ value: JSONValue) -> Result<[String], Refusal> {
        let refusal = Refusal(
            "bad_option: \"options.stop\" must be a string or an array of at most \(BluetoothRequest.maxStops) strings of 1…\(BluetoothRequest.maxStopBytes) bytes"
        )
        let items: [JSONValue]
        if case .string = value { items = [value] } else if let array = value.arrayValue { items = array } else { return .failure(refusal) }
        guard items.count <= BluetoothRequest.maxStops else { return .failure(refusal) }
        var stops: [String] = []
        for item in items {
            guard let text = item.stringValue, (1...BluetoothRequest.maxStopBytes).contains(text.utf8.count) else { return .failure(refusal) }
            stops.append(text)
        }
        return .success(stops)
    }

    /// The id of a broken request, when a `"id":"…"` pair can be found in its bytes.
    static func partialID(_ bytes: [UInt8]) -> String? {
        let key = Array(#""id""#.utf8)
        // Compared in place: a broken object can be `maxRequestBytes` long.
        guard bytes.count > key.count,
            let start = (0...(bytes.count - key.count)).first(where: { at in key.indices.allSatisfy { bytes[at + $0] == key[$0] } })
        else { return nil }
        var i = start + key.count
        while i < bytes.count, bytes[i] == 0x20 || bytes[i] == UInt8(ascii: ":") { i += 1 }
        guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else { return nil }
        i += 1
        var id: [UInt8] = []
        while i < bytes.count, bytes[i] != UInt8(ascii: "\""), id.count <= 200 { id.append(bytes[i]); i += 1 }
        guard i < bytes.count, let text = String(validating: id, as: UTF8.self), Subtask.isSafeID(text) else { return nil }
        return text
    }
}

/// Messages the worker notifies, and their chunking.
public enum BluetoothMessage {
    public static func response(id: String, output: String, ok: Bool, durationMs: Int64, error: String? = nil) -> [UInt8] {
        var object = JSONObject([("id", .string(id)), ("output", .string(output)), ("ok", .bool(ok)), ("durationMs", .int(durationMs))])
        if let error { object["error"] = .string(error) }
        return JSONValue.object(object).serializedBytes
    }

    /// A rejection (protocol-bluetooth §1 bad input): `ok: false` with the reason, the id when known.
    public static func rejection(id: String?, error: String) -> [UInt8] {
        response(id: id ?? "", output: "", ok: false, durationMs: 0, error: error)
    }

    /// A client's cancel of its request `id` (protocol-bluetooth §2): `{"id", "cancel": true}`.
    public static func cancel(id: String) -> [UInt8] {
        JSONValue.object(JSONObject([("id", .string(id)), ("cancel", .bool(true))])).serializedBytes
    }

    /// A streamed request's partial message (protocol-bluetooth §2): `{"id", "delta", "done": false}`.
    public static func partial(id: String, delta: String) -> [UInt8] {
        JSONValue.object(JSONObject([("id", .string(id)), ("delta", .string(delta)), ("done", .bool(false))])).serializedBytes
    }

    /// A streamed request's last message (protocol-bluetooth §2), without `output`: `{"id", "ok": true,
    /// "done": true, "durationMs", "evalCount"?}`, or `{"id", "ok": false, "done": true, "error"}`.
    public static func final(id: String, ok: Bool, durationMs: Int64, evalCount: Int? = nil, error: String? = nil) -> [UInt8] {
        var object = JSONObject([("id", .string(id)), ("ok", .bool(ok)), ("done", .bool(true))])
        if ok {
            object["durationMs"] = .int(durationMs)
            if let evalCount { object["evalCount"] = .int(Int64(evalCount)) }
        } else {
            object["error"] = .string(error ?? "failed")
        }
        return JSONValue.object(object).serializedBytes
    }

    /// The size a partial message of request `id` aims at: the fewest whole notifications
    /// at `mtu` that hold the message's keys and at least one byte of text (one
    /// notification at any usual MTU; at MTU 23 the keys alone need several).
    public static func partialBudget(id: String, mtu: Int) -> Int {
        let size = chunkSize(mtu: mtu)
        let overhead = partial(id: id, delta: "").count
        return size * ((overhead + 1 + size - 1) / size)
    }

    /// `batteryPct` -1 when the host has no battery (protocol-bluetooth §1).
    /// `name` (protocol-bluetooth §1 lets more keys follow) tells a client which worker it reached even
    /// when bluetoothd shows the host's GAP name instead of the advertised one.
    public static func status(modelState: String, batteryPct: Int?, name: String? = nil) -> [UInt8] {
        var object = JSONObject([("modelState", .string(modelState)), ("batteryPct", .int(Int64(batteryPct ?? -1)))])
        if let name { object["name"] = .string(name) }
        return JSONValue.object(object).serializedBytes
    }

    /// The chunk size for an ATT MTU: min(512, MTU − 5), within protocol-bluetooth §1's "at most
    /// min(512, MTU − 3)". Why 5: when the client is BlueZ (which enables Multiple Handle
    /// Value Notifications), bluetoothd 5.66 sends each notification inside an
    /// ATT_HANDLE_VALUE_MULT_NFY PDU whose entries carry a 2-byte length as well as the
    /// handle, and silently truncates the value to MTU − 5 (seen in the VM: 2 bytes lost
    /// per chunk at MTU 48). At the usual MTU 517 it is 512 either way.
    public static func chunkSize(mtu: Int) -> Int { max(18, min(512, mtu - 5)) }

    /// Consecutive chunks of at most `chunkSize(mtu:)` bytes; the client concatenates them
    /// until they form one complete JSON object.
    public static func chunks(_ message: [UInt8], mtu: Int) -> [ArraySlice<UInt8>] {
        let size = chunkSize(mtu: mtu)
        return stride(from: 0, to: message.count, by: size).map { message[$0..<min($0 + size, message.count)] }
    }
}

/// Gathers the text a streamed request produces into partial messages (protocol-bluetooth §2): one is
/// due once its text would fill the partial's budget (whole notifications, see
/// `BluetoothMessage.partialBudget`) or `delayMs` after its first byte, whichever comes first.
/// The answer's first partial is due as soon as it has any text (protocol-bluetooth §2): the client sees
/// the model start at once; only later partials wait to fill notifications.
/// Pure: the peripheral asks for a due partial whenever its link is free, so a link slower
/// than the model makes bigger partials, never a longer queue.
public struct PartialCoalescer: Sendable, Equatable {
    public let id: String
    public let delayMs: Int64
    /// The text not yet sent; `start` is where it begins (taking from the front is O(1)).
    var scalars: [Unicode.Scalar] = []
    var start = 0
    /// Its size once escaped in a JSON string.
    public private(set) var escapedBytes = 0
    /// When the first byte of the text not yet sent arrived.
    public private(set) var firstAtMs: Int64?
    /// Whether a partial went out already; until then text is due without waiting.
    public private(set) var sentAny = false

    public init(id: String, delayMs: Int64 = 100) {
        self.id = id
        self.delayMs = delayMs
    }

    public var isEmpty: Bool { start == scalars.count }
    /// When the text waiting is due whatever its size.
    public var dueAtMs: Int64? { firstAtMs.map { sentAny ? $0 + delayMs : $0 } }

    public mutating func add(_ text: String, nowMs: Int64) {
        guard !text.isEmpty else { return }
        if isEmpty { firstAtMs = nowMs }
        for scalar in text.unicodeScalars {
            scalars.append(scalar)
            escapedBytes += Self.escapedLength(scalar)
        }
    }

    /// Whether the text waiting fills a partial of `budget` bytes.
    public func isFull(budget: Int) -> Bool { escapedBytes >= room(budget) }

    /// The partial message due at `nowMs`, if any: as much text as fits the budget when the
    /// text fills it, else all of it once `delayMs` has passed since its first byte (at once
    /// for the answer's first partial).
    public mutating func take(nowMs: Int64, budget: Int) -> [UInt8]? {
        guard !isEmpty else { return nil }
        if isFull(budget: budget) { return cut(maxEscaped: room(budget), nowMs: nowMs) }
        guard let due = dueAtMs, nowMs >= due else { return nil }
        return cut(maxEscaped: Int.max, nowMs: nowMs)
    }

    /// Everything waiting, as partial messages of at most `budget` bytes (the request ended).
    public mutating func drain(budget: Int) -> [[UInt8]] {
        var messages: [[UInt8]] = []
        while !isEmpty { messages.append(cut(maxEscaped: room(budget), nowMs: firstAtMs ?? 0)) }
        return messages
    }

    func room(_ budget: Int) -> Int { max(1, budget - BluetoothMessage.partial(id: id, delta: "").count) }

    /// The longest prefix whose escaped size fits `maxEscaped` (at least one scalar, so a
    /// tiny budget still makes progress), as a partial message; the rest waits, timed from now.
    mutating func cut(maxEscaped: Int, nowMs: Int64) -> [UInt8] {
        var end = start
        var size = 0
        while end < scalars.count {
            let next = Self.escapedLength(scalars[end])
            if size + next > maxEscaped && end > start { break }
            size += next
            end += 1
        }
        var text = ""
        text.unicodeScalars.append(contentsOf: scalars[start..<end])
        start = end
        sentAny = true
        escapedBytes -= size
        if isEmpty {
            scalars.removeAll(keepingCapacity: true)
            start = 0
            firstAtMs = nil
        } else {
            firstAtMs = nowMs
            if start > 4_096 && start * 2 > scalars.count {
                scalars.removeFirst(start)
                start = 0
            }
        }
        return BluetoothMessage.partial(id: id, delta: text)
    }

    /// The bytes `scalar` takes inside a JSON string as `JSONValue` writes it.
    static func escapedLength(_ scalar: Unicode.Scalar) -> Int {
        switch scalar {
        case "\"", "\\", "\n", "\r", "\t": return 2
        case "\u{2028}", "\u{2029}": return 6
        default: return scalar.value < 0x20 ? 6 : UTF8.width(scalar)
        }
    }
}
