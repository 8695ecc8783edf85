#if canImport(Glibc)
import Glibc
#endif
import Logging
import Posix
import DBus
import WorkerCore

/// What the peripheral needs from the daemon: running a request (power policy, model,
/// task history), the status characteristic's values, and a place to show its state.
public protocol PeripheralHost: Sendable {
    func serve(_ request: BluetoothRequest, client: String) async -> PeripheralOutcome
    func statusValues() async -> (modelState: String, batteryPct: Int?)
    func report(_ status: BluetoothStatus) async
}

public struct PeripheralOutcome: Sendable, Equatable {
    public var ok: Bool
    public var output: String
    public var error: String?
    public var durationMs: Int64
    public init(ok: Bool, output: String, error: String?, durationMs: Int64) {
        self.ok = ok
        self.output = output
        self.error = error
        self.durationMs = durationMs
    }
}

public struct PeripheralSettings: Sendable {
    public var adapter: String?
    public var localName: String
    public var maxRequestBytes: Int
    public var maxQueuedRequests: Int
    public var chunkPacingMs: Int
    public var maxClients: Int
    public var statusIntervalMs: Int64 = 60_000
    public var retryMs: Int64 = 5_000
    /// The bus bluetoothd is on: the system bus unless a D-Bus address is given (tests).
    public var busAddress: String?

    public init(config: WorkerConfig.Bluetooth, agentID: String) {
        adapter = config.adapter
        localName = BluetoothUUID.localName(agentID: agentID)
        maxRequestBytes = Int(config.maxRequestBytes)
        maxQueuedRequests = Int(config.maxQueuedRequests)
        chunkPacingMs = Int(config.chunkPacingMs)
        maxClients = Int(config.maxClients)
    }
}

