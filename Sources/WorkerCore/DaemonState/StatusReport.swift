/// Everything `status` shows, taken from the daemon at one instant: the daemon gathers
/// it, `StatusReport` renders it, so the rendering is tested without a daemon.
public struct StatusSnapshot: Sendable, Equatable {
    /// Where the daemon runs from and how long it has been up.
    public struct Daemon: Sendable, Equatable {
        public var version: String
        public var pid: Int64
        public var startedAtMs: Int64
        public var configPath: String
        public var stateDirectory: String
        public var controlSocket: String
        /// Why the last write to the state directory failed, until one succeeds.
        public var persistenceProblem: String?
        /// The last config reload, nil before the first.
        public var configReload: ConfigReloadStatus?
        /// Why the agent id looks copied from another machine (CopiedIdentityCheck), or nil.
        public var identityProblem: String?

        public init(
            version: String, pid: Int64, startedAtMs: Int64, configPath: String, stateDirectory: String,
            controlSocket: String, persistenceProblem: String? = nil, configReload: ConfigReloadStatus? = nil,
            identityProblem: String? = nil
        ) {
            self.configReload = configReload
            self.identityProblem = identityProblem
            self.version = version
            self.pid = pid
            self.startedAtMs = startedAtMs
            self.configPath = configPath
            self.stateDirectory = stateDirectory
            self.controlSocket = controlSocket
            self.persistenceProblem = persistenceProblem
        }
    }

    /// The network path as the path monitor last saw it.
    public struct Network: Sendable, Equatable {
        public var path: PathStatus
        /// When `path.satisfied` last changed.
        public var sinceMs: Int64

        public init(path: PathStatus, sinceMs: Int64) {
            self.path = path
            self.sinceMs = sinceMs
        }
    }

    /// How the last operator hook ended.
    public struct Hook: Sendable, Equatable {
        public var name: String
        /// The outcome in words (`exited 0`, `timed out after 5000 ms`, …).
        public var outcome: String
        public var succeeded: Bool
        public var timeMs: Int64

        public init(name: String, outcome: String, succeeded: Bool, timeMs: Int64) {
            self.name = name
            self.outcome = outcome
            self.succeeded = succeeded
            self.timeMs = timeMs
        }
    }

    /// The latest power reading and the decision made from it.
    public struct Power: Sendable, Equatable {
        public var telemetry: PowerTelemetry?
        /// Age of `telemetry` (monotonic clock).
        public var ageMs: Int64
        public var decision: PowerDecision?
        /// The monotonic time `decision`'s durations are measured to.
        public var monotonicNowMs: Int64
        /// Rule 2.2: the restored mode waits for external power.
        public var chargeGateBlocked: Bool
        public var held: HoldCounters
        /// Reads of the host's power state since the daemon started: periodic while a working
        /// mode is selected; in mode off only on a uevent or when `status` finds it stale.
        public var reads: Int64

        public init(
            telemetry: PowerTelemetry?, ageMs: Int64, decision: PowerDecision?, monotonicNowMs: Int64,
            chargeGateBlocked: Bool, held: HoldCounters, reads: Int64 = 0
        ) {
            self.reads = reads
            self.telemetry = telemetry
            self.ageMs = ageMs
            self.decision = decision
            self.monotonicNowMs = monotonicNowMs
            self.chargeGateBlocked = chargeGateBlocked
            self.held = held
        }
    }

    /// The model backend's configuration and its last readiness probe.
    public struct Backend: Sendable, Equatable {
        public var kind: String
        public var url: String
        public var model: String
        /// `ready`, `loading`, `unavailable`, `unauthorized`; nil before the first probe (shown as `idle`).
        public var modelState: String?
        public var detail: String?
        public var checkedAtMs: Int64?
        /// `backend.model`; `model` is the active one, which a coordinator may have switched.
        public var configuredModel: String?
        public var switchedModel: ActiveModel?
        public var modelSwitch: ModelSwitchStatus?

