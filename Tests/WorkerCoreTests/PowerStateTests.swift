import Testing
@testable import WorkerCore

/// A laptop reading: on battery at 50 % unless told otherwise.
private func reading(external: Bool? = false, battery: Int? = 50, lowPower: Bool? = nil) -> PowerReading {
    PowerReading(
        telemetry: PowerTelemetry(
            onExternalPower: external, batteryPct: battery, lowPowerMode: lowPower, thermalState: .nominal, cpuUsagePct: 10,
            memoryUsagePct: 40, deviceType: .laptop, hasSystemBattery: battery != nil, updatedAtMs: 1_700_000_000_000),
        supplies: [], sensors: [], platformProfile: nil, chassisType: nil, cpuSampled: true, cpuHadPreviousSample: true, memoryRead: true)
}

private var chargingOnly: PowerPolicy {
    var policy = PowerPolicy()
    policy.runOnlyWhileCharging = true
    return policy
}

extension PowerState {
    /// A reading with no host profile nor configured device type: what most tests need.
    fileprivate mutating func read(
        _ raw: PowerReading, atMs: Int64, fresh: Bool = true, policy: PowerPolicy = PowerPolicy(), working: Bool = true
    ) -> Update {
        read(raw, monotonicMs: atMs, fresh: fresh, activeProfile: nil, deviceType: nil, policy: policy, workingModeSelected: working)
    }
}

@Suite struct ChargeGateTests {
    @Test func theFirstReadingBlocksARestoredWorkingModeOnBatteryUnderRunOnlyWhileCharging() {
        var gate = ChargeGate.unevaluated
        #expect(gate.read(closed: true, workingModeSelected: true) == .blockedAtStart)
        #expect(gate == .blocked)
    }

    @Test func theFirstReadingOpensTheGateForModeOffOrWithPower() {
        var off = ChargeGate.unevaluated
        #expect(off.read(closed: true, workingModeSelected: false) == nil)
        #expect(off == .open)
        var powered = ChargeGate.unevaluated
        #expect(powered.read(closed: false, workingModeSelected: true) == nil)
        #expect(powered == .open)
    }

    @Test func powerReturningOpensABlockedGateOnce() {
        var gate = ChargeGate.blocked
        #expect(gate.read(closed: true, workingModeSelected: true) == nil, "still on battery")
        #expect(gate == .blocked)
        #expect(gate.read(closed: false, workingModeSelected: true) == .opened)
        #expect(gate == .open)
        #expect(gate.read(closed: false, workingModeSelected: true) == nil)
    }

    @Test func unpluggingNeverClosesAnOpenGate() {
        var gate = ChargeGate.open
        #expect(gate.read(closed: true, workingModeSelected: true) == nil)
        #expect(gate == .open)
    }

    @Test func aPausesEndWaitsForPowerAndAModeChosenNowDoesNot() {
        var gate = ChargeGate.open
        gate.modeChanged(waitsForPower: true)
        #expect(gate == .blocked)
        gate.modeChanged(waitsForPower: false)
        #expect(gate == .open)
        var unevaluated = ChargeGate.unevaluated
        unevaluated.modeChanged(waitsForPower: false)
        #expect(unevaluated == .unevaluated, "the first reading still decides on the mode")
    }
}

@Suite struct PowerStateTests {
    @Test func aRestoredModeOnBatteryWaitsForPowerAndStartsWhenItReturns() {
        var power = PowerState()
        let first = power.read(reading(external: false), atMs: 1_000, policy: chargingOnly)
        #expect(first.gate == .blockedAtStart)
        #expect(power.chargeGate.isBlocked)
        #expect(first.policy == nil, "the first decision has nothing to flip from")
        let plugged = power.read(reading(external: true), atMs: 2_000, policy: chargingOnly)
        #expect(plugged.gate == .opened)
        #expect(!power.chargeGate.isBlocked)
    }

    @Test func unknownExternalPowerLeavesTheGateOpen() {
        var power = PowerState()
        #expect(power.read(reading(external: nil), atMs: 1_000, policy: chargingOnly).gate == nil)
        #expect(power.chargeGate == .open)
    }

    @Test func aPolicyFlipIsReportedOnceEachWay() {
        var power = PowerState()
        #expect(power.read(reading(external: true), atMs: 1_000, policy: chargingOnly).policy == nil)
        let unplugged = power.read(reading(external: false), atMs: 2_000, policy: chargingOnly)
        guard case .held(let decision) = unplugged.policy else {
            Issue.record("expected a hold, got \(String(describing: unplugged.policy))")
            return
        }
        #expect(decision.reason == .notCharging)
        #expect(power.read(reading(external: false), atMs: 3_000, policy: chargingOnly).policy == nil, "still held: no news")
        // Resuming waits for the dwell (resumeDwellSec, 30 s by default) with every reason clear.
        #expect(power.read(reading(external: true), atMs: 4_000, policy: chargingOnly).policy == nil)
        let dwelling = power.decision
        let resumed = power.read(reading(external: true), atMs: 40_000, policy: chargingOnly)
        #expect(dwelling.map { resumed.policy == .resumed(after: $0) } == true, "\(String(describing: resumed.policy))")
    }

    @Test func heldWorkIsCountedOnlyWhenAdmissionIsAsked() {
        var power = PowerState()
        #expect(power.admitNewWork() == nil, "no reading: nothing holds")
        _ = power.read(reading(external: false), atMs: 1_000, policy: chargingOnly)
        #expect(power.holdCounters.total == 0, "deciding counts nothing")
        #expect(power.admitNewWork() == .notCharging)
        #expect(power.admitNewWork() == .notCharging)
        power.countHold(.metered)
        #expect(power.holdCounters.count(.notCharging) == 2)
        #expect(power.holdCounters.count(.metered) == 1)
        // Plugged in: allowed once every reason has been clear for the resume dwell.
        _ = power.read(reading(external: true), atMs: 2_000, policy: chargingOnly)
        _ = power.read(reading(external: true), atMs: 40_000, policy: chargingOnly)
        #expect(power.admitNewWork() == nil)
        #expect(power.holdCounters.total == 3)
    }

    @Test func onlyAFreshReadCountsAsARead() {
        var power = PowerState()
        _ = power.read(reading(), atMs: 1_000)
        _ = power.read(reading(), atMs: 5_000, fresh: false)
        #expect(power.reads == 1)
        #expect(power.freshReadAtMs == 1_000)
        #expect(power.readingAtMonotonicMs == 5_000)
    }

    @Test func theHostsProfileAndTheConfiguredDeviceTypeApplyToTheDecidedReadingOnly() {
        var power = PowerState()
        _ = power.read(
            reading(lowPower: nil), monotonicMs: 1_000, fresh: true, activeProfile: "power-saver", deviceType: .desktop, policy: PowerPolicy(),
            workingModeSelected: true)
        #expect(power.reading?.telemetry.lowPowerMode == true)
        #expect(power.reading?.telemetry.deviceType == .desktop)
        #expect(power.decision?.reason == .lowPowerMode)
        #expect(power.rawReading?.telemetry.lowPowerMode == nil)
        #expect(power.rawReading?.telemetry.deviceType == .laptop)
    }

    @Test func thePlatformProfileWinsOverTheHostsProfile() {
        var power = PowerState()
        _ = power.read(
            reading(lowPower: false), monotonicMs: 1_000, fresh: true, activeProfile: "power-saver", deviceType: nil, policy: PowerPolicy(),
            workingModeSelected: true)
        #expect(power.reading?.telemetry.lowPowerMode == false)
        #expect(power.decision?.allowed == true)
    }
}
