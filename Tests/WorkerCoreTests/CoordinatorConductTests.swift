import Testing
@testable import WorkerCore

/// The worker's mirror of the coordinator's behaviour monitor and the holds it decides.
struct CoordinatorConductTests {
    typealias Posted = CoordinatorConduct.Posted
    static let hour: Int64 = 3_600_000
    static let minute: Int64 = 60_000

    func posted(_ at: Int64, ok: Bool = true, output: String = "an answer of some length", ms: Int64 = 4_000) -> Posted {
        Posted(atMs: at, ok: ok, output: output, durationMs: ms)
    }

    // MARK: The rules

    @Test func threeFastFailuresWithTheSameEmptyOutputTripBothBanningRules() {
        // What the worker did with its model server down: three ok:false, output "", 1 ms.
        let results = (0..<3).map { posted(Int64($0), ok: false, output: "", ms: 1) }
        let found = MonitorRule.findings(results)
        #expect(found.contains(.suspiciouslyFast) && found.contains(.identicalOutputs))
        #expect(found.filter(\.bans).count == 2)
        #expect(MonitorRule.findings(Array(results.prefix(2))).isEmpty)
    }

    @Test func fastResultsAreForgivenWhenTheAverageIsASecondOrMore() {
        let results = [posted(0, ms: 100), posted(1, output: "b", ms: 100), posted(2, output: "c", ms: 100), posted(3, output: "d", ms: 4_000)]
        #expect(!MonitorRule.findings(results).contains(.suspiciouslyFast))
        #expect(MonitorRule.findings(Array(results.prefix(3))).contains(.suspiciouslyFast))
    }

    @Test func identicalOutputsCountOnlyInARow() {
        let alternating = ["x", "y", "x", "y", "x"].enumerated().map { posted(Int64($0.offset), output: $0.element) }
        #expect(!MonitorRule.findings(alternating).contains(.identicalOutputs))
        let run = ["x", "y", "y", "y"].enumerated().map { posted(Int64($0.offset), output: $0.element) }
        #expect(MonitorRule.findings(run).contains(.identicalOutputs))
    }

    @Test(arguments: [(4, 0, false), (5, 3, true), (5, 4, false), (6, 4, false), (6, 3, true)])
    func massEmptyNeedsFiveEmptyOverSixtyPercent(empty: Int, full: Int, flagged: Bool) {
        var results = (0..<empty).map { posted(Int64($0), ok: false, output: "", ms: 2_000 + Int64($0) * 100) }
        results += (0..<full).map { posted(Int64(100 + $0), output: "answer \($0) with text", ms: 3_000 + Int64($0) * 100) }
        #expect(MonitorRule.findings(results).contains(.massEmpty) == flagged)
    }

    @Test func aSuccessRateUnderFifteenPercentOverTenResultsCollapses() {
        let failures = (0..<9).map { posted(Int64($0), ok: false, output: "failure \($0) of a subtask", ms: 2_000 + Int64($0) * 97) }
        #expect(!MonitorRule.findings(failures).contains(.successCollapse))
        let ten = failures + [posted(99, ok: true, output: "finally one answer", ms: 5_000)]
        #expect(MonitorRule.findings(ten).contains(.successCollapse))
        let two = failures.dropLast() + [posted(98, output: "one answer here", ms: 4_000), posted(99, output: "two answers here", ms: 5_000)]
        #expect(!MonitorRule.findings(Array(two)).contains(.successCollapse), "2 of 10 is 20 %")
    }

    @Test func durationsTooEvenOverTenResultsLookRobotic() {
        let even = (0..<10).map { posted(Int64($0), output: "answer number \($0)", ms: 2_000 + Int64($0 % 2) * 40) }
        #expect(MonitorRule.findings(even).contains(.robotPrecision))
        let human = (0..<10).map { posted(Int64($0), output: "answer number \($0)", ms: 2_000 + Int64($0) * 300) }
        #expect(!MonitorRule.findings(human).contains(.robotPrecision))
        #expect(!MonitorRule.findings(Array(even.prefix(9))).contains(.robotPrecision))
    }

    @Test func tinySuccessfulOutputsOverFiveResultsAreFlagged() {
        let tiny = (0..<5).map { posted(Int64($0), output: "ok \($0)", ms: 2_000 + Int64($0) * 200) }
        #expect(MonitorRule.findings(tiny).contains(.tinyOutputs))
        #expect(!MonitorRule.findings(Array(tiny.prefix(4))).contains(.tinyOutputs))
        // Measured in UTF-16 code units, as the coordinator's JavaScript does: "😀" is 2.
        #expect(Posted(atMs: 0, ok: true, output: "😀é", durationMs: 1).outputLength == 3)
    }

