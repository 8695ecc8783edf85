/// The GATT peripheral of protocol-bluetooth §1 as a state machine: what bluetoothd, the clients, the
/// model and the clock say goes in as `Event`s; what the peripheral must do comes out as
/// `Command`s (register with bluetoothd, notify a chunk, disconnect a device, run a
/// request, answer a call). No bus, no clock, no tasks: `GattPeripheral` reads the bus,
/// feeds events, executes commands, and wakes at `nextDeadlineMs`.

/// What running one Bluetooth request came to.
public struct PeripheralOutcome: Sendable, Equatable {
    public var ok: Bool
    public var output: String
    public var error: String?
    public var durationMs: Int64
    /// Tokens of the answer, when the backend counts them (a streamed final's `evalCount`).
    public var evalCount: Int?
    public init(ok: Bool, output: String, error: String?, durationMs: Int64, evalCount: Int? = nil) {
        self.ok = ok
        self.output = output
        self.error = error
        self.durationMs = durationMs
        self.evalCount = evalCount
    }
}

/// How loud a line a machine asks its interpreter to log is.
public enum MachineLogLevel: Sendable, Equatable { case debug, info, notice, warning }

/// Why the Bluetooth side waits for the host: the machine knows which, the interpreter
/// adds the kernel's view (rfkill, controllers) as advice when it shows the problem.
public enum BluetoothSetupProblem: Sendable, Equatable {
    case bluezAbsent(adapter: String?)
    case noAdapter(configured: String?, known: [String])
    case poweredOff(adapter: String)

    /// The problem without the kernel's advice.
    public var summary: String {
        switch self {
        case .bluezAbsent: "bluetoothd is not running (org.bluez is not on the system bus)"
        case .noAdapter(let configured?, _): "adapter \(configured) (bluetooth.adapter) is not usable"
        case .noAdapter(nil, _): "no powered adapter"
        case .poweredOff(let adapter): "adapter \(adapter) is powered off"
        }
    }
}

public struct PeripheralMachine: Sendable {
    public struct Settings: Sendable, Equatable {
        public var adapter: String?
        public var localName: String
        public var maxRequestBytes: Int
        public var maxQueuedRequests: Int
        public var chunkPacingMs: Int64
        public var maxClients: Int
        public var statusIntervalMs: Int64 = 60_000
        public var retryMs: Int64 = 5_000
        /// Idle partial requests, the status check and the published status run this often.
        public var housekeepingMs: Int64 = 500
        public var statusCheckMs: Int64 = 2_000
        /// bluetoothd calls StartNotify for the first subscriber only: a client joining
        /// later gets the status this long after it connects (time to subscribe).
        public var laterClientStatusDelayMs: Int64 = 1_500
        /// `bluetooth.maxTokens`: a request asking for more runs with this many.
        public var maxTokens = BluetoothRequest.maxTokensLimit
        /// A streamed request's partial goes out this long after its first byte at the latest (protocol-bluetooth §2).
        public var partialDelayMs: Int64 = 100
        /// `bluetooth.allowedClients` (protocol-bluetooth §3).
        public var allowedClients = BluetoothAllowedClients.any
        /// Idle eviction, bad-input cool-down, outbound bound (protocol-bluetooth §3).
        public var limits = NeighbourLimits()
        /// `bluetooth.pacing`: `auto` decides from bluetoothd's ATT bearers (`.attBearers`).
        public var pacing = BluetoothPacingMode.auto
        /// Whether the worker's Just Works agent runs (`bluetooth.pairingAgent`), and why.
        public var pairingAgent = PairingAgentChoice(answerer: .host, reason: "security is open: no pairing is needed")

        public init(adapter: String?, localName: String, maxRequestBytes: Int, maxQueuedRequests: Int, chunkPacingMs: Int64, maxClients: Int) {
            self.adapter = adapter
            self.localName = localName
            self.maxRequestBytes = maxRequestBytes
            self.maxQueuedRequests = maxQueuedRequests
            self.chunkPacingMs = chunkPacingMs
            self.maxClients = maxClients
        }

        /// From the `bluetooth` section (the daemon sets `maxTokens` and `pairingAgent`,
        /// which need more than that section).
        public init(config: WorkerConfig.Bluetooth, agentID: String) {
            self.init(
                adapter: config.adapter, localName: BluetoothUUID.localName(agentID: agentID), maxRequestBytes: Int(config.maxRequestBytes),
                maxQueuedRequests: Int(config.maxQueuedRequests), chunkPacingMs: config.chunkPacingMs, maxClients: Int(config.maxClients))
            pacing = config.pacing
            allowedClients = config.allowedClients
            limits.clientIdleMs = config.clientIdleSec * 1_000
        }
    }

    public enum Registration: Sendable, Equatable { case none, pending, done }
    public enum Registered: String, Sendable, Equatable {
        case application = "GATT application"
        case advertisement
        /// The Just Works agent (AgentManager1, not per adapter).
        case agent = "pairing agent"
    }
    public enum RegistrationAnswer: Sendable, Equatable {
        case accepted
        /// bluetoothd already holds it (it keeps what we registered across an adapter power cycle).
        case alreadyExists(String)
        case refused(String)
    }

    /// A method call of bluetoothd's on one of the worker's characteristics.
    public enum Call: Sendable, Equatable {
        case read(GattLayout.Role, device: String?, mtu: Int?, offset: Int)
        case write(GattLayout.Role, bytes: [UInt8], device: String?, mtu: Int?, expectsReply: Bool)
        /// A WriteValue whose arguments are not (ay, a{sv}).
        case malformedWrite
        case startNotify(GattLayout.Role)
        case stopNotify(GattLayout.Role)
        /// LEAdvertisement1.Release: bluetoothd dropped the advertisement.
        case releaseAdvertisement
        /// An Agent1 call to the worker's pairing agent.
        case agent(JustWorksAgent.Call)
        /// A member the characteristic does not support.
        case unsupported(member: String, path: String)
    }

    public enum Reply: Sendable, Equatable {
        case value([UInt8])
        case empty
        case noReply
        case error(name: String, message: String)
    }