        public init(
            kind: String, url: String, model: String, modelState: String? = nil, detail: String? = nil, checkedAtMs: Int64? = nil,
            configuredModel: String? = nil, switchedModel: ActiveModel? = nil, modelSwitch: ModelSwitchStatus? = nil
        ) {
            self.kind = kind
            self.url = url
            self.model = model
            self.modelState = modelState
            self.detail = detail
            self.checkedAtMs = checkedAtMs
            self.configuredModel = configuredModel
            self.switchedModel = switchedModel
            self.modelSwitch = modelSwitch
        }
    }

    /// A state file moved aside at start.
    public struct RecoveredFile: Sendable, Equatable {
        public var file: String
        public var movedTo: String
        public var problem: String
        public var timeMs: Int64

        public init(file: String, movedTo: String, problem: String, timeMs: Int64) {
            self.file = file
            self.movedTo = movedTo
            self.problem = problem
            self.timeMs = timeMs
        }
    }

    /// Wall-clock milliseconds when the snapshot was taken (uptime is measured to it).
    public var nowMs: Int64
    public var agentID: String
    public var daemon: Daemon
    /// The selected mode, persisted.
    public var mode: ModeState
    /// Whether the selected mode's runtime runs, and why not when it does not.
    public var runtime: RuntimeState
    /// nil until the path monitor reports.
    public var network: Network?
    /// nil until an operator hook has run.
    public var lastHook: Hook?
    /// What logind, NetworkManager and power-profiles-daemon said; nil in tests that do not say.
    public var host: HostServices?
    /// Why the host holds new work now (suspending, metered), if it does.
    public var hostHold: LocalHoldReason?
    public var power: Power
    /// The policy in force (config plus per-host overrides) and where each key came from.
    public var policy: PowerPolicy
    public var policySources: [String: PolicySource]
    /// `coordinator.url` from the config.
    public var coordinatorURL: String?
    /// nil while mode `on`'s runtime is not running.
    public var coordinator: CoordinatorStatus?
    /// What the coordinator's behaviour monitor has seen of this worker, and the holds it implies.
    public var conduct: CoordinatorConduct
    /// The peripheral's latest report (`inactive` outside mode bluetooth).
    public var bluetooth: BluetoothStatus
    /// `bluetooth.adapter` and `bluetooth.maxClients` from the config.
    public var bluetoothConfiguredAdapter: String?
    public var bluetoothMaxClients: Int64
    public var backend: Backend
    /// The modes whose runtime runs now (at most the selected one).
    public var activeRuntimes: Set<Mode>
    /// State files moved aside at start.
    public var recovered: [RecoveredFile]
    /// Events kept in the log, and the sequence number of the latest.
    public var eventCount: Int
    public var lastEventSeq: Int64
    /// What the daemon counted since it started (`metrics`).
    public var counters: WorkCounters
    /// How code subtasks are answered.
    public var execution: ExecutionStatus

    public init(
        nowMs: Int64, agentID: String, daemon: Daemon, mode: ModeState, runtime: RuntimeState, network: Network? = nil,
        lastHook: Hook? = nil, host: HostServices? = nil, hostHold: LocalHoldReason? = nil, power: Power, policy: PowerPolicy,
        policySources: [String: PolicySource] = [:],
        coordinatorURL: String? = nil, coordinator: CoordinatorStatus? = nil, conduct: CoordinatorConduct = CoordinatorConduct(),
        bluetooth: BluetoothStatus = BluetoothStatus(),
        bluetoothConfiguredAdapter: String? = nil, bluetoothMaxClients: Int64, backend: Backend,
        activeRuntimes: Set<Mode> = [], recovered: [RecoveredFile] = [], eventCount: Int = 0, lastEventSeq: Int64 = 0,
        counters: WorkCounters = WorkCounters(), execution: ExecutionStatus = ExecutionStatus()
    ) {
        self.counters = counters
        self.execution = execution
        self.nowMs = nowMs
        self.agentID = agentID
        self.daemon = daemon
        self.mode = mode
        self.runtime = runtime
        self.network = network
        self.lastHook = lastHook
        self.host = host
        self.hostHold = hostHold
        self.power = power
        self.policy = policy
        self.policySources = policySources
        self.coordinatorURL = coordinatorURL
        self.coordinator = coordinator
        self.conduct = conduct
        self.bluetooth = bluetooth
        self.bluetoothConfiguredAdapter = bluetoothConfiguredAdapter
        self.bluetoothMaxClients = bluetoothMaxClients
        self.backend = backend
        self.activeRuntimes = activeRuntimes
        self.recovered = recovered
        self.eventCount = eventCount
        self.lastEventSeq = lastEventSeq
    }
}

