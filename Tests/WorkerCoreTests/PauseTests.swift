import Testing
@testable import WorkerCore

/// `mode off --for DURATION`: the duration's grammar, and the pause in the mode rules.
@Suite struct PauseDurationParsing {
    @Test(
        arguments: [
            ("1s", 1_000), ("45s", 45_000), ("30m", 1_800_000), ("2h", 7_200_000), ("1h30m", 5_400_000),
            ("1d12h", 129_600_000), ("1d1h1m1s", 90_061_000), ("90m", 5_400_000), ("0h5m", 300_000), ("007m", 420_000),
            ("30d", 30 * 86_400_000), ("720h", 30 * 86_400_000), ("2592000s", 30 * 86_400_000),
        ] as [(String, Int64)])
    func readsWholeNumbersWithUnitsLargestFirst(text: String, ms: Int64) throws {
        #expect(try PauseDuration.parse(text).get() == ms)
    }

    @Test(arguments: [
        "", " ", "30", "m", "h30", "30 m", " 30m", "30m ", "30M", "1.5h", "-5m", "+5m", "5m-", "1m1h", "1h1h", "1s1m",
        "0s", "0h0m", "999ms", "1w", "1y", "٣m", "３m", "5m\n", "5m\u{0}", "1h30", "30m;rm -rf /", "m30", "hm",
        "30d1s", "31d", "721h", "2592001s", "9223372036854775807s", "99999999999999999999999d", String(repeating: "9", count: 10_000),
        String(repeating: "1h", count: 20),
    ])
    func refusesBrokenEmptyHugeAndHostileText(text: String) {
        guard case .failure(let error) = PauseDuration.parse(text) else {
            Issue.record("'\(text.debugDescription)' was read as a duration")
            return
        }
        #expect(!error.message.isEmpty)
        // The message never echoes control characters or more than a line of the input.
        #expect(!error.message.contains("\n") && !error.message.contains("\u{0}") && error.message.count < 400)
    }

    @Test func theMessagesSayWhatIsWrong() {
        #expect(PauseDuration.parse("").failureMessage?.contains("empty") == true)
        #expect(PauseDuration.parse("30").failureMessage?.contains("without a unit") == true)
        #expect(PauseDuration.parse("31d").failureMessage?.contains("longer than 30 days") == true)
        #expect(PauseDuration.parse("0s").failureMessage?.contains("shorter than 1s") == true)
        #expect(PauseDuration.parse("1m1h").failureMessage?.contains("larger one after a smaller") == true)
    }

    @Test(arguments: [0, 999, 1_000, 61_000, 5_400_000, 90_061_000, 30 * 86_400_000] as [Int64])
    func formatReadsBack(ms: Int64) throws {
        let text = PauseDuration.format(milliseconds: ms)
        if ms >= 1_000 { #expect(try PauseDuration.parse(text).get() == ms / 1_000 * 1_000) } else { #expect(text == "0s") }
    }
}

private extension Result where Failure == DurationError {
    var failureMessage: String? { if case .failure(let error) = self { return error.message }; return nil }
}

@Suite struct PauseDecisions {
    let now: Int64 = 1_800_000_000_000
    let hour: Int64 = 3_600_000
    func decide(_ request: ModeRequest, _ current: ModeState, at time: Int64? = nil, context: ModeContext? = nil) -> ModeDecision {
        ModeRules.decide(request, current: current, context: context ?? ModeContext(nowMs: time ?? now))
    }

    @Test(arguments: [Mode.on, .bluetooth])
    func aPauseGoesOffAndRemembersTheModeAndTheDeadline(from: Mode) {
        let decision = decide(.operatorPause(forMs: hour, by: "root"), ModeState(mode: from, sinceMs: 1, reason: "earlier"))
        #expect(decision.outcome == .changed)
        #expect(decision.state.mode == .off && decision.state.sinceMs == now)
        #expect(decision.state.pause == ModeState.Pause(resumeMode: from, untilMs: now + hour))
        #expect(decision.state.reason.hasPrefix("paused by root for 1h: back to \(from.rawValue) at "))
        #expect(decision.events.map(\.kind) == [.modeChange] && decision.events[0].from == from && decision.events[0].to == .off)
    }

    @Test func aSecondPauseMovesTheDeadlineAndKeepsTheModeToReturnTo() {
        let paused = decide(.operatorPause(forMs: hour, by: "root"), ModeState(mode: .on, sinceMs: 1, reason: "x")).state
        let again = decide(.operatorPause(forMs: 2 * hour, by: "root"), paused, at: now + 10)
        #expect(again.outcome == .changed && again.state.pause == ModeState.Pause(resumeMode: .on, untilMs: now + 10 + 2 * hour))
        #expect(again.state.sinceMs == now, "off since the first pause")
    }

