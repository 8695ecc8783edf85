/// The coordinator's model switch (protocol-coordinator §7, "Model orchestration"), pure: what a heartbeat
/// answer's `orchestration` asks, whether this worker may do it, how often progress is
/// forwarded, and the bodies of the two calls (`/orchestration/agents/:agentId/status` and
/// `/ack`); Ollama's `/api/pull` progress lines are ModelBackend's. Checked against EdgeCoder's
/// coordinator (IntegrationTests/coordinator/WIRE.md): `phase` ≤ 64 and `message` ≤ 512 UTF-16
/// code units, `progressPct` 0–100, `error` a string, never null.
public struct ModelSwitchRequest: Sendable, Equatable {
    /// EdgeCoder's `rolloutId`; absent from older coordinators.
    public var rolloutID: String?
    /// `ollama-local` or `edgecoder-local` (anything else is refused, not guessed at).
    public var provider: String
    public var model: String?
    /// EdgeCoder: install (pull) the model when missing. False: switch only to a model
    /// the server already has.
    public var autoInstall: Bool
    /// What identifies this request across heartbeats: the coordinator keeps sending it
    /// (`pending: true`) until it is acknowledged.
    public var key: String

    public init(rolloutID: String?, provider: String, model: String?, autoInstall: Bool, key: String) {
        self.rolloutID = rolloutID
        self.provider = provider
        self.model = model
        self.autoInstall = autoInstall
        self.key = key
    }

    /// The pending request in a heartbeat answer; nil when there is none (absent, null,
    /// `pending` not true) or it is not an object. Hostile input: strings are bounded.
    public static func parse(heartbeatAnswer answer: JSONValue?) -> ModelSwitchRequest? {
        guard let value = answer?["orchestration"], case .object = value else { return nil }
        guard value["pending"]?.boolValue == true else { return nil }
        let rollout = value["rolloutId"]?.stringValue.flatMap { $0.isEmpty || $0.utf8.count > 200 ? nil : $0 }
        let provider = value["provider"]?.stringValue.map { printable($0, limit: 64) } ?? "(none)"
        let model = value["model"]?.stringValue
        // EdgeCoder's default for a missing autoInstall is true.
        let autoInstall = value["autoInstall"]?.boolValue ?? true
        let requestedAt = value["requestedAtMs"]?.intValue.map(String.init) ?? ""
        let key = rollout ?? "\(provider)|\(model.map { printable($0, limit: 256) } ?? "")|\(requestedAt)"
        return ModelSwitchRequest(rolloutID: rollout, provider: provider, model: model, autoInstall: autoInstall, key: key)
    }

    /// What the worker does with a request.
    public enum Plan: Sendable, Equatable {
        /// Pull `model` through Ollama's `/api/pull`, then switch to it.
        case pull(model: String)
        /// Switch to `model` without downloading: it must already be on the server.
        case switchInstalled(model: String)
        /// Acknowledge `ok: false` with this reason.
        case refuse(String)
    }

    /// The one decision: allowed on this host, an Ollama backend, a usable model name.
    /// `allowedRegistries`: the registry hosts `backend.allowedModelRegistries` lets a
    /// coordinator name; none by default (hardening #26 row 3).
    public func plan(allowed: Bool, backend: WorkerConfig.BackendKind, allowedRegistries: [String] = []) -> Plan {
        guard allowed else { return .refuse(ModelSwitchRequest.notAllowed) }
        guard provider == "ollama-local" else {
            return .refuse("provider \(provider) is not supported: this worker switches Ollama models only (ollama-local)")
        }
        guard backend == .ollama else {
            return .refuse("backend.kind is \(backend.rawValue): only an Ollama backend can pull and switch models")
        }
        guard let model else { return .refuse("the request names no model") }
        if let problem = ModelSwitchRequest.modelNameProblem(model) { return .refuse("model name \(problem)") }
        if model.contains("://") {
            return .refuse("model name \"\(printable(model))\" carries a URL scheme: name the model as Ollama does ([host/]namespace/model[:tag])")
        }
        if let host = ModelSwitchRequest.registryHost(of: model), !allowedRegistries.contains(host.lowercased()) {
            return .refuse(
                "model name \"\(printable(model))\" names the registry \(printable(host)): this worker pulls only from the model server's default registry unless the host is listed in backend.allowedModelRegistries"
            )
        }
        return autoInstall ? .pull(model: model) : .switchInstalled(model: model)
    }

