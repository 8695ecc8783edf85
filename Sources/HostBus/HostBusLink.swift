#if canImport(Glibc)
import Glibc
#endif
import DBus
import Logging
import Posix
import WorkerCore

/// What the host's services said, decoded from the bus (service §2).
public enum HostBusEvent: Sendable {
    case connected
    case busUnavailable(String)
    case presence(HostBusLink.Peer, HostServices.Presence)
    /// logind's delay inhibitor: a duplicate of its fd (ours to close), or why not.
    case inhibitor(Result<Int32, DBusError>)
    case prepareForSleep(Bool)
    case metered(UInt32?)
    case activeProfile(String?)
}

/// The system bus connection and what is read over it: logind's delay inhibitor and
/// PrepareForSleep, NetworkManager's Metered, power-profiles-daemon's ActiveProfile. An
/// actor owns the `Bus`; handlers run inside `dispatchReady()` on it and only decode into
/// `HostBusEvent`s, which the service handles (awaiting the daemon) outside the bus.
public actor HostBusLink: BusDriving {
    /// The services looked for, by bus name.
    public enum Peer: String, Sendable, CaseIterable {
        case logind = "org.freedesktop.login1"
        case networkManager = "org.freedesktop.NetworkManager"
        case powerProfiles = "net.hadess.PowerProfiles"
        /// power-profiles-daemon's name from 0.20 (the old one stays as an alias).
        case upowerProfiles = "org.freedesktop.UPower.PowerProfiles"

        public var path: String {
            switch self {
            case .logind: return "/org/freedesktop/login1"
            case .networkManager: return "/org/freedesktop/NetworkManager"
            case .powerProfiles: return "/net/hadess/PowerProfiles"
            case .upowerProfiles: return "/org/freedesktop/UPower/PowerProfiles"
            }
        }
    }

    static let logindManager = "org.freedesktop.login1.Manager"
    /// How long after a failed connect the bus is tried again.
    package let reconnectDelayMs: Int64 = 30_000

    let address: String?
    package let logger: Logger
    let events: AsyncStream<HostBusEvent>.Continuation
    package nonisolated let wake = WakeEvent()
    package private(set) var bus: Bus?
    private var slots: [BusSlot] = []
    private var inhibitorFD: Int32 = -1
    /// The unique names of the services as last seen: a signal counts only from its owner.
    private var owners: [Peer: String] = [:]

    public init(address: String?, logger: Logger, events: AsyncStream<HostBusEvent>.Continuation) {
        self.address = address
        self.logger = logger
        self.events = events
    }

    deinit { if inhibitorFD >= 0 { close(inhibitorFD) } }

    /// Connects (again after a loss), subscribes, asks, and drives the connection from
    /// the reactor until the task is cancelled.
    public func loop() async {
        await busLoop()
        drop()
    }

    package func connectBus() {
        do {
            try connect()
        } catch {
            events.yield(.busUnavailable("\(error)"))
        }
    }

    package func dropBus(reason: String) {
        drop()
        events.yield(.busUnavailable(reason))
    }

    /// Nothing runs on a clock here: every answer is a bus message.
    package func processed() async -> Int64? { nil }

    private func drop() {
        slots.removeAll()
        bus = nil
        owners = [:]
        releaseInhibitor()
    }

    private func connect() throws(BusFailure) {
        let connected: Bus
        if let address { connected = try Bus.connect(address: address) } else { connected = try Bus.system() }
        self.bus = connected
        events.yield(.connected)
        let events = self.events
        // Owners are followed, so a service that starts (or restarts) later is read then.
        slots.append(
            try connected.addMatch("type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged'") {
                [weak self] message in
                guard let args = try? message.arguments(), args.count == 3, let name = args[0].stringValue,
                    let peer = Peer(rawValue: name), let owner = args[2].stringValue
                else { return }
                self?.assumeIsolated { link in link.ownerChanged(peer, owner: owner.isEmpty ? nil : owner) }
            })
        slots.append(
            try connected.addMatch("type='signal',interface='\(HostBusLink.logindManager)',member='PrepareForSleep',path='/org/freedesktop/login1'") {
                [weak self] message in
                let (sender, path) = (message.sender, message.path)
                guard let self, self.assumeIsolated({ $0.isFrom(.logind, sender: sender, path: path) }),
                    let args = try? message.arguments(), case .bool(let starting)? = args.first
                else { return }
                events.yield(.prepareForSleep(starting))
            })
        // One rule per object: the bus daemon filters, so BlueZ's many property changes never reach us.
        for peer in [Peer.networkManager, .powerProfiles, .upowerProfiles] {
            slots.append(
                try connected.addMatch("type='signal',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',path='\(peer.path)'") {
                    [weak self] message in
                    guard let self, let args = try? message.arguments(), args.count >= 2, args[0].stringValue == peer.rawValue,
                        let changed = args[1].stringKeyedEntries
                    else { return }
                    let (sender, path) = (message.sender, message.path)
                    guard self.assumeIsolated({ $0.isFrom(peer, sender: sender, path: path) }) else { return }
                    switch peer {
                    case .networkManager:
                        if let value = changed["Metered"] { events.yield(.metered(value.integerValue.flatMap { UInt32(exactly: $0) })) }
                    case .powerProfiles, .upowerProfiles:
                        if let value = changed["ActiveProfile"] { events.yield(.activeProfile(value.stringValue)) }
                    case .logind:
                        break
                    }
                })
        }
        for peer in Peer.allCases {
            try connected.call(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "GetNameOwner", arguments: [.string(peer.rawValue)]
            ) { [weak self] result in
                let owner: String? = if case .success(let args) = result, let name = args.first?.stringValue, !name.isEmpty { name } else { nil }
                self?.assumeIsolated { link in link.ownerChanged(peer, owner: owner) }
            }
        }
    }

    private func isFrom(_ peer: Peer, sender: String?, path: String?) -> Bool {
        guard let sender, let owner = owners[peer] else { return false }
        return sender == owner && path == peer.path
    }

    private func ownerChanged(_ peer: Peer, owner: String?) {
        let previous = owners[peer]
        owners[peer] = owner
        guard previous != owner || owner == nil else { return }
        guard let owner else {
            events.yield(.presence(peer, .absent("\(peer.rawValue) is not on the system bus")))
            if peer == .networkManager { events.yield(.metered(nil)) }
            if peer == .logind { releaseInhibitor() }
            return
        }
        logger.debug("\(peer.rawValue) is on the system bus as \(owner)")
        events.yield(.presence(peer, .present))
        switch peer {
        case .logind:
            // A restarted logind forgot the old inhibitor: ours is stale, take a new one.
            releaseInhibitor()
            takeInhibitor()
        case .networkManager: readProperty(peer, "Metered") { [events] in events.yield(.metered($0?.integerValue.flatMap { UInt32(exactly: $0) })) }
        case .powerProfiles, .upowerProfiles: readProperty(peer, "ActiveProfile") { [events] in events.yield(.activeProfile($0?.stringValue)) }
        }
    }

    private func readProperty(_ peer: Peer, _ name: String, _ done: @escaping (DBusValue?) -> Void) {
        try? bus?.call(
            destination: peer.rawValue, path: peer.path, interface: "org.freedesktop.DBus.Properties", member: "Get",
            arguments: [.string(peer.rawValue), .string(name)]
        ) { result in
            if case .success(let args) = result, case .variant(let value)? = args.first { done(value) } else { done(nil) }
        }
        wake.signal()
    }

    /// Asks logind for a delay inhibitor: suspend waits (up to logind's
    /// InhibitDelayMaxSec, 5 s by default) until we close the fd it hands us.
    public func takeInhibitor() {
        guard inhibitorFD < 0, let bus else { return }
        let events = self.events
        do {
            try bus.call(
                destination: Peer.logind.rawValue, path: Peer.logind.path, interface: HostBusLink.logindManager, member: "Inhibit",
                arguments: [
                    .string("sleep"), .string("edgecoder-worker"),
                    .string("Finish taking work, save the journal and tell the coordinator"), .string("delay"),
                ]
            ) { [weak self] result in
                switch result {
                case .success(let args):
                    guard case .unixFD(let fd)? = args.first else {
                        events.yield(
                            .inhibitor(
                                .failure(
                                    DBusError(name: "org.freedesktop.DBus.Error.InvalidArgs", message: "Inhibit answered without a file descriptor")))
                        )
                        return
                    }
                    // The message owns its fd: keep a duplicate of our own.
                    let own = fcntl(fd, F_DUPFD_CLOEXEC, 3)
                    guard own >= 0 else {
                        events.yield(
                            .inhibitor(
                                .failure(DBusError(name: "org.freedesktop.DBus.Error.Failed", message: "dup: \(String(cString: strerror(errno)))"))))
                        return
                    }
                    self?.assumeIsolated { link in link.adopt(own) }
                    events.yield(.inhibitor(.success(own)))
                case .failure(let error):
                    events.yield(.inhibitor(.failure(error)))
                }
            }
        } catch {
            events.yield(.inhibitor(.failure(DBusError(name: "org.freedesktop.DBus.Error.Failed", message: "\(error)"))))
        }
        wake.signal()
    }

    private func adopt(_ fd: Int32) {
        if inhibitorFD >= 0 { close(inhibitorFD) }
        inhibitorFD = fd
    }

    /// Closes the inhibitor's fd: logind may suspend now.
    public func releaseInhibitor() {
        guard inhibitorFD >= 0 else { return }
        close(inhibitorFD)
        inhibitorFD = -1
    }
}
