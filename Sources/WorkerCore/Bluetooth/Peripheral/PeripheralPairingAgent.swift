/// The worker's Just Works agent (`bluetooth.pairingAgent`): registered with bluetoothd's
/// AgentManager1 (not per adapter) while it should run, and the bonds it made that no
/// client has used yet.
struct PeripheralPairingAgent: Sendable, Equatable {
    typealias Registration = PeripheralMachine.Registration

    /// Whether the agent runs at all (`settings.pairingAgent.registersAgent`).
    let registers: Bool
    /// Registered while `registers` says so, bluetoothd is there and the adapter is usable.
    private(set) var registration = Registration.none
    /// A refused or released agent is registered again from this time on.
    private(set) var retryAtMs: Int64 = 0
    /// Devices the agent accepted a pairing of, by path, with when: each is removed
    /// (its bond with it) unless it uses the service within `limits.clientIdleMs`.
    private(set) var bonds: [String: Int64] = [:]
    /// Adapters the kernel reports Bluetooth Classic connectable (`.classicConnectable`).
    private(set) var classicConnectable: Set<String> = []

    init(registers: Bool) { self.registers = registers }

    /// The retry, while the agent should run, is not registered, and it has not passed `nowMs`.
    func nextDeadlineMs(after nowMs: Int64) -> Int64? {
        guard registers, registration == .none, retryAtMs > nowMs else { return nil }
        return retryAtMs
    }

    mutating func set(_ registration: Registration) { self.registration = registration }

    /// bluetoothd refused or released the agent: registered again at `retryAtMs`.
    mutating func drop(retryAtMs: Int64) {
        registration = .none
        self.retryAtMs = retryAtMs
    }

    /// bluetoothd forgets an agent whose process or bluetoothd itself left the bus; a
    /// new bluetoothd gets it at once.
    mutating func bluezLost() { drop(retryAtMs: 0) }

    /// Whether the kernel's setting changed.
    mutating func setClassicConnectable(_ adapter: String, _ connectable: Bool) -> Bool {
        guard classicConnectable.contains(adapter) != connectable else { return false }
        if connectable { classicConnectable.insert(adapter) } else { classicConnectable.remove(adapter) }
        return true
    }

    /// The oldest bond, when remembering one of `device` would go past `maxBonds`.
    func bondToMakeRoom(for device: String, maxBonds: Int) -> String? {
        guard bonds[device] == nil, bonds.count >= maxBonds else { return nil }
        return bonds.min { ($0.value, $0.key) < ($1.value, $1.key) }?.key
    }

    mutating func remember(_ device: String, pairedAtMs: Int64) { bonds[device] = pairedAtMs }

    /// Whether there was a bond of `device` to forget.
    @discardableResult
    mutating func forget(_ device: String) -> Bool { bonds.removeValue(forKey: device) != nil }

    /// The bonds at least `idleMs` old at `nowMs`, oldest first.
    func expired(nowMs: Int64, idleMs: Int64) -> [(device: String, pairedAtMs: Int64)] {
        bonds.sorted { ($0.value, $0.key) < ($1.value, $1.key) }.filter { nowMs - $0.value >= idleMs }.map { ($0.key, $0.value) }
    }
}