    /// Why a switch is refused when the permission is off (at the start, or turned off
    /// while the switch waits or pulls).
    public static let notAllowed =
        "remote model switch is off on this worker: set backend.allowRemoteModelSwitch true in its config, or run `edgecoder-worker policy set allowRemoteModelSwitch true` on the host"

    /// The registry host a model name carries, lowercased; nil for the default registry.
    /// Docker's reference grammar reads a first component with a `.` or `:`, `localhost`,
    /// or capitals as a host; Ollama reads any first of three components as one
    /// (`host/namespace/model`). Either way, the model server would fetch from there.
    public static func registryHost(of name: String) -> String? {
        let components = name.split(separator: "/", omittingEmptySubsequences: false)
        guard components.count > 1, let first = components.first else { return nil }
        let docker = first.contains(".") || first.contains(":") || first == "localhost" || first.contains(where: \.isUppercase)
        return docker || components.count > 2 ? first.lowercased() : nil
    }

    /// Whether `text` reads as a registry host for `backend.allowedModelRegistries`:
    /// a host name or address with an optional port, no scheme, no path.
    public static func isRegistryHost(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= 253 && !text.hasPrefix(":") && !text.hasSuffix(":")
            && text.unicodeScalars.allSatisfy {
                $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || ".-_:[]".unicodeScalars.contains($0))
            }
    }

    /// Ollama model names: `[namespace/]model[:tag]`, printable, no spaces. The name is
    /// sent to the model server and written to the state directory, so it is bounded.
    public static func modelNameProblem(_ name: String) -> String? {
        if name.isEmpty { return "is empty" }
        if name.utf8.count > 256 { return "is longer than 256 bytes" }
        let ok = name.unicodeScalars.allSatisfy { $0.isASCII && $0.value > 0x20 && $0.value < 0x7F && $0 != "\"" && $0 != "\\" }
        return ok ? nil : "\"\(printable(name))\" holds spaces, quotes or characters outside printable ASCII"
    }
}

/// How often progress goes to the coordinator: a new phase at once, otherwise at most
/// every `intervalMs` and only when something changed (a pull can stream thousands of
/// lines a second; the coordinator writes each status to its database).
public struct ProgressThrottle: Sendable, Equatable {
    public var intervalMs: Int64
    private var lastPhase: String?
    private var lastSentMs: Int64?
    private var lastMessage: String?

    public init(intervalMs: Int64 = 2_000) { self.intervalMs = intervalMs }

    /// Whether to send now; records the send when it says yes.
    public mutating func shouldSend(phase: String, message: String, nowMs: Int64) -> Bool {
        let send: Bool
        if phase != lastPhase {
            send = true
        } else if message == lastMessage {
            send = false
        } else {
            send = nowMs - (lastSentMs ?? Int64.min / 2) >= intervalMs
        }
        if send {
            lastPhase = phase
            lastSentMs = nowMs
            lastMessage = message
        }
        return send
    }
}

/// The orchestration calls' bodies and the meaning of their answers.
public enum OrchestrationWire {
    public static let maxPhase = 64
    public static let maxMessage = 512

    /// `POST /orchestration/agents/:agentId/status`.
    public static func status(phase: String, message: String, progressPct: Double?) -> JSONValue {
        var object = JSONObject([("phase", .string(cut(phase, utf16: maxPhase))), ("message", .string(cut(message, utf16: maxMessage)))])
        if let progressPct, progressPct.isFinite { object["progressPct"] = .double((min(100, max(0, progressPct)) * 10).rounded() / 10) }
        return .object(object)
    }

