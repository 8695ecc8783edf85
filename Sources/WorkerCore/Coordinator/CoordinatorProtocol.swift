/// The EdgeCoder coordinator protocol of docs/reference/protocol-coordinator.md: request bodies and the classification
/// of answers, pure. Checked against the coordinator's zod schemas (see
/// IntegrationTests/coordinator/WIRE.md): optional fields are omitted, never null; unknown answer
/// keys are ignored; every answer is hostile input until it parses.
public enum CoordinatorWire {
    public static let clientType = "edgecoder-linux-worker"
    /// The coordinator refuses bodies over 1 MiB (413); a result's output is cut to fit.
    public static let maxBodyBytes = 1_048_576

    public static func register(
        agentID: String, version: String, registrationToken: String?,
        provider: WorkerConfig.BackendKind, telemetry: JSONValue, sandboxMode: String = "none"
    ) -> JSONValue {
        var body = JSONObject([
            ("agentId", .string(agentID)), ("os", "linux"), ("version", .string(version)), ("mode", "swarm-only"),
        ])
        if let registrationToken { body["registrationToken"] = .string(registrationToken) }
        body["localModelProvider"] = provider == .ollama ? "ollama-local" : "edgecoder-local"
        body["clientType"] = .string(clientType)
        body["maxConcurrentTasks"] = 1
        body["powerTelemetry"] = telemetry
        // `docker` only while programs run in a container: the coordinator then gives
        // this agent a tenant's subtasks, which need a sandbox.
        body["sandboxMode"] = .string(sandboxMode)
        return .object(body)
    }

    /// `activeModelParamSize` (billions of parameters, a number in the coordinator's
    /// schema) goes only with `activeModel`, and only when known, positive and finite.
    public static func heartbeat(
        agentID: String, telemetry: JSONValue, activeModel: String?, activeModelParamSize: Double? = nil,
        modelSwapInProgress: Bool = false, sandboxMode: String = "none"
    ) -> JSONValue {
        var body = JSONObject([("agentId", .string(agentID)), ("powerTelemetry", telemetry)])
        if let activeModel {
            body["activeModel"] = .string(activeModel)
            if let size = activeModelParamSize, size.isFinite, size > 0 { body["activeModelParamSize"] = .double(size) }
        }
        body["modelSwapInProgress"] = .bool(modelSwapInProgress)
        body["sandboxMode"] = .string(sandboxMode)
        return .object(body)
    }

    public static func pull(agentID: String) -> JSONValue { ["agentId": .string(agentID)] }

    /// The result body, with `output` cut (on a character boundary) so the whole body
    /// stays under the coordinator's limit.
    public static func result(_ result: SubtaskResult, agentID: String) -> JSONValue {
        let result = result.boundedError
        func body(_ output: String) -> JSONValue {
            var object = JSONObject([
                ("subtaskId", .string(result.subtaskID)), ("taskId", .string(result.taskID)), ("agentId", .string(agentID)),
                ("ok", .bool(result.ok)), ("output", .string(output)),
            ])
            if let error = result.error { object["error"] = .string(error) }
            object["durationMs"] = .int(result.durationMs)
            return .object(object)
        }
        // Escaping never shortens text: what is over the limit unescaped goes first, cheaply.
        var output = utf8Prefix(result.output, maxBytes: maxBodyBytes)
        var value = body(output)
        while value.serialized.utf8.count > maxBodyBytes - 1024 && !output.isEmpty {
            // Escaping can make JSON longer than the text; cut a quarter and measure again.
            output = String(output.prefix(output.count * 3 / 4))
            value = body(output)
        }
        return value
    }
}

/// A subtask from `/pull`, validated: what running it needs. The coordinator's other
/// fields are not kept (the journal stores this, bounded, not the whole answer).
public struct Subtask: Sendable, Equatable {
    public var id: String
    public var taskID: String
    public var kind: String
    public var input: String
    public var timeoutMs: Int64
    /// The language of the program a code subtask asks for (EdgeCoder's coordinator sends
    /// one with every subtask); nil when absent: the model's text answers it.
    public var language: CodeLanguage? = nil

    /// Bounds on what we accept from a coordinator.
    public static let maxInputBytes = 1_048_576
    /// The worker only carries `kind` (it runs every kind the same way): a longer one is cut
    /// here, between characters, so that the journal keeps what the subtask holds.
    public static let maxKindBytes = 64
    public static let defaultTimeoutMs: Int64 = 30_000

