/// What a reload (SIGHUP, `systemctl reload`) does with a new config file: the keys the
/// running daemon can take at once, and the ones that wait for a restart because taking
/// them live would drop a running subtask, a Bluetooth client or an open socket.
public struct ConfigReloadPlan: Sendable, Equatable {
    /// The config to run with from now on: the running one with the live keys of the file.
    public var applied: WorkerConfig
    /// Keys whose new value applies now.
    public var appliedKeys: [String]
    /// Whether the Bluetooth session must start again to apply them.
    public var restartsBluetooth: Bool { appliedKeys.contains(where: Self.restartingBluetooth.contains) }
    /// Keys whose value in the file differs from the running one and needs a restart.
    public var restartKeys: [String]

    /// Keys (dotted paths) taken at once; a key under `policy.` is live too. Everything
    /// else is read once, when the part that uses it starts.
    public static let liveKeys = Set([
        "coordinator.heartbeatIntervalMs", "coordinator.pullIntervalMs", "coordinator.gapGuard",
        "backend.allowRemoteModelSwitch", "network.onMetered", "log.level",
        "telemetry.deviceType",
    ]).union(restartingBluetooth)

    /// Live keys that start the Bluetooth session again (its clients are disconnected):
    /// bluetoothd reads the characteristics' flags only when the application registers, and
    /// a client admitted at the old level must not keep a link the new one refuses; the
    /// pairing agent follows the level (PairingAgentChoice).
    public static let restartingBluetooth: Set<String> = ["bluetooth.security", "bluetooth.pairingAgent"]

    public static func isLive(_ key: String) -> Bool { liveKeys.contains(key) || key.hasPrefix("policy.") }

    /// Compares the running config with the file's. Pure: the daemon applies `applied`.
    /// `coordinator.url`, `allowInsecureHttp` and `registrationToken` are read when mode
    /// `on`'s runtime starts: live while it is stopped (so that `enroll` can point a daemon
    /// at a coordinator with a reload), waiting for a restart while it runs.
    public static func plan(running: WorkerConfig, file: WorkerConfig, coordinatorRunning: Bool = true) -> ConfigReloadPlan {
        var applied = running
        if !coordinatorRunning {
            applied.coordinator.url = file.coordinator.url
            applied.coordinator.allowInsecureHttp = file.coordinator.allowInsecureHttp
            applied.coordinator.registrationToken = file.coordinator.registrationToken
        }
        applied.policy = file.policy
        applied.policyKeysInFile = file.policyKeysInFile
        applied.backend.allowRemoteModelSwitch = file.backend.allowRemoteModelSwitch
        applied.coordinator.heartbeatIntervalMs = file.coordinator.heartbeatIntervalMs
        applied.coordinator.pullIntervalMs = file.coordinator.pullIntervalMs
        applied.coordinator.gapGuard = file.coordinator.gapGuard
        applied.network.onMetered = file.network.onMetered
        applied.log.level = file.log.level
        applied.telemetry.deviceType = file.telemetry.deviceType
        applied.bluetooth.security = file.bluetooth.security
        applied.bluetooth.pairingAgent = file.bluetooth.pairingAgent
        let changedNow = changedKeys(running, applied)
        let waiting = changedKeys(applied, file)
        return ConfigReloadPlan(applied: applied, appliedKeys: changedNow, restartKeys: waiting)
    }

    /// The dotted keys whose values differ, in the order of `WorkerConfig.flattened`.
    public static func changedKeys(_ a: WorkerConfig, _ b: WorkerConfig) -> [String] {
        let left = a.flattened, right = b.flattened
        return zip(left, right).filter { $0.value != $1.value }.map(\.0.key)
    }
}

