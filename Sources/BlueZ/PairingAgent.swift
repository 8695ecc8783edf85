#if canImport(Glibc)
import Glibc
#endif
import DBus
import Posix
import Synchronization
import WorkerCore

/// `edgecoder-worker bluetooth pair`: a BlueZ pairing agent that lives only as long as the
/// window. It registers an org.bluez.Agent1 (RegisterAgent + RequestDefaultAgent), makes
/// the adapter pairable, answers bluetoothd's calls as `PairingWindow` decides (asking the
/// operator on the terminal), and at the end unregisters and restores `Pairable`, so the
/// desktop's own agent (BlueZ keeps a queue of default agents) is the default again. The
/// daemon never runs this: outside the window no agent of ours exists.
///
/// Capability KeyboardDisplay: the operator has a terminal that shows and reads digits, so
/// every client input/output pairing can reach MITM protection (numeric comparison with
/// phones, Macs and desktops; passkey entry with a display-only or keyboard-only client),
/// where DisplayYesNo would fall back to Just Works against a display-only client.
public final class PairingAgent {
    public enum Outcome: Sendable, Equatable {
        /// A device of the adapter paired (its address).
        case paired(String)
        /// The window ended without a pairing (timeout, signal, release): why.
        case closed(String)
        /// The window could not open or broke: what failed and what to do.
        case failed(String)
    }

    public static let objectPath = "/com/edgecoder/worker/pairing_agent"
    public static let capability = "KeyboardDisplay"

    private let adapterName: String?
    private let durationMs: Int64
    private let say: (String) -> Void
    private let busAddress: String?
    private let stop: PairingStop
    private let wake: WakeEvent
    private let input: Int32

    private var bus: Bus?
    private var slots: [BusSlot] = []
    private var window: PairingWindow?
    private var bluez: String?
    /// The Agent1 call waiting for the operator's answer.
    private var held: BusMessage?
    private var lines = TerminalLines()
    private var inputEnded = false

    /// `say` prints a line for the operator (prompts included); `input` is where answers
    /// come from (stdin). `stop`/`wake`: a signal handler sets the signal and wakes the loop.
    public init(
        adapter: String?, durationMs: Int64, input: Int32 = 0, busAddress: String? = nil,
        stop: PairingStop, wake: WakeEvent, clock: any WorkerClock = SystemClock(), say: @escaping (String) -> Void
    ) {
        self.adapterName = adapter
        self.durationMs = durationMs
        self.input = input
        self.busAddress = busAddress
        self.stop = stop
        self.wake = wake
        self.say = say
        self.clock = clock
    }

    /// The window's time (monotonic).
    private let clock: any WorkerClock

