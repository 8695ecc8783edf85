/// The chunked JSON protocol of SPEC 6, pure: bytes in, requests and errors out; messages
/// in, notification chunks out. No D-Bus here (the GATT adapter feeds it).

/// A well-formed request from a Bluetooth client.
public struct BluetoothRequest: Sendable, Equatable {
    public var id: String
    public var prompt: String
    public var maxTokens: Int
    public static let defaultMaxTokens = 512
    public static let maxTokensLimit = 32_768
}

/// One turn of a chat (SPEC 6.1 `messages`): `role` is `system`, `user` or `assistant`.
public struct ChatTurn: Sendable, Equatable {
    public var role: String
    public var content: String
    public init(role: String, content: String) {
        self.role = role
        self.content = content
    }
}

/// The generation options a client may pass to the worker's backend (SPEC 6.1 `options`);
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
        /// Bytes between objects that cannot start one (reported once per run).
        case garbage
        /// A partial object idle for `idleDropMs`, dropped; its bytes so far.
        case dropped([UInt8])
    }

    public let maxBytes: Int
    public let idleDropMs: Int64

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
        for byte in bytes {
            if depth == 0 && !discarding {
                // Between objects: whitespace is ignored; anything but '{' is garbage,
                // reported once and skipped up to the next '{'.
                if byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 { continue }
                guard byte == UInt8(ascii: "{") else {
                    if !skippingGarbage {
                        events.append(.garbage)
                        skippingGarbage = true
                    }
                    continue
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
        return events
    }

    private mutating func scan(_ byte: UInt8) {
        if inString {
            if escaped { escaped = false } else if byte == UInt8(ascii: "\\") { escaped = true } else if byte == UInt8(ascii: "\"") { inString = false }
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
        case .garbage: return .rejected(id: nil, error: "malformed_request: a request must be a JSON object starting with '{'")
        case .dropped(let partial):
            return .rejected(id: RequestAssembler.partialID(partial), error: "incomplete_request: no more bytes for \(idleDropMs) ms; the partial request was dropped")
        }
    }

    /// Parses a complete object once and checks its fields.
    static func decode(_ bytes: [UInt8]) -> AssemblerEvent {
        let value: JSONValue
        do {
            value = try JSON.parse(bytes, maxDepth: 16)
        } catch {
            let kind = error.reason == .invalidUTF8 ? "invalid_utf8" : "malformed_json"
            return .rejected(id: partialID(bytes), error: "\(kind): \(error)")
        }
        let id = value["id"]?.stringValue.flatMap { Subtask.isSafeID($0) ? $0 : nil }
        guard let id else { return .rejected(id: nil, error: "missing_id: the request needs an \"id\" string") }
        guard let prompt = value["prompt"]?.stringValue, !prompt.isEmpty else {
            return .rejected(id: id, error: "missing_prompt: the request needs a non-empty \"prompt\" string")
        }
        var maxTokens = BluetoothRequest.defaultMaxTokens
        if let given = value["maxTokens"] {
            guard let n = given.intValue, n >= 1, n <= Int64(BluetoothRequest.maxTokensLimit) else {
                return .rejected(id: id, error: "bad_max_tokens: \"maxTokens\" must be an integer in 1…\(BluetoothRequest.maxTokensLimit)")
            }
            maxTokens = Int(n)
        }
        return .request(BluetoothRequest(id: id, prompt: prompt, maxTokens: maxTokens))
    }

    /// The id of a broken request, when a `"id":"…"` pair can be found in its bytes.
    static func partialID(_ bytes: [UInt8]) -> String? {
        let key = Array(#""id""#.utf8)
        guard bytes.count > key.count, let start = (0...(bytes.count - key.count)).first(where: { Array(bytes[$0..<($0 + key.count)]) == key }) else { return nil }
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

    /// A rejection (SPEC 6 bad input): `ok: false` with the reason, the id when known.
    public static func rejection(id: String?, error: String) -> [UInt8] {
        response(id: id ?? "", output: "", ok: false, durationMs: 0, error: error)
    }

    /// `batteryPct` -1 when the host has no battery (SPEC 6).
    /// `name` (SPEC 6 lets more keys follow) tells a client which worker it reached even
    /// when bluetoothd shows the host's GAP name instead of the advertised one.
    public static func status(modelState: String, batteryPct: Int?, name: String? = nil) -> [UInt8] {
        var object = JSONObject([("modelState", .string(modelState)), ("batteryPct", .int(Int64(batteryPct ?? -1)))])
        if let name { object["name"] = .string(name) }
        return JSONValue.object(object).serializedBytes
    }

    /// The chunk size for an ATT MTU: min(512, MTU − 5), within SPEC 6's "at most
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
