import Testing
@testable import WorkerCore

@Suite struct ModeDecisions {
    let now: Int64 = 1_800_000_000_000
    func state(_ mode: Mode, downgraded: Bool = false) -> ModeState {
        ModeState(mode: mode, sinceMs: 1, reason: "earlier", downgraded: downgraded)
    }

    @Test func freshInstallStartsOff() {
        #expect(ModeState.fresh(nowMs: now).mode == .off)
    }

    @Test(arguments: Mode.allCases, Mode.allCases)
    func operatorChangesAreRecordedWithOldAndNewMode(from: Mode, to: Mode) {
        let decision = ModeRules.decide(.operatorSet(to, by: "root"), current: state(from), context: ModeContext(nowMs: now))
        if from == to {
            #expect(decision.outcome == .unchanged)
            #expect(decision.events.isEmpty)
            #expect(decision.state == state(from))
        } else {
            #expect(decision.outcome == .changed)
            #expect(decision.state.mode == to)
            #expect(decision.state.sinceMs == now)
            #expect(decision.events == [EventDraft(kind: .modeChange, from: from, to: to, reason: "set by root")])
        }
    }

    @Test(arguments: [Mode.on, .bluetooth])
    func chargeGateRefusesWorkingModesOnBattery(target: Mode) {
        let context = ModeContext(runOnlyWhileCharging: true, onExternalPower: false, nowMs: now)
        let decision = ModeRules.decide(.operatorSet(target, by: "root"), current: state(.off), context: context)
        #expect(decision.outcome == .refused(message: "Runtime blocked: connect power to start."))
        #expect(decision.state == state(.off))
        #expect(decision.events.first?.kind == .modeRefused)
        #expect(decision.events.first?.to == target)
    }

    @Test func chargeGateNeverRefusesOff() {
        let context = ModeContext(runOnlyWhileCharging: true, onExternalPower: false, nowMs: now)
        #expect(ModeRules.decide(.operatorSet(.off, by: "root"), current: state(.on), context: context).outcome == .changed)
    }

    @Test(arguments: [(true, Bool?.some(true)), (false, Bool?.some(false)), (true, Bool?.none)])
    func chargeGateStaysOpenWhenPolicyOrPowerAllows(runOnlyWhileCharging: Bool, external: Bool?) {
        let context = ModeContext(runOnlyWhileCharging: runOnlyWhileCharging, onExternalPower: external, nowMs: now)
        #expect(ModeRules.decide(.operatorSet(.on, by: "root"), current: state(.off), context: context).outcome == .changed)
    }

    @Test func pathLossDowngradesOnlyFromOn() {
        let decision = ModeRules.decide(.pathLost(reason: "default route removed"), current: state(.on), context: ModeContext(nowMs: now))
        #expect(decision.state.mode == .bluetooth)
        #expect(decision.state.downgraded)
        #expect(decision.events == [EventDraft(kind: .downgrade, from: .on, to: .bluetooth, reason: "default route removed")])
        for mode in [Mode.off, .bluetooth] {
            let other = ModeRules.decide(.pathLost(reason: "x"), current: state(mode), context: ModeContext(nowMs: now))
            #expect(other.outcome == .unchanged && other.events.isEmpty && other.state.mode == mode)
        }
    }

    @Test func restoredPathIsNotedButNeverEscalates() {
        let decision = ModeRules.decide(
            .pathRestored(interface: "eth0"), current: state(.bluetooth, downgraded: true), context: ModeContext(nowMs: now))
        #expect(decision.state.mode == .bluetooth)
        #expect(decision.outcome == .unchanged)
        #expect(decision.events.map(\.kind) == [.networkRestored])
        // Chosen by the operator, not a downgrade: nothing to note.
        #expect(ModeRules.decide(.pathRestored(interface: "eth0"), current: state(.bluetooth), context: ModeContext(nowMs: now)).events.isEmpty)
    }

    @Test func choosingBluetoothExplicitlyEndsADowngrade() {
        let decision = ModeRules.decide(
            .operatorSet(.bluetooth, by: "root"), current: state(.bluetooth, downgraded: true), context: ModeContext(nowMs: now))
        #expect(decision.outcome == .changed)
        #expect(decision.state.downgraded == false)
    }

    @Test func runtimeOfAGatedModeIsBlockedWithTheReason() {
        let runtime = RuntimeState.of(state(.on), gateBlocked: true, runtimeAvailable: { _ in nil })
        #expect(runtime.phase == .blocked)
        #expect(runtime.reason.contains("connect power"))
        #expect(RuntimeState.of(state(.on), gateBlocked: false, runtimeAvailable: { _ in nil }).phase == .running)
        #expect(RuntimeState.of(state(.off), gateBlocked: true, runtimeAvailable: { _ in nil }).phase == .idle)
        #expect(
            RuntimeState.of(state(.bluetooth), gateBlocked: false, runtimeAvailable: { _ in "not built" })
                == RuntimeState(phase: .blocked, reason: "not built"))
    }

    @Test func modeStateRoundTripsThroughJSON() {
        let original = ModeState(mode: .bluetooth, sinceMs: 42, reason: "downgrade: x", downgraded: true)
        #expect(ModeState.from(json: original.json) == original)
        #expect(ModeState.from(json: ["mode": "sideways", "sinceMs": 1, "reason": "x"]) == nil)
        #expect(ModeState.from(json: ["mode": "on"]) == nil)
    }
}
