import Testing
@testable import WorkerCore

/// A laptop reading: on battery at `battery` % unless told otherwise.
private func reading(
    external: Bool? = false, battery: Int? = 50, draining: Bool = false, lowPower: Bool? = false,
    thermal: ThermalState? = .nominal, cpu: Double? = 10
) -> PowerTelemetry {
    PowerTelemetry(
        onExternalPower: external, batteryPct: battery, lowPowerMode: lowPower, thermalState: thermal,
        cpuUsagePct: cpu, memoryUsagePct: 40, deviceType: .laptop, draining: draining,
        hasSystemBattery: battery != nil, updatedAtMs: 1_700_000_000_000)
}

private let desktopWithoutSensors = PowerTelemetry(onExternalPower: true, updatedAtMs: 1)

private func policy(_ change: (inout PowerPolicy) -> Void = { _ in }) -> PowerPolicy {
    var policy = PowerPolicy()
    change(&policy)
    return policy
}

@Suite struct PowerDecisionFromFreshStartTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var telemetry: PowerTelemetry
        var policy = PowerPolicy()
        var reason: HoldReason?
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(name: "a desktop without sensors works", telemetry: desktopWithoutSensors, reason: nil),
        Case(
            name: "nothing known at all works", telemetry: PowerTelemetry(updatedAtMs: 1), policy: policy { $0.runOnlyWhileCharging = true },
            reason: nil),
        Case(name: "on battery at 42 % works", telemetry: reading(battery: 42), reason: nil),
        Case(name: "battery exactly at minBatteryPct holds", telemetry: reading(battery: 20), reason: .batteryLow),
        Case(name: "battery one above minBatteryPct works", telemetry: reading(battery: 21), reason: nil),
        Case(name: "battery at 0 holds", telemetry: reading(battery: 0), reason: .batteryLow),
        Case(name: "low battery while charging works", telemetry: reading(external: true, battery: 10), reason: nil),
        Case(name: "low battery with power unknown holds", telemetry: reading(external: nil, battery: 10), reason: .batteryLow),
        Case(name: "unknown battery never holds", telemetry: reading(battery: nil), reason: nil),
        Case(
            name: "minBatteryPct 0 holds only at 0", telemetry: reading(battery: 1),
            policy: policy {
                $0.minBatteryPct = 0; $0.resumeBatteryPct = 0
            }, reason: nil),
        Case(name: "draining holds", telemetry: reading(external: true, battery: 60, draining: true), reason: .draining),
        Case(
            name: "draining allowed by policy works", telemetry: reading(external: true, battery: 60, draining: true),
            policy: policy { $0.holdWhileDraining = false }, reason: nil),
        Case(
            name: "draining to a low battery holds for the battery when draining is allowed",
            telemetry: reading(external: true, battery: 15, draining: true), policy: policy { $0.holdWhileDraining = false }, reason: .batteryLow),
        Case(
            name: "runOnlyWhileCharging on battery holds", telemetry: reading(external: false), policy: policy { $0.runOnlyWhileCharging = true },
            reason: .notCharging),
        Case(
            name: "runOnlyWhileCharging on power works", telemetry: reading(external: true), policy: policy { $0.runOnlyWhileCharging = true },
            reason: nil),
        Case(
            name: "runOnlyWhileCharging with power unknown works", telemetry: reading(external: nil),
            policy: policy { $0.runOnlyWhileCharging = true }, reason: nil),
        Case(name: "low-power mode holds", telemetry: reading(lowPower: true), reason: .lowPowerMode),
        Case(
            name: "low-power mode ignored by policy works", telemetry: reading(lowPower: true), policy: policy { $0.pauseOnLowPowerMode = false },
            reason: nil),
        Case(name: "unknown low-power mode works", telemetry: reading(lowPower: nil), reason: nil),
        Case(name: "thermal at maxThermalState works", telemetry: reading(thermal: .fair), reason: nil),
        Case(name: "thermal above maxThermalState holds", telemetry: reading(thermal: .serious), reason: .thermal),
        Case(name: "critical holds", telemetry: reading(thermal: .critical), policy: policy { $0.maxThermalState = .serious }, reason: .thermal),
        Case(
            name: "maxThermalState critical never holds", telemetry: reading(thermal: .critical), policy: policy { $0.maxThermalState = .critical },
            reason: nil),
        Case(name: "unknown thermal state works", telemetry: reading(thermal: nil), reason: nil),
        Case(name: "CPU exactly at maxCpuUsagePct works", telemetry: reading(cpu: 90), reason: nil),
        Case(name: "CPU just above maxCpuUsagePct holds", telemetry: reading(cpu: 90.1), reason: .cpuBusy),
        Case(name: "unknown CPU works", telemetry: reading(cpu: nil), reason: nil),
        Case(name: "NaN CPU works", telemetry: reading(cpu: .nan), reason: nil),
        Case(
            name: "not-charging outranks everything", telemetry: reading(external: false, battery: 5, lowPower: true, thermal: .critical, cpu: 100),
            policy: policy { $0.runOnlyWhileCharging = true }, reason: .notCharging),
        Case(
            name: "draining outranks the battery", telemetry: reading(external: true, battery: 5, draining: true, thermal: .critical),
            reason: .draining),
        Case(
            name: "battery outranks low-power, thermal and CPU", telemetry: reading(battery: 5, lowPower: true, thermal: .critical, cpu: 100),
            reason: .batteryLow),
        Case(name: "low-power outranks thermal and CPU", telemetry: reading(lowPower: true, thermal: .critical, cpu: 100), reason: .lowPowerMode),
        Case(name: "thermal outranks CPU", telemetry: reading(thermal: .critical, cpu: 100), reason: .thermal),
    ]

    @Test(arguments: cases)
    func decidesTheReasonOfHighestPrecedence(c: Case) {
        let decision = PowerDecision.decide(c.telemetry, policy: c.policy, previous: nil, nowMs: 5_000)
        #expect(decision.reason == c.reason)
        #expect(decision.allowed == (c.reason == nil))
        #expect(decision.reasonText == (c.reason?.rawValue ?? "ok"))
        #expect(decision.sinceMs == 5_000)
        #expect((decision.waitingFor == nil) == decision.allowed)
    }

    @Test func reasonStringsAreThoseOfSpec32() {
        #expect(HoldReason.allCases.map(\.rawValue) == ["not-charging", "draining", "battery-low", "low-power-mode", "thermal", "cpu-busy"])
    }
}

