import Testing
@testable import WorkerCore

/// The shape of a JSON value as docs/reference/json-output.md documents it.
indirect enum Shape: Sendable {
    case string, int, bool, any
    case nullable(Shape)
    /// Exactly these keys: every `required` one, any of `optional`, nothing else.
    case object(required: [String: Shape], optional: [String: Shape] = [:])
    case array(of: Shape)
    /// Keys chosen by the data (`policy`, `held`), each value of this shape.
    case map(of: Shape)

    /// What does not match, one line per problem, with its JSON path.
    func problems(_ value: JSONValue, at path: String = "$") -> [String] {
        switch (self, value) {
        case (.any, _), (.string, .string), (.int, .int), (.bool, .bool), (.nullable, .null): return []
        case (.nullable(let inner), _): return inner.problems(value, at: path)
        case (.array(let element), .array(let items)):
            return items.enumerated().flatMap { element.problems($1, at: "\(path)[\($0)]") }
        case (.map(let member), .object(let object)):
            return object.members.flatMap { member.problems($0.value, at: "\(path).\($0.key)") }
        case (.object(let required, let optional), .object(let object)):
            var problems: [String] = []
            for (key, shape) in required.sorted(by: { $0.key < $1.key }) {
                if let member = object[key] {
                    problems += shape.problems(member, at: "\(path).\(key)")
                } else {
                    problems.append("\(path).\(key) is missing")
                }
            }
            for member in object.members where required[member.key] == nil {
                if let shape = optional[member.key] {
                    problems += shape.problems(member.value, at: "\(path).\(member.key)")
                } else {
                    problems.append("\(path).\(member.key) is not documented")
                }
            }
            return problems
        default:
            return ["\(path) is \(value.serialized), expected \(self)"]
        }
    }
}

