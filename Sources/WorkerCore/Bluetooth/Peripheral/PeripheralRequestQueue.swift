/// The requests of protocol-bluetooth §1: they wait in arrival order and run one at a time
/// on the model, each with the ticket its `.serve` and `.served` carry.
struct PeripheralRequestQueue: Sendable {
    struct Queued: Sendable, Equatable {
        var ticket: Int
        var request: BluetoothRequest
        var client: String
    }

    /// Why the running request is being stopped: the client's cancel (answered
    /// `cancelled`) or its departure (nothing to answer).
    enum Stopping: Sendable, Equatable { case cancelled, clientGone }

    /// The request on the model, if any; it stays there until its `.served`, stopped or not.
    enum Current: Sendable, Equatable {
        case idle
        /// `partials` holds the text not yet notified (streamed requests; nil once it is
        /// not wanted any more, as when the service stops).
        case running(Queued, partials: PartialCoalescer?)
        /// Its backend call was cancelled: its text is not wanted, its `.served` still comes.
        case stopping(Queued, Stopping)
    }

    let policy: RequestQueuePolicy
    private(set) var waiting: [Queued] = []
    private(set) var current = Current.idle
    private var lastTicket = 0

    init(policy: RequestQueuePolicy) { self.policy = policy }

    var running: Queued? {
        switch current {
        case .idle: nil
        case .running(let item, _), .stopping(let item, _): item
        }
    }

    /// Requests waiting or running.
    var count: Int { waiting.count + (running == nil ? 0 : 1) }

    /// When the running request's text is due as a partial whatever its size.
    var partialDueAtMs: Int64? {
        guard case .running(_, let partials?) = current else { return nil }
        return partials.dueAtMs
    }

    /// Whether one more request fits (else it is answered `busy`).
    var admitsAnother: Bool { policy.admits(waiting: waiting.count, running: running == nil ? 0 : 1) }

    /// Whether `client` has a request waiting or running.
    func holds(_ client: String) -> Bool { waiting.contains { $0.client == client } || running?.client == client }

    mutating func append(_ request: BluetoothRequest, client: String) {
        lastTicket += 1
        waiting.append(Queued(ticket: lastTicket, request: request, client: client))
    }

    /// The next request to run, taken from the queue, when none runs.
    mutating func next() -> Queued? {
        guard current == .idle, !waiting.isEmpty else { return nil }
        return waiting.removeFirst()
    }

    /// `item` (from `next`) runs; a streamed one gathers its text into partials.
    mutating func run(_ item: Queued, partialDelayMs: Int64) {
        current = .running(item, partials: item.request.stream ? PartialCoalescer(id: item.request.id, delayMs: partialDelayMs) : nil)
    }

    /// Text of the running request `ticket`, kept for its next partial unless it is being stopped.
    mutating func add(_ text: String, ticket: Int, nowMs: Int64) {
        guard case .running(let item, var partials?) = current, item.ticket == ticket else { return }
        partials.add(text, nowMs: nowMs)
        current = .running(item, partials: partials)
    }

    /// The running request's partial due at `nowMs`, sized for notifications at `mtu`, with its client.
    mutating func takePartial(nowMs: Int64, mtu: Int) -> (client: String, bytes: [UInt8])? {
        guard case .running(let item, var partials?) = current else { return nil }
        let partial = partials.take(nowMs: nowMs, budget: BluetoothMessage.partialBudget(id: item.request.id, mtu: mtu))
        current = .running(item, partials: partials)
        return partial.map { (item.client, $0) }
    }

    /// Stops the running request (its `.cancel` is the caller's to send): nil when none runs
    /// or it is already stopping, except that a client leaving after its cancel turns that
    /// stop into a departure, which has nothing to answer.
    mutating func stopRunning(_ why: Stopping) -> Queued? {
        switch (current, why) {
        case (.running(let item, _), _), (.stopping(let item, .cancelled), .clientGone):
            current = .stopping(item, why)
            return item
        default:
            return nil
        }
    }

    /// The running request `ticket` is done: what it was, why it was stopped (nil: it was
    /// not), and its text not yet notified.
    mutating func finish(ticket: Int) -> (item: Queued, stopped: Stopping?, partials: PartialCoalescer?)? {
        let ended: (Queued, Stopping?, PartialCoalescer?)
        switch current {
        case .running(let item, let partials) where item.ticket == ticket: ended = (item, nil, partials)
        case .stopping(let item, let why) where item.ticket == ticket: ended = (item, why, nil)
        default: return nil
        }
        current = .idle
        return ended
    }

    /// `client`'s waiting request `id`, taken out of the queue.
    mutating func removeWaiting(id: String, client: String) -> Queued? {
        guard let index = waiting.firstIndex(where: { $0.request.id == id && $0.client == client }) else { return nil }
        return waiting.remove(at: index)
    }

    /// Drops `client`'s waiting requests: how many there were.
    mutating func removeWaiting(of client: String) -> Int {
        let before = waiting.count
        waiting.removeAll { $0.client == client }
        return before - waiting.count
    }

    /// The service stops: nothing waiting will run, and the running request's answer
    /// cannot be delivered any more.
    mutating func abandon() {
        waiting.removeAll()
        if case .running(let item, _?) = current { current = .running(item, partials: nil) }
    }
}