    /// `POST /orchestration/agents/:agentId/ack`.
    public static func ack(ok: Bool, error: String?) -> JSONValue {
        var object = JSONObject([("ok", .bool(ok))])
        if let error, !ok { object["error"] = .string(cut(error, utf16: maxMessage)) }
        return .object(object)
    }

    /// The path of a call for this agent (agent ids hold only URL-safe characters).
    public static func path(_ call: String, agentID: String) -> String { "/orchestration/agents/\(agentID)/\(call)" }

    /// What an answer to either call means.
    public enum Answer: Sendable, Equatable {
        /// 2xx: taken (EdgeCoder echoes the ack's `ok`, so the body's `ok` says nothing).
        case accepted
        /// 404 `orchestration_not_found`: the coordinator no longer has this request.
        case gone
        /// 401: the mesh token is wrong; register again.
        case unauthorized
        /// Anything else: try again later.
        case failure(String)
    }

    public static func classify(status: Int, body: [UInt8]) -> Answer {
        if (200..<300).contains(status) { return .accepted }
        let error = (try? JSON.parse(body))?["error"]?.stringValue.map { printable($0) }
        if status == 401 { return .unauthorized }
        if status == 404 && error == "orchestration_not_found" { return .gone }
        return .failure("HTTP \(status)\(error.map { ": \($0)" } ?? "")")
    }

    /// `text` cut on a character boundary to at most `utf16` UTF-16 code units, as zod's
    /// `.max()` counts them.
    public static func cut(_ text: String, utf16 limit: Int) -> String {
        if text.utf16.count <= limit { return text }
        var out = ""
        var count = 0
        for character in text {
            let size = character.utf16.count
            if count + size > limit - 1 { break }
            out.append(character)
            count += size
        }
        return out + "…"
    }
}

/// The model this worker runs and why (docs/reference/model-backends.md): the config's `backend.model`, or the one
/// a coordinator switched to, persisted so it survives restarts. A switch counts only
/// while the config still names the model it switched from: an operator who edits
/// `backend.model` afterwards wins.
public struct ActiveModel: Sendable, Equatable {
    public var model: String
    /// The config's model when the switch was made.
    public var switchedFrom: String
    public var switchedAtMs: Int64
    public var rolloutID: String?

    public init(model: String, switchedFrom: String, switchedAtMs: Int64, rolloutID: String?) {
        self.model = model
        self.switchedFrom = switchedFrom
        self.switchedAtMs = switchedAtMs
        self.rolloutID = rolloutID
    }

    public var json: JSONValue {
        var object = JSONObject([("model", .string(model)), ("switchedFrom", .string(switchedFrom)), ("switchedAtMs", .int(switchedAtMs))])
        if let rolloutID { object["rolloutId"] = .string(rolloutID) }
        return .object(object)
    }

    public static func from(json value: JSONValue) -> ActiveModel? {
        guard let model = value["model"]?.stringValue, ModelSwitchRequest.modelNameProblem(model) == nil,
            let from = value["switchedFrom"]?.stringValue, let at = value["switchedAtMs"]?.intValue
        else { return nil }
        return ActiveModel(model: model, switchedFrom: from, switchedAtMs: at, rolloutID: value["rolloutId"]?.stringValue)
    }

    /// The model to run: the switch's when it still applies, else the config's.
    public static func resolve(config: WorkerConfig.Backend, persisted: ActiveModel?) -> (model: String, switched: ActiveModel?) {
        guard let persisted, config.kind == .ollama, persisted.switchedFrom == config.model else { return (config.model, nil) }
        return (persisted.model, persisted)
    }
}

