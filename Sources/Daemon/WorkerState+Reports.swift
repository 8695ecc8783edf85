import Logging
import Posix
import WorkerCore

/// What the Bluetooth peripheral, the path monitor and its hook report, kept for status.
extension WorkerState {
    /// The peripheral's latest state, for status.
    public func updateBluetooth(_ status: BluetoothStatus) {
        if status.state != reports.bluetooth.state || status.problem != reports.bluetooth.problem {
            if let problem = status.problem, status.state == .failed || status.state == .waiting {
                logger.info("bluetooth \(status.state.rawValue): \(problem)")
            }
        }
        reports.bluetooth = status
        updateServiceStatus()
    }

    /// The status characteristic's values (protocol-bluetooth §1): `modelState` and `batteryPct`.
    public func bluetoothStatusValues() -> (modelState: String, batteryPct: Int?) {
        (model.probe?.state ?? "idle", power.reading?.telemetry.batteryPct)
    }

    /// The path monitor's latest evaluation, for status.
    public func updatePath(_ status: PathStatus) {
        if reports.path?.satisfied != status.satisfied { reports.pathSinceMs = clock.wallMs() }
        if reports.path != status {
            logger.info("network path \(status.satisfied ? "satisfied" : "unsatisfied"): \(status.reason)")
            reports.path = status
            updateServiceStatus()
        }
    }

    /// Records how an operator hook ended (the event `hook-ran`).
    public func recordHook(name: String, outcome: HookOutcome) {
        reports.lastHook = (name, outcome, clock.wallMs())
        record(EventDraft(kind: .hookRan, reason: "\(name) \(outcome)"))
    }
}