/// The GATT peripheral of SPEC 6 over BlueZ's D-Bus API. One actor owns the bus
/// connection: every sd-bus call, and every handler (they run inside `process()`), is
/// on this actor. A session runs from `run()` until `stop()`; mode `off` has no session,
/// so no bus connection and nothing registered with bluetoothd.
public actor GattPeripheral: BusDriving {
    let settings: PeripheralSettings
    let host: any PeripheralHost
    let logger: Logger

    var bus: Bus?
    private var slots: [BusSlot] = []
    private var bluezOwner: String?
    private var objects = BlueZObjects()
    private var adapterPath: String?

    private enum Registration: Equatable { case none, pending, done }
    private var application = Registration.none
    private var advertisement = Registration.none
    /// Bumped whenever bluetoothd's side is lost: answers to older calls are ignored.
    private var epoch = 0
    private var retryAtMs: Int64 = 0
    private var stopping = false

    private var status = BluetoothStatus()
    private var lastReported: BluetoothStatus?
    private var roster: ClientRoster
    private let queuePolicy: RequestQueuePolicy

    private struct Session {
        var address: String
        var assembler: RequestAssembler
        var mtu: Int?
    }
    private var sessions: [String: Session] = [:]

    private var values: [String: [UInt8]] = [:]
    private var notifying: Set<String> = []
    private var statusBytes: [UInt8] = []
    private var statusSentAtMs: Int64 = 0

    private struct Outbound { var path: String; var bytes: [UInt8] }
    private var outbox: [Outbound] = []
    private let outboxWake: AsyncStream<Void>.Continuation
    private let outboxStream: AsyncStream<Void>

    private struct Queued { var request: BluetoothRequest; var client: String }
    private var pending: [Queued] = []
    private var running = 0
    private let workWake: AsyncStream<Void>.Continuation
    private let workStream: AsyncStream<Void>

    var busWaiter: Task<Void, Never>?

    public init(settings: PeripheralSettings, host: any PeripheralHost, logger: Logger) {
        self.settings = settings
        self.host = host
        self.logger = logger
        roster = ClientRoster(maxClients: settings.maxClients)
        queuePolicy = RequestQueuePolicy(maxQueued: settings.maxQueuedRequests)
        (outboxStream, outboxWake) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
        (workStream, workWake) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
        status.localName = settings.localName
        status.adapter = settings.adapter
    }

    // MARK: Session

    /// Runs the session until cancelled: the bus, the notification sender, the request
    /// worker and the housekeeping tick, as child tasks.
    public func run() async {
        status.state = .waiting
        status.problem = "connecting to the system bus"
        await publish()
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.busLoop() }
            group.addTask { await self.senderLoop() }
            group.addTask { await self.workLoop() }
            group.addTask { await self.tickLoop() }
            await group.next()
            group.cancelAll()
        }
    }

    /// Takes the application and advertisement back from bluetoothd (waiting up to
    /// `timeoutMs` for its answers, while `run()` still dispatches), then closes the bus.
    public func stop(timeoutMs: Int64 = 2_000) async {
        stopping = true
        if let bus, bluezOwner != nil, let adapterPath {
            if advertisement != .none {
                try? bus.call(destination: "org.bluez", path: adapterPath, interface: "org.bluez.LEAdvertisingManager1", member: "UnregisterAdvertisement",
                              arguments: [.objectPath(GattObjects.advertisement)], timeoutUsec: UInt64(timeoutMs) * 1000) { [unowned self] _ in
                    self.advertisement = .none
                }
            }
            if application != .none {
                try? bus.call(destination: "org.bluez", path: adapterPath, interface: "org.bluez.GattManager1", member: "UnregisterApplication",
                              arguments: [.objectPath(GattObjects.root)], timeoutUsec: UInt64(timeoutMs) * 1000) { [unowned self] _ in
                    self.application = .none
                }
            }
            // Connected clients learn at once that the worker is gone (their link would
            // otherwise stay up, to a host without the service).
            for device in sessions.keys {
                try? bus.call(destination: "org.bluez", path: device, interface: "org.bluez.Device1", member: "Disconnect",
                              timeoutUsec: UInt64(timeoutMs) * 1000) { _ in }
            }
            kickBus()
            let deadline = monotonicMs() + timeoutMs
            while (advertisement != .none || application != .none) && monotonicMs() < deadline {
                try? await Task.sleep(nanoseconds: 20_000_000)
            }
        }
        dropBus(reason: nil)
        status = BluetoothStatus()
        status.localName = settings.localName
        status.adapter = settings.adapter
        await publish()
    }

    // MARK: The bus, driven from the reactor

    var reconnectDelayMs: Int64 { settings.retryMs }
    func processed() async { await publish() }

    func connectBus() {
        do {
            let bus = try BlueZBus.open(address: settings.busAddress)
            self.bus = bus
            slots.append(try bus.exportObjects(under: GattObjects.root) { message in
                self.handle(message)
            })
            logger.info("connected to the system bus as \(bus.uniqueName ?? "?")")
            status.problem = "asking the bus for bluetoothd (org.bluez)"
            slots += try BlueZBus.follow(bus, nameOwnerChanged: { self.nameOwnerChanged($0) }, objectsChanged: { self.objectsChanged($0) },
                                         propertiesChanged: { self.propertiesChanged($0) },
                                         owner: { owner in if let owner { self.bluezAppeared(owner: owner) } else { self.bluezGone() } })
        } catch {
            dropBus(reason: "cannot use the system bus: \(error). Is dbus-daemon running (systemctl status dbus)?")
            logger.warning(status.problem ?? "")
        }
    }

    func dropBus(reason: String) { dropBus(reason: Optional(reason)) }

    private func dropBus(reason: String?) {
        slots.forEach { $0.cancel() }
        slots.removeAll()
        bus = nil
        bluezLost()
        if let reason {
            status.state = .waiting
            status.problem = reason
        }
    }

    // MARK: bluetoothd's side

    private func bluezAppeared(owner: String?) {
        guard let owner, !owner.isEmpty else { return bluezGone() }
        bluezOwner = owner
        logger.info("bluetoothd is on the bus as \(owner)")
        try? bus?.call(destination: "org.bluez", path: "/", interface: GattObjects.objectManager, member: "GetManagedObjects") { [unowned self] result in
            guard case .success(let args) = result else { return }
            self.objects = BlueZObjects(managedObjects: args.first)
            self.reconcile()
        }
        kickBus()
    }

    private func bluezGone() {
        bluezLost()
        status.state = .waiting
        status.problem = "bluetoothd is not running (org.bluez is not on the system bus): " + AdapterDiagnostics.advice(for: settings.adapter)
    }

    /// Everything bluetoothd held for us is gone (it exited, or the bus did).
    private func bluezLost() {
        if bluezOwner != nil { logger.warning("bluetoothd left the bus: the application and advertisement are gone; registering again when it is back") }
        bluezOwner = nil
        objects = BlueZObjects()
        application = .none
        advertisement = .none
        adapterPath = nil
        epoch += 1
        retryAtMs = 0
        roster.removeAll()
        sessions.removeAll()
        notifying.removeAll()
    }

    private func nameOwnerChanged(_ message: BusMessage) {
        guard let newOwner = BlueZBus.newOwner(message) else { return }
        if bluezOwner != nil { bluezGone() }
        if !newOwner.isEmpty { bluezAppeared(owner: newOwner) }
    }

    private func objectsChanged(_ message: BusMessage) {
        guard message.sender == bluezOwner, let args = try? message.arguments(), let path = args.first?.stringValue else { return }
        switch message.member {
        case "InterfacesAdded":
            guard args.count == 2, let interfaces = args[1].stringKeyedEntries else { return }
            let wasConnected = objects.devices[path]?.connected ?? false
            objects.add(path: path, interfaces: interfaces)
            if let device = objects.devices[path], device.connected, !wasConnected { deviceConnected(path) }
        case "InterfacesRemoved":
            guard args.count == 2, let interfaces = args[1].arrayValue?.compactMap(\.stringValue) else { return }
            if interfaces.contains("org.bluez.Device1") { deviceDisconnected(path) }
            objects.remove(path: path, interfaces: interfaces)
            if path == adapterPath && interfaces.contains("org.bluez.Adapter1") {
                logger.warning("adapter \(objects.adapters[path]?.name ?? path) went away")
                registrationsLost()
            }
        default: return
        }
        reconcile()
    }

    private func propertiesChanged(_ message: BusMessage) {
        guard message.sender == bluezOwner, let path = message.path, let args = try? message.arguments(), args.count >= 2,
              let interface = args[0].stringValue, let changed = args[1].stringKeyedEntries else { return }
        if interface == "org.bluez.Adapter1", let powered = changed["Powered"]?.boolValue, objects.adapters[path] != nil {
            objects.adapters[path]?.powered = powered
            if path == adapterPath && !powered {
                logger.warning("adapter \(objects.adapters[path]?.name ?? path) powered off")
                registrationsLost()
            }
            reconcile()
        } else if interface == "org.bluez.Device1", let connected = changed["Connected"]?.boolValue {
            let wasConnected = objects.devices[path]?.connected ?? false
            objects.devices[path]?.connected = connected
            if connected && !wasConnected { deviceConnected(path) }
            if !connected { deviceDisconnected(path) }
        }
    }

    /// The adapter went away or off: bluetoothd dropped what was registered on it.
    private func registrationsLost() {
        application = .none
        advertisement = .none
        adapterPath = nil
        epoch += 1
        roster.removeAll()
        sessions.removeAll()
        notifying.removeAll()
    }

    // MARK: Registration

    /// Brings bluetoothd's side to what it should be: the application, then the
    /// advertisement, on the chosen adapter; failures retried after `retryMs`.
    private func reconcile() {
        guard !stopping, let bus, bluezOwner != nil else { return }
        guard let (path, adapter) = objects.choose(configured: settings.adapter) else {
            status.state = .waiting
            status.problem = AdapterDiagnostics.explain(configured: settings.adapter, known: objects.adapters.values.map(\.name).sorted())
            return
        }
        status.adapter = adapter.name
        status.address = adapter.address
        guard adapter.powered else {
            status.state = .waiting
            status.problem = "adapter \(adapter.name) is powered off: " + AdapterDiagnostics.advice(for: adapter.name)
            return
        }
        if adapterPath != path {
            registrationsLost()
            adapterPath = path
        }
        let now = monotonicMs()
        guard now >= retryAtMs else { return }
        let epoch = self.epoch
        if application == .none {
            application = .pending
            status.state = .registering
            status.problem = nil
            logger.info("registering the GATT application on \(adapter.name)")
            do {
                try bus.call(destination: "org.bluez", path: path, interface: "org.bluez.GattManager1", member: "RegisterApplication",
                             arguments: [.objectPath(GattObjects.root), .properties([])]) { [unowned self] result in
                    self.registered(application: true, result: result, epoch: epoch)
                }
            } catch {
                registered(application: true, result: .failure(.failed("\(error)")), epoch: epoch)
            }
        } else if application == .done && advertisement == .none {
            guard adapter.canAdvertise else {
                status.state = .failed
                status.problem = "adapter \(adapter.name) offers no LE advertising (org.bluez.LEAdvertisingManager1): it needs Bluetooth Low Energy"
                return
            }
            advertisement = .pending
            do {
                try bus.call(destination: "org.bluez", path: path, interface: "org.bluez.LEAdvertisingManager1", member: "RegisterAdvertisement",
                             arguments: [.objectPath(GattObjects.advertisement), .properties([])]) { [unowned self] result in
                    self.registered(application: false, result: result, epoch: epoch)
                }
            } catch {
                registered(application: false, result: .failure(.failed("\(error)")), epoch: epoch)
            }
        }
        kickBus()
    }

    private func registered(application isApplication: Bool, result: Result<[DBusValue], DBusError>, epoch: Int) {
        guard epoch == self.epoch, !stopping else { return }
        let what = isApplication ? "GATT application" : "advertisement"
        var result = result
        if case .failure(let error) = result, error.name == "org.bluez.Error.AlreadyExists" {
            // bluetoothd keeps what we registered across an adapter power cycle (seen in
            // the VM: the application survives power off/on): it is ours, and in place.
            logger.info("\(what) still registered with bluetoothd (\(error.message)); keeping it")
            result = .success([])
        }
        switch result {
        case .success:
            if isApplication { application = .done } else { advertisement = .done }
            logger.notice("\(what) registered on \(status.adapter ?? "?")\(isApplication ? "" : " as \(settings.localName)")")
            if !isApplication {
                status.state = .advertising
                status.problem = nil
                status.registrations += 1
            }
        case .failure(let error):
            if isApplication { application = .none } else { advertisement = .none }
            retryAtMs = monotonicMs() + settings.retryMs
            status.state = .failed
            status.problem = "bluetoothd refused the \(what) on \(status.adapter ?? "?"): \(error); retrying every \(settings.retryMs / 1000) s"
            logger.warning(status.problem!)
        }
        status.applicationRegistered = application == .done
        status.advertising = advertisement == .done
        reconcile()
    }

    // MARK: Exported objects

    private func handle(_ message: BusMessage) -> ObjectAnswer {
        guard let path = message.path, let interface = message.interface, let member = message.member else { return .notHandled }
        // Only bluetoothd talks to the application (the system bus's policy already keeps
        // other users out; this keeps out local root mistakes too).
        guard message.sender == bluezOwner else {
            return .error(DBusError(name: "org.freedesktop.DBus.Error.AccessDenied", message: "only bluetoothd may call the worker's GATT objects"))
        }
        let args = (try? message.arguments()) ?? []
        switch (interface, member) {
        case (GattObjects.objectManager, "GetManagedObjects") where path == GattObjects.root:
            return .reply([GattObjects.managedObjects(localName: settings.localName, values: values, notifying: notifying)])
        case (GattObjects.properties, "GetAll"):
            guard let wanted = args.first?.stringValue,
                  let props = GattObjects.properties(path: path, interface: wanted, localName: settings.localName, values: values, notifying: notifying)
            else { return .error(DBusError(name: "org.freedesktop.DBus.Error.InvalidArgs", message: "no such interface on \(path)")) }
            return .reply([.properties(props)])
        case (GattObjects.properties, "Get"):
            guard args.count == 2, let wanted = args[0].stringValue, let name = args[1].stringValue,
                  let value = GattObjects.properties(path: path, interface: wanted, localName: settings.localName, values: values, notifying: notifying)?.first(where: { $0.0 == name })?.1
            else { return .error(DBusError(name: "org.freedesktop.DBus.Error.InvalidArgs", message: "no such property on \(path)")) }
            return .reply([.variant(value)])
        case (GattObjects.characteristicInterface, "ReadValue") where path == GattObjects.response || path == GattObjects.status:
            let options = args.first?.stringKeyedEntries ?? [:]
            noteClient(options: options)
            let value = path == GattObjects.status ? statusBytes : (values[path] ?? [])
            let offset = Int(options["offset"]?.integerValue ?? 0)
            guard offset >= 0, offset <= value.count else {
                return .error(DBusError(name: "org.bluez.Error.InvalidOffset", message: "offset \(offset) is past the value's \(value.count) bytes"))
            }
            return .reply([.bytes(Array(value[offset...]))])
        case (GattObjects.characteristicInterface, "WriteValue") where path == GattObjects.request:
            guard args.count == 2, let bytes = args[0].bytesValue else {
                return .error(DBusError(name: "org.bluez.Error.InvalidArguments", message: "WriteValue takes (ay, a{sv})"))
            }
            received(bytes, options: args[1].stringKeyedEntries ?? [:])
            return message.expectsReply ? .reply([]) : .handledWithoutReply
        case (GattObjects.characteristicInterface, "StartNotify") where path == GattObjects.response || path == GattObjects.status:
            notifying.insert(path)
            if path == GattObjects.status { Task { await self.refreshStatus(force: true) } }
            return .reply([])
        case (GattObjects.characteristicInterface, "StopNotify") where path == GattObjects.response || path == GattObjects.status:
            notifying.remove(path)
            return .reply([])
        case (GattObjects.advertisementInterface, "Release") where path == GattObjects.advertisement:
            logger.warning("bluetoothd released the advertisement")
            advertisement = .none
            status.advertising = false
            retryAtMs = monotonicMs() + settings.retryMs
            return .reply([])
        case (GattObjects.characteristicInterface, _):
            return .error(DBusError(name: "org.bluez.Error.NotSupported", message: "\(member) is not supported on \(path)"))
        default:
            return .notHandled
        }
    }

    // MARK: Clients

    /// The device of a ReadValue/WriteValue, from its options; learns its MTU. Returns
    /// its object path when it is a served client. bluetoothd always names the device;
    /// a call without one cannot be answered to anyone and takes no client's place.
    @discardableResult
    private func noteClient(options: [String: DBusValue]) -> String? {
        guard let device = options["device"]?.stringValue, device.hasPrefix("/") else { return nil }
        guard admit(device) else { return nil }
        if let mtu = options["mtu"]?.integerValue, mtu >= 23, mtu <= 517 { sessions[device]?.mtu = Int(mtu) }
        return device
    }

    private func admit(_ device: String) -> Bool {
        if sessions[device] != nil { return true }
        switch roster.seen(device) {
        case .admitted:
            let address = objects.devices[device]?.address ?? BlueZObjects.address(fromDevicePath: device)
            sessions[device] = Session(address: address, assembler: RequestAssembler(maxRequestBytes: settings.maxRequestBytes), mtu: nil)
            logger.info("client \(address) connected")
            // bluetoothd calls StartNotify for the first subscriber only: a client joining
            // later gets the status shortly after it connects (time to subscribe).
            if sessions.count > 1 {
                Task {
                    try? await Task.sleep(nanoseconds: 1_500_000_000)
                    await self.refreshStatus(force: true)
                }
            }
            return true
        case .refused:
            let address = objects.devices[device]?.address ?? BlueZObjects.address(fromDevicePath: device)
            status.clientsRefused += 1
            logger.warning("client \(address) refused: \(settings.maxClients) client(s) already connected (bluetooth.maxClients); disconnecting it, since BlueZ 5.66 would show it every other client's answers")
            try? bus?.call(destination: "org.bluez", path: device, interface: "org.bluez.Device1", member: "Disconnect") { [logger] result in
                if case .failure(let error) = result { logger.warning("cannot disconnect \(address): \(error)") }
            }
            kickBus()
            return false
        }
    }

    private func deviceConnected(_ path: String) {
        guard let device = objects.devices[path], device.adapter == adapterPath, advertisement == .done || application == .done else { return }
        _ = admit(path)
    }

    private func deviceDisconnected(_ path: String) {
        roster.gone(path)
        if let session = sessions.removeValue(forKey: path) {
            logger.info("client \(session.address) disconnected\(session.assembler.isPartial ? " in the middle of a request (dropped)" : "")")
        }
    }

    private func received(_ bytes: [UInt8], options: [String: DBusValue]) {
        logger.debug("write of \(bytes.count) bytes from \(options["device"]?.stringValue ?? "?") (mtu \(options["mtu"]?.integerValue ?? 0), offset \(options["offset"]?.integerValue ?? 0))")
        guard let device = noteClient(options: options), var session = sessions[device] else {
            if options["device"] == nil { logger.warning("a write of \(bytes.count) bytes named no device; dropped") }
            return
        }
        let events = session.assembler.feed(bytes, nowMs: monotonicMs())
        sessions[device] = session
        handle(events, client: session.address)
    }

    private func handle(_ events: [AssemblerEvent], client: String) {
        for event in events {
            switch event {
            case .rejected(let id, let error):
                status.requestsRejected += 1
                logger.info("request from \(client) rejected: \(error)")
                enqueue(GattObjects.response, BluetoothMessage.rejection(id: id, error: error))
            case .request(let request):
                guard queuePolicy.admits(waiting: pending.count, running: running) else {
                    status.requestsFailed += 1
                    logger.warning("request \(request.id) from \(client) refused: busy (\(pending.count + running) queued)")
                    enqueue(GattObjects.response, BluetoothMessage.rejection(id: request.id, error: RequestQueuePolicy.busyError))
                    continue
                }
                logger.info("request \(request.id) from \(client): \(request.prompt.utf8.count) bytes of prompt, maxTokens \(request.maxTokens)")
                pending.append(Queued(request: request, client: client))
                status.queued = pending.count + running
                workWake.yield()
            }
        }
    }

    // MARK: Requests

    private func workLoop() async {
        for await _ in workStream {
            while let next = takeWork() {
                let outcome = await host.serve(next.request, client: next.client)
                if Task.isCancelled { return }
                finished(next, outcome)
            }
        }
    }

    private func takeWork() -> Queued? {
        guard !pending.isEmpty else { return nil }
        running += 1
        return pending.removeFirst()
    }

    private func finished(_ item: Queued, _ outcome: PeripheralOutcome) {
        running -= 1
        status.queued = pending.count + running
        if outcome.ok { status.requestsServed += 1 } else { status.requestsFailed += 1 }
        enqueue(GattObjects.response, BluetoothMessage.response(id: item.request.id, output: outcome.output, ok: outcome.ok,
                                                                durationMs: outcome.durationMs, error: outcome.error))
    }

    // MARK: Notifications

    private func enqueue(_ path: String, _ bytes: [UInt8]?) {
        guard let bytes, !bytes.isEmpty else { return }
        outbox.append(Outbound(path: path, bytes: bytes))
        outboxWake.yield()
    }

    /// The chunk size fits the smallest MTU among the served clients (one notification
    /// reaches all of them); 23 until a client's MTU is known.
    private var notificationMTU: Int {
        sessions.values.compactMap(\.mtu).min() ?? 23
    }

    /// Sends each message whole, chunk after chunk, `chunkPacingMs` apart (bluetoothd
    /// queues notifications without bound), never interleaving two messages.
    private func senderLoop() async {
        let pacingNs = UInt64(settings.chunkPacingMs) * 1_000_000
        for await _ in outboxStream {
            while let message = takeOutbound() {
                var next = monotonicNanoseconds()
                for chunk in BluetoothMessage.chunks(message.bytes, mtu: notificationMTU) {
                    guard notify(message.path, Array(chunk)) else { break }
                    if pacingNs > 0 {
                        next += pacingNs
                        let now = monotonicNanoseconds()
                        if next > now { try? await Task.sleep(nanoseconds: next - now) }
                    }
                    if Task.isCancelled { return }
                }
            }
        }
    }

    private func takeOutbound() -> Outbound? { outbox.isEmpty ? nil : outbox.removeFirst() }

    /// One notification: the characteristic's Value changes (PropertiesChanged), which
    /// bluetoothd sends to every subscribed client. False when there is no one to send to.
    private func notify(_ path: String, _ chunk: [UInt8]) -> Bool {
        values[path] = chunk
        guard let bus, application == .done else { return false }
        do {
            try bus.emitSignal(path: path, interface: GattObjects.properties, member: "PropertiesChanged",
                               arguments: [.string(GattObjects.characteristicInterface), .properties([("Value", .bytes(chunk))]), .strings([])])
            if bus.events & Int16(POLLOUT) != 0 { kickBus() }
            return true
        } catch {
            logger.warning("cannot send a notification: \(error)")
            return false
        }
    }

    // MARK: Housekeeping

    private func tickLoop() async {
        var lastStatusCheck: Int64 = 0
        while !Task.isCancelled {
            try? await Task.sleep(nanoseconds: 500_000_000)
            let now = monotonicMs()
            dropIdlePartials(now: now)
            if now - lastStatusCheck >= 2_000 {
                lastStatusCheck = now
                await refreshStatus(force: false)
                reconcile()
            }
            await publish()
        }
    }

    private func dropIdlePartials(now: Int64) {
        for device in sessions.keys {
            guard var session = sessions[device] else { continue }
            let events = session.assembler.tick(nowMs: now)
            sessions[device] = session
            if !events.isEmpty { handle(events, client: session.address) }
        }
    }

    /// The status characteristic: notified when its values change, every
    /// `statusIntervalMs`, and (forced) on subscription.
    private func refreshStatus(force: Bool) async {
        let (modelState, batteryPct) = await host.statusValues()
        let bytes = BluetoothMessage.status(modelState: modelState, batteryPct: batteryPct, name: settings.localName)
        let now = monotonicMs()
        let changed = bytes != statusBytes
        statusBytes = bytes
        if force || changed || now - statusSentAtMs >= settings.statusIntervalMs {
            statusSentAtMs = now
            if notifying.contains(GattObjects.status) || force { enqueue(GattObjects.status, bytes) }
        }
    }

    private func publish() async {
        status.clients = sessions.values.map { BluetoothStatus.Client(address: $0.address, mtu: $0.mtu) }.sorted { $0.address < $1.address }
        status.applicationRegistered = application == .done
        status.advertising = advertisement == .done
        guard status != lastReported else { return }
        lastReported = status
        await host.report(status)
    }
}

func monotonicMs() -> Int64 { Int64(monotonicNanoseconds() / 1_000_000) }

/// A task that ends when the bus connection needs `process()`: its fd is ready for
/// `events`, or its timeout passed. Its owner cancels it to wake early (something was
/// queued, a call with a timeout was made), so it never holds the owner's actor.
func busWaitTask(fd: Int32, events: Int16, deadlineUsec: UInt64?) -> Task<Void, Never> {
    Task.detached {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await Reactor.shared.waitReadable(fd) }
            if events & Int16(POLLOUT) != 0 {
                group.addTask { try? await Reactor.shared.waitWritable(fd) }
            }
            if let deadlineUsec {
                let now = monotonicNanoseconds() / 1_000
                let wait = deadlineUsec > now ? (deadlineUsec - now) * 1_000 : 0
                group.addTask { try? await Task.sleep(nanoseconds: wait) }
            }
            await group.next()
            group.cancelAll()
        }
    }
}
