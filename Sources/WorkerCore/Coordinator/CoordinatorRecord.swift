/// What the daemon keeps about its coordinator: the session's status, the conduct its
/// behaviour monitor sees, and the work counted for `metrics`.
public struct CoordinatorRecord: Sendable, Equatable {
    /// The mode-on session's latest state; nil while none runs.
    public var status: CoordinatorStatus?
    /// What the coordinator's behaviour monitor has seen of this worker in the last hour:
    /// kept across sessions and restarts, so a restart never forgets a gap or a storm.
    public var conduct: CoordinatorConduct
    /// Subtasks, releases and heartbeats since the daemon started (`metrics`).
    public var counters = WorkCounters()
    /// When a heartbeat last made the conduct record durable (heartbeats come every 15 s;
    /// the record is written at most once a minute for them).
    private var conductHeartbeatPersistedAtMs: Int64 = 0

    public init(conduct: CoordinatorConduct) {
        self.conduct = conduct
    }

    /// A heartbeat the coordinator took. The conduct record is to be written (`persist`)
    /// at most once a minute for heartbeats, and only while the hour holds claims (only
    /// then can a gap matter after a restart), or when this heartbeat began a gap hold
    /// (`began`).
    public mutating func heartbeatAccepted(atMs now: Int64, guardGaps: Bool) -> (began: CoordinatorConduct.GapHold?, persist: Bool) {
        let before = conduct.gap
        conduct.heartbeatAccepted(atMs: now, guardGaps: guardGaps)
        let began = conduct.gap != nil && conduct.gap != before ? conduct.gap : nil
        guard began != nil || (!conduct.claims.isEmpty && now - conductHeartbeatPersistedAtMs >= 60_000) else { return (began, false) }
        conductHeartbeatPersistedAtMs = now
        return (began, true)
    }
}
