import WorkerCore

/// The coordinator's model-switch requests (protocol-coordinator §7) as one session
/// handles them: the one the last heartbeat answer asked for, the one being carried out,
/// the outcomes whose ack the coordinator has not taken, and the ones it took.
struct ModelSwitchLedger: Sendable {
    /// The model switch the last heartbeat answer asked for (protocol-coordinator §7), not yet taken.
    var pending: ModelSwitchRequest?
    /// The key of the switch being carried out; one at a time.
    private(set) var running: String?
    /// Outcomes whose ack the coordinator has not taken yet, by request key (the last 64).
    private(set) var outcomes = RecentKeys<(ok: Bool, error: String?)>()
    /// Requests acknowledged in this session: never carried out twice (the last 64).
    private(set) var acknowledged = RecentKeys<Bool>()

    /// The pending request, once; nil while a switch runs.
    mutating func take() -> ModelSwitchRequest? {
        guard let request = pending, running == nil else { return nil }
        pending = nil
        // A heartbeat answered before the coordinator took our ack still says pending.
        if acknowledged.contains(request.key) { return nil }
        running = request.key
        return request
    }

    mutating func ended(_ key: String) {
        if running == key { running = nil }
    }

    mutating func record(_ key: String, ok: Bool, error: String?) { outcomes[key] = (ok, error) }

    /// The coordinator took the outcome's ack: forgotten, and the request never carried out again.
    mutating func acknowledge(_ key: String) {
        outcomes[key] = nil
        acknowledged.insert(key)
    }
}
