/// Why new work is held (modes-and-power §3.2). The declaration order is the precedence when several
/// hold at once: the power source first (what plugging in fixes), then the battery, then
/// the host's own state, with `cpu-busy` last because it is the most passing.
public enum HoldReason: String, Sendable, CaseIterable, Comparable {
    case notCharging = "not-charging"
    case draining
    case batteryLow = "battery-low"
    case lowPowerMode = "low-power-mode"
    case thermal
    case cpuBusy = "cpu-busy"

    var precedence: Int { HoldReason.allCases.firstIndex(of: self)! }
    public static func < (a: HoldReason, b: HoldReason) -> Bool { a.precedence < b.precedence }

    /// What it means and what clears it, for `status` and `doctor`.
    public var explanation: String {
        switch self {
        case .notCharging: return "runOnlyWhileCharging is on and the host is not on external power; connect power"
        case .draining: return "on external power but a battery still discharges (the charger is too weak for the load)"
        case .batteryLow: return "the battery is at or below minBatteryPct and has not recharged to resumeBatteryPct"
        case .lowPowerMode: return "the platform profile is low-power and pauseOnLowPowerMode is on"
        case .thermal: return "the host is hotter than maxThermalState"
        case .cpuBusy: return "other load keeps the CPU above maxCpuUsagePct"
        }
    }
}

/// What a held decision waits for before it resumes.
public enum ResumeCondition: Sendable, Equatable {
    /// The reason still holds; it must clear.
    case reasonClears(HoldReason)
    /// Held for the battery: it must reach this percentage (resumeBatteryPct).
    case batteryAtLeast(Int64)
    /// Every reason is clear; work resumes at this monotonic time unless one returns.
    case dwellUntil(Int64)
}

/// The policy's decision and the state its hysteresis needs (modes-and-power §3.2). A value: the
/// daemon keeps the latest and passes it back in with each new reading.
public struct PowerDecision: Sendable, Equatable {
    /// nil when new work is allowed (reason `ok`); otherwise why it is held. While the
    /// resume dwell runs, the reason that held last.
    public var reason: HoldReason?
    /// Monotonic milliseconds when the current allowed or held period began (the reason
    /// may change within a hold).
    public var sinceMs: Int64
    /// While held: monotonic milliseconds since when every reason has been clear.
    public var clearSinceMs: Int64?
    /// The battery fell to minBatteryPct during this hold and has not reached
    /// resumeBatteryPct since.
    public var batteryLatched: Bool
    /// While held: what resuming waits for.
    public var waitingFor: ResumeCondition?

    public init(
        reason: HoldReason?, sinceMs: Int64, clearSinceMs: Int64? = nil, batteryLatched: Bool = false,
        waitingFor: ResumeCondition? = nil
    ) {
        self.reason = reason
        self.sinceMs = sinceMs
        self.clearSinceMs = clearSinceMs
        self.batteryLatched = batteryLatched
        self.waitingFor = waitingFor
    }

    public var allowed: Bool { reason == nil }
    /// `ok` or the hold reason: the reason string of modes-and-power §3.2.
    public var reasonText: String { reason?.rawValue ?? "ok" }