/// `status` rendered from a snapshot: the one-line summary (systemd's STATUS= and the
/// first line the CLI prints) and the JSON whose keys docs/reference/json-output.md documents as stable.
public struct StatusReport: Sendable {
    public let snapshot: StatusSnapshot

    public init(_ snapshot: StatusSnapshot) { self.snapshot = snapshot }

    /// One line: the mode, its runtime, and whatever needs the operator's eye.
    public var summary: String {
        let s = snapshot
        var line = "mode \(s.mode.mode.rawValue), \(s.runtime.phase.rawValue)"
        if s.runtime.phase != .running && s.mode.mode != .off { line += ": " + s.runtime.reason }
        if let decision = s.power.decision, !decision.allowed { line += "; new work held: \(decision.reasonText)" }
        if let hold = s.hostHold { line += "; new work held: \(hold.rawValue)" }
        if let coordinator = s.coordinator {
            if let rejection = coordinator.rejection {
                line += "; coordinator rejected: \(rejection)"
            } else {
                line += coordinator.registered ? "; registered" : "; not registered"
            }
            let failures = max(coordinator.consecutiveFailures, coordinator.heartbeatFailures)
            if failures > 0 { line += " (\(failures) failures)" }
            if let hold = s.conduct.pullHold(nowMs: s.nowMs) {
                line += "; new work held: \(hold.reason.rawValue) until \(formatUTC(milliseconds: hold.untilMs))"
            } else if let state = s.backend.modelState, state != "ready" {
                line += "; new work held: \(LocalHoldReason.modelUnavailable.rawValue) (model backend \(state))"
            } else if s.execution.decision.answering == .held {
                line += "; new work held: \(LocalHoldReason.sandboxUnavailable.rawValue)"
            }
        }
        if let path = s.network?.path { line += path.satisfied ? "; network via \(path.interface ?? "?")" : "; network lost" }
        if s.bluetooth.state != .inactive { line += "; " + s.bluetooth.summary }
        if let change = s.backend.modelSwitch, change.inProgress { line += "; switching model to \(change.model ?? "?") (\(change.phase.rawValue))" }
        if s.mode.restoredAtMs != nil { line += "; network restored: run 'edgecoder-worker mode on' to rejoin" }
        if !s.recovered.isEmpty { line += "; \(s.recovered.count) state file(s) recovered" }
        if s.daemon.persistenceProblem != nil { line += "; state not writable" }
        if s.daemon.identityProblem != nil { line += "; agent id copied from another machine: run identity reset" }
        if let reload = s.daemon.configReload {
            if reload.outcome == .refused { line += "; config reload refused" }
            if !reload.restartKeys.isEmpty { line += "; restart to apply \(reload.restartKeys.joined(separator: ", "))" }
        }
        return line
    }