/// Drives the decision through a sequence of readings with an injected clock.
private struct Drive {
    var policy: PowerPolicy
    var decision: PowerDecision?
    /// Every change of `allowed`, with its time: flapping shows up here.
    var transitions: [(Int64, Bool)] = []

    init(policy: PowerPolicy = PowerPolicy()) { self.policy = policy }

    @discardableResult
    mutating func at(_ ms: Int64, _ telemetry: PowerTelemetry) -> PowerDecision {
        let next = PowerDecision.decide(telemetry, policy: policy, previous: decision, nowMs: ms)
        if decision == nil || decision!.allowed != next.allowed { transitions.append((ms, next.allowed)) }
        decision = next
        return next
    }
}

@Suite struct PowerDecisionHysteresisTests {
    @Test func resumesExactlyWhenTheDwellEndsAndNotAMillisecondBefore() {
        var drive = Drive()
        #expect(drive.at(0, reading(thermal: .serious)).reason == .thermal)
        let clear = drive.at(10_000, reading(thermal: .fair))
        #expect(clear.reason == .thermal)
        #expect(clear.waitingFor == .dwellUntil(40_000))
        #expect(drive.at(39_999, reading(thermal: .fair)).allowed == false)
        let resumed = drive.at(40_000, reading(thermal: .fair))
        #expect(resumed.allowed)
        #expect(resumed.sinceMs == 40_000)
        #expect(resumed.waitingFor == nil)
    }

    @Test func holdingIsImmediate() {
        var drive = Drive()
        #expect(drive.at(0, reading()).allowed)
        #expect(drive.at(1, reading(thermal: .serious)).reason == .thermal)
        #expect(drive.decision?.sinceMs == 1)
    }

    @Test func aReasonReturningDuringTheDwellRestartsIt() {
        var drive = Drive()
        drive.at(0, reading(cpu: 95))
        drive.at(10_000, reading(cpu: 20))
        #expect(drive.at(20_000, reading(cpu: 95)).waitingFor == .reasonClears(.cpuBusy))
        #expect(drive.at(25_000, reading(cpu: 20)).waitingFor == .dwellUntil(55_000))
        #expect(drive.at(54_999, reading(cpu: 20)).allowed == false)
        #expect(drive.at(55_000, reading(cpu: 20)).allowed)
        #expect(drive.transitions.map(\.1) == [false, true])
    }

    @Test func aDifferentReasonDuringTheDwellAlsoRestartsIt() {
        var drive = Drive()
        drive.at(0, reading(thermal: .serious))
        drive.at(10_000, reading())
        #expect(drive.at(20_000, reading(lowPower: true)).reason == .lowPowerMode)
        #expect(drive.at(21_000, reading()).waitingFor == .dwellUntil(51_000))
        #expect(drive.decision?.sinceMs == 0)
    }