    /// The one decision function of modes-and-power §3.2. Holding is immediate; resuming waits until
    /// every reason has been clear for `resumeDwellSec`, and after a battery hold until
    /// the battery is back at `resumeBatteryPct`. Unknown values never hold.
    ///
    /// `minBatteryPct` counts only while the battery powers the host (not on external
    /// power, or draining): a plugged-in laptop charges, and an old laptop whose worn
    /// battery reads 0 % must still work on mains. Without a previous decision (a daemon
    /// that just started) clear conditions allow at once: there was no hold to dwell on.
    /// `nowMs` is monotonic.
    public static func decide(
        _ telemetry: PowerTelemetry, policy: PowerPolicy, previous: PowerDecision?,
        nowMs: Int64
    ) -> PowerDecision {
        // The latch records that this hold met the battery minimum; it ends only with
        // the hold, so an unreadable battery or a dip below resumeBatteryPct during the
        // dwell cannot skip the recharge. Unknown or not powering the host, the battery
        // does not hold, as every unknown value.
        var latched = previous?.batteryLatched ?? false
        let resumePct = effectiveResumePct(policy)
        if batteryPowersHost(telemetry), let pct = telemetry.batteryPct, Int64(pct) <= policy.minBatteryPct {
            latched = true
        }
        let active = activeReasons(telemetry, policy: policy, batteryLatched: latched)

        if let first = active.first {
            var sinceMs = nowMs
            if let previous, !previous.allowed { sinceMs = previous.sinceMs }
            let waiting: ResumeCondition = first == .batteryLow ? .batteryAtLeast(resumePct) : .reasonClears(first)
            return PowerDecision(
                reason: first, sinceMs: sinceMs, clearSinceMs: nil, batteryLatched: latched,
                waitingFor: waiting)
        }
        guard let previous, let heldFor = previous.reason else {
            return PowerDecision(reason: nil, sinceMs: previous?.sinceMs ?? nowMs)
        }
        let clearSince = previous.clearSinceMs ?? nowMs
        let resumeAt = clearSince + min(3600, max(0, policy.resumeDwellSec)) * 1000
        if nowMs >= resumeAt {
            return PowerDecision(reason: nil, sinceMs: nowMs)
        }
        return PowerDecision(
            reason: heldFor, sinceMs: previous.sinceMs, clearSinceMs: clearSince,
            batteryLatched: latched, waitingFor: .dwellUntil(resumeAt))
    }

    /// The battery level that ends a battery hold: `resumeBatteryPct`, and at least one
    /// above `minBatteryPct` (a level at the minimum holds, so it cannot also resume).
    public static func effectiveResumePct(_ policy: PowerPolicy) -> Int64 {
        max(policy.resumeBatteryPct, policy.minBatteryPct + 1)
    }

    /// Whether the battery is what powers the host: not known to be on external power,
    /// or on it but draining.
    static func batteryPowersHost(_ telemetry: PowerTelemetry) -> Bool {
        telemetry.onExternalPower != true || telemetry.draining
    }

    /// Every reason that holds for this telemetry, in precedence order.
    public static func activeReasons(_ telemetry: PowerTelemetry, policy: PowerPolicy, batteryLatched: Bool) -> [HoldReason] {
        HoldReason.allCases.filter { holds($0, telemetry, policy: policy, batteryLatched: batteryLatched) }
    }

    /// One rule of modes-and-power §3.2; an unknown value never holds.
    static func holds(_ reason: HoldReason, _ t: PowerTelemetry, policy: PowerPolicy, batteryLatched: Bool) -> Bool {
        switch reason {
        case .notCharging: return policy.runOnlyWhileCharging && t.onExternalPower == false
        case .draining: return policy.holdWhileDraining && t.draining
        case .batteryLow:
            guard batteryLatched, batteryPowersHost(t), let pct = t.batteryPct else { return false }
            return Int64(pct) < effectiveResumePct(policy)
        case .lowPowerMode: return policy.pauseOnLowPowerMode && t.lowPowerMode == true
        case .thermal: return t.thermalState.map { $0 > policy.maxThermalState } ?? false
        case .cpuBusy:
            guard let cpu = t.otherCpuUsagePct ?? t.cpuUsagePct, cpu.isFinite else { return false }
            return cpu > Double(policy.maxCpuUsagePct)
        }
    }

    /// One rule of the policy applied to one reading, for `doctor`.
    public struct Check: Sendable, Equatable {
        public var reason: HoldReason
        public var holds: Bool
        /// The values compared, in words.
        public var detail: String

        public var json: JSONValue {
            ["reason": .string(reason.rawValue), "holds": .bool(holds), "detail": .string(detail)]
        }
    }