    public enum Event: Sendable, Equatable {
        case busOpened
        /// The bus could not be opened, or its connection failed; nil on a deliberate close.
        case busClosed(reason: String?)
        case bluez(BlueZSignal)
        case registration(Registered, epoch: Int, RegistrationAnswer)
        /// A call from `sender` (only bluetoothd may call the application).
        case call(sender: String?, Call)
        /// The request handed out by `.serve(ticket:…)` produced this text (streamed requests).
        case partial(ticket: Int, String)
        /// The request handed out by `.serve(ticket:…)` is done (after a `.cancel`: it stopped).
        case served(ticket: Int, PeripheralOutcome)
        /// The answer to `.fetchStatusValues`.
        case statusValues(modelState: String, batteryPct: Int?, force: Bool)
        /// bluetoothd's `[GATT] Channels` as its configuration says, read when it appeared
        /// on the bus (nil: unreadable, taken as more than one bearer).
        case attBearers(Int?)
        /// The kernel's settings of an adapter (by name): whether Classic devices can page it.
        case classicConnectable(adapter: String, Bool)
        /// Nothing happened but time passed.
        case tick
        /// Take everything back from bluetoothd and disconnect the clients.
        case stop
        case unregistered(Registered)
    }

    public enum Command: Sendable, Equatable {
        /// bluetoothd's GetManagedObjects.
        case loadObjects
        case register(Registered, adapterPath: String, epoch: Int)
        case unregister(Registered, adapterPath: String)
        case disconnect(device: String, address: String)
        /// Adapter1.RemoveDevice: bluetoothd forgets the device and its bond (a bond the
        /// worker's agent made for a device that never used the service).
        case removeDevice(adapterPath: String, device: String, address: String)
        /// One notification chunk (PropertiesChanged on the characteristic's Value).
        case notify(GattLayout.Role, [UInt8])
        /// Run a request on the model; answer with `.partial` (streamed requests) and `.served(ticket:…)`.
        case serve(ticket: Int, BluetoothRequest, client: String)
        /// Stop the request `ticket` (abort its backend call), then answer `.served` as usual.
        case cancel(ticket: Int, reason: String)
        /// Ask the daemon for the status characteristic's values; answer with `.statusValues`.
        case fetchStatusValues(force: Bool)
        /// `status` changed: show it.
        case publish(BluetoothStatus)
        case log(MachineLogLevel, String)
        /// The answer to the `.call` being handled.
        case reply(Reply)
    }

    public let settings: Settings
    public private(set) var follower = BlueZFollower()
    public private(set) var busOpen = false
    public private(set) var stopping = false
    public private(set) var status = BluetoothStatus()
    /// Set while `status.problem` is one of the host's setup problems.
    public private(set) var setupProblem: BluetoothSetupProblem?
    var lastPublished: BluetoothStatus?
    var housekeepingDueAtMs: Int64 = 0
    var lastNowMs: Int64 = 0

    // One sub-machine per job, each with the deadlines it needs (`nextDeadlineMs(after:)`):
    // the machine dispatches events among them and holds only what several jobs read.
    private(set) var registrar = PeripheralRegistrar()
    private(set) var pairingAgent: PeripheralPairingAgent
    private(set) var clientTable = PeripheralClientTable()
    private(set) var requests: PeripheralRequestQueue
    private(set) var outbox: PeripheralOutbox
    private(set) var statusCharacteristic = PeripheralStatusCharacteristic()

    /// A flood of pairings from random addresses removes the oldest unused bonds early
    /// rather than keeping a table without bound.
    public static let maxAgentBonds = 64

    public init(settings: Settings) {
        self.settings = settings
        pairingAgent = PeripheralPairingAgent(registers: settings.pairingAgent.registersAgent)
        requests = PeripheralRequestQueue(policy: RequestQueuePolicy(maxQueued: settings.maxQueuedRequests))
        outbox = PeripheralOutbox(
            maxPerClient: settings.limits.maxOutboundPerClient, pacer: NotificationPacer(mode: settings.pacing, pauseMs: settings.chunkPacingMs))
        status.pacing = outbox.pacer.rule.rawValue
        status.pairingAgent = settings.pairingAgent.answerer.rawValue
        status.pairingAgentReason = settings.pairingAgent.reason
        status.localName = settings.localName
        status.adapter = settings.adapter
        status.state = .waiting
        status.problem = "connecting to the system bus"
    }

    /// Clients being served, by device path.
    public var clients: [String] { clientTable.sessions.keys.sorted() }
    /// Requests waiting or running.
    public var queued: Int { requests.count }
    /// True once `.stop` was handled and bluetoothd holds nothing of ours any more.
    public var stopped: Bool { stopping && registrar.application == .none && registrar.advertisement == .none && pairingAgent.registration == .none }
    /// Bumped whenever bluetoothd's side is lost: answers to older calls are ignored.
    public var epoch: Int { registrar.epoch }
    /// Each characteristic's current value as D-Bus shows it: the last chunk notified.
    public var values: [GattLayout.Role: [UInt8]] { outbox.values }
    public var notifying: Set<GattLayout.Role> { outbox.notifying }
    /// The chunk size of notifications (`PeripheralClientTable.notificationMTU`).
    public var notificationMTU: Int { clientTable.notificationMTU }

    /// When the interpreter must feed `.tick` next (monotonic ms). Every time-based rule
    /// runs in every `on`, so only deadlines after the last event's time count: one that
    /// has passed was handled then (reporting it again would make the loop spin).
    public var nextDeadlineMs: Int64 {
        // A partial goes out with a chunk: not before the pacing lets the next one go.
        let partialDueAtMs = requests.partialDueAtMs.map { max($0, outbox.nextChunkAtMs) }.flatMap { $0 > lastNowMs ? $0 : nil }
        let deadlines = [
            outbox.nextDeadlineMs(after: lastNowMs), partialDueAtMs, statusCharacteristic.nextDeadlineMs(after: lastNowMs),
            clientTable.nextDeadlineMs(after: lastNowMs), registrar.nextDeadlineMs(after: lastNowMs), pairingAgent.nextDeadlineMs(after: lastNowMs),
        ]
        return max(deadlines.compactMap { $0 }.reduce(housekeepingDueAtMs, min), lastNowMs + 1)
    }

    // MARK: Events

