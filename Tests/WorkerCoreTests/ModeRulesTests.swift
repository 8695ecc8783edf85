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
        let decision = ModeRules.decide(.pathRestored(interface: "eth0"), current: state(.bluetooth, downgraded: true), context: ModeContext(nowMs: now))
        #expect(decision.state.mode == .bluetooth)
        #expect(decision.outcome == .unchanged)
        #expect(decision.events.map(\.kind) == [.networkRestored])
        // Chosen by the operator, not a downgrade: nothing to note.
        #expect(ModeRules.decide(.pathRestored(interface: "eth0"), current: state(.bluetooth), context: ModeContext(nowMs: now)).events.isEmpty)
    }

    @Test func choosingBluetoothExplicitlyEndsADowngrade() {
        let decision = ModeRules.decide(.operatorSet(.bluetooth, by: "root"), current: state(.bluetooth, downgraded: true), context: ModeContext(nowMs: now))
        #expect(decision.outcome == .changed)
        #expect(decision.state.downgraded == false)
    }

    @Test func runtimeOfAGatedModeIsBlockedWithTheReason() {
        let runtime = RuntimeState.of(state(.on), gateBlocked: true, runtimeAvailable: { _ in nil })
        #expect(runtime.phase == .blocked)
        #expect(runtime.reason.contains("connect power"))
        #expect(RuntimeState.of(state(.on), gateBlocked: false, runtimeAvailable: { _ in nil }).phase == .running)
        #expect(RuntimeState.of(state(.off), gateBlocked: true, runtimeAvailable: { _ in nil }).phase == .idle)
        #expect(RuntimeState.of(state(.bluetooth), gateBlocked: false, runtimeAvailable: { _ in "not built" }) == RuntimeState(phase: .blocked, reason: "not built"))
    }

    @Test func modeStateRoundTripsThroughJSON() {
        let original = ModeState(mode: .bluetooth, sinceMs: 42, reason: "downgrade: x", downgraded: true)
        #expect(ModeState.from(json: original.json) == original)
        #expect(ModeState.from(json: ["mode": "sideways", "sinceMs": 1, "reason": "x"]) == nil)
        #expect(ModeState.from(json: ["mode": "on"]) == nil)
    }
}

@Suite struct EventLogBounds {
    @Test func keepsOnlyTheNewestThousand() {
        var log = EventLog()
        for i in 0..<1_250 { log.append(EventDraft(kind: .modeChange, from: .off, to: .on, reason: "n\(i)"), timeMs: Int64(i)) }
        #expect(log.events.count == 1_000)
        #expect(log.events.first?.reason == "n250")
        #expect(log.events.last?.reason == "n1249")
        #expect(log.events.last?.seq == 1_250)
        #expect(log.nextSeq == 1_251)
    }

    @Test func sequenceNumbersSurviveAReload() throws {
        var log = EventLog(capacity: 3)
        for i in 0..<5 { log.append(EventDraft(kind: .daemonStarted, reason: "\(i)"), timeMs: 7) }
        let reloaded = try #require(EventLog.from(json: try JSON.parse(log.json.serialized), capacity: 3))
        #expect(reloaded == log)
        var next = reloaded
        #expect(next.append(EventDraft(kind: .daemonStopped, reason: "x"), timeMs: 8).seq == 6)
    }

    @Test func afterReturnsOnlyNewerEvents() {
        var log = EventLog()
        for i in 0..<5 { log.append(EventDraft(kind: .modeChange, reason: "\(i)"), timeMs: 1) }
        #expect(log.after(3).map(\.seq) == [4, 5])
        #expect(log.after(99).isEmpty)
    }

    @Test func aDamagedEntryRejectsTheWholeFile() throws {
        let text = #"{"nextSeq": 3, "events": [{"seq":1,"timeMs":1,"kind":"mode-change","reason":"a"}, {"seq":2,"kind":"bogus"}]}"#
        #expect(EventLog.from(json: try JSON.parse(text)) == nil)
    }

