import Logging
import Posix
import StateStore
import Tasks
import WorkerCore

/// Power: readings and the policy's decision on them, the charge gate, and every hold of
/// new work (the power policy's, the host's, the state directory's), counted.
extension WorkerState {
    var effectivePolicy: (policy: PowerPolicy, sources: [String: PolicySource]) { policyOverrides.apply(to: config) }

    /// In mode off nothing reads the host periodically; `status` asks for a read when the
    /// last one is older than `maxAgeMs` and waits up to `waitMs` for it, so what it shows
    /// is current without a timer waking the daemon all day.
    public func freshenIdleReading(maxAgeMs: Int64 = 1_000, waitMs: Int64 = 500) async {
        guard !signals.workingModeSelected.value else { return }
        let asked = clock.monotonicMs()
        guard asked - power.freshReadAtMs > maxAgeMs else { return }
        signals.freshRead.set(false)
        signals.powerRereadRequested.set(true)
        // The power monitor's read sets the signal (updateReading, fresh); the actor is
        // free meanwhile, so that read can land.
        let read = signals.freshRead
        _ = await race({ await read.wait(for: true) }, { try? await Task.sleep(nanoseconds: UInt64(waitMs) * 1_000_000) })
    }

    /// A new telemetry reading: decides the policy (hysteresis needs the previous
    /// decision and a monotonic clock) and opens the start-up charge gate when power returns.
    public func updateReading(_ raw: PowerReading, monotonicMs: Int64, fresh: Bool = false) {
        let update = power.read(
            raw, monotonicMs: monotonicMs, fresh: fresh, activeProfile: reports.host.activeProfile,
            deviceType: config.telemetry.deviceType?.deviceType, policy: effectivePolicy.policy, workingModeSelected: modeState.mode != .off)
        if fresh { signals.freshRead.set(true) }
        switch update.policy {
        case .resumed(let previous):
            record(EventDraft(kind: .powerResume, reason: "new work allowed again (was held: \(previous.reasonText))"))
            logger.notice("power policy: new work allowed again", [("event", EventKind.powerResume.rawValue), ("mode", modeState.mode.rawValue)])
        case .held(let decision):
            record(EventDraft(kind: .powerHold, reason: "new work held: \(decision.reasonText) (\(decision.reason?.explanation ?? ""))"))
            logger.notice(
                "power policy: holding new work: \(decision.reasonText)",
                [("event", EventKind.powerHold.rawValue), ("mode", modeState.mode.rawValue), ("hold_reason", decision.reasonText)])
        case nil:
            break
        }
        switch update.gate {
        case .blockedAtStart:
            logger.warning(
                "mode \(modeState.mode.rawValue) restored but the host is on battery and runOnlyWhileCharging is set: the runtime stays idle until power returns"
            )
        case .opened:
            logger.notice("external power connected: starting the \(modeState.mode.rawValue) runtime")
            record(
                EventDraft(kind: .powerResume, to: modeState.mode, reason: "external power connected: the \(modeState.mode.rawValue) runtime starts"))
        case nil:
            break
        }
        updateServiceStatus()
    }

    /// Decides again on the last reading (`base`) without reading the host: after a change
    /// of the power profile, the policy or the config. Dated no earlier than that reading.
    func decideAgain(on base: PowerReading) {
        updateReading(base, monotonicMs: max(power.readingAtMonotonicMs, clock.monotonicMs()))
    }

    /// Whether new work may be taken now (modes-and-power §3.2 "hold new work"): the one question the
    /// coordinator loop and the Bluetooth service ask before taking work. A held answer
    /// is counted under its reason (the assignment drop reasons).
    public func admitNewWork() -> HoldReason? {
        power.admitNewWork()
    }

    /// Whether the host holds new work (suspending, or a metered connection under
    /// `network.onMetered` hold): asked by the coordinator loop before each pull and by
    /// the Bluetooth service (`overNetwork` false: only a suspend holds it) before each
    /// request, each held one counted under its reason.
    public func hostHold(overNetwork: Bool = true) -> LocalHoldReason? {
        guard let reason = reports.host.hold(onMetered: config.network.onMetered, overNetwork: overNetwork) else { return nil }
        power.countHold(reason)
        return reason
    }

    /// What the host's services say now; a changed power profile is decided on at once.
    public func updateHost(_ new: HostServices) {
        let previous = reports.host
        reports.host = new
        if previous.activeProfile != new.activeProfile, let rawReading = power.rawReading {
            decideAgain(on: rawReading)
        }
        if previous.hold(onMetered: config.network.onMetered) != new.hold(onMetered: config.network.onMetered) { updateServiceStatus() }
    }

    /// Why new work is held now, without counting it as a held assignment (a model pull
    /// waiting for the policy asks this repeatedly).
    public var currentHold: HoldReason? { power.decision?.reason }

    /// What holds a coordinator's model switch now (the power policy, a metered
    /// connection under hold or a suspend, the charge gate), uncounted: the switch asks
    /// this repeatedly while it waits.
    public var modelSwitchHold: ModelSwitchHold? {
        .first(
            power: power.decision?.reason, host: reports.host.hold(onMetered: config.network.onMetered),
            chargeGateClosed: modeContext().chargeGateClosed)
    }

    /// Whether pulling must wait because the state directory cannot be written: a pulled
    /// subtask could not be journaled, and running it unjournaled could lose it. The
    /// problem while it lasts (until a write succeeds), each held pull counted.
    public func stateHold() -> String? {
        guard let problem = writer.problem else { return nil }
        power.countHold(.stateUnwritable)
        return problem
    }

    /// Counts a pull held for a local reason (the assignment drop reasons).
    public func countHold(_ reason: LocalHoldReason) { power.countHold(reason) }

    /// Changes a per-host policy key, decides again at once, and returns once the
    /// overrides are durable.
    public func changePolicy(_ change: PolicyOverrides.Change, by who: String) async -> Result<JSONValue, ControlError> {
        switch policyOverrides.applying(change, over: config) {
        case .failure(let problem):
            return .failure(ControlError(.badRequest, "policy \(problem.path): \(problem.message)"))
        case .success(let next):
            policyOverrides = next
            let text: String
            switch change {
            case .set(let key, let value): text = "\(key) set to \(value.serialized) by \(who)"
            case .unset(let key): text = "\(key) reset to the config's value by \(who)"
            }
            record(EventDraft(kind: .policyChanged, reason: text))
            logger.notice("policy: \(text)", [("event", EventKind.policyChanged.rawValue)])
            if let reading = power.reading { decideAgain(on: reading) }
            let answer = policyJSON()
            await persistDurably(WorkerStateFiles.policyFile, WorkerStateFiles.policyBytes(next))
            return .success(answer)
        }
    }

    public func policyJSON() -> JSONValue {
        let (policy, sources) = effectivePolicy
        return PowerPolicy.showJSON(policy, sources: sources)
    }

    /// The heartbeat's powerTelemetry: the latest reading, unknown values omitted.
    public func powerTelemetryJSON() -> JSONValue {
        power.reading?.telemetry.heartbeatJSON ?? .object(JSONObject())
    }
}