/// What a model switch waits for before it downloads or switches: every hold the work
/// loop obeys on this host (hardening #26 row 1). Not the coordinator-conduct holds
/// (local failures, heartbeat gap, …): they protect the coordinator's view of claimed
/// work, which a switch does not touch.
public enum ModelSwitchHold: Sendable, Equatable {
    /// The power policy holds new work (battery, heat, CPU, …).
    case power(HoldReason)
    /// The host holds work: a metered connection under `network.onMetered` hold, or a suspend.
    case host(LocalHoldReason)
    /// `runOnlyWhileCharging` is set and the host is on battery.
    case chargeGate

    /// The first hold that applies, in the order `status` names them; nil when none does.
    public static func first(power: HoldReason?, host: LocalHoldReason?, chargeGateClosed: Bool) -> ModelSwitchHold? {
        if let power { return .power(power) }
        if let host { return .host(host) }
        return chargeGateClosed ? .chargeGate : nil
    }

    /// Its name, as `status` and the coordinator's status call show it.
    public var reason: String {
        switch self {
        case .power(let reason): return reason.rawValue
        case .host(let reason): return reason.rawValue
        case .chargeGate: return HoldReason.notCharging.rawValue
        }
    }

    /// The held phase's message: which rule holds the switch and what clears it.
    public var message: String {
        switch self {
        case .power(let reason): return "waiting: the power policy holds new work (\(reason.rawValue))"
        case .host(let reason): return "waiting: held: \(reason.rawValue): \(reason.explanation)"
        case .chargeGate: return "waiting: not-charging: runOnlyWhileCharging is set and the host is on battery; connect power"
        }
    }
}

/// A switch in progress or the last one's outcome, for `status` and heartbeats.
public struct ModelSwitchStatus: Sendable, Equatable {
    public enum Phase: String, Sendable {
        case held, starting, pulling, switching, done, failed, refused
        /// Ended by mode off (or the session's end) before it switched: final, not in progress.
        case interrupted
    }
    public var phase: Phase
    public var model: String?
    public var rolloutID: String?
    public var message: String
    public var progressPct: Double?
    public var sinceMs: Int64

    public init(phase: Phase, model: String?, rolloutID: String?, message: String, progressPct: Double? = nil, sinceMs: Int64) {
        self.phase = phase
        self.model = model
        self.rolloutID = rolloutID
        self.message = message
        self.progressPct = progressPct
        self.sinceMs = sinceMs
    }

    /// Whether the model is being changed now (the heartbeat's `modelSwapInProgress`).
    public var inProgress: Bool { [.held, .starting, .pulling, .switching].contains(phase) }

    public var json: JSONValue {
        var object = JSONObject([("phase", .string(phase.rawValue)), ("inProgress", .bool(inProgress))])
        object["model"] = .optional(model)
        object["rolloutId"] = .optional(rolloutID)
        object["message"] = .string(message)
        object["progressPct"] = progressPct.map { .double($0) } ?? .null
        object["since"] = .string(formatUTC(milliseconds: sinceMs))
        return .object(object)
    }
}

/// The last `limit` keys, each with a value, the oldest forgotten first: what a session
/// remembers of the coordinator's switch requests (acks taken, outcomes not yet acked)
/// stays bounded however many rollouts it sees (hardening #26 row 10).
public struct RecentKeys<Value: Sendable>: Sendable {
    /// How many a session remembers.
    public static var defaultLimit: Int { 64 }
    public let limit: Int
    private var order: [String] = []
    private var values: [String: Value] = [:]

    public init(limit: Int = defaultLimit) { self.limit = max(1, limit) }

    public var count: Int { order.count }
    public func contains(_ key: String) -> Bool { values[key] != nil }

    /// Setting a key makes it the newest; setting nil forgets it.
    public subscript(key: String) -> Value? {
        get { values[key] }
        set {
            if values[key] != nil { order.removeAll { $0 == key } }
            values[key] = newValue
            guard newValue != nil else { return }
            order.append(key)
            while order.count > limit { values[order.removeFirst()] = nil }
        }
    }
}

extension RecentKeys where Value == Bool {
    /// Remembers `key` as the newest (a set's insert).
    public mutating func insert(_ key: String) { self[key] = true }
}