extension WorkerConfig {
    /// Every key as a dotted path with a comparable rendering of its value (secrets
    /// included, so a changed token counts as a change: never print the values). The
    /// order and the set of keys are fixed, so two configs flatten to aligned lists.
    public var flattened: [(key: String, value: String)] {
        func text(_ value: String?) -> String { value.map { "=" + $0 } ?? "-" }
        var out: [(key: String, value: String)] = [
            ("agentId", text(agentId)),
            ("coordinator.url", text(coordinator.url)),
            ("coordinator.registrationToken", text(coordinator.registrationToken)),
            ("coordinator.heartbeatIntervalMs", "\(coordinator.heartbeatIntervalMs)"),
            ("coordinator.pullIntervalMs", "\(coordinator.pullIntervalMs)"),
            ("coordinator.stopGraceMs", "\(coordinator.stopGraceMs)"),
            ("coordinator.connectTimeoutMs", "\(coordinator.connectTimeoutMs)"),
            ("coordinator.requestTimeoutMs", "\(coordinator.requestTimeoutMs)"),
            ("coordinator.maxResponseBytes", "\(coordinator.maxResponseBytes)"),
            ("coordinator.allowInsecureHttp", "\(coordinator.allowInsecureHttp)"),
            ("coordinator.gapGuard", "\(coordinator.gapGuard)"),
            ("backend.kind", backend.kind.rawValue),
            ("backend.url", backend.url),
            ("backend.model", backend.model),
            ("backend.timeoutMs", "\(backend.timeoutMs)"),
            ("backend.openaiEndpoint", backend.openaiEndpoint.rawValue),
            ("backend.maxOutputBytes", "\(backend.maxOutputBytes)"),
            ("backend.maxTokens", "\(backend.maxTokens)"),
            ("backend.think", "\(backend.think)"),
            ("backend.keepAlive", backend.keepAlive.serialized),
            ("backend.apiKey", text(backend.apiKey)),
            ("backend.allowRemoteModelSwitch", "\(backend.allowRemoteModelSwitch)"),
            ("backend.allowedModelRegistries", backend.allowedModelRegistries.joined(separator: ",")),
            ("backend.allowInsecureHttp", "\(backend.allowInsecureHttp)"),
        ]
        // allowRemoteModelSwitch is set in the file as backend.allowRemoteModelSwitch.
        if case .object(let policyObject) = policy.json {
            for member in policyObject.members where member.key != "allowRemoteModelSwitch" {
                out.append(("policy." + member.key, member.value.serialized))
            }
        }
        out += [
            ("network.pathLossGraceMs", "\(network.pathLossGraceMs)"),
            ("network.onMetered", network.onMetered.rawValue),
            ("telemetry.deviceType", text(telemetry.deviceType?.rawValue)),
            ("bluetooth.adapter", text(bluetooth.adapter)),
            ("bluetooth.maxRequestBytes", "\(bluetooth.maxRequestBytes)"),
            ("bluetooth.maxQueuedRequests", "\(bluetooth.maxQueuedRequests)"),
            ("bluetooth.chunkPacingMs", "\(bluetooth.chunkPacingMs)"),
            ("bluetooth.pacing", bluetooth.pacing.rawValue),
            ("bluetooth.maxClients", "\(bluetooth.maxClients)"),
            ("bluetooth.maxTokens", text(bluetooth.maxTokens.map { "\($0)" })),
            ("bluetooth.security", bluetooth.security.rawValue),
            ("bluetooth.pairingAgent", bluetooth.pairingAgent.rawValue),
            ("bluetooth.allowedClients", bluetooth.allowedClients.description),
            ("bluetooth.clientIdleSec", "\(bluetooth.clientIdleSec)"),
            ("execution.mode", execution.mode.rawValue),
            ("execution.engine", execution.engine),
            ("execution.engineArguments", execution.engineArguments.joined(separator: " ")),
            ("execution.image", execution.image),
            ("execution.timeoutMs", "\(execution.timeoutMs)"),
            ("hooks.networkRestored", text(hooks.networkRestored)),
            ("hooks.timeoutMs", "\(hooks.timeoutMs)"),
            ("control.readGroup", control.readGroup),
            ("log.level", log.level.rawValue),
        ]
        return out
    }
}

/// The outcome of the last reload, for `status` (`daemon.configReload`).
public struct ConfigReloadStatus: Sendable, Equatable {
    public enum Outcome: String, Sendable { case applied, unchanged, refused }
    public var atMs: Int64
    public var outcome: Outcome
    /// Why the file was refused (every problem, with its key), when it was.
    public var problems: [String]
    public var appliedKeys: [String]
    /// Keys that differ between the file and what runs: they apply at the next restart.
    public var restartKeys: [String]

    public init(atMs: Int64, outcome: Outcome, problems: [String] = [], appliedKeys: [String] = [], restartKeys: [String] = []) {
        self.atMs = atMs
        self.outcome = outcome
        self.problems = problems
        self.appliedKeys = appliedKeys
        self.restartKeys = restartKeys
    }

    public var json: JSONValue {
        .object(
            JSONObject([
                ("at", .string(formatUTC(milliseconds: atMs))),
                ("outcome", .string(outcome.rawValue)),
                ("problems", .array(problems.map { .string($0) })),
                ("applied", .array(appliedKeys.map { .string($0) })),
                ("needsRestart", .array(restartKeys.map { .string($0) })),
            ]))
    }

    /// One line for the log and the event.
    public var line: String {
        switch outcome {
        case .refused:
            return "config reload refused, the running config is kept: " + problems.joined(separator: "; ")
        case .unchanged, .applied:
            var text = appliedKeys.isEmpty ? "config reloaded: nothing to apply" : "config reloaded: applied " + appliedKeys.joined(separator: ", ")
            if !restartKeys.isEmpty { text += "; needs a restart to apply: " + restartKeys.joined(separator: ", ") }
            return text
        }
    }
}