    public mutating func on(_ event: Event, now: Int64) -> [Command] {
        lastNowMs = max(lastNowMs, now)
        var out: [Command] = []
        switch event {
        case .busOpened:
            busOpen = true
            setProblem("asking the bus for bluetoothd (org.bluez)")
        case .busClosed(let reason):
            busOpen = false
            // Our own stop closes the bus without a reason: what was registered was taken
            // back by us (or goes with our connection), bluetoothd itself is still there.
            bluezLost(reason == nil && stopping ? .ourStop : .busLost, &out)
            follower = BlueZFollower()
            if let reason {
                status.state = .waiting
                setProblem(reason)
            }
        case .bluez(let signal):
            for fact in follower.apply(signal) { apply(fact, now: now, &out) }
            if case .owner = signal, !follower.present { bluezAbsent() }
        case .registration(let what, let epoch, let answer):
            registered(what, epoch: epoch, answer: answer, now: now, &out)
        case .call(let sender, let call):
            handle(call, sender: sender, now: now, &out)
        case .partial(let ticket, let text):
            requests.add(text, ticket: ticket, nowMs: now)
            // Text comes once per token of the model: it changes nothing of the status and
            // no other rule (housekeeping runs on the loop's own deadlines), so only the pump
            // runs, not the whole round, which matters on a slow CPU.
            pump(now: now, &out)
            return out
        case .served(let ticket, let outcome):
            finished(ticket: ticket, outcome, &out)
        case .statusValues(let modelState, let batteryPct, let force):
            statusValues(modelState: modelState, batteryPct: batteryPct, force: force, now: now, &out)
        case .attBearers(let bearers):
            let before = outbox.pacer.rule
            outbox.learn(attBearers: bearers)
            status.attBearers = bearers
            status.pacing = outbox.pacer.rule.rawValue
            if outbox.pacer.rule != before || bearers != 1 {
                out.append(.log(outbox.pacer.reordersAtSmallMTUs ? .warning : .info, outbox.pacer.summary))
            }
        case .classicConnectable(let adapter, let connectable):
            guard pairingAgent.setClassicConnectable(adapter, connectable) else { break }
            reconcile(now: now, &out)
        case .tick:
            reconcile(now: now, &out)
        case .stop:
            stop(&out)
        case .unregistered(let what):
            switch what {
            case .application, .advertisement: registrar.set(what, .none)
            case .agent:
                pairingAgent.set(.none)
                out.append(.log(.notice, "pairing agent unregistered: bluetoothd's previous default agent, if any, answers pairings again"))
            }
        }
        housekeeping(now: now, &out)
        startWork(&out)
        pump(now: now, &out)
        publish(&out)
        return out
    }

    // MARK: bluetoothd's side

    mutating func apply(_ fact: BlueZFollower.Fact, now: Int64, _ out: inout [Command]) {
        switch fact {
        case .appeared(let owner):
            out.append(.log(.info, "bluetoothd is on the bus as \(owner)"))
            out.append(.loadObjects)
        case .gone:
            bluezLost(.bluetoothdLeft, &out)
            bluezAbsent()
        case .loaded:
            reconcile(now: now, &out)
        case .adapterRemoved(let path):
            if path == registrar.adapterPath {
                out.append(.log(.warning, "adapter \(adapterName(path)) went away"))
                registrationsLost(&out)
            }
            reconcile(now: now, &out)
        case .adapterPowered(let path, let powered):
            if path == registrar.adapterPath && !powered {
                out.append(.log(.warning, "adapter \(adapterName(path)) powered off"))
                registrationsLost(&out)
            }
            reconcile(now: now, &out)
        case .deviceConnected(let path):
            // Connecting is not using the service (protocol-bluetooth §3): the host's own mouse or
            // headset is never counted. bluetoothd calls StartNotify for the first
            // subscriber only, so a client joining later gets the status this long after
            // its link comes up.
            guard let device = follower.objects.devices[path], device.adapter == registrar.adapterPath,
                registrar.application == .done, outbox.notifying.contains(.status)
            else { return }
            statusCharacteristic.force(atMs: now + settings.laterClientStatusDelayMs)
        case .deviceDisconnected(let path), .deviceRemoved(let path):
            deviceGone(path, &out)
            if case .deviceRemoved = fact {
                // bluetoothd forgot it (and its bond): nothing of the agent's is left to remove.
                pairingAgent.forget(path)
                reconcile(now: now, &out)
            }
        case .adapterDiscovering, .adapterDiscoverable, .remoteObjectsRemoved, .deviceChanged:
            reconcile(now: now, &out)
        }
    }

    private func adapterName(_ path: String) -> String { follower.objects.adapters[path]?.name ?? path }

    mutating func bluezAbsent() {
        waiting(for: .bluezAbsent(adapter: settings.adapter))
    }

    mutating func setProblem(_ text: String?) {
        status.problem = text
        setupProblem = nil
    }

    mutating func waiting(for problem: BluetoothSetupProblem) {
        status.state = .waiting
        status.problem = problem.summary
        setupProblem = problem
    }

    /// Why what bluetoothd held for us is gone: the log says which, never that bluetoothd
    /// left when it was our own stop that closed the connection.
    enum BluezLoss { case bluetoothdLeft, busLost, ourStop }

    /// Everything bluetoothd held for us is gone (it exited, the bus did, or we closed it).
    mutating func bluezLost(_ cause: BluezLoss, _ out: inout [Command]) {
        let held = [registrar.application != .none ? "application" : nil, registrar.advertisement != .none ? "advertisement" : nil].compactMap { $0 }
        switch cause {
        case .bluetoothdLeft where follower.present || !held.isEmpty:
            out.append(.log(.warning, "bluetoothd left the bus: the application and advertisement are gone; registering again when it is back"))
        case .busLost where follower.present || !held.isEmpty:
            out.append(
                .log(.warning, "the system bus connection closed: the application and advertisement are gone; registering again when it is back"))
        case .ourStop where !held.isEmpty:
            // Withdrawn in order, the daemon says so itself once stopped; this is the case
            // where bluetoothd never answered and the closing connection takes them back.
            out.append(
                .log(
                    .info,
                    "stopped: closing the bus connection withdraws the worker's \(held.joined(separator: " and ")) (bluetoothd did not answer the unregistration)"
                ))
        default:
            break
        }
        registrationsLost(&out)
        registrar.retryAtOnce()
        pairingAgent.bluezLost()
    }

