/// The status characteristic (protocol-bluetooth §1): its value, notified when it changes, every
/// `statusIntervalMs`, and (forced) on subscription; its values are asked of the daemon
/// every `statusCheckMs`.
struct PeripheralStatusCharacteristic: Sendable, Equatable {
    /// The whole value, as a read returns it.
    private(set) var bytes: [UInt8] = []
    private var sentAtMs: Int64 = 0
    private var checkDueAtMs: Int64 = 0
    /// When a client that connected while the status is subscribed gets it (bluetoothd
    /// calls StartNotify for the first subscriber only).
    private var forcedAtMs: Int64?

    /// The forced notification, unless it is due by `nowMs` already.
    func nextDeadlineMs(after nowMs: Int64) -> Int64? {
        guard let forcedAtMs, forcedAtMs > nowMs else { return nil }
        return forcedAtMs
    }

    mutating func force(atMs: Int64) { forcedAtMs = atMs }

    /// Whether the forced notification is due at `nowMs` (it is then no longer pending).
    mutating func takeForced(nowMs: Int64) -> Bool {
        guard let forcedAtMs, nowMs >= forcedAtMs else { return false }
        self.forcedAtMs = nil
        return true
    }

    /// Whether the values are to be asked for at `nowMs`; the next time is `everyMs` later.
    mutating func checkDue(nowMs: Int64, everyMs: Int64) -> Bool {
        guard nowMs >= checkDueAtMs else { return false }
        checkDueAtMs = nowMs + everyMs
        return true
    }

    /// The value is now `bytes`: whether it is to be sent, as it changed, is forced, or was
    /// last sent `intervalMs` ago.
    mutating func update(_ bytes: [UInt8], force: Bool, nowMs: Int64, intervalMs: Int64) -> Bool {
        let changed = bytes != self.bytes
        self.bytes = bytes
        guard force || changed || nowMs - sentAtMs >= intervalMs else { return false }
        sentAtMs = nowMs
        return true
    }
}
