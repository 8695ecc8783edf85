import Logging
import Posix
import StateStore
import Tasks
import WorkerCore

/// Mode on's coordinator: the session's status, heartbeats on demand, the conduct its
/// behaviour monitor sees, and the counts for `metrics`.
extension WorkerState {
    public func updateCoordinator(_ status: CoordinatorStatus?) {
        coordinator.status = status
        updateServiceStatus()
    }

    /// Asks mode on's session for a heartbeat now and waits until it was sent (or
    /// `timeoutMs`); false at once when the session does not run.
    public func heartbeatNow(timeoutMs: Int64) async -> Bool {
        guard runtimeActive(.on), coordinator.status != nil else { return false }
        let signal = signals.heartbeatRequested
        signal.set(true)
        switch await race(
            {
                await signal.wait(for: false); return true
            },
            {
                try? await Task.sleep(nanoseconds: UInt64(max(0, timeoutMs)) * 1_000_000)
                return false
            })
        {
        case .first(let done): return done
        case .second(let done): return done
        }
    }

    // MARK: Conduct towards the coordinator's monitor

    /// Counts an event for `metrics` (kept in memory from start to exit).
    public func count(_ change: (inout WorkCounters) -> Void) {
        change(&coordinator.counters)
    }

    /// Changes the conduct record and writes it behind (a coalesced, atomic write).
    public func updateConduct<T: Sendable>(_ change: (inout CoordinatorConduct) -> T) -> T {
        let value = change(&coordinator.conduct)
        submitConduct()
        return value
    }

    /// A heartbeat the coordinator took (`CoordinatorRecord.heartbeatAccepted` says when
    /// the conduct record is written). Returns the gap hold when this heartbeat began one.
    public func conductHeartbeat(atMs now: Int64) -> CoordinatorConduct.GapHold? {
        let (began, persist) = coordinator.heartbeatAccepted(atMs: now, guardGaps: config.coordinator.gapGuard)
        if persist { submitConduct() }
        return began
    }

    private func submitConduct() {
        writer.submit(WorkerStateFiles.conductFile) { [conduct = coordinator.conduct] in WorkerStateFiles.conductBytes(conduct) }
    }

    /// Records that pulls are held, or resumed (nil), with the reason.
    public func recordWorkHold(_ reason: LocalHoldReason?, detail: String) {
        if let reason {
            record(EventDraft(kind: .workHeld, to: .on, reason: "new work held: \(reason.rawValue): \(detail)"))
            logger.notice("new work held: \(reason.rawValue): \(detail)", [("event", EventKind.workHeld.rawValue), ("hold_reason", reason.rawValue)])
        } else {
            record(EventDraft(kind: .workResumed, to: .on, reason: "new work resumed: \(detail)"))
            logger.notice("new work resumed: \(detail)", [("event", EventKind.workResumed.rawValue)])
        }
    }
}