    @Test func pausingWhileOffIsRefusedSayingWhy() {
        let off = ModeState(mode: .off, sinceMs: 1, reason: "x")
        let decision = decide(.operatorPause(forMs: hour, by: "root"), off)
        guard case .refused(let message) = decision.outcome else { Issue.record("not refused"); return }
        #expect(message.contains("already off") && decision.state == off && decision.events.map(\.kind) == [.modeRefused])
    }

    @Test(arguments: Mode.allCases)
    func anyLaterModeCancelsThePause(target: Mode) {
        let paused = decide(.operatorPause(forMs: hour, by: "root"), ModeState(mode: .bluetooth, sinceMs: 1, reason: "x")).state
        let decision = decide(.operatorSet(target, by: "root"), paused, at: now + 5)
        #expect(decision.outcome == .changed, "even 'mode off' ends the pause: off for good")
        #expect(decision.state.mode == target && decision.state.pause == nil)
    }

    @Test func thePauseEndsAtItsDeadlineAndNotBefore() {
        let paused = decide(.operatorPause(forMs: hour, by: "root"), ModeState(mode: .bluetooth, sinceMs: 1, reason: "x")).state
        #expect(decide(.pauseEnded, paused, at: now + hour - 1).outcome == .unchanged)
        let ended = decide(.pauseEnded, paused, at: now + hour)
        #expect(ended.outcome == .changed && ended.state.mode == .bluetooth && ended.state.pause == nil && ended.state.sinceMs == now + hour)
        #expect(ended.events == [EventDraft(kind: .modeChange, from: .off, to: .bluetooth, reason: "the pause ended: back to bluetooth")])
        // Long past (the daemon was stopped through the deadline): the same.
        #expect(decide(.pauseEnded, paused, at: now + 100 * hour).state.mode == .bluetooth)
        // Nothing to end.
        let plain = ModeState(mode: .on, sinceMs: 1, reason: "x")
        #expect(decide(.pauseEnded, plain).outcome == .unchanged && decide(.pauseEnded, plain).state == plain)
    }

    @Test func aPauseThatWouldReturnToOnWithThePlaceholderCoordinatorEndsInOffSayingWhy() {
        let paused = decide(.operatorPause(forMs: hour, by: "root"), ModeState(mode: .on, sinceMs: 1, reason: "x")).state
        let decision = decide(.pauseEnded, paused, context: ModeContext(nowMs: now + hour, coordinatorProblem: "placeholder"))
        guard case .refused = decision.outcome else { Issue.record("not refused"); return }
        #expect(decision.state.mode == .off && decision.state.pause == nil && decision.state.reason.contains("placeholder"))
    }

    @Test func theChargeGateDoesNotKeepThePauseGoing() {
        // The mode returns; the daemon keeps its runtime waiting for power, as after a restart.
        let paused = decide(.operatorPause(forMs: hour, by: "root"), ModeState(mode: .on, sinceMs: 1, reason: "x")).state
        let closed = ModeContext(runOnlyWhileCharging: true, onExternalPower: false, nowMs: now + hour)
        #expect(decide(.pauseEnded, paused, context: closed).state.mode == .on)
    }

    @Test func thePausePersistsInTheModeFile() throws {
        let paused = decide(.operatorPause(forMs: hour, by: "root"), ModeState(mode: .on, sinceMs: 1, reason: "x")).state
        #expect(ModeState.from(json: try JSON.parse(paused.json.serialized)) == paused)
        let plain = ModeState(mode: .on, sinceMs: 1, reason: "x")
        #expect(ModeState.from(json: try JSON.parse(plain.json.serialized)) == plain && !plain.json.serialized.contains("pause"))
    }

    @Test(arguments: [
        #"{"mode": "off", "sinceMs": 1, "reason": "r", "pause": {"resumeMode": "off", "untilMs": 5}}"#,
        #"{"mode": "on", "sinceMs": 1, "reason": "r", "pause": {"resumeMode": "on", "untilMs": 5}}"#,
        #"{"mode": "off", "sinceMs": 1, "reason": "r", "pause": {"resumeMode": "turbo", "untilMs": 5}}"#,
        #"{"mode": "off", "sinceMs": 1, "reason": "r", "pause": {"resumeMode": "on"}}"#,
        #"{"mode": "off", "sinceMs": 1, "reason": "r", "pause": {"resumeMode": "on", "untilMs": "soon"}}"#,
        #"{"mode": "off", "sinceMs": 1, "reason": "r", "pause": null}"#,
        #"{"mode": "off", "sinceMs": 1, "reason": "r", "pause": []}"#,
    ])
    func aBrokenPauseMakesTheModeFileUnusable(json: String) throws {
        // The file is moved aside and the daemon starts in off, as for any broken mode file.
        #expect(ModeState.from(json: try JSON.parse(Array(json.utf8))) == nil)
    }
}