    /// The adapter went away or off, or bluetoothd did: what was registered is gone, and
    /// so are the clients' links (and their requests, protocol-bluetooth §2).
    mutating func registrationsLost(_ out: inout [Command]) {
        registrar.lose()
        // A registered agent outlives the adapter (AgentManager1 is bluetoothd's); one being
        // registered loses its answer with the epoch, so it is registered again.
        if pairingAgent.registration == .pending { pairingAgent.set(.none) }
        for address in clientTable.removeAll() { clientGone(address, &out) }
        outbox.unsubscribeAll()
    }

    /// Brings bluetoothd's side to what it should be: the application, then the
    /// advertisement, on the chosen adapter; failures retried after `retryMs`.
    mutating func reconcile(now: Int64, _ out: inout [Command]) {
        guard !stopping, busOpen, follower.present else { return }
        guard let (path, adapter) = follower.objects.choose(configured: settings.adapter) else {
            return waiting(for: .noAdapter(configured: settings.adapter, known: follower.objects.adapters.values.map(\.name).sorted()))
        }
        status.adapter = adapter.name
        status.address = adapter.address
        guard adapter.powered else { return waiting(for: .poweredOff(adapter: adapter.name)) }
        setupProblem = nil
        if registrar.adapterPath != path {
            registrationsLost(&out)
            registrar.bind(path)
        }
        reconcileAgent(adapter, path: path, now: now, &out)
        switch registrar.due(nowMs: now) {
        case .application:
            registrar.set(.application, .pending)
            status.state = .registering
            setProblem(nil)
            out.append(.log(.info, "registering the GATT application on \(adapter.name)"))
            out.append(.register(.application, adapterPath: path, epoch: registrar.epoch))
        case .advertisement:
            guard adapter.canAdvertise else {
                status.state = .failed
                setProblem("adapter \(adapter.name) offers no LE advertising (org.bluez.LEAdvertisingManager1): it needs Bluetooth Low Energy")
                return
            }
            registrar.set(.advertisement, .pending)
            out.append(.register(.advertisement, adapterPath: path, epoch: registrar.epoch))
        case .agent, nil:
            break
        }
    }

    mutating func registered(_ what: Registered, epoch: Int, answer: RegistrationAnswer, now: Int64, _ out: inout [Command]) {
        guard epoch == registrar.epoch, !stopping else { return }
        if what == .agent { return agentRegistered(answer, now: now, &out) }
        var accepted = false
        switch answer {
        case .accepted:
            accepted = true
        case .alreadyExists(let message):
            // bluetoothd keeps what we registered across an adapter power cycle (seen in
            // the VM: the application survives power off/on): it is ours, and in place.
            out.append(.log(.info, "\(what.rawValue) still registered with bluetoothd (\(message)); keeping it"))
            accepted = true
        case .refused(let error):
            registrar.drop(what, retryAtMs: now + settings.retryMs)
            status.state = .failed
            setProblem("bluetoothd refused the \(what.rawValue) on \(status.adapter ?? "?"): \(error); retrying every \(settings.retryMs / 1000) s")
            out.append(.log(.warning, status.problem!))
        }
        if accepted {
            registrar.set(what, .done)
            out.append(
                .log(.notice, "\(what.rawValue) registered on \(status.adapter ?? "?")\(what == .application ? "" : " as \(settings.localName)")"))
            if what == .advertisement {
                status.state = .advertising
                setProblem(nil)
                status.registrations += 1
            }
        }
        reconcile(now: now, &out)
    }

    // MARK: The pairing agent (bluetooth.pairingAgent)

    /// How a Bluetooth Classic device could reach the adapter to pair with it.
    public enum ClassicOpening: Sendable, Equatable {
        /// bluetoothd's Discoverable (inquiry and page scan).
        case discoverable
        /// Page scan on, set outside bluetoothd (`btmgmt connectable on`): only the
        /// kernel's settings show it (`MgmtWire`), bluetoothd's D-Bus API does not.
        case connectable
    }

    /// Why the worker's agent stands back while the adapter is open to Classic devices.
    static func classicOpenReason(_ adapter: String, _ opening: ClassicOpening) -> String {
        let (state, until) =
            switch opening {
            case .discoverable: ("is discoverable", "is not discoverable")
            case .connectable:
                ("is Bluetooth Classic connectable (page scan on, set outside bluetoothd: btmgmt connectable on)", "is not connectable")
            }
        return "\(adapter) \(state): while it is, a Bluetooth Classic device can pair with it by Just Works, "
            + "which the kernel accepts by itself under the worker's NoInputNoOutput agent without asking it; "
            + "the worker's agent stands back until \(adapter) \(until)"
    }

    /// The agent first (it must answer the first client's pairing), unless a Classic device
    /// can reach the adapter: registered, the worker's NoInputNoOutput default agent makes
    /// the adapter bondable, and the kernel then accepts any Classic Just Works pairing
    /// without asking it (docs/operating/bluetooth-pairing.md, "Bluetooth Classic"). It
    /// stands back while the adapter is discoverable or Classic-connectable, and comes back
    /// when it no longer is.
    mutating func reconcileAgent(_ adapter: BlueZObjects.Adapter, path: String, now: Int64, _ out: inout [Command]) {
        guard settings.pairingAgent.registersAgent else { return }
        let opening: ClassicOpening? =
            adapter.discoverable
            ? .discoverable
            : pairingAgent.classicConnectable.contains(adapter.name) ? .connectable : nil
        if let opening {
            let reason = Self.classicOpenReason(adapter.name, opening)
            if status.pairingAgentReason != reason {
                status.pairingAgentReason = reason
                out.append(.log(.warning, reason + "; until then clients that never paired are refused (security encrypted)"))
            }
            if pairingAgent.registration == .done {
                pairingAgent.set(.pending)
                out.append(.unregister(.agent, adapterPath: "/org/bluez"))
            }
            return
        }
        if pairingAgent.registration == .none && now >= pairingAgent.retryAtMs {
            pairingAgent.set(.pending)
            out.append(.register(.agent, adapterPath: path, epoch: registrar.epoch))
        }
    }