    /// Every rule with its verdict and the values behind it, in precedence order.
    public static func checks(_ t: PowerTelemetry, policy: PowerPolicy, batteryLatched: Bool) -> [Check] {
        func describe(_ value: Bool?) -> String { value.map { $0 ? "yes" : "no" } ?? "unknown" }
        return HoldReason.allCases.map { reason in
            let detail: String
            switch reason {
            case .notCharging:
                detail = "runOnlyWhileCharging \(policy.runOnlyWhileCharging), on external power: \(describe(t.onExternalPower))"
            case .draining:
                detail = "holdWhileDraining \(policy.holdWhileDraining), draining: \(t.draining ? "yes" : "no")"
            case .batteryLow:
                var battery: String
                if let pct = t.batteryPct {
                    battery = "battery \(pct) %" + (batteryPowersHost(t) ? "" : " (on external power: not counted)")
                } else {
                    battery = t.hasSystemBattery ? "battery unknown" : "no system battery"
                }
                battery += ", minBatteryPct \(policy.minBatteryPct), resumeBatteryPct \(effectiveResumePct(policy))"
                detail = battery + (batteryLatched ? ", fell to the minimum during this hold" : "")
            case .lowPowerMode:
                detail = "pauseOnLowPowerMode \(policy.pauseOnLowPowerMode), low-power mode: \(describe(t.lowPowerMode))"
            case .thermal:
                detail = "thermal state \(t.thermalState?.rawValue ?? "unknown"), maxThermalState \(policy.maxThermalState.rawValue)"
            case .cpuBusy:
                func percent(_ value: Double?) -> String { value.flatMap { $0.isFinite ? "\(($0 * 10).rounded() / 10) %" : nil } ?? "unknown" }
                if t.otherCpuUsagePct != nil {
                    detail =
                        "other load \(percent(t.otherCpuUsagePct)) (host \(percent(t.cpuUsagePct)), less the worker and its model server), maxCpuUsagePct \(policy.maxCpuUsagePct)"
                } else {
                    detail = "CPU \(percent(t.cpuUsagePct)), maxCpuUsagePct \(policy.maxCpuUsagePct)"
                }
            }
            return Check(reason: reason, holds: holds(reason, t, policy: policy, batteryLatched: batteryLatched), detail: detail)
        }
    }

    /// For `status`: allowed, reason, how long, and what a hold waits for. Times are
    /// durations from `nowMs` (monotonic), so the JSON needs no clock of its own.
    public func json(nowMs: Int64) -> JSONValue {
        var object = JSONObject()
        object["allowed"] = .bool(allowed)
        object["reason"] = .string(reasonText)
        object["forMs"] = .int(max(0, nowMs - sinceMs))
        if let reason { object["explanation"] = .string(reason.explanation) }
        switch waitingFor {
        case .reasonClears(let reason)?:
            object["waitingFor"] = .string("\(reason.rawValue) to clear")
        case .batteryAtLeast(let pct)?:
            object["waitingFor"] = .string("battery at or above \(pct) %")
        case .dwellUntil(let at)?:
            object["waitingFor"] = .string("every reason to stay clear for the resume dwell")
            object["resumeInMs"] = .int(max(0, at - nowMs))
        case nil:
            break
        }
        return .object(object)
    }
}

/// Why new work is held for the worker's own sake, not the host's power: never decided
/// by the policy, but counted with its reasons (the assignment drop reasons).
public enum LocalHoldReason: String, Sendable, CaseIterable {
    /// A write to the state directory failed (full, read-only): a pulled subtask could
    /// not be journaled, so nothing is pulled until a write succeeds again.
    case stateUnwritable = "state-unwritable"
    /// The primary connection is metered (NetworkManager) and network.onMetered is hold.
    case metered
    /// The host is about to suspend (logind's PrepareForSleep): nothing new until it resumes.
    case hostSleeping = "host-sleeping"
    /// The model backend is not ready (down, model missing, loading, pulling): a claimed
    /// subtask could only fail, and fast failures get an agent banned.
    case modelUnavailable = "model-unavailable"
    /// Three or more local failures in a row (the circuit breaker): pulls wait, longer each time.
    case localFailures = "local-failures"
    /// A heartbeat gap over the monitor's threshold while the last hour holds claims:
    /// pulls wait until the gap leaves the coordinator's window.
    case heartbeatGap = "heartbeat-gap"
    /// The coordinator keeps the work it has for agents with a sandbox (`sandboxRequired`).
    case sandboxRequired = "sandbox-required"
    /// `execution.mode` is `container` and no container engine is usable.
    case sandboxUnavailable = "sandbox-unavailable"