    @Test func formatsTimesInUTC() {
        #expect(formatUTC(milliseconds: 0) == "1970-01-01T00:00:00.000Z")
        #expect(formatUTC(milliseconds: 951_782_400_123) == "2000-02-29T00:00:00.123Z")
        #expect(formatUTC(milliseconds: 1_798_551_352_120) == "2026-12-29T13:35:52.120Z")
        #expect(formatUTC(milliseconds: -1) == "1969-12-31T23:59:59.999Z")
        #expect(fileStampUTC(milliseconds: 951_782_400_123) == "20000229T000000Z")
    }
}

@Suite struct ControlProtocolParsing {
    func parse(_ text: String) -> Result<ControlRequest, ControlError> { ControlRequest.parse(ArraySlice(text.utf8)) }

    @Test func parsesEveryRequest() throws {
        #expect(try parse(#"{"cmd":"status"}"#).get() == .status)
        #expect(try parse(#"{"cmd":"mode"}"#).get() == .getMode)
        #expect(try parse(#"{"cmd":"mode","set":"bluetooth"}"#).get() == .setMode(.bluetooth))
        #expect(try parse(#"{"cmd":"events","follow":true,"limit":5}"#).get() == .events(follow: true, limit: 5))
        for request in [ControlRequest.status, .getMode, .setMode(.on), .events(follow: false, limit: nil), .ping, .policyShow,
                        .policyChange(.set(key: "minBatteryPct", value: 40)), .policyChange(.unset(key: "minBatteryPct"))] {
            #expect(try parse(request.json.serialized).get() == request)
        }
    }

    @Test(arguments: [
        ("garbage", ControlError.Code.badRequest),
        ("", .badRequest),
        ("[1]", .badRequest),
        (#"{"cmd": 5}"#, .badRequest),
        (#"{"cmd": "reboot"}"#, .unknownCommand),
        (#"{"cmd": "mode", "set": "turbo"}"#, .badRequest),
        (#"{"cmd": "status", "extra": 1}"#, .badRequest),
        (#"{"cmd": "events", "limit": 0}"#, .badRequest),
        (#"{"cmd": "events", "follow": "yes"}"#, .badRequest),
        (#"{"cmd": "policy", "set": "minBatteryPct"}"#, .badRequest),
        (#"{"cmd": "policy", "set": 5, "value": 1}"#, .badRequest),
        (#"{"cmd": "policy", "set": "a", "value": 1, "unset": "b"}"#, .badRequest),
    ])
    func answersBadRequestsWithACode(text: String, code: ControlError.Code) {
        switch parse(text) {
        case .success(let request): Issue.record("accepted \(request)")
        case .failure(let error): #expect(error.code == code)
        }
    }

    @Test func onlySettingTheModeOrThePolicyChangesTheDaemon() {
        #expect(ControlRequest.setMode(.on).changes)
        #expect(ControlRequest.policyChange(.unset(key: "x")).changes && !ControlRequest.policyShow.changes)
        #expect(!ControlRequest.getMode.changes && !ControlRequest.status.changes && !ControlRequest.events(follow: true, limit: nil).changes)
    }

    @Test(arguments: [
        (PeerCredentials(pid: 1, uid: 0, gid: 0, groups: []), ControlAccess.change),
        (PeerCredentials(pid: 1, uid: 990, gid: 990, groups: []), .change),
        (PeerCredentials(pid: 1, uid: 1000, gid: 1000, groups: [27, 500]), .read),
        (PeerCredentials(pid: 1, uid: 1000, gid: 500, groups: []), .read),
        (PeerCredentials(pid: 1, uid: 1000, gid: 1000, groups: [27]), .none),
    ])
    func peerCredentialsDecideAccess(peer: PeerCredentials, expected: ControlAccess) {
        #expect(ControlAccess.of(peer, daemonUID: 990, readGroupGID: 500) == expected)
    }

    @Test func withoutAReadGroupOnlyRootAndTheDaemonUserGetIn() {
        #expect(ControlAccess.of(PeerCredentials(pid: 1, uid: 1000, gid: 500, groups: [500]), daemonUID: 990, readGroupGID: nil) == .none)
    }
}
