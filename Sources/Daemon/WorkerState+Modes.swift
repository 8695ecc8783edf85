import Logging
import StateStore
import WorkerCore

/// The selected mode: requests through the one decision function, the pause, and which
/// mode's runtime should run.
extension WorkerState {
    func modeContext() -> ModeContext {
        ModeContext(
            runOnlyWhileCharging: effectivePolicy.policy.runOnlyWhileCharging,
            onExternalPower: power.reading?.telemetry.onExternalPower, nowMs: clock.wallMs(),
            coordinatorProblem: CoordinatorPlaceholder.problem(config.coordinator.url))
    }

    /// What a mode's runtime lacks (`ModeRuntimes`); until it has it, the mode stays
    /// selected and status says what is missing instead of pretending to run.
    func missingRuntime(_ mode: Mode) -> String? {
        ModeRuntimes.unavailable(mode, config: config)
    }

    var runtime: RuntimeState { RuntimeState.of(modeState, gateBlocked: power.chargeGate.isBlocked, runtimeAvailable: missingRuntime) }

    public var currentMode: Mode { modeState.mode }

    // MARK: Requests

    public struct ModeRequestResult: Sendable {
        public var outcome: ModeDecision.Outcome
        public var previous: Mode
        public var events: [WorkerEvent]
    }

    /// Applies a mode request through the one decision function, records, and returns
    /// once the new mode is durable (or its write failed: status then says so).
    @discardableResult
    public func request(_ request: ModeRequest) async -> ModeRequestResult {
        let previous = modeState
        let context = modeContext()
        let decision = ModeRules.decide(request, current: modeState, context: context)
        let now = clock.wallMs()
        let modeChanged = decision.state != modeState
        if modeChanged { modeState = decision.state }
        if decision.outcome == .changed {
            power.chargeGate.modeChanged(waitsForPower: request == .pauseEnded && modeState.mode != .off && context.chargeGateClosed)
        }
        if previous.pause != modeState.pause { signals.pauseChanged.set(true) }
        let events = decision.events.map { record($0, now: now) }
        updateServiceStatus()
        switch decision.outcome {
        case .changed:
            logger.notice(
                "mode \(previous.mode.rawValue) -> \(modeState.mode.rawValue): \(modeState.reason)",
                WorkerState.fields(events.last { $0.kind == .downgrade } ?? events.last, mode: modeState.mode))
        case .unchanged:
            for event in events where event.kind == .networkRestored { logger.notice(event.reason, WorkerState.fields(event, mode: modeState.mode)) }
        case .refused(let message):
            logger.warning(
                "refused mode \(requestedMode(request)?.rawValue ?? "?"): \(message)",
                WorkerState.fields(events.last, mode: modeState.mode))
        }
        // Every change to the actor's state is made above, before this suspension point;
        // another request may run meanwhile, and its newer mode supersedes this one.
        if modeChanged { await persistDurably(WorkerStateFiles.modeFile, WorkerStateFiles.modeBytes(modeState)) }
        return ModeRequestResult(outcome: decision.outcome, previous: previous.mode, events: events)
    }

    /// An event's keys as log metadata (journal fields EDGECODER_EVENT, _MODE, _FROM).
    static func fields(_ event: WorkerEvent?, mode: Mode) -> [(String, String)] {
        var fields: [(String, String)] = []
        if let event { fields.append(("event", event.kind.rawValue)) }
        fields.append(("mode", mode.rawValue))
        if let from = event?.from { fields.append(("from", from.rawValue)) }
        return fields
    }

    private func requestedMode(_ request: ModeRequest) -> Mode? {
        switch request {
        case .operatorSet(let mode, _): return mode
        case .operatorPause: return .off
        // The only refusal at a pause's end is mode on's (the placeholder coordinator).
        case .pauseEnded: return .on
        default: return nil
        }
    }

    /// How long until the current pause ends (ms, by the daemon's clock), or nil when there is none.
    public var pauseLeftMs: Int64? { modeState.pause.map { $0.untilMs - clock.wallMs() } }

    /// The pause timer's tick: returns to the paused mode once the deadline has passed.
    public func endPauseIfDue() async {
        guard let until = modeState.pause?.untilMs, clock.wallMs() >= until else { return }
        await request(.pauseEnded)
    }

    public func modeJSON() -> JSONValue { StatusReport.modeJSON(modeState, runtime: runtime) }

    // MARK: Mode runtimes

    /// Whether `mode`'s runtime should run now: selected, past the charge gate, configured.
    func runtimeActive(_ mode: Mode) -> Bool { mode != .off && modeState.mode == mode && runtime.phase == .running }

    func wakeRuntimeWaiters() {
        for mode in Mode.allCases {
            let signal = signals.runtime(for: mode), active = runtimeActive(mode)
            if signal.value != active { signal.set(active) }
        }
        let working = modeState.mode != .off
        if signals.workingModeSelected.value != working { signals.workingModeSelected.set(working) }
    }
}
