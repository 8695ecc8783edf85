import WorkerCore

/// The event log and the `events --follow` readers it feeds.
struct EventFeed {
    private(set) var log: EventLog
    private var subscribers: [Int: AsyncStream<WorkerEvent>.Continuation] = [:]
    private var lastSubscriber = 0

    init(log: EventLog) {
        self.log = log
    }

    /// Appends an event to the log and hands it to every reader.
    mutating func append(_ draft: EventDraft, timeMs: Int64) -> WorkerEvent {
        let event = log.append(draft, timeMs: timeMs)
        for continuation in subscribers.values { continuation.yield(event) }
        return event
    }

    /// A stream of events appended from now on, with the log so far as its backlog.
    mutating func subscribe() -> (backlog: [WorkerEvent], stream: AsyncStream<WorkerEvent>, id: Int) {
        let (stream, continuation) = AsyncStream<WorkerEvent>.makeStream(bufferingPolicy: .bufferingNewest(1_000))
        lastSubscriber += 1
        subscribers[lastSubscriber] = continuation
        return (log.events, stream, lastSubscriber)
    }

    mutating func unsubscribe(_ id: Int) {
        subscribers.removeValue(forKey: id)?.finish()
    }

    /// Ends every reader's stream (the daemon stops).
    mutating func finishAll() {
        for continuation in subscribers.values { continuation.finish() }
        subscribers.removeAll()
    }
}
