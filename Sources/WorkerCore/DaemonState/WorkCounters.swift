/// Why a claimed subtask went back to the coordinator unanswered (the `reason` label of
/// `edgecoder_worker_subtasks_released_total`).
public enum SubtaskReleaseReason: String, Sendable, CaseIterable {
    /// Its claim expired while the worker was down; found at recovery.
    case claimExpired = "claim-expired"
    /// The work journal could not be written, so the subtask could not be run safely.
    case journalUnwritable = "journal-unwritable"
    /// Posting its failure would trip the coordinator's behaviour monitor.
    case monitorWouldFlag = "monitor-would-flag"
    /// The host failed it (the model server down or failing), not the subtask.
    case hostFailure = "host-failure"
}

/// Counts the daemon keeps from its start to its exit for `metrics` (status' `counters`).
/// Never persisted: a restart starts them at zero, which Prometheus reads as a counter reset.
public struct WorkCounters: Sendable, Equatable {
    public private(set) var subtasksDone: Int64 = 0
    public private(set) var subtasksFailed: Int64 = 0
    public private(set) var heartbeatsSent: Int64 = 0
    public private(set) var heartbeatsFailed: Int64 = 0
    /// One count per reason, in declaration order.
    private var released = [Int64](repeating: 0, count: SubtaskReleaseReason.allCases.count)

    public init() {}

    /// A result posted (`ok` or a failure answered to the coordinator).
    public mutating func subtaskAnswered(ok: Bool) {
        if ok { WorkCounters.add(&subtasksDone) } else { WorkCounters.add(&subtasksFailed) }
    }

    /// A heartbeat sent and whether the coordinator took it.
    public mutating func heartbeat(accepted: Bool) {
        WorkCounters.add(&heartbeatsSent)
        if !accepted { WorkCounters.add(&heartbeatsFailed) }
    }

    public mutating func released(_ reason: SubtaskReleaseReason) {
        WorkCounters.add(&released[SubtaskReleaseReason.allCases.firstIndex(of: reason)!])
    }

    public func count(_ reason: SubtaskReleaseReason) -> Int64 {
        released[SubtaskReleaseReason.allCases.firstIndex(of: reason)!]
    }

    /// Saturating: a counter pinned at Int64.max is wrong by less than a wrapped one.
    private static func add(_ counter: inout Int64) {
        if counter < Int64.max { counter += 1 }
    }

    /// `{"subtasksDone": 0, "subtasksFailed": 0, "subtasksReleased": {"claim-expired": 0, …},
    /// "heartbeatsSent": 0, "heartbeatsFailed": 0}`.
    public var json: JSONValue {
        [
            "subtasksDone": .int(subtasksDone),
            "subtasksFailed": .int(subtasksFailed),
            "subtasksReleased": .object(JSONObject(SubtaskReleaseReason.allCases.map { ($0.rawValue, .int(count($0))) })),
            "heartbeatsSent": .int(heartbeatsSent),
            "heartbeatsFailed": .int(heartbeatsFailed),
        ]
    }
}