    /// What it means and what clears it, for `status` and `doctor`.
    public var explanation: String {
        switch self {
        case .stateUnwritable:
            return
                "the state directory cannot be written (full or read-only): a pulled subtask could not be journaled; free space or remount it read-write"
        case .metered:
            return "NetworkManager says the primary connection is metered and network.onMetered is hold; set it to allow to pull anyway"
        case .hostSleeping:
            return "the host is suspending; work resumes after the resume"
        case .modelUnavailable:
            return "the model backend is not ready (see backend in status, or doctor); pulls resume by themselves once it is"
        case .localFailures:
            return
                "the model failed three or more subtasks in a row (each was released for another agent); pulls wait, longer after each failure, and resume after a success"
        case .heartbeatGap:
            return
                "heartbeats stopped for over 4 minutes while this worker had claimed work in the last hour (suspend, mode off, lost path); the coordinator's monitor counts that gap at each registration and result until it leaves its one-hour window, so pulls wait until then (coordinator.gapGuard false turns this off)"
        case .sandboxRequired:
            return
                "the coordinator answered sandboxRequired: its queued work needs an agent that runs code in a sandbox (execution.mode auto or container, with a usable container engine: see doctor)"
        case .sandboxUnavailable:
            return
                "execution.mode is container and no container engine can run the sandbox image (see execution in status, or doctor; 'edgecoder-worker sandbox build' makes the image); pulls resume once it can"
        }
    }
}

/// Assignments held or refused, counted per reason (the assignment drop reasons of modes-and-power §3.2).
public struct HoldCounters: Sendable, Equatable {
    /// One count per reason, in precedence order.
    private var counts = [Int64](repeating: 0, count: HoldReason.allCases.count)
    /// One count per local reason, in declaration order.
    private var localCounts = [Int64](repeating: 0, count: LocalHoldReason.allCases.count)

    public init() {}

    /// Adds `count` (saturating at Int64.max; negative counts are ignored).
    public mutating func record(_ reason: HoldReason, count: Int64 = 1) {
        HoldCounters.add(count, to: &counts[reason.precedence])
    }

    /// Adds `count` for a local reason (saturating; negative counts are ignored).
    public mutating func record(_ reason: LocalHoldReason, count: Int64 = 1) {
        HoldCounters.add(count, to: &localCounts[LocalHoldReason.allCases.firstIndex(of: reason)!])
    }

    private static func add(_ count: Int64, to counter: inout Int64) {
        let (sum, overflow) = counter.addingReportingOverflow(max(0, count))
        counter = overflow ? Int64.max : sum
    }

    public func count(_ reason: HoldReason) -> Int64 { counts[reason.precedence] }

    public func count(_ reason: LocalHoldReason) -> Int64 { localCounts[LocalHoldReason.allCases.firstIndex(of: reason)!] }

    public var total: Int64 {
        (counts + localCounts).reduce(0) { $0.addingReportingOverflow($1).overflow ? Int64.max : $0 + $1 }
    }

    /// Every reason, zero included, power reasons in precedence order then the local
    /// ones: `{"not-charging": 0, …, "state-unwritable": 0}`.
    public var json: JSONValue {
        .object(
            JSONObject(
                HoldReason.allCases.map { ($0.rawValue, .int(count($0))) }
                    + LocalHoldReason.allCases.map { ($0.rawValue, .int(count($0))) }))
    }

    /// Reads counters written by `json`; unknown keys are ignored (a newer daemon may add
    /// reasons), a negative or non-integer count makes the whole value unusable.
    public static func from(json value: JSONValue) -> HoldCounters? {
        guard let object = value.objectValue else { return nil }
        var counters = HoldCounters()
        for reason in HoldReason.allCases {
            guard let member = object[reason.rawValue] else { continue }
            guard let count = member.intValue, count >= 0 else { return nil }
            counters.counts[reason.precedence] = count
        }
        for (index, reason) in LocalHoldReason.allCases.enumerated() {
            guard let member = object[reason.rawValue] else { continue }
            guard let count = member.intValue, count >= 0 else { return nil }
            counters.localCounts[index] = count
        }
        return counters
    }
}