    public enum Problem: Error, Sendable, Equatable {
        /// Unusable and unanswerable: no id or task id to report against.
        case unidentifiable(String)
        /// Identified but not runnable: reported as a failed result.
        case unrunnable(id: String, taskID: String, reason: String)
    }

    public static func parse(_ value: JSONValue) -> Result<Subtask, Problem> {
        guard case .object = value else { return .failure(.unidentifiable("the subtask is \(value.typeDescription), not an object")) }
        guard let id = value["id"]?.stringValue, isSafeID(id) else {
            return .failure(.unidentifiable("the subtask has no usable id"))
        }
        guard let taskID = value["taskId"]?.stringValue, isSafeID(taskID) else {
            return .failure(.unidentifiable("subtask \(printable(id)) has no usable taskId"))
        }
        guard let input = value["input"]?.stringValue else {
            return .failure(.unrunnable(id: id, taskID: taskID, reason: "malformed_subtask: no input string"))
        }
        if input.utf8.count > maxInputBytes {
            return .failure(.unrunnable(id: id, taskID: taskID, reason: "malformed_subtask: input over \(maxInputBytes) bytes"))
        }
        var timeout = defaultTimeoutMs
        if let given = value["timeoutMs"]?.doubleValue, given.isFinite, given >= 1 { timeout = Int64(min(given, 86_400_000)) }
        var language: CodeLanguage?
        switch value["language"] {
        case nil, .null?: language = nil
        case .string(let name)?:
            guard let known = CodeLanguage(rawValue: name) else {
                return .failure(
                    .unrunnable(
                        id: id, taskID: taskID,
                        reason: "malformed_subtask: language \"\(printable(name, limit: 32))\" is not one of python, javascript"))
            }
            language = known
        case let other?:
            return .failure(.unrunnable(id: id, taskID: taskID, reason: "malformed_subtask: language is \(other.typeDescription), not a string"))
        }
        return .success(
            Subtask(
                id: id, taskID: taskID, kind: utf8Prefix(value["kind"]?.stringValue ?? "single_step", maxBytes: maxKindBytes), input: input,
                timeoutMs: timeout, language: language))
    }

    /// Ids end up in file names and logs: printable ASCII without separators, bounded.
    public static func isSafeID(_ id: String) -> Bool {
        !id.isEmpty && id.utf8.count <= 200
            && id.unicodeScalars.allSatisfy { $0.isASCII && $0.value > 0x20 && $0.value < 0x7F && $0 != "/" && $0 != "\\" }
    }
}

/// The outcome of running a subtask, as posted to `/result`.
public struct SubtaskResult: Sendable, Equatable {
    public var subtaskID: String
    public var taskID: String
    public var ok: Bool
    public var output: String
    public var error: String?
    public var durationMs: Int64

    public init(subtaskID: String, taskID: String, ok: Bool, output: String, error: String? = nil, durationMs: Int64) {
        self.subtaskID = subtaskID
        self.taskID = taskID
        self.ok = ok
        self.output = output
        self.error = error
        self.durationMs = durationMs
    }

    /// The answer to a subtask that is itself at fault (malformed, over the limits): never
    /// an empty output, and never the same text for two subtasks (the coordinator bans an
    /// agent whose outputs repeat or are empty), so it names the subtask and the reason.
    public static func unrunnable(subtaskID: String, taskID: String, reason: String, durationMs: Int64 = 0) -> SubtaskResult {
        SubtaskResult(
            subtaskID: subtaskID, taskID: taskID, ok: false,
            output: "subtask \(subtaskID) of task \(taskID) was not run: \(reason)", error: reason, durationMs: durationMs)
    }

    /// An error text is a reason, not a payload: longer ones are cut to this (UTF-8 bytes).
    public static let maxErrorBytes = 4_096

    /// The result as posted: the error cut to `maxErrorBytes` and the output cut so the
    /// body fits the coordinator's limit. The outbox keeps this, not the model's whole
    /// text, so an outbox file is never larger than `maxStoredBytes`.
    public var bounded: SubtaskResult {
        var result = boundedError
        guard let output = CoordinatorWire.result(result, agentID: String(repeating: "a", count: AgentID.maxBytes))["output"]?.stringValue else {
            return result
        }
        result.output = output
        return result
    }

