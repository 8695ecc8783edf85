/// The daemon's power side as a value (modes-and-power §2.2, §3.2): the latest reading, the
/// policy's decision on it, the charge gate and the held-work counters. Readings go in,
/// what changed comes out; the daemon logs and records it.
public struct PowerState: Sendable, Equatable {
    /// The latest reading with the host's power profile applied (what the policy decides on).
    public private(set) var reading: PowerReading?
    /// The latest reading as sysfs gave it.
    public private(set) var rawReading: PowerReading?
    /// The monotonic time `reading` was decided at: deciding again without a new read (a
    /// policy change, a reload) is dated no earlier, so the hysteresis never runs backwards.
    public private(set) var readingAtMonotonicMs: Int64 = 0
    /// When the host was last read (monotonic), and how many times: a policy change decides
    /// again on the last reading without reading the host.
    public private(set) var freshReadAtMs: Int64 = 0
    public private(set) var reads: Int64 = 0
    public private(set) var decision: PowerDecision?
    /// modes-and-power §2.2 at start: the persisted mode stays selected but idle until power returns.
    public var chargeGate = ChargeGate.unevaluated
    /// Assignments held or refused, per reason: the power policy's, the host's and the daemon's own.
    public private(set) var holdCounters = HoldCounters()

    public init() {}

    /// Where the policy's answer went with a reading.
    public enum PolicyChange: Sendable, Equatable {
        /// New work is allowed again; the decision that held it until now.
        case resumed(after: PowerDecision)
        /// New work is held from now on, by this decision.
        case held(PowerDecision)
    }

    /// What a reading changed: nil members changed nothing worth telling.
    public struct Update: Sendable, Equatable {
        public var policy: PolicyChange?
        public var gate: ChargeGate.Change?
    }

    /// Decides on a reading: applies the host's power profile (`activeProfile`, from
    /// power-profiles-daemon) and the config's `deviceType`, decides the policy (its
    /// hysteresis needs the previous decision and a monotonic clock), and passes the result
    /// to the charge gate. `fresh`: the host was read now (not a decision again on an old reading).
    public mutating func read(
        _ raw: PowerReading, monotonicMs: Int64, fresh: Bool, activeProfile: String?, deviceType: DeviceType?, policy: PowerPolicy,
        workingModeSelected: Bool
    ) -> Update {
        if fresh {
            reads += 1
            freshReadAtMs = monotonicMs
        }
        rawReading = raw
        var new = raw
        new.telemetry.lowPowerMode = HostServices.lowPowerMode(platformProfile: raw.telemetry.lowPowerMode, activeProfile: activeProfile)
        new.telemetry.overrideDeviceType(deviceType)
        reading = new
        readingAtMonotonicMs = monotonicMs
        let previous = decision
        let next = PowerDecision.decide(new.telemetry, policy: policy, previous: previous, nowMs: monotonicMs)
        decision = next
        var update = Update()
        if let previous, previous.allowed != next.allowed {
            update.policy = next.allowed ? .resumed(after: previous) : .held(next)
        }
        let closed = ModeContext.chargeGateClosed(runOnlyWhileCharging: policy.runOnlyWhileCharging, onExternalPower: new.telemetry.onExternalPower)
        update.gate = chargeGate.read(closed: closed, workingModeSelected: workingModeSelected)
        return update
    }

    /// Whether new work may be taken now: nil, or why it is held, counted under its reason
    /// (the assignment drop reasons). `decision?.reason` asks without counting.
    public mutating func admitNewWork() -> HoldReason? {
        guard let reason = decision?.reason else { return nil }
        holdCounters.record(reason)
        return reason
    }

    /// Counts work held for a reason of the host's or the daemon's own.
    public mutating func countHold(_ reason: LocalHoldReason) {
        holdCounters.record(reason)
    }
}