    mutating func agentRegistered(_ answer: RegistrationAnswer, now: Int64, _ out: inout [Command]) {
        switch answer {
        case .accepted, .alreadyExists:
            pairingAgent.set(.done)
            status.pairingAgentReason = settings.pairingAgent.reason
            out.append(
                .log(
                    .notice,
                    "pairing agent registered (\(JustWorksAgent.capability), bluetoothd's default agent): Just Works pairings of \(status.adapter ?? "the adapter")'s devices are accepted; \(settings.pairingAgent.reason)"
                ))
        case .refused(let error):
            pairingAgent.drop(retryAtMs: now + settings.retryMs)
            status.pairingAgentReason = "bluetoothd refused the pairing agent: \(error); retrying every \(settings.retryMs / 1000) s"
            out.append(
                .log(.warning, status.pairingAgentReason + ". Until it is registered, clients that never paired are refused (security encrypted)"))
        }
    }

    /// An Agent1 call (bluetoothd's, `handle` checked): Just Works for the worker's adapter
    /// only, decided by `JustWorksAgent`; nothing is ever held.
    mutating func agentCall(_ call: JustWorksAgent.Call, now: Int64, _ out: inout [Command]) {
        switch call {
        case .release:
            // bluetoothd dropped it on its own (it is going away, or another process
            // unregistered it): registered again after the retry delay while it should run.
            if pairingAgent.registration != .none && !stopping {
                out.append(.log(.warning, "bluetoothd released the pairing agent; registering it again in \(settings.retryMs / 1000) s"))
                pairingAgent.drop(retryAtMs: now + settings.retryMs)
            } else {
                pairingAgent.set(.none)
            }
            out.append(.reply(.empty))
        case .cancel:
            out.append(.reply(.empty))
        case .malformed(let member):
            out.append(.reply(.error(name: "org.freedesktop.DBus.Error.InvalidArgs", message: "unexpected arguments for \(member)")))
        case .request(let request):
            guard pairingAgent.registers, pairingAgent.registration != .none, !stopping else {
                out.append(.reply(.error(name: BlueZErrorName.rejected.rawValue, message: "the worker's pairing agent is not registered")))
                return
            }
            let device = request.device
            switch JustWorksAgent.answer(request, adapterPath: registrar.adapterPath, transport: DeviceTransport.of(follower.objects.devices[device]))
            {
            case .accept(let address):
                status.pairingsAccepted += 1
                out.append(.log(.notice, "accepted a Just Works pairing from \(address) (the worker's pairing agent)"))
                out.append(.reply(.empty))
                // A client already using the service keeps its (renewed) bond.
                if clientTable.sessions[device] == nil { rememberAgentBond(device, address: address, now: now, &out) }
            case .reject(let why):
                status.pairingsRefused += 1
                out.append(.log(.info, "refused a pairing request: \(why)"))
                out.append(.reply(.error(name: BlueZErrorName.rejected.rawValue, message: why)))
            }
        }
    }

    mutating func rememberAgentBond(_ device: String, address: String, now: Int64, _ out: inout [Command]) {
        if let oldest = pairingAgent.bondToMakeRoom(for: device, maxBonds: Self.maxAgentBonds) {
            removeAgentBond(oldest, why: "\(Self.maxAgentBonds) unused bonds of the worker's agent are waiting; the oldest goes first", &out)
        }
        pairingAgent.remember(device, pairedAtMs: now)
    }

    /// Removes the bond the agent made for `device` (it never used the service).
    mutating func removeAgentBond(_ device: String, why: String, _ out: inout [Command]) {
        guard pairingAgent.forget(device), let known = follower.objects.devices[device] else { return }
        status.agentBondsRemoved += 1
        out.append(.log(.notice, "removing the bond of \(known.address): \(why)"))
        out.append(.removeDevice(adapterPath: known.adapter, device: device, address: known.address))
    }

    /// Bonds of the agent whose device has not used the service within clientIdleSec.
    mutating func expireAgentBonds(now: Int64, _ out: inout [Command]) {
        for (device, pairedAt) in pairingAgent.expired(nowMs: now, idleMs: settings.limits.clientIdleMs) {
            removeAgentBond(
                device, why: "paired by the worker's agent \((now - pairedAt) / 1000) s ago and never used the service (bluetooth.clientIdleSec)",
                &out)
        }
    }

    mutating func stop(_ out: inout [Command]) {
        stopping = true
        if pairingAgent.registration != .none && busOpen && follower.present {
            out.append(.unregister(.agent, adapterPath: "/org/bluez"))
        } else {
            pairingAgent.set(.none)
        }
        guard busOpen, follower.present, let adapterPath = registrar.adapterPath else {
            registrar.forgetAll()
            return
        }
        if registrar.advertisement != .none { out.append(.unregister(.advertisement, adapterPath: adapterPath)) }
        if registrar.application != .none { out.append(.unregister(.application, adapterPath: adapterPath)) }
        // Connected clients learn at once that the worker is gone (their link would
        // otherwise stay up, to a host without the service).
        for device in clientTable.sessions.keys.sorted() {
            out.append(.disconnect(device: device, address: clientTable.sessions[device]!.address))
        }
        // Refused devices waiting to be told why are disconnected now; a device that
        // never touched the service is not ours to disconnect.
        for (device, address) in clientTable.takeDisconnects(dueAtMs: nil) {
            out.append(.disconnect(device: device, address: address))
        }
        // Answers that cannot be delivered any more are dropped with the queue.
        requests.abandon()
        outbox.removeAll()
    }

    // MARK: Calls from bluetoothd

    /// Whether `sender` may call the application's objects: bluetoothd only.
    public func admitsCaller(_ sender: String?) -> Bool {
        sender != nil && sender == follower.owner
    }