/// docs/reference/json-output.md: `status --json`. Tests/DaemonProcessTests and the
/// shell suites read these keys; a change here is a change of the documented interface.
enum DocumentedStatus {
    static let runtime = Shape.object(required: ["state": .string, "reason": .string])
    static let mode = Shape.object(
        required: ["mode": .string, "since": .string, "sinceMs": .int, "reason": .string, "downgraded": .bool, "runtime": runtime],
        optional: ["networkRestoredAt": .string, "networkRestoredNotice": .string])
    static let hook = Shape.object(required: ["name": .string, "outcome": .string, "ok": .bool, "time": .string])
    static let network = Shape.object(
        required: ["state": .string, "reason": .string],
        optional: ["satisfied": .bool, "interface": .nullable(.string), "since": .string, "lastHook": hook])
    static let decision = Shape.object(
        required: ["allowed": .bool, "reason": .string, "forMs": .int],
        optional: ["explanation": .string, "waitingFor": .string, "resumeInMs": .int])
    static let power = Shape.object(
        required: ["telemetry": .nullable(.map(of: .any)), "chargeGate": .string, "held": .map(of: .int), "reads": .int],
        optional: ["ageMs": .int, "decision": decision])
    static let policy = Shape.map(of: .object(required: ["value": .any, "source": .string]))
    /// What the coordinator's behaviour monitor has seen of this worker: always there.
    static let conduct = Shape.object(required: [
        "hold": .nullable(.string), "holdUntil": .nullable(.string), "consecutiveLocalFailures": .int, "released": .int,
        "registrationsLastHour": .int, "resultsLastHour": .int, "monitorFindings": .array(of: .string),
    ])
    static let coordinator = Shape.object(
        required: ["url": .nullable(.string), "active": .bool, "conduct": conduct],
        optional: [
            "state": .string, "registered": .bool, "lastHeartbeat": .nullable(.string), "lastHeartbeatLatencyMs": .nullable(.int),
            "consecutiveFailures": .int, "heartbeatFailures": .int, "backoffMs": .nullable(.int), "lastError": .nullable(.string),
            "rejection": .nullable(.string), "retryAt": .nullable(.string), "deferredReason": .nullable(.string),
            "subtasksDone": .int, "subtasksFailed": .int, "outboxDepth": .int, "running": .nullable(.string),
        ])
    /// While the coordinator session runs, every key of its status is there.
    static let coordinatorRunning = Shape.object(
        required: [
            "url": .nullable(.string), "active": .bool, "conduct": conduct, "registered": .bool, "lastHeartbeat": .nullable(.string),
            "lastHeartbeatLatencyMs": .nullable(.int), "consecutiveFailures": .int, "heartbeatFailures": .int,
            "backoffMs": .nullable(.int), "lastError": .nullable(.string), "rejection": .nullable(.string),
            "retryAt": .nullable(.string), "deferredReason": .nullable(.string), "subtasksDone": .int,
            "subtasksFailed": .int, "outboxDepth": .int, "running": .nullable(.string),
        ])
    static let backend = Shape.object(
        required: ["kind": .string, "url": .string, "model": .string, "modelState": .string, "detail": .string],
        optional: [
            "checkedAt": .string, "modelSource": .string, "configuredModel": .string, "switchedAt": .string,
            "modelSwitch": .nullable(
                .object(required: [
                    "phase": .string, "inProgress": .bool, "model": .nullable(.string),
                    "rolloutId": .nullable(.string), "message": .string,
                    "progressPct": .nullable(.any), "since": .string,
                ])),
        ])
    static let bluetooth = Shape.object(required: [
        "active": .bool, "state": .string, "adapter": .nullable(.string), "address": .nullable(.string), "localName": .string,
        "applicationRegistered": .bool, "advertising": .bool, "problem": .nullable(.string),
        "clients": .array(of: .object(required: ["address": .string, "mtu": .nullable(.int)])),
        "requestsServed": .int, "requestsFailed": .int, "requestsRejected": .int, "requestsCancelled": .int, "bytesNotified": .int,
        "clientsRefused": .int, "queued": .int,
        "clientsNotAllowed": .int, "clientsEvicted": .int, "clientsCooledDown": .int, "rejectionsDropped": .int,
        "registrations": .int, "configuredAdapter": .nullable(.string), "maxClients": .int,
        "pacing": .string, "attBearers": .nullable(.int), "pairingAgent": .string, "pairingAgentRegistered": .bool,
        "pairingAgentReason": .string, "pairingsAccepted": .int, "pairingsRefused": .int,
        "agentBondsRemoved": .int,
    ])
    static let configReload = Shape.object(required: [
        "at": .string, "outcome": .string, "problems": .array(of: .string), "applied": .array(of: .string), "needsRestart": .array(of: .string),
    ])
    static let daemon = Shape.object(required: [
        "version": .string, "pid": .int, "startedAt": .string, "uptimeMs": .int, "config": .string, "stateDirectory": .string,
        "controlSocket": .string, "persistenceProblem": .nullable(.string), "configReload": .nullable(configReload),
        "identityProblem": .nullable(.string),
    ])
    static let presence = Shape.object(required: ["state": .string], optional: ["reason": .string])
    static let host = Shape.object(
        required: ["hold": .nullable(.object(required: ["reason": .string, "explanation": .string]))],
        optional: [
            "systemBus": .string,
            "logind": .object(
                required: ["state": .string, "inhibitor": .string, "sleep": .string, "lastResume": .nullable(.string)],
                optional: ["reason": .string]),
            "networkManager": .object(required: ["state": .string, "metered": .nullable(.string)], optional: ["reason": .string]),
            "powerProfiles": .object(required: ["state": .string, "activeProfile": .nullable(.string)], optional: ["reason": .string]),
        ])
    static let status = Shape.object(required: [
        "summary": .string, "agentId": .string, "mode": mode, "network": network, "power": power, "policy": policy,
        "coordinator": coordinator, "backend": backend, "bluetooth": bluetooth, "daemon": daemon, "host": host,
        "recoveredStateFiles": .array(of: .object(required: ["file": .string, "movedTo": .string, "problem": .string, "time": .string])),
        "events": .object(required: ["count": .int, "lastSeq": .int]),
        "counters": counters, "execution": execution,
    ])
    static let execution = Shape.object(
        required: [
            "mode": .string, "answering": .string, "sandboxMode": .string, "why": .string, "engine": .string, "image": .string, "sandbox": .string,
        ],
        optional: ["sandboxDetail": .string, "checkedAt": .string])
    static let counters = Shape.object(required: [
        "subtasksDone": .int, "subtasksFailed": .int, "subtasksReleased": .map(of: .int), "heartbeatsSent": .int, "heartbeatsFailed": .int,
    ])
}

