/// The CPU figure the policy compares (and the heartbeat sends), and the host's.
public struct CPUShare: Sendable, Equatable {
    /// The whole host, 0–100.
    public var hostPct: Double
    /// The worker's and its model server's share, 0–100 of the host.
    public var ownPct: Double
    /// Everything else: what `maxCpuUsagePct` holds on and the heartbeat's `cpuUsagePct`.
    public var otherPct: Double

    public init(hostPct: Double, ownPct: Double, otherPct: Double) {
        self.hostPct = hostPct
        self.ownPct = ownPct
        self.otherPct = otherPct
    }

    /// Between two samples: the host's counters and the own processes' ticks (keyed by pid
    /// and start time, so a reused pid is a new process). A process seen only in the
    /// later sample started in between and counts whole; one seen only in the earlier
    /// one ended and its last ticks are lost (at most one interval's worth). nil when no
    /// time passed or the host's counters went backwards.
    /// The model server measured by its cgroup (`server`, two samples) adds its CPU time
    /// there, converted with `ticksPerSecond` (`sysconf(_SC_CLK_TCK)`); its processes
    /// are then not among `own`.
    public static func between(
        host earlier: CPUTimes, _ later: CPUTimes, own before: [ProcessSample], _ after: [ProcessSample],
        server serverBefore: CgroupUsage? = nil, _ serverAfter: CgroupUsage? = nil,
        ticksPerSecond: Double = 100
    ) -> CPUShare? {
        guard let host = CPUTimes.usagePct(from: earlier, to: later) else { return nil }
        let elapsed = Double(later.total - earlier.total)
        var previous: [Int32: ProcessSample] = [:]
        for sample in before { previous[sample.pid] = sample }
        var ownTicks = 0.0
        for sample in after {
            if let old = previous[sample.pid], old.startTime == sample.startTime {
                ownTicks += sample.ticks >= old.ticks ? Double(sample.ticks - old.ticks) : 0
            } else {
                ownTicks += Double(sample.ticks)
            }
        }
        ownTicks += CgroupUsage.ticks(from: serverBefore, to: serverAfter, ticksPerSecond: ticksPerSecond)
        // Ticks are counted per process and per CPU slightly apart: never more than the host.
        let own = min(host, max(0, ownTicks / elapsed * 100))
        return CPUShare(hostPct: host, ownPct: own, otherPct: max(0, host - own))
    }
}
