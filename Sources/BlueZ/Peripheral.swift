#if canImport(Glibc)
import Glibc
#endif
import Logging
import Posix
import DBus
import Synchronization
import Tasks
import WorkerCore

/// What the peripheral needs from the daemon: running a request (power policy, model,
/// task history), the status characteristic's values, and a place to show its state.
public protocol PeripheralHost: Sendable {
    /// Runs `request`; a streamed one hands each piece of text to `onPartial`, in order,
    /// before returning. When the client cancels it (or leaves), the calling task is
    /// cancelled after `cancellation.reason` is set: the host stops the model and records why.
    func serve(
        _ request: BluetoothRequest, client: String, cancellation: ServeCancellation,
        onPartial: @escaping @Sendable (String) async -> Void
    ) async -> PeripheralOutcome
    func statusValues() async -> (modelState: String, batteryPct: Int?)
    func report(_ status: BluetoothStatus) async
}

/// The peripheral's settings: the machine's own (one type, read through as if they were
/// this struct's fields: `settings.retryMs`), and the two only the interpreter uses.
@dynamicMemberLookup
public struct PeripheralSettings: Sendable {
    public var machine: PeripheralMachine.Settings
    /// `bluetooth.security`: the characteristics' flags.
    public var security: BluetoothSecurity
    /// The bus bluetoothd is on: the system bus unless a D-Bus address is given (tests).
    public var busAddress: String?

    public init(config: WorkerConfig.Bluetooth, agentID: String) {
        machine = PeripheralMachine.Settings(config: config, agentID: agentID)
        security = config.security
    }

    public subscript<Value>(dynamicMember path: WritableKeyPath<PeripheralMachine.Settings, Value>) -> Value {
        get { machine[keyPath: path] }
        set { machine[keyPath: path] = newValue }
    }
}