    @Test func aShortCPUSpikeHoldsOnceAndResumesOnce() {
        var drive = Drive()
        var cpu: [Double] = [50, 95, 40]
        cpu += Array(repeating: 40, count: 10)
        for (i, value) in cpu.enumerated() { drive.at(Int64(i) * 5_000, reading(cpu: value)) }
        // Spike at 5 s, clear from 10 s, resume at 40 s: one hold, one resume.
        #expect(drive.transitions.map(\.0) == [0, 5_000, 40_000])
        #expect(drive.transitions.map(\.1) == [true, false, true])
    }

    @Test func spikesMoreOftenThanTheDwellKeepWorkHeldWithoutFlapping() {
        var drive = Drive()
        for i in 0..<40 {
            drive.at(Int64(i) * 5_000, reading(cpu: i % 4 == 1 ? 99 : 30))
        }
        #expect(drive.transitions.map(\.1) == [true, false])
    }

    @Test func batteryHoveringAroundMinimumDoesNotFlap() {
        var drive = Drive()
        let levels = [22, 21, 20, 21, 20, 21, 22, 25, 29, 29]
        for (i, level) in levels.enumerated() { drive.at(Int64(i) * 60_000, reading(battery: level)) }
        #expect(drive.transitions.map(\.1) == [true, false])
        #expect(drive.transitions.last?.0 == 120_000)
        #expect(drive.decision?.reason == .batteryLow)
        #expect(drive.decision?.waitingFor == .batteryAtLeast(30))
    }

    @Test func batteryResumesAtResumeBatteryPctAfterTheDwell() {
        var drive = Drive()
        drive.at(0, reading(battery: 20))
        #expect(drive.at(1_000, reading(battery: 29)).waitingFor == .batteryAtLeast(30))
        #expect(drive.at(2_000, reading(battery: 30)).waitingFor == .dwellUntil(32_000))
        #expect(drive.at(31_999, reading(battery: 30)).allowed == false)
        #expect(drive.at(32_000, reading(battery: 30)).allowed)
        // Once resumed, dipping between the thresholds does not hold again.
        #expect(drive.at(40_000, reading(battery: 25)).allowed)
        #expect(drive.at(50_000, reading(battery: 21)).allowed)
        #expect(drive.at(60_000, reading(battery: 20)).reason == .batteryLow)
    }

    @Test func batteryFallingBackBelowResumeDuringTheDwellHoldsAgain() {
        var drive = Drive()
        drive.at(0, reading(battery: 19))
        drive.at(1_000, reading(battery: 30))
        #expect(drive.at(2_000, reading(battery: 29)).waitingFor == .batteryAtLeast(30))
    }

    @Test func anUnreadableBatteryDuringAHoldDoesNotSkipTheRecharge() {
        var drive = Drive()
        drive.at(0, reading(battery: 15))
        #expect(drive.at(1_000, reading(battery: nil)).waitingFor == .dwellUntil(31_000))
        #expect(drive.at(2_000, reading(battery: 25)).waitingFor == .batteryAtLeast(30))
    }

    @Test func aBatteryUnknownForTheWholeDwellResumes() {
        var drive = Drive()
        drive.at(0, reading(battery: 15))
        drive.at(1_000, reading(battery: nil))
        let resumed = drive.at(31_000, reading(battery: nil))
        #expect(resumed.allowed)
        #expect(resumed.batteryLatched == false)
    }

    @Test func pluggingInEndsABatteryHoldAfterTheDwell() {
        var drive = Drive()
        drive.at(0, reading(battery: 15))
        #expect(drive.at(1_000, reading(external: true, battery: 16)).waitingFor == .dwellUntil(31_000))
        #expect(drive.at(31_000, reading(external: true, battery: 24)).allowed)
        // Unplugged again above the minimum: the battery hold ended, so nothing holds.
        #expect(drive.at(40_000, reading(external: false, battery: 24)).allowed)
    }

    @Test func unpluggingDuringTheDwellBelowResumeHoldsForTheBatteryAgain() {
        var drive = Drive()
        drive.at(0, reading(battery: 15))
        drive.at(1_000, reading(external: true, battery: 25))
        #expect(drive.at(2_000, reading(external: false, battery: 25)).reason == .batteryLow)
    }

    @Test func reasonFollowsWhatStillHoldsAndKeepsTheHoldsStart() {
        var drive = Drive()
        #expect(drive.at(0, reading(battery: 10, thermal: .critical)).reason == .batteryLow)
        let stillHot = drive.at(5_000, reading(external: true, battery: 12, thermal: .critical))
        #expect(stillHot.reason == .thermal)
        #expect(stillHot.sinceMs == 0)
    }

    @Test func zeroDwellResumesAtOnce() {
        var drive = Drive(policy: policy { $0.resumeDwellSec = 0 })
        drive.at(0, reading(thermal: .critical))
        #expect(drive.at(1, reading()).allowed)
    }