    /// The whole `status --json` object.
    public var json: JSONValue {
        let s = snapshot
        return [
            "summary": .string(summary),
            "agentId": .string(s.agentID),
            "mode": StatusReport.modeJSON(s.mode, runtime: s.runtime),
            "network": networkJSON,
            "power": powerJSON,
            "coordinator": coordinatorJSON,
            "bluetooth": bluetoothJSON,
            "backend": backendJSON,
            "execution": s.execution.json,
            "policy": PowerPolicy.showJSON(s.policy, sources: s.policySources),
            "daemon": daemonJSON,
            "host": hostJSON,
            "recoveredStateFiles": .array(
                s.recovered.map {
                    [
                        "file": .string($0.file), "movedTo": .string($0.movedTo), "problem": .string($0.problem),
                        "time": .string(formatUTC(milliseconds: $0.timeMs)),
                    ]
                }),
            "events": ["count": .int(Int64(s.eventCount)), "lastSeq": .int(s.lastEventSeq)],
            "counters": s.counters.json,
        ]
    }

    /// `mode --json`, and `status`'s `mode`.
    public static func modeJSON(_ mode: ModeState, runtime: RuntimeState) -> JSONValue {
        var object = JSONObject([
            ("mode", .string(mode.mode.rawValue)),
            ("since", .string(formatUTC(milliseconds: mode.sinceMs))),
            ("sinceMs", .int(mode.sinceMs)),
            ("reason", .string(mode.reason)),
            ("downgraded", .bool(mode.downgraded)),
            ("runtime", ["state": .string(runtime.phase.rawValue), "reason": .string(runtime.reason)]),
        ])
        if let restored = mode.restoredAtMs {
            object["networkRestoredAt"] = .string(formatUTC(milliseconds: restored))
            object["networkRestoredNotice"] =
                "the network path is back; the worker stays in bluetooth until an operator runs 'edgecoder-worker mode on'"
        }
        if let pause = mode.pause {
            object["resumesAt"] = .string(formatUTC(milliseconds: pause.untilMs))
            object["resumesAtMs"] = .int(pause.untilMs)
            object["resumesMode"] = .string(pause.resumeMode.rawValue)
        }
        return .object(object)
    }

    var networkJSON: JSONValue {
        guard let network = snapshot.network else { return ["state": "unknown", "reason": "the path monitor has not reported yet"] }
        let path = network.path
        var object = JSONObject([
            ("state", .string(path.satisfied ? "satisfied" : "unsatisfied")),
            ("satisfied", .bool(path.satisfied)),
            ("since", .string(formatUTC(milliseconds: network.sinceMs))),
            ("reason", .string(path.reason)),
        ])
        object["interface"] = .optional(path.interface)
        if let hook = snapshot.lastHook {
            object["lastHook"] = [
                "name": .string(hook.name), "outcome": .string(hook.outcome),
                "ok": .bool(hook.succeeded), "time": .string(formatUTC(milliseconds: hook.timeMs)),
            ]
        }
        return .object(object)
    }

    var powerJSON: JSONValue {
        let power = snapshot.power
        var object = JSONObject()
        if let telemetry = power.telemetry {
            object["telemetry"] = telemetry.heartbeatJSON
            object["ageMs"] = .int(max(0, power.ageMs))
        } else {
            object["telemetry"] = .null
        }
        if let decision = power.decision { object["decision"] = decision.json(nowMs: power.monotonicNowMs) }
        object["chargeGate"] = power.chargeGateBlocked ? "blocked: connect power to start" : "open"
        object["held"] = power.held.json
        object["reads"] = .int(power.reads)
        return .object(object)
    }

    var coordinatorJSON: JSONValue {
        var object = snapshot.coordinator?.json.objectValue ?? JSONObject([("state", "not running")])
        object["url"] = .optional(snapshot.coordinatorURL)
        object["active"] = .bool(snapshot.activeRuntimes.contains(.on))
        object["conduct"] = snapshot.conduct.statusJSON(nowMs: snapshot.nowMs)
        return .object(object)
    }

    var bluetoothJSON: JSONValue {
        var object = snapshot.bluetooth.json.objectValue ?? JSONObject()
        object["active"] = .bool(snapshot.activeRuntimes.contains(.bluetooth))
        object["configuredAdapter"] = .optional(snapshot.bluetoothConfiguredAdapter)
        object["maxClients"] = .int(snapshot.bluetoothMaxClients)
        return .object(object)
    }