/// `status` rendered from snapshots of the daemon's states, without a daemon.
@Suite struct StatusReportTests {
    static let started: Int64 = 1_700_000_000_000
    static let now = started + 90_000

    /// A daemon just started in a fresh state directory: mode off, nothing reported yet.
    static func fresh() -> StatusSnapshot {
        StatusSnapshot(
            nowMs: now, agentID: "laptop-0123456789ab",
            daemon: .init(
                version: "0.1.0", pid: 4242, startedAtMs: started, configPath: "/etc/edgecoder-worker/config.json",
                stateDirectory: "/var/lib/edgecoder-worker", controlSocket: "/run/edgecoder-worker/control.sock"),
            mode: .fresh(nowMs: started), runtime: RuntimeState(phase: .idle, reason: "mode off"),
            power: .init(telemetry: nil, ageMs: 0, decision: nil, monotonicNowMs: 50_000, chargeGateBlocked: false, held: HoldCounters()),
            policy: PowerPolicy(), bluetoothMaxClients: 1,
            backend: .init(kind: "ollama", url: "http://127.0.0.1:11434", model: "qwen2.5-coder:1.5b"),
            eventCount: 1, lastEventSeq: 1)
    }

    static func running(_ mode: Mode) -> StatusSnapshot {
        var s = fresh()
        s.mode = ModeState(mode: mode, sinceMs: started + 1_000, reason: "set by alice")
        s.runtime = RuntimeState(phase: .running, reason: "mode \(mode.rawValue)")
        s.activeRuntimes = [mode]
        s.network = .init(path: PathStatus(satisfied: true, interface: "wlan0", reason: "default route via wlan0"), sinceMs: started + 500)
        s.power.telemetry = PowerTelemetry(onExternalPower: true, batteryPct: 80, cpuUsagePct: 12.5, hasSystemBattery: true, updatedAtMs: now - 2_000)
        s.power.ageMs = 2_000
        s.power.decision = PowerDecision(reason: nil, sinceMs: 10_000)
        s.backend.modelState = "ready"
        s.backend.detail = "tiny is loaded"
        s.backend.checkedAtMs = now - 5_000
        return s
    }

    static func registered() -> StatusSnapshot {
        var s = running(.on)
        s.coordinatorURL = "https://coordinator.example"
        var coordinator = CoordinatorStatus()
        coordinator.registered = true
        coordinator.lastHeartbeatAtMs = now - 1_000
        coordinator.lastHeartbeatLatencyMs = 35
        coordinator.subtasksDone = 3
        s.coordinator = coordinator
        return s
    }

    static func rejected() -> StatusSnapshot {
        var s = registered()
        s.coordinator?.registered = false
        s.coordinator?.rejection = "agent_blacklisted"
        s.coordinator?.retryAtMs = now + 300_000
        s.coordinator?.consecutiveFailures = 2
        s.coordinator?.backoffMs = 4_000
        s.coordinator?.lastError = "register: could-not-connect: refused"
        return s
    }

    static func bluetoothWithClients() -> StatusSnapshot {
        var s = running(.bluetooth)
        s.bluetooth.state = .advertising
        s.bluetooth.adapter = "hci0"
        s.bluetooth.address = "00:AA:01:00:00:10"
        s.bluetooth.localName = "EdgeCoder-laptop-012345678"
        s.bluetooth.applicationRegistered = true
        s.bluetooth.advertising = true
        s.bluetooth.clients = [.init(address: "00:AA:01:01:00:01", mtu: 517), .init(address: "00:AA:01:02:00:02", mtu: nil)]
        s.bluetooth.requestsServed = 7
        s.bluetooth.queued = 1
        s.bluetooth.registrations = 1
        s.bluetoothConfiguredAdapter = "hci0"
        s.bluetoothMaxClients = 2
        return s
    }