    public func run() async -> Outcome {
        let bus: Bus
        do { bus = try BlueZBus.open(address: busAddress) } catch {
            return .failed("cannot reach the system bus: \(error); is dbus running?")
        }
        self.bus = bus
        defer { self.bus = nil }
        guard
            case .success(let owner) = await call(
                "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "GetNameOwner", [.string("org.bluez")]),
            let bluez = owner.first?.stringValue
        else {
            return .failed("bluetoothd is not running (no org.bluez on the system bus): start it (systemctl start bluetooth)")
        }
        self.bluez = bluez
        let adapter: String
        switch await chooseAdapter() {
        case .success(let name): adapter = name
        case .failure(let why): return .failed(why.message)
        }
        let adapterPath = "/org/bluez/" + adapter
        do {
            slots.append(try bus.exportObjects(under: Self.objectPath) { [unowned self] message in self.handle(message) })
            slots.append(
                try bus.addMatch(
                    "type='signal',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',path_namespace='\(adapterPath)'"
                ) { [unowned self] message in
                    self.propertiesChanged(message)
                })
        } catch {
            return .failed("cannot export the agent object: \(error)")
        }
        defer { slots.forEach { $0.cancel() }; slots.removeAll() }

        let manager = Agent1Calls.manager
        if case .failure(let error) = await call(
            manager.0, manager.1, manager.2, "RegisterAgent", [.objectPath(Self.objectPath), .string(Self.capability)])
        {
            return .failed(
                "bluetoothd refused to register the pairing agent: \(error)\(error.name.hasSuffix("AccessDenied") ? " (run as root or a member of group bluetooth)" : "")"
            )
        }
        var outcome: Outcome
        if case .failure(let error) = await call(manager.0, manager.1, manager.2, "RequestDefaultAgent", [.objectPath(Self.objectPath)]) {
            outcome = .failed("bluetoothd refused to make the pairing agent the default: \(error)")
        } else {
            let wasPairable = await property(adapterPath, "Pairable")?.boolValue
            if wasPairable != true, case .failure(let error) = await setPairable(adapterPath, true) {
                outcome = .failed("cannot make \(adapter) pairable: \(error)")
            } else {
                say(
                    "Pairing window open on \(adapter) for \(durationMs / 1000) s (agent \(Self.capability)). Pair from the client now; Ctrl-C ends the window."
                )
                window = PairingWindow(adapter: adapter, nowMs: clock.monotonicMs(), durationMs: durationMs)
                outcome = await loop(bus)
            }
            // Restored whatever happened: a headless host goes back to non-pairable. When
            // the old value could not be read, non-pairable is the safe guess (bluetoothd
            // turns a desktop's adapter pairable again with its agent).
            if wasPairable != true, case .failure(let error) = await setPairable(adapterPath, false) {
                say("warning: cannot make \(adapter) non-pairable again: \(error); check with bluetoothctl show")
            }
        }
        if let held {
            try? bus.replyError(to: held, DBusError(name: BlueZErrorName.canceled.rawValue, message: "the pairing window closed"))
            self.held = nil
        }
        // bluetoothd also drops the agent when this process leaves the bus; unregistering
        // says so now, and puts the previous default agent (the desktop's) back at once.
        if case .failure(let error) = await call(manager.0, manager.1, manager.2, "UnregisterAgent", [.objectPath(Self.objectPath)]),
            !error.name.hasSuffix("DoesNotExist")
        {
            say("warning: cannot unregister the pairing agent: \(error); bluetoothd drops it when this program exits")
        }
        return outcome
    }

    // MARK: - The window's loop

    private func loop(_ bus: Bus) async -> Outcome {
        while true {
            do { try bus.dispatchReady() } catch {
                return .failed("the system bus connection failed: \(error)")
            }
            if let signal = stop.signal {
                close("interrupted (\(SignalPipe.name(signal)))")
            }
            if let reply = window?.tick(nowMs: clock.monotonicMs()) { send(reply) }
            guard let window, window.isOpen else { break }
            let reading = held != nil && !inputEnded
            let terminal = reading ? [Reactor.Interest(fd: input, events: Int16(POLLIN))] : []
            await bus.prepareWait(wake: wake, extra: terminal, deadlineNs: UInt64(max(0, window.deadlineMs)) * 1_000_000).wait()
            if held != nil && !inputEnded { readInput(waiting: true) }
        }
        switch window?.state {
        case .closed(let why)?:
            if let address = window?.paired { return .paired(address) }
            return .closed(why)
        default:
            return .closed("closed")
        }
    }

    private func close(_ why: String) {
        if let reply = window?.close(why) { send(reply) }
    }

    /// Reads what the terminal has now (never blocks: only after poll said readable, or
    /// to drop what was typed before a question was asked).
    private func readInput(waiting: Bool) {
        var buffer = [UInt8](repeating: 0, count: 512)
        while true {
            var fds = pollfd(fd: input, events: Int16(POLLIN), revents: 0)
            guard Glibc.poll(&fds, 1, 0) > 0 else { return }
            let n = buffer.withUnsafeMutableBytes { read(input, $0.baseAddress, $0.count) }
            if n < 0 && (errno == EINTR || errno == EAGAIN) { continue }
            if n <= 0 {
                inputEnded = true
                if waiting, let last = lines.finish() { answer(last) }
                if held != nil, let reply = window?.answer("") { send(reply) }
                return
            }
            let got = lines.feed(buffer[0..<n])
            if waiting { got.forEach(answer) }
        }
    }

    private func answer(_ line: String) {
        guard held != nil, let reply = window?.answer(line) else { return }
        send(reply)
    }

    /// Answers the held call.
    private func send(_ reply: PairingWindow.Reply) {
        guard let bus, let call = held else { return }
        held = nil
        switch reply {
        case .accept:
            say("accepted")
            try? bus.reply(to: call)
        case .passkey(let passkey):
            say("passkey sent")
            try? bus.reply(to: call, [.uint32(passkey)])
        case .reject(let why):
            say("refused: \(why)")
            try? bus.replyError(to: call, DBusError(name: BlueZErrorName.rejected.rawValue, message: why))
        }
    }

    // MARK: - Agent1

    private func handle(_ message: BusMessage) -> ObjectAnswer {
        guard message.path == Self.objectPath, message.interface == Agent1Calls.interface, let member = message.member else { return .notHandled }
        // Only bluetoothd may drive the agent: another peer could otherwise make the
        // operator confirm a pairing it invented.
        guard message.sender != nil, message.sender == bluez else {
            return .error(DBusError(name: "org.freedesktop.DBus.Error.AccessDenied", message: "only bluetoothd calls this agent"))
        }
        let request: PairingWindow.Request
        switch Agent1Calls.decode(member: member, (try? message.arguments()) ?? []) {
        case nil:
            return .notHandled
        case .release:
            close("bluetoothd released the agent")
            return .reply([])
        case .cancel:
            if window?.cancelPending() != nil, let call = held {
                held = nil
                say("bluetoothd cancelled the request (the client gave up or took too long)")
                try? bus?.replyError(to: call, DBusError(name: BlueZErrorName.canceled.rawValue, message: "cancelled"))
            }
            return .reply([])
        case .malformed(let member):
            return .error(DBusError(name: "org.freedesktop.DBus.Error.InvalidArgs", message: "unexpected arguments for \(member)"))
        case .request(let decoded):
            request = decoded
        }
        guard var window else { return .error(DBusError(name: BlueZErrorName.rejected.rawValue, message: "the pairing window is not open")) }
        let decision = window.decide(request, nowMs: clock.monotonicMs())
        self.window = window
        switch decision {
        case .show(let text):
            say(text)
            return .reply([])
        case .reject(let why):
            say("refused: \(why)")
            return .error(DBusError(name: BlueZErrorName.rejected.rawValue, message: why))
        case .ask(_, let prompt):
            // What was typed before the question belongs to no question: dropped.
            if !inputEnded { readInput(waiting: false) }
            held = message
            say(prompt)
            if inputEnded, let reply = self.window?.answer("") { send(reply) }
            return .deferred
        }
    }

    private func propertiesChanged(_ message: BusMessage) {
        guard message.sender != nil, message.sender == bluez, let path = message.path,
            let args = try? message.arguments(), args.count >= 2, args[0].stringValue == "org.bluez.Device1",
            let changed = args[1].stringKeyedEntries, changed["Paired"]?.boolValue == true || changed["Bonded"]?.boolValue == true
        else { return }
        if window?.devicePaired(path) == true, let address = window?.paired {
            let bonded = changed["Bonded"]?.boolValue == true ? " and bonded" : ""
            say("\(address) paired\(bonded). The window closes.")
        }
    }

    // MARK: - Bus calls awaited on the loop

    private func call(_ destination: String, _ path: String, _ interface: String, _ member: String, _ arguments: [DBusValue] = []) async -> Result<
        [DBusValue], DBusError
    > {
        guard let bus else { return .failure(.failed("no bus")) }
        let box = ResultBox()
        do {
            try bus.call(destination: destination, path: path, interface: interface, member: member, arguments: arguments, timeoutUsec: 10_000_000) {
                box.result = $0
            }
        } catch {
            return .failure(.failed("\(error)"))
        }
        while box.result == nil {
            do { while try bus.process() {} } catch { return .failure(.failed("\(error)")) }
            if box.result != nil { break }
            var deadlineNs: UInt64?
            if let usec = bus.timeoutUsec { deadlineNs = usec &* 1_000 }
            _ = try? await Reactor.shared.wait(
                [Reactor.Interest(fd: bus.fileDescriptor, events: bus.events == 0 ? Int16(POLLIN) : bus.events)], deadlineNs: deadlineNs)
        }
        return box.result!
    }

    private func property(_ path: String, _ name: String) async -> DBusValue? {
        guard
            case .success(let args) = await call(
                "org.bluez", path, "org.freedesktop.DBus.Properties", "Get", [.string("org.bluez.Adapter1"), .string(name)])
        else { return nil }
        return args.first
    }

    private func setPairable(_ path: String, _ on: Bool) async -> Result<[DBusValue], DBusError> {
        await call(
            "org.bluez", path, "org.freedesktop.DBus.Properties", "Set", [.string("org.bluez.Adapter1"), .string("Pairable"), .variant(.bool(on))])
    }

    /// --adapter, else the first powered adapter bluetoothd lists.
    private func chooseAdapter() async -> Result<String, DBusError> {
        guard case .success(let args) = await call("org.bluez", "/", "org.freedesktop.DBus.ObjectManager", "GetManagedObjects") else {
            return .failure(.failed("cannot list bluetoothd's adapters"))
        }
        let tree = BlueZBus.managedObjects(args.first)
        let adapters = tree.filter { $0.value.adapter != nil && $0.key.hasPrefix("/org/bluez/") }.sorted { $0.key < $1.key }
        if let adapterName {
            guard let found = adapters.first(where: { $0.key == "/org/bluez/" + adapterName }) else {
                return .failure(
                    .failed(
                        "bluetoothd has no adapter \(adapterName) (it has: \(adapters.map { String($0.key.dropFirst(11)) }.joined(separator: ", ")))")
                )
            }
            if found.value.adapter?.powered != true { return .failure(.failed("\(adapterName) is powered off: bluetoothctl power on")) }
            return .success(adapterName)
        }
        guard let first = adapters.first(where: { $0.value.adapter?.powered == true }) else {
            return .failure(.failed(adapters.isEmpty ? "bluetoothd has no adapter" : "no adapter is powered on: bluetoothctl power on"))
        }
        return .success(String(first.key.dropFirst("/org/bluez/".count)))
    }
}

/// Set from the signal task, read by the window's loop (then woken through its WakeEvent).
public final class PairingStop: Sendable {
    private let received = Mutex<Int32?>(nil)
    public init() {}
    public func set(_ signal: Int32) { received.withLock { $0 = signal } }
    public var signal: Int32? { received.withLock { $0 } }
}

private final class ResultBox {
    var result: Result<[DBusValue], DBusError>?
}