    var boundedError: SubtaskResult {
        guard let error, error.utf8.count > SubtaskResult.maxErrorBytes else { return self }
        var result = self
        result.error = utf8Prefix(error, maxBytes: SubtaskResult.maxErrorBytes)
        return result
    }

    /// The largest outbox file a `bounded` result makes: the body limit (the outbox
    /// holds the body's fields without the agent id). Its reader refuses larger files.
    public static let maxStoredBytes = CoordinatorWire.maxBodyBytes

    public var json: JSONValue {
        var object = JSONObject([("subtaskId", .string(subtaskID)), ("taskId", .string(taskID)), ("ok", .bool(ok)), ("output", .string(output))])
        if let error { object["error"] = .string(error) }
        object["durationMs"] = .int(durationMs)
        return .object(object)
    }

    public static func from(json value: JSONValue) -> SubtaskResult? {
        guard let id = value["subtaskId"]?.stringValue, let task = value["taskId"]?.stringValue, let ok = value["ok"]?.boolValue,
            let output = value["output"]?.stringValue, let duration = value["durationMs"]?.intValue
        else { return nil }
        return SubtaskResult(subtaskID: id, taskID: task, ok: ok, output: output, error: value["error"]?.stringValue, durationMs: duration)
    }
}

/// What a coordinator answer means for the worker.
public enum CoordinatorAnswer: Sendable, Equatable {
    case registered(meshToken: String?)
    case accepted
    case noWork
    case work(Subtask)
    /// A subtask we can identify but not run: answer it with a failed result.
    case unrunnable(id: String, taskID: String, reason: String)
    case deferred(reason: String, deferMs: Int64?)
    /// No work for this agent: what is queued needs an agent that runs code in a sandbox.
    case sandboxRequired(reason: String)
    /// 401 mesh_unauthorized: forget the mesh token and register again.
    case unauthorized(reason: String?)
    /// 403, blacklisted or blocked: stop and retry no faster than every 5 minutes.
    case rejected(reason: String)
    /// Anything else (5xx, malformed, unexpected): back off and try again.
    case failure(String)

    public enum Call: String, Sendable { case register, heartbeat, pull, result }

    public static func classify(_ call: Call, status: Int, body: [UInt8]) -> CoordinatorAnswer {
        let parsed = try? JSON.parse(body)
        let errorCode = parsed?["error"]?.stringValue
        let reason = parsed?["reason"]?.stringValue.map { printable($0, limit: 200) }
        if status == 401 { return .unauthorized(reason: reason ?? errorCode.map { printable($0) }) }
        if status == 403 {
            let what = [errorCode.map { printable($0) }, reason].compactMap { $0 }.joined(separator: ": ")
            return .rejected(reason: what.isEmpty ? "forbidden (403) without a reason" : what)
        }
        guard (200..<300).contains(status) else {
            let detail = errorCode.map { ": \(printable($0))" } ?? ""
            return .failure("\(call.rawValue) answered HTTP \(status)\(detail)")
        }
        guard let value = parsed, case .object = value else {
            return .failure("\(call.rawValue) answered \(status) with a body that is not a JSON object")
        }
        switch call {
        case .register:
            guard value["accepted"]?.boolValue == true else { return .failure("register answered without accepted: true") }
            let token = value["meshToken"]?.stringValue
            if let token, token.isEmpty || token.utf8.count > 4096 || !token.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) {
                return .failure("register answered with an unusable meshToken")
            }
            return .registered(meshToken: token)
        case .heartbeat:
            if value["blacklisted"]?.boolValue == true { return .rejected(reason: "blacklisted: \(reason ?? "no reason given")") }
            guard value["ok"]?.boolValue == true else { return .failure("heartbeat answered without ok: true") }
            return .accepted
        case .pull:
            if value["blocked"]?.boolValue == true { return .rejected(reason: "blocked: \(reason ?? "no reason given")") }
            if value["powerDeferred"]?.boolValue == true {
                let defer_ = value["deferMs"]?.doubleValue.flatMap { $0.isFinite && $0 >= 0 ? Int64(min($0, 3_600_000)) : nil }
                return .deferred(reason: reason ?? "power_deferred", deferMs: defer_)
            }
            guard let subtask = value["subtask"] else { return .failure("pull answered without a subtask key") }
            if subtask == .null && value["sandboxRequired"]?.boolValue == true {
                return .sandboxRequired(reason: reason ?? "sandbox_required")
            }
            if subtask == .null { return .noWork }
            switch Subtask.parse(subtask) {
            case .success(let parsed): return .work(parsed)
            case .failure(.unrunnable(let id, let taskID, let why)): return .unrunnable(id: id, taskID: taskID, reason: why)
            case .failure(.unidentifiable(let why)): return .failure("pull answered with an unusable subtask: \(why)")
            }
        case .result:
            guard value["ok"]?.boolValue == true else { return .failure("result answered without ok: true") }
            return .accepted
        }
    }
}