    mutating func handle(_ call: Call, sender: String?, now: Int64, _ out: inout [Command]) {
        // Only bluetoothd talks to the application (the system bus's policy already keeps
        // other users out; this keeps out local root mistakes too).
        guard admitsCaller(sender) else {
            out.append(.reply(.error(name: "org.freedesktop.DBus.Error.AccessDenied", message: "only bluetoothd may call the worker's GATT objects")))
            return
        }
        switch call {
        case .read(let role, let device, let mtu, let offset):
            var value: [UInt8]
            switch touch(device: device, mtu: mtu, now: now, &out) {
            case .client(let address):
                value = role == .status ? statusCharacteristic.bytes : (outbox.responseOwner == address ? outbox.values[role] ?? [] : [])
            case .refused(let why) where role == .response:
                value = why.message(maxClients: settings.maxClients)
            case .refused(let why):
                out.append(.reply(.error(name: BlueZErrorName.notAuthorized.rawValue, message: why.error(maxClients: settings.maxClients))))
                return
            case .anonymous:
                value = role == .status ? statusCharacteristic.bytes : []
            }
            guard offset >= 0, offset <= value.count else {
                out.append(
                    .reply(.error(name: BlueZErrorName.invalidOffset.rawValue, message: "offset \(offset) is past the value's \(value.count) bytes")))
                return
            }
            out.append(.reply(.value(Array(value[offset...]))))
        case .write(let role, let bytes, let device, let mtu, let expectsReply):
            out.append(.log(.debug, "write of \(bytes.count) bytes from \(device ?? "?") (mtu \(mtu ?? 0))"))
            guard role == .request else { return out.append(.reply(expectsReply ? .empty : .noReply)) }
            switch touch(device: device, mtu: mtu, now: now, &out) {
            case .client:
                out.append(.reply(expectsReply ? .empty : .noReply))
            case .refused(let why):
                out.append(
                    .reply(
                        expectsReply
                            ? .error(name: BlueZErrorName.notPermitted.rawValue, message: why.error(maxClients: settings.maxClients)) : .noReply))
                return
            case .anonymous:
                out.append(.reply(expectsReply ? .empty : .noReply))
                out.append(.log(.warning, "a write of \(bytes.count) bytes named no device; dropped"))
                return
            }
            guard let device, let written = clientTable.write(bytes, from: device, nowMs: now) else { return }
            assembled(written.events, client: written.address, &out)
            badInput(written.events, device: device, now: now, &out)
        case .malformedWrite:
            out.append(.reply(.error(name: BlueZErrorName.invalidArguments.rawValue, message: "WriteValue takes (ay, a{sv})")))
        case .startNotify(let role):
            outbox.subscribe(role)
            if role == .status { out.append(.fetchStatusValues(force: true)) }
            out.append(.reply(.empty))
        case .stopNotify(let role):
            outbox.unsubscribe(role)
            out.append(.reply(.empty))
        case .agent(let call):
            agentCall(call, now: now, &out)
        case .releaseAdvertisement:
            out.append(.log(.warning, "bluetoothd released the advertisement"))
            registrar.drop(.advertisement, retryAtMs: now + settings.retryMs)
            status.advertising = false
            out.append(.reply(.empty))
        case .unsupported(let member, let path):
            out.append(.reply(.error(name: BlueZErrorName.notSupported.rawValue, message: "\(member) is not supported on \(path)")))
        }
    }

    // MARK: Clients

    /// Who made a ReadValue/WriteValue: a client, a refused device, or a call that named none.
    enum Toucher: Sendable, Equatable {
        case client(address: String)
        case refused(ClientRefusal)
        /// bluetoothd always names the device; a call without one takes no client's place.
        case anonymous
    }

    /// A device touched the service (protocol-bluetooth §3 admission by use): it becomes a client if it
    /// may, learning its MTU; otherwise it is refused, told why on a read of the response,
    /// and disconnected a moment later.
    mutating func touch(device: String?, mtu: Int?, now: Int64, _ out: inout [Command]) -> Toucher {
        guard let device, device.hasPrefix("/") else { return .anonymous }
        if let why = admit(device, now: now, &out) { return .refused(why) }
        clientTable.learn(mtu: mtu, of: device)
        return .client(address: clientTable.sessions[device]!.address)
    }

    /// nil when `device` is (or now becomes) a client, else why it is refused.
    mutating func admit(_ device: String, now: Int64, _ out: inout [Command]) -> ClientRefusal? {
        if clientTable.sessions[device] != nil { return nil }
        if let why = clientTable.refused[device] { return why }
        let address = follower.objects.address(of: device)
        if stopping {
            // Not left half-admitted: the service is going away, so the device is told
            // and disconnected at once, like the clients stop() disconnects.
            clientTable.refuse(device, address: address, .stopping, disconnectAtMs: nil)
            out.append(.log(.info, "device \(address) touched the service while it stops; disconnecting it"))
            out.append(.disconnect(device: device, address: address))
            return .stopping
        }
        if let until = clientTable.coolDowns[address], now < until {
            status.clientsRefused += 1
            return refuse(
                device, address: address, .coolingDown, detail: "cooling down for \((until - now + 999) / 1000) s more after too much bad input",
                now: now, &out)
        }
        let bonded = follower.objects.devices[device]?.bonded ?? false
        guard settings.allowedClients.allows(address: address, bonded: bonded) else {
            status.clientsNotAllowed += 1
            return refuse(
                device, address: address, .notAllowed, detail: "not in bluetooth.allowedClients (\(settings.allowedClients))", now: now, &out)
        }
        if clientTable.sessions.count >= max(1, settings.maxClients) {
            guard let idle = evictable(now: now) else {
                status.clientsRefused += 1
                return refuse(
                    device, address: address, .busy,
                    detail:
                        "\(settings.maxClients) client(s) already connected (bluetooth.maxClients); BlueZ 5.66 would show it every other client's answers",
                    now: now, &out)
            }
            let gone = clientTable.removeSession(idle)!
            status.clientsEvicted += 1
            out.append(
                .log(
                    .notice,
                    "client \(gone.address) evicted: idle for \((now - gone.lastActiveAtMs) / 1000) s (bluetooth.clientIdleSec) while \(address) wants its slot"
                ))
            clientGone(gone.address, &out)
            out.append(.disconnect(device: idle, address: gone.address))
        }
        clientTable.admit(device, address: address, maxRequestBytes: settings.maxRequestBytes, nowMs: now)
        // It uses the service: a bond the agent made for it is the operator's to keep.
        pairingAgent.forget(device)
        out.append(.log(.info, "client \(address) connected"))
        return nil
    }