    static func heldByPolicy() -> StatusSnapshot {
        var s = registered()
        s.power.decision = PowerDecision(reason: .thermal, sinceMs: 20_000, clearSinceMs: 40_000, waitingFor: .dwellUntil(70_000))
        s.power.held.record(.thermal, count: 4)
        s.policy.maxThermalState = .fair
        s.policySources = ["maxThermalState": .host]
        return s
    }

    static func chargeGateBlocked() -> StatusSnapshot {
        var s = running(.on)
        s.runtime = RuntimeState(phase: .blocked, reason: "not-charging: \(chargeGateMessage)")
        s.activeRuntimes = []
        s.power.chargeGateBlocked = true
        s.power.telemetry?.onExternalPower = false
        return s
    }

    static func recoveredFiles() -> StatusSnapshot {
        var s = fresh()
        s.recovered = [.init(file: "mode.json", movedTo: "mode.json.corrupt-1700000000000", problem: "is not valid JSON", timeMs: started)]
        return s
    }

    static func persistenceProblem() -> StatusSnapshot {
        var s = running(.bluetooth)
        s.daemon.persistenceProblem = "cannot write the state directory /var/lib/edgecoder-worker: ENOSPC"
        return s
    }

    static func restoredAfterDowngrade() -> StatusSnapshot {
        var s = running(.bluetooth)
        s.mode = ModeState(
            mode: .bluetooth, sinceMs: started + 2_000, reason: "downgrade: network lost", downgraded: true, restoredAtMs: now - 10_000)
        s.lastHook = .init(name: "networkRestored", outcome: "exited 0", succeeded: true, timeMs: now - 9_000)
        return s
    }

    static let states: [(String, StatusSnapshot)] = [
        ("off", fresh()), ("on registered", registered()), ("on rejected", rejected()),
        ("bluetooth with clients", bluetoothWithClients()), ("held by policy", heldByPolicy()),
        ("charge gate blocked", chargeGateBlocked()), ("recovered files", recoveredFiles()),
        ("persistence problem", persistenceProblem()), ("network restored", restoredAfterDowngrade()),
    ]

    @Test(arguments: states)
    func everyDocumentedKeyIsThereWithItsTypeAndNoOther(_ state: String, _ snapshot: StatusSnapshot) {
        let json = StatusReport(snapshot).json
        #expect(DocumentedStatus.status.problems(json) == [], "\(state)")
        #expect(json["summary"]?.stringValue == StatusReport(snapshot).summary)
    }

    @Test func aRefusedReloadAHostHoldAndKeysAwaitingARestartAreInTheSummaryAndTheJSON() {
        var snapshot = Self.fresh()
        snapshot.daemon.configReload = ConfigReloadStatus(
            atMs: Self.now, outcome: .refused, problems: ["x.json: typo: unknown key"],
            restartKeys: ["bluetooth.maxClients"])
        var host = HostServices()
        host.busConnected = true
        host.networkManager = .present
        host.meteredRaw = 1
        snapshot.host = host
        snapshot.hostHold = .metered
        let report = StatusReport(snapshot)
        #expect(report.summary == "mode off, idle; new work held: metered; config reload refused; restart to apply bluetooth.maxClients")
        let json = report.json
        #expect(DocumentedStatus.status.problems(json) == [])
        #expect(json["daemon"]?["configReload"]?["problems"] == ["x.json: typo: unknown key"])
        #expect(json["host"]?["hold"]?["reason"] == "metered")
        #expect(json["host"]?["networkManager"]?["metered"] == "yes")
    }