/// What to do with the journal and outbox found at start (protocol-coordinator §5, "Nothing is lost").
public enum RecoveryPlan {
    public struct JournalEntry: Sendable, Equatable {
        public var subtask: Subtask
        public var pulledAtMs: Int64
        public init(subtask: Subtask, pulledAtMs: Int64) {
            self.subtask = subtask
            self.pulledAtMs = pulledAtMs
        }

        /// What a rerun needs, not the whole subtask the coordinator sent: its other
        /// fields can be as large as `coordinator.maxResponseBytes` (64 MiB), while this
        /// is bounded by `maxStoredBytes` whatever the coordinator adds.
        public var json: JSONValue {
            var stored = JSONObject([("id", .string(subtask.id)), ("taskId", .string(subtask.taskID))])
            // Subtask.parse bounds it (maxKindBytes); the bound here keeps a file's size
            // known for a Subtask made in code.
            stored["kind"] = .string(utf8Prefix(subtask.kind, maxBytes: Subtask.maxKindBytes))
            stored["input"] = .string(subtask.input)
            stored["timeoutMs"] = .int(subtask.timeoutMs)
            if let language = subtask.language { stored["language"] = .string(language.rawValue) }
            return ["pulledAtMs": .int(pulledAtMs), "subtask": .object(stored)]
        }

        /// The largest journal file `json` makes: the input escaped at worst (a control
        /// character becomes six bytes), plus ids and keys. Its reader refuses larger files.
        public static let maxStoredBytes = 6 * Subtask.maxInputBytes + 65_536

        public static func from(json value: JSONValue) -> JournalEntry? {
            guard let pulled = value["pulledAtMs"]?.intValue, let raw = value["subtask"],
                case .success(let subtask) = Subtask.parse(raw)
            else { return nil }
            return JournalEntry(subtask: subtask, pulledAtMs: pulled)
        }
    }

    public enum Action: Sendable, Equatable {
        /// Its result is in the outbox: post it (first, before anything else).
        case post(SubtaskResult)
        /// Claimed so recently that the coordinator still waits for this worker: run it again.
        case rerun(JournalEntry)
        /// The coordinator has given its claim back to the queue (or will before a rerun
        /// could answer): drop it. Reporting it failed would complete it for the whole swarm.
        case release(JournalEntry)
    }

    /// How long the coordinator waits for a claimed subtask's result before it gives the
    /// subtask to another agent (its queue re-queues stale claims after 30 s).
    public static let claimLifetimeMs: Int64 = 30_000

    /// Outbox first; then each journal entry without an outbox result, rerun while its
    /// claim is alive, released otherwise.
    public static func plan(journal: [JournalEntry], outbox: [SubtaskResult], nowMs: Int64) -> [Action] {
        var actions = outbox.map(Action.post)
        let posted = Set(outbox.map(\.subtaskID))
        for entry in journal.sorted(by: { $0.pulledAtMs < $1.pulledAtMs }) where !posted.contains(entry.subtask.id) {
            let age = nowMs - entry.pulledAtMs
            actions.append(age >= 0 && age < claimLifetimeMs ? .rerun(entry) : .release(entry))
        }
        return actions
    }
}

/// The longest prefix of `text` of at most `maxBytes` UTF-8 bytes, cut between characters.
func utf8Prefix(_ text: String, maxBytes: Int) -> String {
    let utf8 = text.utf8
    guard utf8.count > maxBytes else { return text }
    var end = utf8.index(utf8.startIndex, offsetBy: max(0, maxBytes))
    // A continuation byte (10xxxxxx) at the cut means the cut is inside a character.
    while end > utf8.startIndex && utf8[end] & 0xC0 == 0x80 { end = utf8.index(before: end) }
    return String(decoding: Array(utf8[..<end]), as: UTF8.self)
}
