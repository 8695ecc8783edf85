#if canImport(Glibc)
import Glibc
#endif
import Logging
import Posix
import DBus
import WorkerCore

public struct CentralSettings: Sendable {
    /// The local adapter (`hci1`), else the first powered one.
    public var adapter: String?
    /// The worker's address; else the strongest worker found by a scan.
    public var device: String?
    /// The bus bluetoothd is on: the system bus unless a D-Bus address is given (tests).
    public var busAddress: String?
    /// How long a scan collects workers before choosing the strongest.
    public var scanWindowMs: Int64 = 2_500
    public var connectTimeoutMs: Int64 = 30_000
    public var maxBackoffMs: Int64 = 30_000

    public init(adapter: String?, device: String?) {
        self.adapter = adapter
        self.device = device?.uppercased()
    }
}

/// A BlueZ central for the worker's service (SPEC 6): scans, connects to the named or
/// strongest worker, subscribes to the response and status characteristics, writes
/// requests in chunks of at most min(MTU − 3, 508) bytes (508: the largest value
/// bluetoothd before 5.69 accepts), reassembles responses by id, and reconnects with
/// backoff when the link drops. One actor owns the bus, as in `GattPeripheral`.
public actor GattCentral: BusDriving {
    let settings: CentralSettings
    let logger: Logger

    var bus: Bus?
    private var slots: [BusSlot] = []
    private var bluezOwner: String?
    private var objects = BlueZObjects()
    private var adapterPath: String?

    private enum Phase: Equatable { case idle, connecting, resolving, subscribing, connected }
    private var phase = Phase.idle
    private var target: String?
    private var characteristics: (request: String, response: String, status: String)?
    private var scanningSinceMs: Int64?
    private var discoveryStarted = false
    private var nextAttemptAtMs: Int64 = 0
    private var backoffMs: Int64 = 1_000
    private var phaseDeadlineMs: Int64 = 0
    private var subscriptionsAnswered = 0

    private var responseFramer = JSONObjectFramer(maxBytes: 4 << 20, idleDropMs: 30_000)
    private var statusFramer = JSONObjectFramer(maxBytes: 4_096, idleDropMs: 30_000)
    private var pending: [String: CheckedContinuation<GenerateResult, Never>] = [:]
    private var status = ProxyStatus()

    private struct WriteJob { var id: String; var bytes: [UInt8] }
    private var writeQueue: [WriteJob] = []
    private let writeWake: AsyncStream<Void>.Continuation
    private let writeStream: AsyncStream<Void>
    private var writeWaiters: [Int: CheckedContinuation<DBusError?, Never>] = [:]
    private var nextWaiter = 0

    var busWaiter: Task<Void, Never>?

    public init(settings: CentralSettings, logger: Logger) {
        self.settings = settings
        self.logger = logger
        (writeStream, writeWake) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
        status.adapter = settings.adapter
    }

    public var currentStatus: ProxyStatus { status }

    /// Runs until cancelled.
    public func run() async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.busLoop() }
            group.addTask { await self.writeLoop() }
            group.addTask { await self.tickLoop() }
            await group.next()
            group.cancelAll()
        }
    }

    /// Sends one request and waits for its response (or the timeout, or the link's loss).
    public func generate(prompt: String, maxTokens: Int, timeoutMs: Int64) async -> GenerateResult {
        guard phase == .connected, characteristics != nil else {
            return .notConnected("no worker connected: " + (status.problem ?? "scanning for \(BluetoothUUID.localName(agentID: "…"))"))
        }
        let id = "proxy-" + randomID()
        let bytes = JSONValue.object(JSONObject([("id", .string(id)), ("prompt", .string(prompt)), ("maxTokens", .int(Int64(maxTokens)))])).serializedBytes
        status.requestsInFlight += 1
        defer { status.requestsInFlight -= 1 }
        return await withCheckedContinuation { continuation in
            pending[id] = continuation
            writeQueue.append(WriteJob(id: id, bytes: bytes))
            writeWake.yield()
            Task {
                try? await Task.sleep(nanoseconds: UInt64(max(1, timeoutMs)) * 1_000_000)
                await self.resolve(id, .timedOut(timeoutMs))
            }
        }
    }

    private func resolve(_ id: String, _ result: GenerateResult) {
        pending.removeValue(forKey: id)?.resume(returning: result)
    }

    // MARK: The bus

    var reconnectDelayMs: Int64 { 2_000 }
    func processed() async {}

    func connectBus() {
        do {
            let bus = try BlueZBus.open(address: settings.busAddress)
            self.bus = bus
            slots += try BlueZBus.follow(bus, nameOwnerChanged: { self.nameOwnerChanged($0) }, objectsChanged: { self.objectsChanged($0) },
                                         propertiesChanged: { self.propertiesChanged($0) },
                                         owner: { owner in if let owner { self.bluezAppeared(owner) } else { self.bluezGone() } })
        } catch {
            dropBus(reason: "cannot use the system bus: \(error). Is dbus-daemon running (systemctl status dbus)?")
        }
    }

    func dropBus(reason: String) {
        slots.forEach { $0.cancel() }
        slots.removeAll()
        bus = nil
        bluezGone()
        status.problem = reason
    }

    private func bluezAppeared(_ owner: String) {
        bluezOwner = owner
        refreshObjects()
    }

    private func refreshObjects() {
        try? bus?.call(destination: "org.bluez", path: "/", interface: GattObjects.objectManager, member: "GetManagedObjects") { result in
            guard case .success(let args) = result else { return }
            self.objects = BlueZObjects(managedObjects: args.first)
            self.advance()
        }
        kickBus()
    }

    private func bluezGone() {
        if bluezOwner != nil { logger.warning("bluetoothd left the bus") }
        bluezOwner = nil
        objects = BlueZObjects()
        linkLost(reason: "bluetoothd is not running (org.bluez is not on the system bus): systemctl start bluetooth")
        discoveryStarted = false
        scanningSinceMs = nil
        status.scanning = false
    }

    private func nameOwnerChanged(_ message: BusMessage) {
        guard let owner = BlueZBus.newOwner(message) else { return }
        if bluezOwner != nil { bluezGone() }
        if !owner.isEmpty { bluezAppeared(owner) }
    }

    private func objectsChanged(_ message: BusMessage) {
        guard message.sender == bluezOwner, let args = try? message.arguments(), let path = args.first?.stringValue else { return }
        if message.member == "InterfacesAdded", args.count == 2, let interfaces = args[1].stringKeyedEntries {
            objects.add(path: path, interfaces: interfaces)
            if let device = objects.devices[path], interfaces["org.bluez.Device1"] != nil {
                logger.debug("device \(device.address) \(device.name ?? "") RSSI \(device.rssi.map(String.init) ?? "?") UUIDs \(device.uuids)")
            }
        } else if message.member == "InterfacesRemoved", args.count == 2, let interfaces = args[1].arrayValue?.compactMap(\.stringValue) {
            objects.remove(path: path, interfaces: interfaces)
            if path == target && interfaces.contains("org.bluez.Device1") { linkLost(reason: "the worker's device object was removed") }
            // The worker's daemon stopped or left mode bluetooth: bluetoothd saw its
            // service go (Service Changed) while the link itself may stay up.
            if let characteristics, [characteristics.request, characteristics.response, characteristics.status].contains(path) {
                fail("the worker's service went away (its daemon stopped or left mode bluetooth)")
            }
        }
        advance()
    }

    private func propertiesChanged(_ message: BusMessage) {
        guard message.sender == bluezOwner, let path = message.path, let args = try? message.arguments(), args.count >= 2,
              let interface = args[0].stringValue, let changed = args[1].stringKeyedEntries else { return }
        switch interface {
        case "org.bluez.GattCharacteristic1":
            guard let value = changed["Value"]?.bytesValue, let characteristics else { return }
            if path == characteristics.response { responseChunk(value) } else if path == characteristics.status { statusChunk(value) }
        case "org.bluez.Device1":
            guard var device = objects.devices[path] else { return }
            objects.update(&device, with: changed)
            logger.debug("device \(device.address): \(changed.keys.sorted().joined(separator: ", ")) changed (RSSI \(device.rssi.map(String.init) ?? "?"), connected \(device.connected))")
            objects.devices[path] = device
            if path == target, changed["Connected"]?.boolValue == false { linkLost(reason: "the worker disconnected") }
            advance()
        case "org.bluez.Adapter1":
            if let powered = changed["Powered"]?.boolValue { objects.adapters[path]?.powered = powered }
            if path == adapterPath, changed["Powered"]?.boolValue == false { linkLost(reason: "adapter powered off") }
            if let discovering = changed["Discovering"]?.boolValue, path == adapterPath {
                logger.debug("discovery \(discovering ? "on" : "off") on \(path)")
                if !discovering { discoveryStarted = false }
            }
            advance()
        default:
            return
        }
    }

    // MARK: Finding and connecting

    private func tickLoop() async {
        while !Task.isCancelled {
            try? await Task.sleep(nanoseconds: 500_000_000)
            advance()
            if phase == .resolving || phase == .connecting { refreshDevice() }
        }
    }

    /// Moves the link toward connected, one step at a time.
    private func advance() {
        guard let bus, bluezOwner != nil else { return }
        let now = monotonicMs()
        guard let (path, adapter) = objects.choose(configured: settings.adapter) else {
            status.problem = AdapterDiagnostics.explain(configured: settings.adapter, known: objects.adapters.values.map(\.name).sorted())
            return
        }
        adapterPath = path
        status.adapter = adapter.name
        guard adapter.powered else {
            status.problem = "adapter \(adapter.name) is powered off: " + AdapterDiagnostics.advice(for: adapter.name)
            return
        }
        switch phase {
        case .connected:
            if let target, objects.devices[target]?.connected == false { linkLost(reason: "the worker disconnected") }
            if let target, let rssi = objects.devices[target]?.rssi { status.rssi = rssi }
        case .connecting, .resolving, .subscribing:
            if now > phaseDeadlineMs { fail("connecting to \(status.deviceAddress ?? "?") took over \(settings.connectTimeoutMs) ms") }
            if phase == .resolving, let target, objects.devices[target]?.servicesResolved == true {
                if let found = objects.workerCharacteristics(of: target) { subscribe(found) }
            }
        case .idle:
            guard now >= nextAttemptAtMs else { return }
            let candidates = objects.devices.filter { entry in
                entry.value.adapter == path && (settings.device.map { entry.value.address.uppercased() == $0 }
                    ?? (entry.value.uuids.contains(BluetoothUUID.service) && entry.value.rssi != nil))
            }
            let windowOver = scanningSinceMs.map { now - $0 >= settings.scanWindowMs } ?? false
            if let best = candidates.max(by: { ($0.value.rssi ?? -999) < ($1.value.rssi ?? -999) }), settings.device != nil || windowOver || best.value.connected {
                connect(best.key, best.value, bus: bus)
            } else {
                startDiscovery(bus: bus, adapterPath: path)
            }
        }
    }

    private func startDiscovery(bus: Bus, adapterPath: String) {
        if scanningSinceMs == nil { scanningSinceMs = monotonicMs() }
        status.scanning = true
        if status.problem == nil || !status.connected { status.problem = "scanning for a worker (service \(BluetoothUUID.service))" }
        guard !discoveryStarted else { return }
        discoveryStarted = true
        try? bus.call(destination: "org.bluez", path: adapterPath, interface: "org.bluez.Adapter1", member: "SetDiscoveryFilter",
                      arguments: [.properties([("UUIDs", .strings([BluetoothUUID.service])), ("Transport", .string("le")), ("DuplicateData", .bool(true))])]) { _ in }
        try? bus.call(destination: "org.bluez", path: adapterPath, interface: "org.bluez.Adapter1", member: "StartDiscovery") { result in
            if case .failure(let error) = result, !error.name.hasSuffix("InProgress") {
                self.logger.warning("cannot start discovery: \(error)")
                self.discoveryStarted = false
            }
        }
        kickBus()
    }

    private func stopDiscovery(bus: Bus) {
        guard discoveryStarted, let adapterPath else { return }
        discoveryStarted = false
        scanningSinceMs = nil
        status.scanning = false
        try? bus.call(destination: "org.bluez", path: adapterPath, interface: "org.bluez.Adapter1", member: "StopDiscovery") { _ in }
    }

    private func connect(_ path: String, _ device: BlueZObjects.Device, bus: Bus) {
        stopDiscovery(bus: bus)
        target = path
        phase = .connecting
        phaseDeadlineMs = monotonicMs() + settings.connectTimeoutMs
        status.deviceAddress = device.address
        status.deviceName = device.name
        status.rssi = device.rssi
        status.problem = "connecting to \(device.name ?? device.address)"
        logger.info("connecting to \(device.name ?? "?") (\(device.address), RSSI \(device.rssi.map(String.init) ?? "?"))")
        try? bus.call(destination: "org.bluez", path: path, interface: "org.bluez.Device1", member: "Connect",
                      timeoutUsec: UInt64(settings.connectTimeoutMs) * 1000) { result in
            guard self.target == path, self.phase == .connecting else { return }
            switch result {
            case .success:
                self.phase = .resolving
                self.refreshDevice()
            case .failure(let error):
                self.fail("cannot connect to \(device.address): \(error)")
            }
        }
        kickBus()
    }

    /// Re-reads the device's properties: bluetoothd 5.66 can drop the Connected signal
    /// (a race between its ATT socket and the kernel's event), so signals alone are not trusted.
    private func refreshDevice() {
        guard let target, let bus else { return }
        try? bus.call(destination: "org.bluez", path: target, interface: GattObjects.properties, member: "GetAll",
                      arguments: [.string("org.bluez.Device1")]) { result in
            guard case .success(let args) = result, let properties = args.first?.stringKeyedEntries, var device = self.objects.devices[target] else { return }
            self.objects.update(&device, with: properties)
            self.objects.devices[target] = device
            if device.servicesResolved && self.objects.workerCharacteristics(of: target) == nil { self.refreshObjects() }
            self.advance()
        }
        kickBus()
    }

    private func subscribe(_ found: (request: String, response: String, status: String, mtu: Int?)) {
        guard let bus else { return }
        phase = .subscribing
        characteristics = (found.request, found.response, found.status)
        status.mtu = found.mtu
        responseFramer.reset()
        statusFramer.reset()
        subscriptionsAnswered = 0
        for path in [found.response, found.status] {
            try? bus.call(destination: "org.bluez", path: path, interface: "org.bluez.GattCharacteristic1", member: "StartNotify") { result in
                guard self.phase == .subscribing else { return }
                if case .failure(let error) = result { return self.fail("cannot subscribe to \(path): \(error)") }
                self.subscriptionsAnswered += 1
                if self.subscriptionsAnswered == 2 { self.connected() }
            }
        }
        kickBus()
    }

    private func connected() {
        phase = .connected
        status.connected = true
        status.problem = nil
        status.lastSeenMs = wallClockMilliseconds()
        backoffMs = 1_000
        logger.notice("connected to the worker \(status.deviceName ?? "?") (\(status.deviceAddress ?? "?")), MTU \(status.mtu.map(String.init) ?? "?")")
        // The ATT MTU sets the write size; bluetoothd knows it once the link is up.
        if let path = characteristics?.request {
            try? bus?.call(destination: "org.bluez", path: path, interface: GattObjects.properties, member: "Get",
                           arguments: [.string("org.bluez.GattCharacteristic1"), .string("MTU")]) { result in
                if case .success(let args) = result, let mtu = args.first?.integerValue, (23...517).contains(mtu) { self.status.mtu = Int(mtu) }
            }
        }
        // The status characteristic's current value, without waiting for a notification.
        if let path = characteristics?.status {
            try? bus?.call(destination: "org.bluez", path: path, interface: "org.bluez.GattCharacteristic1", member: "ReadValue",
                           arguments: [.properties([])]) { result in
                if case .success(let args) = result, let value = args.first?.bytesValue, let json = try? JSON.parse(value) { self.applyStatus(json) }
            }
        }
        kickBus()
    }

    private func fail(_ reason: String) {
        logger.warning(reason + "; retrying in \(backoffMs) ms")
        if let target, let bus, phase != .idle {
            try? bus.call(destination: "org.bluez", path: target, interface: "org.bluez.Device1", member: "Disconnect") { _ in }
        }
        linkLost(reason: reason)
    }

    /// The link is gone: requests waiting for an answer fail now (their notifications
    /// cannot arrive any more); the next attempt waits the backoff.
    private func linkLost(reason: String) {
        let wasConnected = phase == .connected
        if phase != .idle {
            nextAttemptAtMs = monotonicMs() + backoffMs + Int64.random(in: 0...(backoffMs / 2))
            backoffMs = min(settings.maxBackoffMs, backoffMs * 2)
        }
        phase = .idle
        target = nil
        characteristics = nil
        status.connected = false
        status.problem = reason
        if wasConnected {
            status.reconnects += 1
            logger.warning("lost the worker: \(reason)")
        }
        for id in Array(pending.keys) { resolve(id, .answered(ok: false, output: "", error: "link_lost: \(reason)", workerDurationMs: 0)) }
        writeQueue.removeAll()
        for waiter in writeWaiters.values { waiter.resume(returning: DBusError.failed("link lost")) }
        writeWaiters.removeAll()
    }

    // MARK: Requests out, responses in

    private func writeLoop() async {
        for await _ in writeStream {
            while let job = takeWrite() {
                await write(job)
            }
        }
    }

    private func takeWrite() -> WriteJob? { writeQueue.isEmpty ? nil : writeQueue.removeFirst() }

    /// Writes one request, chunk after chunk, each a write with response (flow control
    /// by the worker's side), never interleaved with another request's chunks.
    private func write(_ job: WriteJob) async {
        let size = max(20, min((status.mtu ?? 23) - 3, 508))
        var offset = 0
        while offset < job.bytes.count {
            guard let bus, let request = characteristics?.request, pending[job.id] != nil else { return }
            let chunk = Array(job.bytes[offset..<min(offset + size, job.bytes.count)])
            let error: DBusError? = await withCheckedContinuation { continuation in
                nextWaiter += 1
                let key = nextWaiter
                writeWaiters[key] = continuation
                do {
                    try bus.call(destination: "org.bluez", path: request, interface: "org.bluez.GattCharacteristic1", member: "WriteValue",
                                 arguments: [.bytes(chunk), .properties([("type", .string("request"))])]) { result in
                        guard let waiter = self.writeWaiters.removeValue(forKey: key) else { return }
                        if case .failure(let error) = result { waiter.resume(returning: error) } else { waiter.resume(returning: nil) }
                    }
                    kickBus()
                } catch {
                    writeWaiters.removeValue(forKey: key)?.resume(returning: DBusError.failed("\(error)"))
                }
            }
            if let error {
                resolve(job.id, .answered(ok: false, output: "", error: "write_failed: \(error)", workerDurationMs: 0))
                // A write the worker's side refuses means the link or its service is not
                // what we think: start over with a fresh connection.
                if phase == .connected { fail("a write to the worker failed: \(error)") }
                return
            }
            offset += chunk.count
        }
    }

    private func responseChunk(_ bytes: [UInt8]) {
        status.lastSeenMs = wallClockMilliseconds()
        for event in responseFramer.feed(bytes, nowMs: monotonicMs()) {
            guard case .object(let object) = event, let json = try? JSON.parse(object), let id = json["id"]?.stringValue else { continue }
            resolve(id, .answered(ok: json["ok"]?.boolValue ?? false, output: json["output"]?.stringValue ?? "",
                                  error: json["error"]?.stringValue, workerDurationMs: json["durationMs"]?.intValue ?? 0))
        }
    }

    private func statusChunk(_ bytes: [UInt8]) {
        status.lastSeenMs = wallClockMilliseconds()
        for event in statusFramer.feed(bytes, nowMs: monotonicMs()) {
            if case .object(let object) = event, let json = try? JSON.parse(object) { applyStatus(json) }
        }
    }

    private func applyStatus(_ json: JSONValue) {
        if let state = json["modelState"]?.stringValue { status.modelState = String(state.prefix(32)) }
        if let battery = json["batteryPct"]?.intValue { status.batteryPct = battery < 0 ? nil : Int(min(100, battery)) }
        if let name = json["name"]?.stringValue, name.hasPrefix("EdgeCoder-"), name.count <= 64 { status.deviceName = name }
    }
}

func randomID() -> String {
    var generator = SystemRandomNumberGenerator()
    let digits = Array("0123456789abcdef")
    return String((0..<16).map { _ in digits[Int(generator.next() % 16)] })
}
