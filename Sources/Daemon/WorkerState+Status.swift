import Posix
import Systemd
import WorkerCore

/// The status view: the snapshot `status` shows and the line systemd's STATUS= carries.
extension WorkerState {
    /// Everything `status` shows, as of now.
    func statusSnapshot() -> StatusSnapshot {
        let monotonicNow = clock.monotonicMs()
        let (policy, sources) = effectivePolicy
        let paths = start.paths
        return StatusSnapshot(
            nowMs: clock.wallMs(), agentID: agentID,
            daemon: StatusSnapshot.Daemon(
                version: workerVersion, pid: Int64(getpidValue()), startedAtMs: start.startedAtMs,
                configPath: paths.configPath, stateDirectory: paths.stateDirectory,
                controlSocket: paths.controlSocket, persistenceProblem: persistenceProblem,
                configReload: reports.configReload, identityProblem: start.identityProblem),
            mode: modeState, runtime: runtime,
            network: reports.path.map { StatusSnapshot.Network(path: $0, sinceMs: reports.pathSinceMs) },
            lastHook: reports.lastHook.map {
                StatusSnapshot.Hook(name: $0.name, outcome: $0.outcome.description, succeeded: $0.outcome.succeeded, timeMs: $0.timeMs)
            },
            host: reports.host, hostHold: reports.host.hold(onMetered: config.network.onMetered),
            power: StatusSnapshot.Power(
                telemetry: power.reading?.telemetry, ageMs: monotonicNow - power.freshReadAtMs, decision: power.decision,
                monotonicNowMs: monotonicNow, chargeGateBlocked: power.chargeGate.isBlocked, held: power.holdCounters, reads: power.reads),
            policy: policy, policySources: sources,
            coordinatorURL: config.coordinator.url, coordinator: coordinator.status, conduct: coordinator.conduct,
            bluetooth: reports.bluetooth, bluetoothConfiguredAdapter: config.bluetooth.adapter, bluetoothMaxClients: config.bluetooth.maxClients,
            backend: StatusSnapshot.Backend(
                kind: config.backend.kind.rawValue, url: config.backend.url, model: activeModel,
                modelState: model.probe?.state, detail: model.probe?.detail, checkedAtMs: model.probe?.atMs,
                configuredModel: config.backend.model, switchedModel: model.switched, modelSwitch: model.switchStatus),
            activeRuntimes: Set(Mode.allCases.filter { runtimeActive($0) }),
            recovered: start.recovered.map {
                StatusSnapshot.RecoveredFile(file: $0.file, movedTo: $0.movedTo, problem: $0.problem, timeMs: $0.timeMs)
            },
            eventCount: events.log.events.count, lastEventSeq: events.log.nextSeq - 1, counters: coordinator.counters, execution: execution)
    }

    /// Persisting failed (disk full, read-only): shown in status until a write succeeds.
    private var persistenceProblem: String? { writer.problem }

    /// One line for systemd's STATUS= and the first line of `status`.
    public func statusLine() -> String { StatusReport(statusSnapshot()).summary }

    func updateServiceStatus() {
        wakeRuntimeWaiters()
        let line = statusLine()
        if line != lastStatusLine {
            lastStatusLine = line
            ServiceManager.notify("STATUS=" + line)
        }
    }

    public func statusJSON() -> JSONValue { StatusReport(statusSnapshot()).json }
}