    @Test func findingsOnlyCoverTheLastHour() {
        var conduct = CoordinatorConduct()
        for at in [Int64(0), 1, 2] { conduct.posting(posted(at, ok: false, output: "", ms: 1)) }
        #expect(conduct.findings(nowMs: 10).contains(.suspiciouslyFast))
        #expect(conduct.findings(nowMs: 3 + Self.hour).isEmpty)
        // What a fourth such post would do, without posting it.
        var fresh = CoordinatorConduct()
        fresh.posting(posted(0, ok: false, output: "", ms: 1))
        fresh.posting(posted(1, ok: false, output: "", ms: 1))
        #expect(fresh.findings(nowMs: 2).isEmpty)
        #expect(fresh.findings(nowMs: 2, adding: posted(2, ok: false, output: "", ms: 1)).contains(.identicalOutputs))
    }

    // MARK: Heartbeat gaps

    @Test func aGapHoldsPullsUntilItsEarlierHeartbeatLeavesTheWindow() {
        var conduct = CoordinatorConduct()
        conduct.heartbeatAccepted(atMs: 0)
        conduct.claimed(atMs: 10_000)
        conduct.heartbeatAccepted(atMs: 15_000)
        #expect(conduct.pullHold(nowMs: 16_000) == nil)
        // Mode off (or a suspend) for five minutes, then the next heartbeat.
        let back: Int64 = 15_000 + 5 * Self.minute
        conduct.heartbeatAccepted(atMs: back)
        // Not when the old claims leave: the next pull's claim would arm the rule again.
        let clears = 15_000 + Self.hour + Self.minute
        #expect(conduct.pullHold(nowMs: back) == .heartbeatGap(untilMs: clears))
        #expect(conduct.pullHold(nowMs: clears - 1)?.reason == .heartbeatGap)
        #expect(conduct.pullHold(nowMs: clears) == nil)
        #expect(conduct.findings(nowMs: back).contains(.heartbeatGap))
    }

    @Test func aGapWithoutClaimsHoldsPullsButLetsEveryEvaluationThrough() {
        var conduct = CoordinatorConduct()
        conduct.claimed(atMs: 0)
        conduct.heartbeatAccepted(atMs: Self.hour + 2 * Self.minute)
        let back = Self.hour + 20 * Self.minute
        conduct.heartbeatAccepted(atMs: back)
        #expect(conduct.pullHold(nowMs: back) == .heartbeatGap(untilMs: 2 * Self.hour + 3 * Self.minute))
        // No claim in the window: the coordinator's rule cannot fire, whatever is evaluated.
        #expect(conduct.findings(nowMs: back).isEmpty)
        conduct.registering(atMs: back)
        conduct.posting(posted(back))
        #expect(conduct.mayBeEvaluated(nowMs: back + 1))
    }

    @Test func aGapWhoseEarlierHeartbeatLeftTheWindowHoldsNothing() {
        var conduct = CoordinatorConduct()
        conduct.claimed(atMs: 0)
        conduct.heartbeatAccepted(atMs: 1_000)
        conduct.heartbeatAccepted(atMs: 3 * Self.hour)
        #expect(conduct.pullHold(nowMs: 3 * Self.hour) == nil)
    }

    @Test func aGapUnderFourMinutesOrWithTheGuardOffHoldsNothing() {
        var short = CoordinatorConduct()
        short.claimed(atMs: 0)
        short.heartbeatAccepted(atMs: 1_000)
        short.heartbeatAccepted(atMs: 1_000 + 4 * Self.minute)
        #expect(short.pullHold(nowMs: 1_000 + 4 * Self.minute) == nil)
        var off = CoordinatorConduct()
        off.claimed(atMs: 0)
        off.heartbeatAccepted(atMs: 1_000, guardGaps: false)
        off.heartbeatAccepted(atMs: 1_000 + 30 * Self.minute, guardGaps: false)
        #expect(off.pullHold(nowMs: 1_000 + 30 * Self.minute) == nil)
    }

    @Test func duringAGapHoldOnlyOneEvaluationIsAllowedWhicheverComesFirst() {
        var conduct = CoordinatorConduct()
        conduct.claimed(atMs: 0)
        conduct.heartbeatAccepted(atMs: 1_000)
        conduct.heartbeatAccepted(atMs: 1_000 + 10 * Self.minute)
        let now = 2_000 + 10 * Self.minute
        #expect(conduct.mayBeEvaluated(nowMs: now))
        conduct.posting(posted(now))  // a journaled result
        #expect(!conduct.mayBeEvaluated(nowMs: now))
        // A heartbeat gap later in the same hold does not grant another.
        conduct.heartbeatAccepted(atMs: now + 6 * Self.minute)
        #expect(!conduct.mayBeEvaluated(nowMs: now + 6 * Self.minute))
        #expect(conduct.mayBeEvaluated(nowMs: 1_000 + Self.hour + Self.minute))
    }

