/// What bluetoothd holds of the worker's GATT service: the application, then the
/// advertisement, on the one adapter chosen, each asked for with the epoch it belongs to.
struct PeripheralRegistrar: Sendable, Equatable {
    typealias Registration = PeripheralMachine.Registration
    typealias Registered = PeripheralMachine.Registered

    /// Nothing is registered without an adapter: the registrations live and die with the
    /// link to the adapter they were made on.
    enum Link: Sendable, Equatable {
        /// No usable adapter chosen (or bluetoothd's side was lost).
        case unbound
        /// On the adapter at `adapterPath`; the advertisement is asked for once the application is `.done`.
        case bound(adapterPath: String, application: Registration, advertisement: Registration)
    }

    private(set) var link = Link.unbound
    /// Bumped whenever bluetoothd's side is lost: answers to older calls are ignored.
    private(set) var epoch = 0
    /// A refused or released registration is asked for again from this time on.
    private(set) var retryAtMs: Int64 = 0

    var adapterPath: String? {
        guard case .bound(let path, _, _) = link else { return nil }
        return path
    }
    var application: Registration {
        guard case .bound(_, let application, _) = link else { return .none }
        return application
    }
    var advertisement: Registration {
        guard case .bound(_, _, let advertisement) = link else { return .none }
        return advertisement
    }

    /// The retry, while something is not registered and it has not passed `nowMs`.
    func nextDeadlineMs(after nowMs: Int64) -> Int64? {
        guard application == .none || advertisement == .none, retryAtMs > nowMs else { return nil }
        return retryAtMs
    }

    /// What to ask bluetoothd for next at `nowMs` (marked pending by `set`): the
    /// application first, the advertisement once the application is in place.
    func due(nowMs: Int64) -> Registered? {
        guard nowMs >= retryAtMs, case .bound(_, let application, let advertisement) = link else { return nil }
        if application == .none { return .application }
        if application == .done && advertisement == .none { return .advertisement }
        return nil
    }

    /// Registrations are made on the adapter at `path` from now on; those on another
    /// adapter were `lose`n first.
    mutating func bind(_ path: String) {
        link = .bound(adapterPath: path, application: .none, advertisement: .none)
    }

    /// Everything registered is gone (the adapter, or bluetoothd's side): answers still on
    /// their way belong to the old epoch.
    mutating func lose() {
        link = .unbound
        epoch += 1
    }

    /// bluetoothd is new: what it refused before is asked for at once.
    mutating func retryAtOnce() { retryAtMs = 0 }

    mutating func set(_ what: Registered, _ registration: Registration) {
        // Unbound, nothing is registered: an answer or release then changes nothing.
        guard case .bound(let path, var application, var advertisement) = link else { return }
        switch what {
        case .application: application = registration
        case .advertisement: advertisement = registration
        case .agent: assertionFailure("the pairing agent is PeripheralPairingAgent's")
        }
        link = .bound(adapterPath: path, application: application, advertisement: advertisement)
    }

    /// bluetoothd refused or released `what`: asked for again at `retryAtMs`.
    mutating func drop(_ what: Registered, retryAtMs: Int64) {
        set(what, .none)
        self.retryAtMs = retryAtMs
    }

    /// The connection to bluetoothd is gone with the stop: it took back what it held.
    mutating func forgetAll() {
        set(.application, .none)
        set(.advertisement, .none)
    }
}
