/// The notifications of the worker's characteristics: who subscribed, the messages
/// waiting for the link, the one being sent chunk after chunk at the pacer's pace, and
/// what each characteristic shows since.
struct PeripheralOutbox: Sendable {
    typealias Command = PeripheralMachine.Command

    /// A message waiting for the link; `client` when it is one client's answer (dropped if
    /// that client leaves first), `refusal` when it is a refused cancel (one queued per client).
    struct Outgoing: Sendable {
        var role: GattLayout.Role
        var bytes: [UInt8]
        var client: String? = nil
        var refusal = false
        /// A rejection of bad input: the first dropped when the client's queue is full.
        var rejection = false
    }

    struct Sending: Sendable {
        var role: GattLayout.Role
        var chunks: [[UInt8]]
        var next = 0
        /// The client whose refused cancel this is: it may have another once this one is out.
        var refusalOf: String? = nil
        /// The client this message is for (nil: everyone subscribed).
        var client: String? = nil
    }

    /// What one `pump` sent.
    struct Pumped: Sendable, Equatable {
        var bytesNotified: Int64 = 0
        /// The clients whose message went out whole, in order.
        var answered: [String] = []
    }

    /// `limits.maxOutboundPerClient`.
    let maxPerClient: Int
    private(set) var messages: [Outgoing] = []
    /// Refused cancels waiting in the outbox or being sent, per client: at most one, so a
    /// flood of bad cancels costs one notification at a time, not one each.
    private var refusalsQueued: Set<String> = []
    private(set) var sending: Sending?
    private(set) var nextChunkAtMs: Int64 = 0
    /// How late a round may be and still keep the `bytes` schedule (ms).
    static let scheduleSlackMs: Int64 = 1
    private(set) var pacer: NotificationPacer
    /// The client the response characteristic's current value belongs to (its read is
    /// empty for anyone else).
    private(set) var responseOwner: String?
    /// Each characteristic's current value as D-Bus shows it: the last chunk notified.
    private(set) var values: [GattLayout.Role: [UInt8]] = [:]
    /// The characteristics with a subscriber (bluetoothd's StartNotify).
    private(set) var notifying: Set<GattLayout.Role> = []

    init(maxPerClient: Int, pacer: NotificationPacer) {
        self.maxPerClient = maxPerClient
        self.pacer = pacer
    }

    /// The next chunk, while there is one to send and it is not due by `nowMs` already.
    func nextDeadlineMs(after nowMs: Int64) -> Int64? {
        guard sending != nil || !messages.isEmpty, nextChunkAtMs > nowMs else { return nil }
        return nextChunkAtMs
    }

    func hasRefusalQueued(for client: String) -> Bool { refusalsQueued.contains(client) }

    /// Whether anything for `client` waits or is being sent.
    func holds(_ client: String) -> Bool { messages.contains { $0.client == client } || sending?.client == client }

    mutating func learn(attBearers: Int?) { pacer.learn(attBearers: attBearers) }

    mutating func subscribe(_ role: GattLayout.Role) { notifying.insert(role) }
    mutating func unsubscribe(_ role: GattLayout.Role) { notifying.remove(role) }
    /// bluetoothd's side is gone, and its subscriptions with it.
    mutating func unsubscribeAll() { notifying.removeAll() }

    /// Queues a message. A client's queue holds at most `maxPerClient` messages
    /// (protocol-bluetooth §3): beyond it its oldest rejection is dropped (or this one, when it is a
    /// rejection and none older is); answers are bounded by the request queue. Whether a
    /// rejection was dropped.
    mutating func enqueue(_ role: GattLayout.Role, _ bytes: [UInt8]?, client: String? = nil, refusal: Bool = false, rejection: Bool = false) -> Bool {
        guard let bytes, !bytes.isEmpty else { return false }
        var dropped = false
        if let client, messages.count(where: { $0.client == client }) >= maxPerClient {
            if let oldest = messages.firstIndex(where: { $0.client == client && $0.rejection }) {
                if messages[oldest].refusal { refusalsQueued.remove(client) }
                messages.remove(at: oldest)
                dropped = true
            } else if rejection {
                return true
            }
        }
        if refusal, let client { refusalsQueued.insert(client) }
        messages.append(Outgoing(role: role, bytes: bytes, client: client, refusal: refusal, rejection: rejection))
        return dropped
    }