    // MARK: Registrations and the circuit breaker

    @Test func registrationsStayUnderTheStormRuleWhateverAsks() {
        var conduct = CoordinatorConduct()
        for index in 0..<CoordinatorConduct.maxRegistrationsPerHour {
            #expect(conduct.registrationAllowedAtMs(nowMs: Int64(index) * 1_000) == Int64(index) * 1_000)
            conduct.registering(atMs: Int64(index) * 1_000)
        }
        let next = conduct.registrationAllowedAtMs(nowMs: 10_000)
        #expect(next == Self.hour + Self.minute, "the oldest leaves the window, plus the clock margin")
        #expect(CoordinatorConduct.maxRegistrationsPerHour < 10)
    }

    @Test func theBreakerOpensAtTheThirdLocalFailureGrowsAndClosesOnSuccess() {
        var conduct = CoordinatorConduct()
        conduct.localFailure(atMs: 0)
        conduct.localFailure(atMs: 1)
        #expect(conduct.pullHold(nowMs: 2) == nil)
        conduct.localFailure(atMs: 2)
        #expect(conduct.pullHold(nowMs: 3) == .localFailures(untilMs: 30_002, failures: 3))
        conduct.localFailure(atMs: 40_000)
        #expect(conduct.pullHold(nowMs: 40_001) == .localFailures(untilMs: 100_000, failures: 4))
        for at in 0..<30 { conduct.localFailure(atMs: 200_000 + Int64(at)) }
        #expect(conduct.pullHold(nowMs: 200_030)?.untilMs == 200_029 + CoordinatorConduct.breakerCapMs)
        #expect(conduct.released == 34)
        conduct.localSuccess()
        #expect(conduct.pullHold(nowMs: 200_031) == nil && conduct.consecutiveLocalFailures == 0)
    }

    // MARK: Persistence

    @Test func theRecordSurvivesARestart() throws {
        var conduct = CoordinatorConduct()
        conduct.claimed(atMs: 5)
        conduct.registering(atMs: 6)
        conduct.posting(posted(7, ok: false, output: "x", ms: 3))
        conduct.heartbeatAccepted(atMs: 8)
        conduct.heartbeatAccepted(atMs: 8 + 10 * Self.minute)
        for at in [Int64(10), 11, 12] { conduct.localFailure(atMs: 8 + 10 * Self.minute + at) }
        let read = CoordinatorConduct.from(json: try JSON.parse(conduct.json.serialized))
        #expect(read == conduct)
    }

    @Test(arguments: [
        "[]", "{}", #"{"claims":[],"registrations":[],"results":[]}"#,
        #"{"claims":["x"],"registrations":[],"results":[],"consecutiveLocalFailures":0,"released":0}"#,
        #"{"claims":[],"registrations":[],"results":[{"atMs":1,"ok":true,"hash":"zz","length":1,"durationMs":1}],"consecutiveLocalFailures":0,"released":0}"#,
        #"{"claims":[],"registrations":[],"results":[{"atMs":1,"ok":true,"hash":"1f","length":-1,"durationMs":1}],"consecutiveLocalFailures":0,"released":0}"#,
        #"{"claims":[],"registrations":[],"results":[],"consecutiveLocalFailures":-1,"released":0}"#,
        #"{"claims":[],"registrations":[],"results":[],"consecutiveLocalFailures":0,"released":0,"gap":{"clearsAtMs":1,"evaluationsLeft":7,"gapMs":1}}"#,
        #"{"claims":[],"registrations":[],"results":[],"consecutiveLocalFailures":0,"released":0,"lastHeartbeatAtMs":"noon"}"#,
    ])
    func aBrokenRecordIsRefusedWhole(text: String) throws {
        #expect(CoordinatorConduct.from(json: try JSON.parse(text)) == nil)
    }

    @Test func anOversizedRecordIsRefused() {
        let many = JSONValue.array((0...CoordinatorConduct.maxStoredEntries).map { .int(Int64($0)) })
        let value: JSONValue = ["claims": many, "registrations": [], "results": [], "consecutiveLocalFailures": 0, "released": 0]
        #expect(CoordinatorConduct.from(json: value) == nil)
        let fine: JSONValue = ["claims": [3, 1, 2], "registrations": [], "results": [], "consecutiveLocalFailures": 0, "released": 0]
        #expect(CoordinatorConduct.from(json: fine)?.claims == [1, 2, 3])
    }

    @Test func scaledLimitsShrinkEveryWindowTogether() {
        let limits = CoordinatorConduct.Limits().scaled(by: 60)
        #expect(limits.windowMs == 60_000 && limits.gapGuardMs == 4_000 && limits.clockMarginMs == 1_000)
        #expect(CoordinatorConduct.Limits().scaled(by: 0) == CoordinatorConduct.Limits())
    }
}