    /// A client's request ended or its answer went out: it is idle from now, not from its last write.
    mutating func active(_ client: String) {
        clientTable.active(client, nowMs: lastNowMs)
    }

    /// The client idle longest, when it has been idle for `clientIdleMs` with nothing queued, running or to send.
    func evictable(now: Int64) -> String? {
        clientTable.evictable(nowMs: now, idleMs: settings.limits.clientIdleMs) { requests.holds($0) || outbox.holds($0) }
    }

    mutating func refuse(_ device: String, address: String, _ why: ClientRefusal, detail: String, now: Int64, _ out: inout [Command]) -> ClientRefusal
    {
        clientTable.refuse(device, address: address, why, disconnectAtMs: now + settings.limits.refusalDisconnectDelayMs)
        out.append(.log(.warning, "client \(address) refused (\(why.rawValue)): \(detail); disconnecting it"))
        return why
    }

    /// A write that produced rejections is bad input; too many within the window cut the
    /// client off and refuse it for the cool-down (protocol-bluetooth §3).
    mutating func badInput(_ events: [AssemblerEvent], device: String, now: Int64, _ out: inout [Command]) {
        guard events.contains(where: { if case .rejected = $0 { true } else { false } }) else { return }
        let limits = settings.limits
        let badWrites = clientTable.badWrite(of: device, nowMs: now, windowMs: limits.badWriteWindowMs)
        guard badWrites >= limits.badWritesLimit, let session = clientTable.removeSession(device) else { return }
        clientTable.coolDown(session.address, untilMs: now + limits.coolDownMs)
        status.clientsCooledDown += 1
        clientGone(session.address, &out)
        _ = refuse(
            device, address: session.address, .coolingDown,
            detail:
                "\(badWrites) writes of bad input within \(limits.badWriteWindowMs / 1000) s; refused for \(limits.coolDownMs / 1000) s",
            now: now, &out)
    }

    mutating func deviceGone(_ path: String, _ out: inout [Command]) {
        if let session = clientTable.forget(path) {
            out.append(
                .log(.info, "client \(session.address) disconnected\(session.assembler.isPartial ? " in the middle of a request (dropped)" : "")"))
            clientGone(session.address, &out)
        }
    }

    /// A departed client's queued requests are dropped and its running one stopped (protocol-bluetooth
    /// §2, protocol-bluetooth §3): nothing of it is answered to whoever connects next.
    mutating func clientGone(_ client: String, _ out: inout [Command]) {
        let dropped = requests.removeWaiting(of: client)
        if dropped > 0 {
            status.requestsFailed += Int64(dropped)
            out.append(.log(.info, "cancelled \(dropped) queued request(s) of \(client): the client disconnected"))
        }
        if requests.running?.client == client, let item = requests.stopRunning(.clientGone) {
            out.append(.log(.info, "cancelling request \(item.request.id) of \(client): the client disconnected"))
            out.append(.cancel(ticket: item.ticket, reason: "cancelled: the client disconnected"))
        }
        // The rest of a message being sent to it is dropped: the next subscriber gets none of it.
        if outbox.drop(client) {
            out.append(.log(.info, "dropped the rest of an answer to \(client): the client left"))
        }
        status.queued = queued
    }

    mutating func assembled(_ events: [AssemblerEvent], client: String, _ out: inout [Command]) {
        // At most one rejection per write (protocol-bluetooth §3): a write of 254 bad objects costs one
        // notification and one log line, not 254.
        let rejections = events.filter { if case .rejected = $0 { true } else { false } }.count
        // The one answered is the first that names an id, else the first: a client
        // matches answers by id (the tail of a request whose first chunks were lost can
        // follow a piece of garbage without one).
        let answered =
            events.firstIndex { if case .rejected(_?, _) = $0 { true } else { false } }
            ?? events.firstIndex { if case .rejected = $0 { true } else { false } }
        for (index, event) in events.enumerated() {
            switch event {
            case .rejected(let id, let error):
                status.requestsRejected += 1
                guard index == answered else { continue }
                out.append(
                    .log(
                        .info,
                        "request from \(client) rejected: \(error)\(rejections > 1 ? " (and \(rejections - 1) more bad object(s) in the same write, answered once)" : "")"
                    ))
                enqueue(.response, BluetoothMessage.rejection(id: id, error: error), client: client, rejection: true)
            case .cancel(let id):
                cancel(id: id, client: client, &out)
            case .request(let request):
                guard requests.admitsAnother else {
                    status.requestsFailed += 1
                    out.append(.log(.warning, "request \(request.id) from \(client) refused: busy (\(queued) queued)"))
                    enqueue(
                        .response, BluetoothMessage.rejection(id: request.id, error: RequestQueuePolicy.busyError), client: client, rejection: true)
                    continue
                }
                if let turns = request.messages {
                    out.append(
                        .log(
                            .info,
                            "request \(request.id) from \(client): a chat of \(turns.count) turn(s), maxTokens \(request.maxTokens)\(request.stream ? ", streamed" : "")"
                        ))
                } else {
                    out.append(
                        .log(
                            .info,
                            "request \(request.id) from \(client): \(request.prompt.utf8.count) bytes of prompt, maxTokens \(request.maxTokens)\(request.stream ? ", streamed" : "")"
                        ))
                }
                requests.append(request, client: client)
            }
        }
        status.queued = queued
    }

    /// `{"id", "cancel": true}`: only the client's own queued or running request stops; any
    /// other id (unknown, finished, another client's) is refused without naming whose it
    /// is, and the refusal goes out with no id, so another client never sees an answer
    /// for its own request that it did not ask for.
    mutating func cancel(id: String, client: String, _ out: inout [Command]) {
        if let item = requests.removeWaiting(id: id, client: client) {
            status.requestsFailed += 1
            status.queued = queued
            out.append(.log(.info, "request \(id) of \(client) cancelled while queued"))
            answerCancelled(item, durationMs: 0)
            return
        }
        if let item = requests.running, item.request.id == id, item.client == client {
            // A second cancel of the same request has nothing more to stop.
            guard requests.stopRunning(.cancelled) != nil else { return }
            out.append(.log(.info, "cancelling request \(id) of \(client) (running)"))
            out.append(.cancel(ticket: item.ticket, reason: "cancelled"))
            return
        }
        status.requestsRejected += 1
        guard !outbox.hasRefusalQueued(for: client) else {
            out.append(.log(.debug, "cancel of \(id) from \(client) refused (a refusal is already queued)"))
            return
        }
        out.append(.log(.info, "cancel of \(id) from \(client) refused: not a queued or running request of this client"))
        let error = "cancel_refused: no queued or running request \"\(id)\" of this client"
        enqueue(.response, BluetoothMessage.rejection(id: nil, error: error), client: client, refusal: true, rejection: true)
    }