    @Test func offShowsNothingRunningAndNothingReportedYet() {
        let report = StatusReport(Self.fresh())
        let json = report.json
        #expect(report.summary == "mode off, idle")
        #expect(json["mode"]?["runtime"] == ["state": "idle", "reason": "mode off"])
        #expect(json["network"] == ["state": "unknown", "reason": "the path monitor has not reported yet"])
        #expect(json["power"]?["telemetry"] == .null)
        #expect(json["power"]?["ageMs"] == nil && json["power"]?["decision"] == nil)
        #expect(json["power"]?["chargeGate"] == "open")
        #expect(json["power"]?["held"]?.objectValue?.keys == HoldReason.allCases.map(\.rawValue) + LocalHoldReason.allCases.map(\.rawValue))
        #expect(
            json["coordinator"] == [
                "state": "not running", "url": .null, "active": false,
                "conduct": [
                    "hold": .null, "holdUntil": .null, "consecutiveLocalFailures": 0, "released": 0, "registrationsLastHour": 0,
                    "resultsLastHour": 0, "monitorFindings": [],
                ],
            ])
        #expect(json["bluetooth"]?["active"] == false)
        #expect(json["bluetooth"]?["state"] == "inactive")
        #expect(json["backend"]?["modelState"] == "idle")
        #expect(json["backend"]?["detail"] == "not probed yet")
        #expect(json["backend"]?["checkedAt"] == nil)
        #expect(json["daemon"]?["uptimeMs"] == 90_000)
        #expect(json["daemon"]?["startedAt"] == "2023-11-14T22:13:20.000Z")
        #expect(json["daemon"]?["persistenceProblem"] == .null)
        #expect(json["events"] == ["count": 1, "lastSeq": 1])
        #expect(json["policy"]?["minBatteryPct"] == ["value": 20, "source": "default"])
    }

    @Test func onRegisteredShowsTheCoordinatorSessionAndTheActiveRuntime() {
        let report = StatusReport(Self.registered())
        let json = report.json
        #expect(report.summary == "mode on, running; registered; network via wlan0")
        #expect(DocumentedStatus.coordinatorRunning.problems(json["coordinator"]!) == [])
        #expect(json["coordinator"]?["active"] == true)
        #expect(json["coordinator"]?["url"] == "https://coordinator.example")
        #expect(json["coordinator"]?["registered"] == true)
        #expect(json["coordinator"]?["subtasksDone"] == 3)
        #expect(json["bluetooth"]?["active"] == false, "only the selected mode's runtime is active")
        #expect(json["network"]?["state"] == "satisfied")
        #expect(json["network"]?["interface"] == "wlan0")
        #expect(json["power"]?["ageMs"] == 2_000)
        #expect(json["power"]?["decision"]?["allowed"] == true)
        #expect(json["power"]?["decision"]?["forMs"] == 40_000, "measured on the monotonic clock")
        #expect(json["power"]?["telemetry"]?["batteryPct"] == 80)
        #expect(json["backend"]?["modelState"] == "ready")
        #expect(json["backend"]?["checkedAt"] != nil)
    }

    @Test func aRejectionIsTheSummarysNewsWithItsFailures() {
        let report = StatusReport(Self.rejected())
        #expect(report.summary == "mode on, running; coordinator rejected: agent_blacklisted (2 failures); network via wlan0")
        let coordinator = report.json["coordinator"]
        #expect(coordinator?["rejection"] == "agent_blacklisted")
        #expect(coordinator?["retryAt"]?.stringValue?.hasSuffix("Z") == true)
        #expect(coordinator?["backoffMs"] == 4_000)
        #expect(coordinator?["lastError"] == "register: could-not-connect: refused")
    }

    @Test func bluetoothShowsItsClientsAndConfiguration() {
        let report = StatusReport(Self.bluetoothWithClients())
        #expect(report.summary == "mode bluetooth, running; network via wlan0; bluetooth advertising on hci0, 2 client(s)")
        let bluetooth = report.json["bluetooth"]
        #expect(bluetooth?["active"] == true)
        #expect(bluetooth?["clients"] == [["address": "00:AA:01:01:00:01", "mtu": 517], ["address": "00:AA:01:02:00:02", "mtu": .null]])
        #expect(bluetooth?["configuredAdapter"] == "hci0")
        #expect(bluetooth?["maxClients"] == 2)
        #expect(bluetooth?["requestsServed"] == 7)
        #expect(report.json["coordinator"]?["active"] == false)
    }

    @Test func aHoldSaysWhyWhatItWaitsForAndWhatItHeld() {
        let report = StatusReport(Self.heldByPolicy())
        #expect(report.summary == "mode on, running; new work held: thermal; registered; network via wlan0")
        let power = report.json["power"]
        #expect(power?["decision"]?["allowed"] == false)
        #expect(power?["decision"]?["reason"] == "thermal")
        #expect(power?["decision"]?["resumeInMs"] == 20_000)
        #expect(power?["held"]?["thermal"] == 4)
        #expect(report.json["policy"]?["maxThermalState"] == ["value": "fair", "source": "host"])
    }

    @Test func aClosedChargeGateBlocksTheRuntimeAndSaysHowToOpenIt() {
        let report = StatusReport(Self.chargeGateBlocked())
        #expect(report.summary == "mode on, blocked: not-charging: Runtime blocked: connect power to start.; network via wlan0")
        #expect(report.json["power"]?["chargeGate"] == "blocked: connect power to start")
        #expect(report.json["mode"]?["runtime"]?["state"] == "blocked")
        #expect(report.json["coordinator"]?["active"] == false)
    }

    @Test func recoveredStateFilesAreListedAndCounted() {
        let report = StatusReport(Self.recoveredFiles())
        #expect(report.summary == "mode off, idle; 1 state file(s) recovered")
        #expect(
            report.json["recoveredStateFiles"] == [
                [
                    "file": "mode.json", "movedTo": "mode.json.corrupt-1700000000000",
                    "problem": "is not valid JSON", "time": "2023-11-14T22:13:20.000Z",
                ]
            ])
    }

    @Test func aStateDirectoryThatCannotBeWrittenIsShownUntilFixed() {
        let report = StatusReport(Self.persistenceProblem())
        #expect(report.summary.hasSuffix("; state not writable"))
        #expect(report.json["daemon"]?["persistenceProblem"] == "cannot write the state directory /var/lib/edgecoder-worker: ENOSPC")
    }

    @Test func aRestoredNetworkAsksTheOperatorToRejoinAndShowsTheHook() {
        let report = StatusReport(Self.restoredAfterDowngrade())
        #expect(report.summary == "mode bluetooth, running; network via wlan0; network restored: run 'edgecoder-worker mode on' to rejoin")
        let mode = report.json["mode"]
        #expect(mode?["downgraded"] == true)
        #expect(mode?["networkRestoredAt"]?.stringValue?.hasSuffix("Z") == true)
        #expect(mode?["networkRestoredNotice"]?.stringValue?.contains("edgecoder-worker mode on") == true)
        #expect(
            report.json["network"]?["lastHook"] == [
                "name": "networkRestored", "outcome": "exited 0", "ok": true,
                "time": .string(formatUTC(milliseconds: Self.now - 9_000)),
            ])
    }

    @Test func aLostNetworkIsInTheSummary() {
        var snapshot = Self.running(.bluetooth)
        snapshot.network = .init(path: PathStatus(satisfied: false, interface: nil, reason: "no default route"), sinceMs: Self.now)
        let report = StatusReport(snapshot)
        #expect(report.summary == "mode bluetooth, running; network lost")
        #expect(report.json["network"]?["satisfied"] == false)
        #expect(report.json["network"]?["interface"] == .null)
    }

    @Test func modeJSONIsStatusModeAndTheModeCommandsAnswer() {
        let snapshot = Self.restoredAfterDowngrade()
        #expect(StatusReport.modeJSON(snapshot.mode, runtime: snapshot.runtime) == StatusReport(snapshot).json["mode"])
        let fresh = StatusReport.modeJSON(.fresh(nowMs: Self.started), runtime: RuntimeState(phase: .idle, reason: "mode off"))
        #expect(fresh.objectValue?.keys == ["mode", "since", "sinceMs", "reason", "downgraded", "runtime"])
    }

    @Test func theShapeCheckCatchesAMissingAWronglyTypedAndAnUndocumentedKey() {
        var json = StatusReport(Self.fresh()).json.objectValue!
        json["agentId"] = 7
        json["extra"] = true
        json["events"] = ["count": 1]
        let problems = DocumentedStatus.status.problems(.object(json))
        #expect(problems.contains { $0.hasPrefix("$.agentId is 7") })
        #expect(problems.contains("$.extra is not documented"))
        #expect(problems.contains("$.events.lastSeq is missing"))
    }
}