/// The GATT peripheral of protocol-bluetooth §1 over BlueZ's D-Bus API: the interpreter of
/// `PeripheralMachine`. It reads the bus (signals, bluetoothd's calls), feeds the machine,
/// and executes its commands; every decision is the machine's. One actor owns the bus
/// connection: every sd-bus call, and every handler (they run inside `process()`), is on
/// this actor. A session runs from `run()` until `stop()`; mode `off` has no session, so
/// no bus connection and nothing registered with bluetoothd.
public actor GattPeripheral: BusDriving {
    let settings: PeripheralSettings
    let host: any PeripheralHost
    package let logger: Logger
    /// The machine's time (monotonic), injected so that a test can drive it.
    let clock: any WorkerClock
    /// The machine's phases as last logged (debug level only).
    private var trace = PhaseTrace()

    package var bus: Bus?
    package nonisolated let wake = WakeEvent()
    private var slots: [BusSlot] = []
    private var machine: PeripheralMachine
    /// A status fetch the machine asked for (true: forced), done in the loop's round.
    private var statusFetch: Bool?
    private var unpublished: BluetoothStatus?

    private typealias Job = (ticket: Int, request: BluetoothRequest, client: String, cancellation: ServeCancellation)
    /// The cancellation of the request handed to the work loop (one runs at a time).
    private var cancellations: [Int: ServeCancellation] = [:]
    private let jobs: AsyncStream<Job>.Continuation
    private let jobStream: AsyncStream<Job>

    public init(settings: PeripheralSettings, host: any PeripheralHost, logger: Logger, clock: any WorkerClock = SystemClock()) {
        self.settings = settings
        self.host = host
        self.logger = logger
        self.clock = clock
        machine = PeripheralMachine(settings: settings.machine)
        (jobStream, jobs) = AsyncStream.makeStream()
    }

    // MARK: Session

    /// Runs the session until cancelled: the bus loop (bus, clock, notifications), the
    /// request worker and the kernel's adapter settings, as child tasks.
    public func run() async {
        unpublished = machine.status
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.busLoop() }
            group.addTask { await self.workLoop() }
            // Only the worker's own agent has a reason to watch (it stands back for Classic).
            if settings.pairingAgent.registersAgent { group.addTask { await self.followKernelSettings() } }
            await group.next()
            group.cancelAll()
        }
        jobs.finish()
    }

    /// Takes the application and advertisement back from bluetoothd and disconnects the
    /// clients (waiting up to `timeoutMs` for its answers, while `run()` still
    /// dispatches), then closes the bus.
    public func stop(timeoutMs: Int64 = 2_000) async {
        stopTimeoutUsec = UInt64(timeoutMs) * 1_000
        feed(.stop)
        kickBus()
        let deadline = clock.monotonicMs() + timeoutMs
        // A cancelled sleep returns at once: cancelled, this would spin until the deadline.
        while !machine.stopped && clock.monotonicMs() < deadline && !Task.isCancelled {
            try? await Task.sleep(nanoseconds: 20_000_000)
        }
        closeBus(reason: nil)
        var idle = BluetoothStatus()
        idle.localName = settings.localName
        idle.adapter = settings.adapter
        idle.pairingAgent = settings.pairingAgent.answerer.rawValue
        idle.pairingAgentReason = settings.pairingAgent.reason
        unpublished = nil
        await host.report(idle)
    }

    private var stopTimeoutUsec: UInt64 = 2_000_000

    // MARK: The machine

    /// Feeds one event and executes what the machine decides; returns the reply to the
    /// call being handled, if the event was one.
    @discardableResult
    private func feed(_ event: PeripheralMachine.Event) -> PeripheralMachine.Reply? {
        execute(machine.on(event, now: clock.monotonicMs()))
    }

    private func execute(_ commands: [PeripheralMachine.Command]) -> PeripheralMachine.Reply? {
        var reply: PeripheralMachine.Reply?
        if logger.effectiveLevel <= .debug, let line = trace.changed(to: machine.phaseLine) { logger.debug("peripheral: \(line)") }
        // Events a command gives rise to, fed once this list is done (its order kept).
        var afterwards: [PeripheralMachine.Event] = []
        defer { for event in afterwards { feed(event) } }
        for command in commands {
            switch command {
            case .loadObjects:
                if let bus { BlueZBus.loadObjects(bus) { self.feed(.bluez($0)) } }
                // bluetoothd (re)appeared: its configuration as it read it at its start.
                afterwards.append(.attBearers(BlueZConfigFile.attBearers()))
            case .register(let what, let adapterPath, let epoch):
                register(what, adapterPath: adapterPath, epoch: epoch)
            case .unregister(let what, let adapterPath):
                let (path, interface, member, object) =
                    switch what {
                    case .application: (adapterPath, "org.bluez.GattManager1", "UnregisterApplication", GattObjects.root)
                    case .advertisement: (adapterPath, "org.bluez.LEAdvertisingManager1", "UnregisterAdvertisement", GattObjects.advertisement)
                    case .agent: (Agent1Calls.manager.path, Agent1Calls.manager.interface, "UnregisterAgent", GattObjects.agent)
                    }
                do {
                    try bus?.call(
                        destination: "org.bluez", path: path, interface: interface, member: member,
                        arguments: [.objectPath(object)], timeoutUsec: stopTimeoutUsec
                    ) { _ in self.feed(.unregistered(what)) }
                } catch {
                    _ = machine.on(.unregistered(what), now: clock.monotonicMs())
                }
            case .disconnect(let device, let address):
                // Asynchronous: the actor goes on at once. bluetoothd answers once the link
                // is down, which takes seconds under load and up to its 25 s supervision
                // timeout when the peer is already gone; a slow answer is no failure.
                try? bus?.call(
                    destination: "org.bluez", path: device, interface: "org.bluez.Device1", member: "Disconnect",
                    timeoutUsec: machine.stopping ? stopTimeoutUsec : 30_000_000
                ) { [logger] result in
                    switch result {
                    case .failure(let error) where error.name == "org.freedesktop.DBus.Error.NoReply":
                        logger.info("disconnecting \(address): bluetoothd did not confirm in time (\(error.message))")
                    case .failure(let error):
                        logger.warning("cannot disconnect \(address): \(error)")
                    case .success:
                        logger.debug("disconnected \(address)")
                    }
                }
            case .removeDevice(let adapterPath, let device, let address):
                // Asynchronous like Disconnect: bluetoothd disconnects the device first if
                // it is still connected, which can take seconds.
                try? bus?.call(
                    destination: "org.bluez", path: adapterPath, interface: "org.bluez.Adapter1", member: "RemoveDevice",
                    arguments: [.objectPath(device)], timeoutUsec: 30_000_000
                ) { [logger] result in
                    switch result {
                    case .failure(let error) where error.name == BlueZErrorName.doesNotExist.rawValue:
                        logger.debug("\(address) was already forgotten by bluetoothd")
                    case .failure(let error):
                        logger.warning("cannot remove the bond of \(address): \(error); remove it with bluetoothctl remove \(address)")
                    case .success:
                        logger.info("removed the bond of \(address)")
                    }
                }
            case .notify(let role, let chunk):
                notify(GattLayout.characteristic(role).path, chunk)
            case .serve(let ticket, let request, let client):
                let cancellation = ServeCancellation()
                cancellations[ticket] = cancellation
                jobs.yield((ticket, request, client, cancellation))
            case .cancel(let ticket, let reason):
                cancellations[ticket]?.cancel(reason: reason)
            case .fetchStatusValues(let force):
                statusFetch = (statusFetch ?? false) || force
                kickBus()
            case .publish(let status):
                unpublished = status
            case .log(let level, let message):
                logger.log(level, message)
            case .reply(let answer):
                reply = answer
            }
        }
        return reply
    }

    private func register(_ what: PeripheralMachine.Registered, adapterPath: String, epoch: Int) {
        if what == .agent { return registerAgent(epoch: epoch) }
        let (interface, member, object) =
            what == .application
            ? ("org.bluez.GattManager1", "RegisterApplication", GattObjects.root)
            : ("org.bluez.LEAdvertisingManager1", "RegisterAdvertisement", GattObjects.advertisement)
        do {
            guard let bus else { throw BusFailure("register with bluetoothd: no bus", -ENOTCONN) }
            try bus.call(
                destination: "org.bluez", path: adapterPath, interface: interface, member: member,
                arguments: [.objectPath(object), .properties([])]
            ) { result in
                self.feed(.registration(what, epoch: epoch, Self.answer(result)))
            }
        } catch {
            feed(.registration(what, epoch: epoch, .refused("\(error)")))
        }
    }

    /// RegisterAgent, then RequestDefaultAgent: only the default agent hears about pairings
    /// the worker's side did not start. bluetoothd keeps earlier default agents in a queue,
    /// so an operator's pairing window (or a desktop's agent registered later) takes over
    /// while it runs, and ours is the default again when it leaves.
    private func registerAgent(epoch: Int) {
        let manager = Agent1Calls.manager
        do {
            guard let bus else { throw BusFailure("register the pairing agent: no bus", -ENOTCONN) }
            try bus.call(
                destination: manager.destination, path: manager.path, interface: manager.interface, member: "RegisterAgent",
                arguments: [.objectPath(GattObjects.agent), .string(JustWorksAgent.capability)]
            ) { result in
                if case .failure(let error) = result, error.name != BlueZErrorName.alreadyExists.rawValue {
                    self.feed(.registration(.agent, epoch: epoch, .refused("RegisterAgent: \(error)")))
                    return
                }
                do {
                    try self.bus?.call(
                        destination: manager.destination, path: manager.path, interface: manager.interface, member: "RequestDefaultAgent",
                        arguments: [.objectPath(GattObjects.agent)]
                    ) { result in
                        switch result {
                        case .success: self.feed(.registration(.agent, epoch: epoch, .accepted))
                        case .failure(let error): self.feed(.registration(.agent, epoch: epoch, .refused("RequestDefaultAgent: \(error)")))
                        }
                    }
                } catch {
                    self.feed(.registration(.agent, epoch: epoch, .refused("RequestDefaultAgent: \(error)")))
                }
            }
        } catch {
            feed(.registration(.agent, epoch: epoch, .refused("\(error)")))
        }
    }

    private static func answer(_ result: Result<[DBusValue], DBusError>) -> PeripheralMachine.RegistrationAnswer {
        switch result {
        case .success: .accepted
        case .failure(let error) where error.name == BlueZErrorName.alreadyExists.rawValue: .alreadyExists(error.message)
        case .failure(let error): .refused("\(error)")
        }
    }

    /// One notification: the characteristic's Value changes (PropertiesChanged), which
    /// bluetoothd sends to every subscribed client.
    private func notify(_ path: String, _ chunk: [UInt8]) {
        guard let bus else { return }
        do {
            try bus.emitSignal(
                path: path, interface: GattObjects.properties, member: "PropertiesChanged",
                arguments: [.string(GattObjects.characteristicInterface), .properties([("Value", .bytes(chunk))]), .strings([])])
        } catch {
            logger.warning("cannot send a notification: \(error)")
        }
    }

    // MARK: The bus, driven from the reactor

    package var reconnectDelayMs: Int64 { settings.retryMs }

    /// A round's end: the clock tick, the status values and the published state, which
    /// need the daemon (async); returns the machine's next deadline.
    package func processed() async -> Int64? {
        let started = clock.monotonicMs()
        defer {
            // The bus waits while the daemon answers: a slow answer delays notifications.
            let took = clock.monotonicMs() - started
            if took > 500 { logger.warning("a round of the Bluetooth loop waited \(took) ms for the daemon") }
        }
        feed(.tick)
        if let force = statusFetch {
            statusFetch = nil
            let (modelState, batteryPct) = await host.statusValues()
            feed(.statusValues(modelState: modelState, batteryPct: batteryPct, force: force))
        }
        if var status = unpublished {
            unpublished = nil
            if let problem = machine.setupProblem { status.problem = AdapterDiagnostics.describe(problem) }
            await host.report(status)
        }
        return machine.nextDeadlineMs
    }

    package func connectBus() {
        guard !machine.stopping else { return }
        do {
            let bus = try BlueZBus.open(address: settings.busAddress)
            self.bus = bus
            slots.append(try bus.exportObjects(under: GattObjects.root) { message in self.handle(message) })
            logger.info("connected to the system bus as \(bus.uniqueName ?? "?")")
            feed(.busOpened)
            slots += try BlueZBus.follow(
                bus, owner: { self.machine.follower.owner },
                signal: { self.feed(.bluez($0)) })
        } catch {
            closeBus(reason: "cannot use the system bus: \(error). Is dbus-daemon running (systemctl status dbus)?")
            logger.warning(machine.status.problem ?? "")
        }
    }

    package func dropBus(reason: String) { closeBus(reason: reason) }

    private func closeBus(reason: String?) {
        slots.forEach { $0.cancel() }
        slots.removeAll()
        bus = nil
        feed(.busClosed(reason: reason))
    }

    // MARK: Exported objects

    private func handle(_ message: BusMessage) -> ObjectAnswer {
        guard let path = message.path, let interface = message.interface, let member = message.member else { return .notHandled }
        guard machine.admitsCaller(message.sender) else {
            return answer(feed(.call(sender: message.sender, .unsupported(member: member, path: path))))
        }
        let args = (try? message.arguments()) ?? []
        let values = Dictionary(uniqueKeysWithValues: machine.values.map { (GattLayout.characteristic($0.key).path, $0.value) })
        let notifying = Set(machine.notifying.map { GattLayout.characteristic($0).path })
        switch (interface, member) {
        case (GattObjects.objectManager, "GetManagedObjects") where path == GattObjects.root:
            return .reply([
                GattObjects.managedObjects(localName: settings.localName, values: values, notifying: notifying, security: settings.security)
            ])
        case (GattObjects.properties, "GetAll"):
            guard let wanted = args.first?.stringValue,
                let props = GattObjects.properties(
                    path: path, interface: wanted, localName: settings.localName, values: values, notifying: notifying, security: settings.security)
            else { return .error(DBusError(name: "org.freedesktop.DBus.Error.InvalidArgs", message: "no such interface on \(path)")) }
            return .reply([.properties(props)])
        case (GattObjects.properties, "Get"):
            guard args.count == 2, let wanted = args[0].stringValue, let name = args[1].stringValue,
                let value = GattObjects.properties(
                    path: path, interface: wanted, localName: settings.localName, values: values, notifying: notifying, security: settings.security)?
                    .first(where: { $0.0 == name })?.1
            else { return .error(DBusError(name: "org.freedesktop.DBus.Error.InvalidArgs", message: "no such property on \(path)")) }
            return .reply([.variant(value)])
        case (GattObjects.characteristicInterface, _):
            guard let characteristic = GattLayout.characteristic(path: path) else { return .notHandled }
            return answer(
                feed(.call(sender: message.sender, Self.call(member, on: characteristic, path: path, args: args, expectsReply: message.expectsReply)))
            )
        case (Agent1Calls.interface, let member) where path == GattObjects.agent:
            guard let call = Agent1Calls.decode(member: member, args) else { return .notHandled }
            return answer(feed(.call(sender: message.sender, .agent(call))))
        case (GattObjects.advertisementInterface, "Release") where path == GattObjects.advertisement:
            return answer(feed(.call(sender: message.sender, .releaseAdvertisement)))
        default:
            return .notHandled
        }
    }

    /// A GattCharacteristic1 call, decoded; what the table does not allow is unsupported.
    static func call(
        _ member: String, on characteristic: GattLayout.Characteristic, path: String, args: [DBusValue],
        expectsReply: Bool
    ) -> PeripheralMachine.Call {
        func options(_ index: Int) -> [String: DBusValue] { args.count > index ? args[index].stringKeyedEntries ?? [:] : [:] }
        func mtu(_ options: [String: DBusValue]) -> Int? { options["mtu"]?.integerValue.flatMap { Int(exactly: $0) } }
        switch member {
        case "ReadValue" where characteristic.readable:
            let opts = options(0)
            let offset = opts["offset"]?.integerValue.flatMap { Int(exactly: $0) } ?? 0
            return .read(characteristic.role, device: opts["device"]?.stringValue, mtu: mtu(opts), offset: offset)
        case "WriteValue" where characteristic.writable:
            guard args.count == 2, let bytes = args[0].bytesValue else { return .malformedWrite }
            let opts = options(1)
            return .write(characteristic.role, bytes: bytes, device: opts["device"]?.stringValue, mtu: mtu(opts), expectsReply: expectsReply)
        case "StartNotify" where characteristic.notifies:
            return .startNotify(characteristic.role)
        case "StopNotify" where characteristic.notifies:
            return .stopNotify(characteristic.role)
        default:
            return .unsupported(member: member, path: path)
        }
    }

    private func answer(_ reply: PeripheralMachine.Reply?) -> ObjectAnswer {
        switch reply {
        case .value(let bytes): .reply([.bytes(bytes)])
        case .empty: .reply([])
        case .noReply: .handledWithoutReply
        case .error(let name, let message): .error(DBusError(name: name, message: message))
        case nil: .notHandled
        }
    }

    // MARK: Requests

    /// Runs the requests one after the other. A request races its cancellation: when the
    /// client cancels or leaves, the serving task is cancelled (the backend's transfer is
    /// aborted, so the model stops) and awaited before the next request starts.
    private func workLoop() async {
        for await job in jobStream {
            let started = clock.monotonicMs()
            let winner = await race(
                { [host] in
                    await host.serve(job.request, client: job.client, cancellation: job.cancellation) { text in
                        await self.partial(job.ticket, text)
                    }
                },
                {
                    await job.cancellation.wait()
                })
            if Task.isCancelled { return }
            switch winner {
            case .first(let outcome): served(job.ticket, outcome)
            case .second:
                served(
                    job.ticket,
                    PeripheralOutcome(
                        ok: false, output: "", error: job.cancellation.reason ?? "cancelled",
                        durationMs: clock.monotonicMs() - started))
            }
        }
    }

    /// A piece of the running request's text. The bus loop is woken only when the piece
    /// brings its next deadline forward (the first text of a partial starts the 100 ms
    /// clock) or left output queued on the bus: waking it for every token of a fast model
    /// would cost a second machine round and a poll per token.
    private func partial(_ ticket: Int, _ text: String) {
        let deadline = machine.nextDeadlineMs
        feed(.partial(ticket: ticket, text))
        if machine.nextDeadlineMs < deadline || (bus.map { $0.events & Int16(POLLOUT) != 0 } ?? false) { kickBus() }
    }

    /// The kernel's view of the adapters, fed to the machine until the session ends. When
    /// it cannot be read (said once), the session goes on with what bluetoothd shows.
    private nonisolated func followKernelSettings() async {
        await KernelAdapterSettings.follow(logger: logger) { adapter, connectable in
            await self.classicConnectable(adapter, connectable)
        }
        await suspendUntilCancelled()
    }

    private func classicConnectable(_ adapter: String, _ connectable: Bool) {
        feed(.classicConnectable(adapter: adapter, connectable))
        kickBus()
    }

    private func served(_ ticket: Int, _ outcome: PeripheralOutcome) {
        cancellations[ticket] = nil
        feed(.served(ticket: ticket, outcome))
        kickBus()
    }
}

/// The client's cancel of one request (protocol-bluetooth §2), set by the peripheral and awaited by its
/// work loop; the host reads `reason` to record why its task stopped.
public final class ServeCancellation: Sendable {
    private let why = Mutex<String?>(nil)
    private let cancelled = StateSignal(false)

    public init() {}

    /// Why the request was cancelled (`cancelled`, `cancelled: the client disconnected`); nil while it was not.
    public var reason: String? { why.withLock { $0 } }

    func cancel(reason: String) {
        // The first reason stands: a disconnect after a cancel does not rename it.
        guard
            why.withLock({ current -> Bool in
                guard current == nil else { return false }
                current = reason
                return true
            })
        else { return }
        cancelled.set(true)
    }

    /// Returns once cancelled, or when the waiting task is (the request ended first).
    func wait() async { await cancelled.wait(for: true) }
}