    /// A cancelled request's last message: `ok: false`, `error: "cancelled"`, in the form
    /// its client asked for.
    mutating func answerCancelled(_ item: PeripheralRequestQueue.Queued, durationMs: Int64) {
        if status.requestsCancelled < Int64.max { status.requestsCancelled += 1 }
        let bytes =
            item.request.stream
            ? BluetoothMessage.final(id: item.request.id, ok: false, durationMs: durationMs, error: "cancelled")
            : BluetoothMessage.response(id: item.request.id, output: "", ok: false, durationMs: durationMs, error: "cancelled")
        enqueue(.response, bytes, client: item.client)
    }

    // MARK: Requests

    /// One request at a time runs on the model, in arrival order.
    mutating func startWork(_ out: inout [Command]) {
        guard !stopping, var next = requests.next() else { return }
        if next.request.maxTokens > settings.maxTokens {
            out.append(
                .log(.info, "request \(next.request.id): maxTokens \(next.request.maxTokens) capped to \(settings.maxTokens) (bluetooth.maxTokens)"))
            next.request.maxTokens = settings.maxTokens
        }
        requests.run(next, partialDelayMs: settings.partialDelayMs)
        out.append(.serve(ticket: next.ticket, next.request, client: next.client))
        status.queued = queued
    }

    mutating func finished(ticket: Int, _ outcome: PeripheralOutcome, _ out: inout [Command]) {
        guard case (let item, let stop, var partials)? = requests.finish(ticket: ticket) else { return }
        active(item.client)
        status.queued = queued
        if outcome.ok && stop == nil { status.requestsServed += 1 } else { status.requestsFailed += 1 }
        guard !stopping else { return }
        switch stop {
        case .clientGone:
            return
        case .cancelled:
            answerCancelled(item, durationMs: outcome.durationMs)
        case nil where item.request.stream:
            // The text produced before the end (or a failure part-way) goes out first.
            for message in partials?.drain(budget: BluetoothMessage.partialBudget(id: item.request.id, mtu: notificationMTU)) ?? [] {
                enqueue(.response, message, client: item.client)
            }
            enqueue(
                .response,
                BluetoothMessage.final(
                    id: item.request.id, ok: outcome.ok, durationMs: outcome.durationMs,
                    evalCount: outcome.evalCount, error: outcome.error), client: item.client)
        case nil:
            enqueue(
                .response,
                BluetoothMessage.response(
                    id: item.request.id, output: outcome.output, ok: outcome.ok,
                    durationMs: outcome.durationMs, error: outcome.error), client: item.client)
        }
    }

    // MARK: Notifications

    /// Queues a message (`PeripheralOutbox.enqueue`), counting a rejection dropped for a full client queue.
    mutating func enqueue(_ role: GattLayout.Role, _ bytes: [UInt8]?, client: String? = nil, refusal: Bool = false, rejection: Bool = false) {
        if outbox.enqueue(role, bytes, client: client, refusal: refusal, rejection: rejection) { status.rejectionsDropped += 1 }
    }

    mutating func pump(now: Int64, _ out: inout [Command]) {
        // No one to send to (bluetoothd gone, application not registered): the rest of a message is dropped.
        let noOneBecause = busOpen ? (registrar.application == .done ? nil : "application not registered") : "no bus"
        let pumped = outbox.pump(nowMs: now, mtu: notificationMTU, noOneBecause: noOneBecause, requests: &requests, &out)
        let (bytes, overflow) = status.bytesNotified.addingReportingOverflow(pumped.bytesNotified)
        status.bytesNotified = overflow ? Int64.max : bytes
        for client in pumped.answered { active(client) }
    }

    // MARK: Housekeeping

    mutating func housekeeping(now: Int64, _ out: inout [Command]) {
        if statusCharacteristic.takeForced(nowMs: now) { out.append(.fetchStatusValues(force: true)) }
        for (device, address) in clientTable.takeDisconnects(dueAtMs: now) {
            out.append(.disconnect(device: device, address: address))
        }
        guard now >= housekeepingDueAtMs else { return }
        housekeepingDueAtMs = now + settings.housekeepingMs
        clientTable.expireCoolDowns(nowMs: now)
        expireAgentBonds(now: now, &out)
        for (client, events) in clientTable.tickAssemblers(nowMs: now) { assembled(events, client: client, &out) }
        if statusCharacteristic.checkDue(nowMs: now, everyMs: settings.statusCheckMs) {
            if busOpen && follower.present { out.append(.fetchStatusValues(force: false)) }
            reconcile(now: now, &out)
        }
    }

    /// The status characteristic: notified when its values change, every
    /// `statusIntervalMs`, and (forced) on subscription.
    mutating func statusValues(modelState: String, batteryPct: Int?, force: Bool, now: Int64, _ out: inout [Command]) {
        let bytes = BluetoothMessage.status(modelState: modelState, batteryPct: batteryPct, name: settings.localName)
        if statusCharacteristic.update(bytes, force: force, nowMs: now, intervalMs: settings.statusIntervalMs),
            outbox.notifying.contains(.status) || force
        {
            enqueue(.status, bytes)
        }
    }

    mutating func publish(_ out: inout [Command]) {
        status.clients = clientTable.statusClients
        status.applicationRegistered = registrar.application == .done
        status.pairingAgentRegistered = pairingAgent.registration == .done
        status.advertising = registrar.advertisement == .done
        status.queued = queued
        guard status != lastPublished else { return }
        lastPublished = status
        out.append(.publish(status))
    }
}