    /// A departed client's messages are dropped: the next subscriber gets none of them.
    /// Whether one was being sent.
    mutating func drop(_ client: String) -> Bool {
        messages.removeAll { $0.client == client }
        let wasSending = sending?.client == client
        if wasSending { sending = nil }
        if responseOwner == client { responseOwner = nil }
        refusalsQueued.remove(client)
        return wasSending
    }

    /// The service stops: answers that cannot be delivered any more are dropped.
    mutating func removeAll() {
        messages.removeAll()
        refusalsQueued.removeAll()
        sending = nil
    }

    /// Sends each message whole, chunk after chunk, at least a pause apart (bluetoothd
    /// queues notifications without bound), never interleaving two messages; chunks fit
    /// `mtu`. `noOneBecause` says why nothing can be notified (the rest of a message is
    /// then dropped), nil when it can.
    mutating func pump(
        nowMs now: Int64, mtu: Int, noOneBecause: String?, requests: inout PeripheralRequestQueue, _ out: inout [Command]
    ) -> Pumped {
        var pumped = Pumped()
        while now >= nextChunkAtMs {
            if sending == nil {
                // The running request's text goes out whenever the link is free and a
                // partial is due: a slow link makes bigger partials, not a longer queue.
                if messages.isEmpty, let partial = requests.takePartial(nowMs: now, mtu: mtu) {
                    _ = enqueue(.response, partial.bytes, client: partial.client)
                }
                guard !messages.isEmpty else { return pumped }
                let message = messages.removeFirst()
                let chunks = BluetoothMessage.chunks(message.bytes, mtu: mtu).map { Array($0) }
                sending = Sending(role: message.role, chunks: chunks, refusalOf: message.refusal ? message.client : nil, client: message.client)
                nextChunkAtMs = max(nextChunkAtMs, now)
                out.append(
                    .log(.debug, "notifying \(message.bytes.count) bytes on \(message.role.rawValue) in \(chunks.count) chunk(s) at MTU \(mtu)"))
            }
            guard var current = sending, current.next < current.chunks.count else {
                if let client = sending?.refusalOf { refusalsQueued.remove(client) }
                sending = nil
                continue
            }
            let chunk = current.chunks[current.next]
            current.next += 1
            values[current.role] = chunk
            if current.role == .response { responseOwner = current.client }
            if let noOneBecause {
                out.append(.log(.info, "no one to notify (\(noOneBecause)): dropped the rest of a message on \(current.role.rawValue)"))
                sending = nil
            } else {
                out.append(.notify(current.role, chunk))
                let (bytes, overflow) = pumped.bytesNotified.addingReportingOverflow(Int64(chunk.count))
                pumped.bytesNotified = overflow ? Int64.max : bytes
                sending = current.next < current.chunks.count ? current : nil
                if sending == nil {
                    out.append(.log(.debug, "sent the last of \(current.chunks.count) chunk(s) on \(current.role.rawValue)"))
                    if let client = current.client { pumped.answered.append(client) }
                }
            }
            if sending == nil, let client = current.refusalOf { refusalsQueued.remove(client) }
            // Under `chunks` the pause counts from now, even after a late round: catching up
            // with a missed schedule in a burst is what reorders notifications over EATT
            // (docs/operating/bluetooth.md, "Pacing"). Under `bytes` (one bearer, in order) a
            // round at most `scheduleSlackMs` late keeps the schedule, so that the wake-up's and
            // the send's own time do not add up to a pause per chunk (6 % of the rate at MTU
            // 517); a later round counts from now too, as a burst would fill bluetoothd's queue.
            let pause = pacer.pause(afterChunkOf: chunk.count)
            let onSchedule = pacer.rule == .bytes && now - nextChunkAtMs <= Self.scheduleSlackMs
            nextChunkAtMs = (onSchedule ? nextChunkAtMs : now) + pause
        }
        return pumped
    }
}
