import StateStore
import WorkerCore

/// The event log: recorded, written behind, and streamed to `events --follow`.
extension WorkerState {
    /// Appends an event, hands the log to the writer and wakes `events --follow` readers.
    @discardableResult
    func record(_ draft: EventDraft, now: Int64? = nil) -> WorkerEvent {
        let event = events.append(draft, timeMs: now ?? clock.wallMs())
        // Serialized on the writer's thread, once for however many events queued meanwhile.
        writer.submit(WorkerStateFiles.eventsFile) { [log = events.log] in WorkerStateFiles.eventsBytes(log) }
        return event
    }

    /// A stream of events recorded from now on; ends when the daemon stops.
    public func subscribe() -> (backlog: [WorkerEvent], stream: AsyncStream<WorkerEvent>, id: Int) {
        events.subscribe()
    }

    public func unsubscribe(_ id: Int) {
        events.unsubscribe(id)
    }

    public func recentEvents(limit: Int?) -> [WorkerEvent] {
        guard let limit else { return events.log.events }
        return Array(events.log.events.suffix(limit))
    }
}