    var backendJSON: JSONValue {
        let backend = snapshot.backend
        var object = JSONObject([("kind", .string(backend.kind)), ("url", .string(backend.url)), ("model", .string(backend.model))])
        object["modelState"] = .string(backend.modelState ?? "idle")
        object["detail"] = .string(backend.detail ?? "not probed yet")
        if let at = backend.checkedAtMs { object["checkedAt"] = .string(formatUTC(milliseconds: at)) }
        object["modelSource"] = .string(backend.switchedModel == nil ? "config" : "coordinator")
        if let switched = backend.switchedModel {
            object["configuredModel"] = .string(switched.switchedFrom)
            object["switchedAt"] = .string(formatUTC(milliseconds: switched.switchedAtMs))
        }
        object["modelSwitch"] = backend.modelSwitch?.json ?? .null
        return .object(object)
    }

    var hostJSON: JSONValue {
        var object = snapshot.host?.json.objectValue ?? JSONObject()
        object["hold"] = snapshot.hostHold.map { ["reason": .string($0.rawValue), "explanation": .string($0.explanation)] } ?? .null
        return .object(object)
    }

    var daemonJSON: JSONValue {
        let daemon = snapshot.daemon
        var object = JSONObject([
            ("version", .string(daemon.version)),
            ("pid", .int(daemon.pid)),
            ("startedAt", .string(formatUTC(milliseconds: daemon.startedAtMs))),
            ("uptimeMs", .int(snapshot.nowMs - daemon.startedAtMs)),
            ("config", .string(daemon.configPath)),
            ("stateDirectory", .string(daemon.stateDirectory)),
            ("controlSocket", .string(daemon.controlSocket)),
        ])
        object["persistenceProblem"] = .optional(daemon.persistenceProblem)
        object["configReload"] = daemon.configReload?.json ?? .null
        object["identityProblem"] = .optional(daemon.identityProblem)
        return .object(object)
    }
}

/// `doctor`'s view of the state directory: what statvfs says of its file system and what
/// the daemon last failed to write, with the advice that follows. Pure: the CLI reads.
public struct StateDirectoryCheck: Sendable, Equatable {
    public var path: String
    /// Bytes an unprivileged writer may still use; nil when statvfs failed.
    public var freeBytes: Int64?
    public var readOnly: Bool?
    /// Why statvfs failed, when it did.
    public var problem: String?
    /// The daemon's `persistenceProblem`, when it answered and has one.
    public var daemonProblem: String?

    /// Below this, a journal entry of a large subtask (6 MiB at worst) may not fit.
    public static let lowFreeBytes: Int64 = 8 * 1_048_576

    public init(path: String, freeBytes: Int64?, readOnly: Bool?, problem: String? = nil, daemonProblem: String? = nil) {
        self.path = path
        self.freeBytes = freeBytes
        self.readOnly = readOnly
        self.problem = problem
        self.daemonProblem = daemonProblem
    }

    /// What an operator should do, if anything.
    public var advice: [String] {
        var lines: [String] = []
        if let daemonProblem {
            lines.append("the daemon cannot write its state directory (\(daemonProblem)): new work is held (state-unwritable) until a write succeeds")
        }
        if readOnly == true {
            lines.append("the state directory \(path) is on a read-only file system: remount it read-write")
        } else if let freeBytes, freeBytes < StateDirectoryCheck.lowFreeBytes {
            lines.append(
                "the state directory \(path) has \(freeBytes) bytes free: free space, or a large subtask cannot be journaled and new work is held")
        }
        if let problem { lines.append("the state directory \(path) cannot be examined: \(problem)") }
        return lines
    }

    public var json: JSONValue {
        var object = JSONObject([("path", .string(path))])
        object["freeBytes"] = freeBytes.map { .int($0) } ?? .null
        object["readOnly"] = readOnly.map { .bool($0) } ?? .null
        object["persistenceProblem"] = .optional(daemonProblem)
        if let problem { object["problem"] = .string(problem) }
        return .object(object)
    }
}
