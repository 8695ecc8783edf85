import Logging
import WorkerCore

/// Config reloads (SIGHUP, `systemctl reload`): what applies live, what waits for a restart.
extension WorkerState {
    /// A reload with a valid file: applies what can change live (the power policy is
    /// decided again at once, the log level, the coordinator's intervals), keeps the
    /// rest as it runs, and records which keys wait for a restart.
    @discardableResult
    public func reload(file: WorkerConfig) -> ConfigReloadStatus {
        let plan = ConfigReloadPlan.plan(running: config, file: file, coordinatorRunning: runtimeActive(.on))
        config = plan.applied
        if plan.appliedKeys.contains("log.level"), let level = LogLevel(name: config.log.level.rawValue) {
            logger.sharedLevel?.set(level)
        }
        let status = ConfigReloadStatus(
            atMs: clock.wallMs(), outcome: plan.appliedKeys.isEmpty ? .unchanged : .applied,
            appliedKeys: plan.appliedKeys, restartKeys: plan.restartKeys)
        reports.configReload = status
        record(EventDraft(kind: .configReloaded, reason: status.line))
        logger.notice(
            status.line,
            [("event", EventKind.configReloaded.rawValue)]
                + (plan.restartKeys.isEmpty ? [] : [("needs_restart", plan.restartKeys.joined(separator: ","))]))
        // From the raw reading, so a telemetry.deviceType taken out of the file is undone.
        if let base = power.rawReading ?? power.reading { decideAgain(on: base) }
        if plan.restartsBluetooth { signals.bluetoothRestart.set(true) }
        // A reload is also how an operator says "I built the sandbox image": look again.
        signals.sandboxCheckRequested.set(true)
        updateServiceStatus()
        return status
    }

    /// A reload whose file is unreadable or invalid: the running config is kept, and
    /// the reason stays in status until a later reload succeeds.
    @discardableResult
    public func refuseReload(problems: [String]) -> ConfigReloadStatus {
        let status = ConfigReloadStatus(
            atMs: clock.wallMs(), outcome: .refused, problems: problems,
            restartKeys: reports.configReload?.restartKeys ?? [])
        reports.configReload = status
        record(EventDraft(kind: .configRefused, reason: status.line))
        logger.error(status.line, [("event", EventKind.configRefused.rawValue)])
        updateServiceStatus()
        return status
    }
}
