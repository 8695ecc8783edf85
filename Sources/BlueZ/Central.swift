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
    /// Without `device`: keep to the first worker connected to; `onPinned` remembers it.
    public var pinFirstWorker = false
    public var selection: String?
    public var onPinned: (@Sendable (String) -> Void)?
    /// `proxy --list`: report the workers in range (`workersInRange()`), connect to none.
    public var listOnly = false

    public init(adapter: String?, device: String?) {
        self.adapter = adapter
        self.device = device?.uppercased()
    }

    var machine: CentralMachine.Settings {
        var settings = CentralMachine.Settings(adapter: adapter, device: device)
        settings.scanWindowMs = scanWindowMs
        settings.connectTimeoutMs = connectTimeoutMs
        settings.maxBackoffMs = maxBackoffMs
        settings.pinFirstWorker = pinFirstWorker
        settings.selection = selection
        settings.listOnly = listOnly
        return settings
    }
}

/// A BlueZ central for the worker's service (protocol-bluetooth §1): the interpreter of `CentralMachine`,
/// which decides how to scan, connect, subscribe, write requests in chunks of at most
/// min(MTU − 3, 508) bytes, match responses by id and reconnect with backoff. One actor
/// owns the bus, as in `GattPeripheral`.
public actor GattCentral: BusDriving, ProxyUpstream {
    let settings: CentralSettings
    package let logger: Logger
    /// The machine's time (monotonic), injected so that a test can drive it.
    let clock: any WorkerClock
    /// The machine's phases as last logged (debug level only).
    private var trace = PhaseTrace()

    package var bus: Bus?
    package nonisolated let wake = WakeEvent()
    private var slots: [BusSlot] = []
    private var machine: CentralMachine
    /// What a waiting `generate` receives: partial texts, then its result.
    private enum Delivery: Sendable {
        case delta(String)
        case result(GenerateResult)
    }
    private var waiters: [String: AsyncStream<Delivery>.Continuation] = [:]
    /// Reads the acquired notification socket (AcquireNotify) until it closes or is released.
    private var notifyReader: Task<Void, Never>?

    public init(settings: CentralSettings, logger: Logger, clock: any WorkerClock = SystemClock()) {
        self.settings = settings
        self.logger = logger
        self.clock = clock
        var generator = SystemRandomNumberGenerator()
        machine = CentralMachine(settings: settings.machine, seed: generator.next())
    }

    public var currentStatus: ProxyStatus {
        var status = machine.status
        if let problem = machine.setupProblem { status.problem = AdapterDiagnostics.describe(problem) }
        return status
    }

    /// Runs until cancelled; requests still waiting then fail at once.
    public func run() async {
        await busLoop()
        feed(.stop)
        notifyReader?.cancel()
    }

    /// Sends one request and waits for its response (or the timeout, or the link's loss),
    /// handing each partial's text to `onDelta` in order on the way; a streamed answer's
    /// result carries the partials joined as its `output`. Cancelling the calling task
    /// abandons the request: the worker is told to cancel it, and this returns at once with
    /// `.notConnected(CentralMachine.abandonedReason)` (503 for a proxy that is stopping).
    public func generate(_ ask: WorkerAsk, timeoutMs: Int64, onDelta: @escaping @Sendable (String) async -> Void) async -> GenerateResult {
        let id = "proxy-" + randomID()
        let (deliveries, continuation) = AsyncStream.makeStream(of: Delivery.self)
        waiters[id] = continuation
        feed(.request(id: id, bytes: ask.wire(id: id), timeoutMs: timeoutMs))
        kickBus()
        // A cancelled task ends the iteration (AsyncStream returns nil): no handler needed.
        for await delivery in deliveries {
            switch delivery {
            case .delta(let text): await onDelta(text)
            case .result(let result): return result
            }
        }
        abandon(id)
        return .notConnected(CentralMachine.abandonedReason)
    }

    private func abandon(_ id: String) {
        feed(.abandon(id: id))
        waiters.removeValue(forKey: id)?.finish()
        kickBus()
    }

    /// Fails every request waiting now (the proxy is stopping).
    public func failPending() {
        feed(.stop)
    }

    /// With `listOnly`: what the scan found, once its window is over (`run()` must run).
    public func workersInRange() async -> [CentralMachine.Sighting] {
        if let sightings { return sightings }
        return await withCheckedContinuation { listWaiters.append($0) }
    }
    private var sightings: [CentralMachine.Sighting]?
    private var listWaiters: [CheckedContinuation<[CentralMachine.Sighting], Never>] = []

    // MARK: The machine

    private func feed(_ event: CentralMachine.Event) {
        execute(machine.on(event, now: clock.monotonicMs()))
    }

    private func execute(_ commands: [CentralMachine.Command]) {
        if logger.effectiveLevel <= .debug, let line = trace.changed(to: machine.phaseLine) { logger.debug("central: \(line)") }
        for command in commands {
            switch command {
            case .loadObjects:
                if let bus { BlueZBus.loadObjects(bus) { self.feed(.bluez($0)) } }
            case .startDiscovery(let adapterPath):
                try? bus?.call(
                    destination: "org.bluez", path: adapterPath, interface: "org.bluez.Adapter1", member: "SetDiscoveryFilter",
                    arguments: [
                        .properties([("UUIDs", .strings([GattLayout.serviceUUID])), ("Transport", .string("le")), ("DuplicateData", .bool(true))])
                    ]
                ) { _ in }
                try? bus?.call(destination: "org.bluez", path: adapterPath, interface: "org.bluez.Adapter1", member: "StartDiscovery") { result in
                    if case .failure(let error) = result {
                        self.feed(.discoveryFailed(error: "\(error)", inProgress: error.name.hasSuffix("InProgress")))
                    }
                }
            case .stopDiscovery(let adapterPath):
                try? bus?.call(destination: "org.bluez", path: adapterPath, interface: "org.bluez.Adapter1", member: "StopDiscovery") { _ in }
            case .connect(let device, let timeoutMs):
                try? bus?.call(
                    destination: "org.bluez", path: device, interface: "org.bluez.Device1", member: "Connect",
                    timeoutUsec: UInt64(timeoutMs) * 1000
                ) { result in
                    self.feed(.connectAnswered(device: device, error: Self.failure(result)))
                }
            case .disconnect(let device):
                try? bus?.call(destination: "org.bluez", path: device, interface: "org.bluez.Device1", member: "Disconnect") { _ in }
            case .refreshDevice(let device):
                try? bus?.call(
                    destination: "org.bluez", path: device, interface: GattObjects.properties, member: "GetAll",
                    arguments: [.string(BlueZInterfaceName.device.rawValue)]
                ) { result in
                    guard case .success(let args) = result, let properties = args.first,
                        let decoded = BlueZBus.decode([BlueZInterfaceName.device.rawValue: properties]).device
                    else { return }
                    self.feed(.deviceProperties(device: device, decoded))
                }
            case .acquireNotify(let path):
                acquireNotify(path)
            case .releaseNotify:
                notifyReader?.cancel()
                notifyReader = nil
            case .startNotify(let path):
                try? bus?.call(destination: "org.bluez", path: path, interface: GattObjects.characteristicInterface, member: "StartNotify") {
                    result in
                    self.feed(.subscribeAnswered(path: path, error: Self.failure(result)))
                }
            case .readMTU(let path):
                try? bus?.call(
                    destination: "org.bluez", path: path, interface: GattObjects.properties, member: "Get",
                    arguments: [.string(GattObjects.characteristicInterface), .string("MTU")]
                ) { result in
                    if case .success(let args) = result, let mtu = args.first?.integerValue.flatMap({ Int(exactly: $0) }) { self.feed(.mtuRead(mtu)) }
                }
            case .readStatus(let path):
                try? bus?.call(
                    destination: "org.bluez", path: path, interface: GattObjects.characteristicInterface, member: "ReadValue",
                    arguments: [.properties([])]
                ) { result in
                    if case .success(let args) = result, let value = args.first?.bytesValue { self.feed(.statusRead(value)) }
                }
            case .write(let id, let path, let chunk):
                do {
                    guard let bus else { throw BusFailure("write to the worker: no bus", -ENOTCONN) }
                    try bus.call(
                        destination: "org.bluez", path: path, interface: GattObjects.characteristicInterface, member: "WriteValue",
                        arguments: [.bytes(chunk), .properties([("type", .string("request"))])]
                    ) { result in
                        self.feed(.writeAnswered(id: id, error: Self.failure(result)))
                    }
                } catch {
                    feed(.writeAnswered(id: id, error: "\(error)"))
                }
            case .partial(let id, let text):
                waiters[id]?.yield(.delta(text))
            case .resolve(let id, let result):
                if let waiter = waiters.removeValue(forKey: id) {
                    waiter.yield(.result(result))
                    waiter.finish()
                }
            case .log(let level, let message):
                logger.log(level, message)
            case .pinned(let address):
                logger.notice("the worker \(address) is remembered: the proxy connects only to it from now on (--any or --forget to change)")
                settings.onPinned?(address)
            case .listed(let found):
                sightings = found
                for waiter in listWaiters { waiter.resume(returning: found) }
                listWaiters = []
            }
        }
    }

    /// AcquireNotify on the response characteristic: bluetoothd writes each notification's
    /// value to a socket of ours (SOCK_SEQPACKET, one value per read), so a piece of an
    /// answer skips bluetoothd's D-Bus signal, dbus-daemon and our decoding of it.
    private func acquireNotify(_ path: String) {
        notifyReader?.cancel()
        notifyReader = nil
        do {
            guard let bus else { throw BusFailure("AcquireNotify: no bus", -ENOTCONN) }
            try bus.call(
                destination: "org.bluez", path: path, interface: GattObjects.characteristicInterface, member: "AcquireNotify",
                arguments: [.properties([])]
            ) { result in
                switch result {
                case .success(let args):
                    // The message owns its descriptor: keep a duplicate of our own.
                    guard case .unixFD(let received)? = args.first else {
                        return self.feed(.notifyAcquired(path: path, error: "AcquireNotify answered without a file descriptor"))
                    }
                    let fd = fcntl(received, F_DUPFD_CLOEXEC, 3)
                    guard fd >= 0 else { return self.feed(.notifyAcquired(path: path, error: "dup: \(String(cString: strerror(errno)))")) }
                    _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
                    // One socket read at a time: an older reader (a late answer) goes.
                    self.notifyReader?.cancel()
                    self.notifyReader = Task { await self.readNotifications(fd: fd, path: path) }
                    self.feed(.notifyAcquired(path: path, error: nil))
                case .failure(let error):
                    self.feed(.notifyAcquired(path: path, error: "\(error)"))
                }
            }
        } catch {
            feed(.notifyAcquired(path: path, error: "\(error)"))
        }
    }

    /// Feeds each value read from the acquired socket until bluetoothd closes it (the link
    /// went down) or the reader is cancelled (released); closes it either way.
    private func readNotifications(fd: Int32, path: String) async {
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 1_024)
        while !Task.isCancelled {
            do { try await Reactor.shared.waitReadable(fd) } catch { return }
            if Task.isCancelled { return }
            while true {
                let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
                if n > 0 {
                    feed(.notification(path: path, Array(buffer[0..<n])))
                    continue
                }
                if n < 0 && (errno == EAGAIN || errno == EINTR) { break }
                // 0: closed by bluetoothd; any other error: the socket is unusable. A
                // released reader (cancelled) says nothing: a new one may be in its place.
                if Task.isCancelled { return }
                notifyReader = nil
                feed(.notifySocketClosed(path: path))
                kickBus()
                return
            }
            kickBus()
        }
    }

    private static func failure(_ result: Result<[DBusValue], DBusError>) -> String? {
        if case .failure(let error) = result { return "\(error)" }
        return nil
    }

    // MARK: The bus

    package var reconnectDelayMs: Int64 { 2_000 }

    package func processed() async -> Int64? {
        feed(.tick)
        return machine.nextDeadlineMs
    }

    package func connectBus() {
        do {
            let bus = try BlueZBus.open(address: settings.busAddress)
            self.bus = bus
            feed(.busOpened)
            slots += try BlueZBus.follow(
                bus, owner: { self.machine.follower.owner },
                signal: { self.feed(.bluez($0)) })
        } catch {
            dropBus(reason: "cannot use the system bus: \(error). Is dbus-daemon running (systemctl status dbus)?")
        }
    }

    package func dropBus(reason: String) {
        slots.forEach { $0.cancel() }
        slots.removeAll()
        bus = nil
        feed(.busClosed(reason: reason))
    }
}

func randomID() -> String {
    var generator = SystemRandomNumberGenerator()
    let digits = Array("0123456789abcdef")
    return String((0..<16).map { _ in digits[Int(generator.next() % 16)] })
}