    @Test func resumeBelowMinimumIsTakenAsTheMinimum() {
        var drive = Drive(
            policy: policy {
                $0.minBatteryPct = 40; $0.resumeBatteryPct = 10; $0.resumeDwellSec = 0
            })
        #expect(drive.at(0, reading(battery: 40)).waitingFor == .batteryAtLeast(41))
        #expect(drive.at(1, reading(battery: 39)).reason == .batteryLow)
        #expect(drive.at(2, reading(battery: 41)).allowed)
    }

    @Test func allowedKeepsItsSinceAcrossReadings() {
        var drive = Drive()
        drive.at(100, reading())
        #expect(drive.at(5_000, reading()).sinceMs == 100)
    }

    @Test func policyChangeTakesEffectAtTheNextDecision() {
        var drive = Drive()
        drive.at(0, reading(thermal: .serious))
        drive.policy.maxThermalState = .serious
        #expect(drive.at(1, reading(thermal: .serious)).waitingFor == .dwellUntil(30_001))
    }

    @Test func statusJSONSaysWhatAHoldWaitsFor() {
        let held = PowerDecision(reason: .thermal, sinceMs: 1_000, clearSinceMs: 5_000, waitingFor: .dwellUntil(35_000))
        let json = held.json(nowMs: 10_000)
        #expect(json["allowed"] == false)
        #expect(json["reason"] == "thermal")
        #expect(json["forMs"] == 9_000)
        #expect(json["resumeInMs"] == 25_000)
        let allowed = PowerDecision(reason: nil, sinceMs: 1_000).json(nowMs: 2_000)
        #expect(allowed.objectValue?.keys == ["allowed", "reason", "forMs"])
        #expect(allowed["reason"] == "ok")
    }

    @Test func doctorChecksListEveryRuleWithItsVerdict() {
        let checks = PowerDecision.checks(reading(battery: 15, thermal: .serious), policy: PowerPolicy(), batteryLatched: true)
        #expect(checks.map(\.reason) == HoldReason.allCases)
        #expect(checks.filter(\.holds).map(\.reason) == [.batteryLow, .thermal])
        #expect(checks[2].detail.contains("battery 15 %"))
    }
}

@Suite struct PowerHoldCounterTests {
    @Test func countsPerReason() {
        var counters = HoldCounters()
        counters.record(.thermal)
        counters.record(.thermal)
        counters.record(.batteryLow)
        #expect(counters.count(.thermal) == 2)
        #expect(counters.count(.batteryLow) == 1)
        #expect(counters.count(.cpuBusy) == 0)
        #expect(counters.total == 3)
    }

    @Test func jsonListsEveryReasonInOrderAndRoundTrips() {
        var counters = HoldCounters()
        counters.record(.cpuBusy, count: 7)
        #expect(
            counters.json.serialized
                == #"{"not-charging":0,"draining":0,"battery-low":0,"low-power-mode":0,"thermal":0,"cpu-busy":7,"state-unwritable":0,"metered":0,"host-sleeping":0,"model-unavailable":0,"local-failures":0,"heartbeat-gap":0,"sandbox-required":0,"sandbox-unavailable":0}"#
        )
        #expect(HoldCounters.from(json: counters.json) == counters)
    }

    @Test(arguments: [
        (#"{"thermal":3,"future-reason":9}"#, Int64?.some(3)),
        (#"{"thermal":-1}"#, nil),
        (#"{"thermal":"3"}"#, nil),
        (#"[]"#, nil),
    ])
    func persistedCountersAreReadStrictly(text: String, thermal: Int64?) throws {
        let counters = HoldCounters.from(json: try JSON.parse(text))
        #expect(counters?.count(.thermal) == thermal)
    }

    @Test func anUnwritableStateDirectoryIsCountedBesideThePowerReasonsAndRoundTrips() throws {
        var counters = HoldCounters()
        counters.record(.stateUnwritable)
        counters.record(.stateUnwritable, count: 2)
        counters.record(.thermal)
        #expect(counters.count(.stateUnwritable) == 3)
        #expect(counters.total == 4)
        #expect(counters.json["state-unwritable"] == 3)
        #expect(HoldCounters.from(json: counters.json) == counters)
        #expect(HoldCounters.from(json: try JSON.parse(#"{"state-unwritable":-1}"#)) == nil)
        #expect(!HoldReason.allCases.map(\.rawValue).contains("state-unwritable"), "never a power decision's reason")
    }

    @Test func countersSaturateInsteadOfOverflowing() {
        var counters = HoldCounters()
        counters.record(.thermal, count: .max)
        counters.record(.thermal)
        counters.record(.draining)
        #expect(counters.count(.thermal) == .max)
        #expect(counters.total == .max)
    }
}
