/// The devices using the service (protocol-bluetooth §3 admission by use), those refused
/// until they disconnect, and the addresses cooling down after too much bad input.
struct PeripheralClientTable: Sendable {
    struct Session: Sendable {
        var address: String
        var assembler: RequestAssembler
        var mtu: Int?
        /// Its last write (admission counts as one), or the end of its last request or
        /// answer: idle since then.
        var lastActiveAtMs: Int64
        /// When its recent writes with bad input came (within the cool-down window).
        var badWritesAtMs: [Int64] = []
    }

    /// A refused device, disconnected at `atMs` (after it could read why).
    struct PendingDisconnect: Sendable {
        var address: String
        var atMs: Int64
    }

    /// Clients being served, by device path.
    private(set) var sessions: [String: Session] = [:]
    /// Devices that touched the service and were refused, by path, until they disconnect.
    private(set) var refused: [String: ClientRefusal] = [:]
    private(set) var pendingDisconnects: [String: PendingDisconnect] = [:]
    /// Addresses refused after too much bad input, until this time.
    private(set) var coolDowns: [String: Int64] = [:]

    /// The first pending disconnect after `nowMs` (one at or before it was done then).
    func nextDeadlineMs(after nowMs: Int64) -> Int64? {
        pendingDisconnects.values.map(\.atMs).filter { $0 > nowMs }.min()
    }

    /// The chunk size fits the smallest MTU among the clients (one notification reaches
    /// all of them); 23 until a client's MTU is known.
    var notificationMTU: Int { sessions.values.compactMap(\.mtu).min() ?? 23 }

    var statusClients: [BluetoothStatus.Client] {
        sessions.values.map { BluetoothStatus.Client(address: $0.address, mtu: $0.mtu) }.sorted { $0.address < $1.address }
    }

    mutating func admit(_ device: String, address: String, maxRequestBytes: Int, nowMs: Int64) {
        sessions[device] = Session(address: address, assembler: RequestAssembler(maxRequestBytes: maxRequestBytes), mtu: nil, lastActiveAtMs: nowMs)
    }

    /// ATT's MTU is 23 to 517; anything else is not one.
    mutating func learn(mtu: Int?, of device: String) {
        if let mtu, (23...517).contains(mtu) { sessions[device]?.mtu = mtu }
    }

    /// A client's write: what its assembler makes of it, with its address.
    mutating func write(_ bytes: [UInt8], from device: String, nowMs: Int64) -> (address: String, events: [AssemblerEvent])? {
        guard var session = sessions[device] else { return nil }
        let events = session.assembler.feed(bytes, nowMs: nowMs)
        session.lastActiveAtMs = nowMs
        sessions[device] = session
        return (session.address, events)
    }

    /// The client's request ended or its answer went out: it is idle from `nowMs`.
    mutating func active(_ address: String, nowMs: Int64) {
        guard let device = sessions.first(where: { $0.value.address == address })?.key else { return }
        sessions[device]?.lastActiveAtMs = nowMs
    }

    /// The client idle longest, when it has been idle for `idleMs` and `busy` says nothing of its is queued, running or to send.
    func evictable(nowMs: Int64, idleMs: Int64, busy: (String) -> Bool) -> String? {
        sessions.filter { _, session in nowMs - session.lastActiveAtMs >= idleMs && !busy(session.address) }
            .min { ($0.value.lastActiveAtMs, $0.key) < ($1.value.lastActiveAtMs, $1.key) }?.key
    }

    /// Idle partial requests time out: each client's rejections, in device order.
    mutating func tickAssemblers(nowMs: Int64) -> [(address: String, events: [AssemblerEvent])] {
        sessions.keys.sorted().compactMap { device in
            guard var session = sessions[device] else { return nil }
            let events = session.assembler.tick(nowMs: nowMs)
            sessions[device] = session
            return events.isEmpty ? nil : (session.address, events)
        }
    }

    /// A write with bad input at `nowMs`: how many the client made within `windowMs`.
    mutating func badWrite(of device: String, nowMs: Int64, windowMs: Int64) -> Int {
        guard var session = sessions[device] else { return 0 }
        session.badWritesAtMs = session.badWritesAtMs.filter { nowMs - $0 < windowMs } + [nowMs]
        sessions[device] = session
        return session.badWritesAtMs.count
    }

    mutating func removeSession(_ device: String) -> Session? { sessions.removeValue(forKey: device) }

    /// Refused until it disconnects, and disconnected at `disconnectAtMs` unless it goes first.
    mutating func refuse(_ device: String, address: String, _ why: ClientRefusal, disconnectAtMs: Int64?) {
        refused[device] = why
        if let disconnectAtMs { pendingDisconnects[device] = PendingDisconnect(address: address, atMs: disconnectAtMs) }
    }

    mutating func coolDown(_ address: String, untilMs: Int64) { coolDowns[address] = untilMs }

    mutating func expireCoolDowns(nowMs: Int64) { coolDowns = coolDowns.filter { $0.value > nowMs } }

    /// The refused devices due to be disconnected at `nowMs` (all of them with nil), in device order.
    mutating func takeDisconnects(dueAtMs nowMs: Int64?) -> [(device: String, address: String)] {
        pendingDisconnects.keys.sorted().compactMap { device in
            guard nowMs.map({ pendingDisconnects[device]!.atMs <= $0 }) ?? true else { return nil }
            return (device, pendingDisconnects.removeValue(forKey: device)!.address)
        }
    }

    /// The device disconnected or bluetoothd forgot it: its session, if it was a client.
    mutating func forget(_ device: String) -> Session? {
        refused.removeValue(forKey: device)
        pendingDisconnects.removeValue(forKey: device)
        return sessions.removeValue(forKey: device)
    }

    /// The clients' links are gone with the adapter or bluetoothd: their addresses, in device order.
    mutating func removeAll() -> [String] {
        let addresses = sessions.keys.sorted().map { sessions[$0]!.address }
        sessions.removeAll()
        refused.removeAll()
        pendingDisconnects.removeAll()
        return addresses
    }
}
