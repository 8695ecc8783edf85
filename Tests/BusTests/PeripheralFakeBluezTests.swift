import Foundation
import Testing
@testable import BlueZ
import Logging
import DBus
import WorkerCore

/// A stand-in for bluetoothd on a private bus, for what real BlueZ never does: calls
/// with the wrong argument types, calls from a process that is not bluetoothd, and an
/// org.bluez that leaves and comes back on demand. (Everything BlueZ really does is
/// tested against real BlueZ in the VM suite, IntegrationTests/suites/bluetooth.sh.)
final class FakeBluez: @unchecked Sendable {
    /// Everything the fake saw, guarded by the lock (the fake's loop runs on its own task).
    struct Log {
        var registeredApplications = 0
        var registeredAdvertisements = 0
        var unregistered = 0
        var objectsOfApplication: DBusValue?
        var notifications: [[UInt8]] = []
        var replies: [String: Result<[DBusValue], DBusError>] = [:]
        var owned = false
        /// The pairing agent's side (bluetooth pair): Adapter1.Pairable of hci0 and the agent.
        var pairable = false
        var agent: (owner: String, path: String)?
        var agentDefault = false
        var agentUnregistered = false
        var agentCapability: String?
        var agentRegistrations = 0
        /// Devices the worker asked to forget (Adapter1.RemoveDevice).
        var removedDevices: [String] = []
    }
    let lock = NSLock()
    var log = Log()
    var commands: [(Bus) throws -> Void] = []
    let address: String
    var thread: Thread?
    let stopped = NSLock()
    var stopRequested = false

    init(address: String) { self.address = address }

    func with<T>(_ body: (inout Log) -> T) -> T { lock.lock(); defer { lock.unlock() }; return body(&log) }
    func enqueue(_ command: @escaping (Bus) throws -> Void) { lock.lock(); commands.append(command); lock.unlock() }

    /// The fake runs on a thread of its own: its loop blocks, and must not take one of
    /// the (two, on CI) threads Swift concurrency runs the worker's actor on.
    func start() {
        let thread = Thread { [self] in
            guard let bus = try? Bus.connect(address: address) else { return }
            var slots: [BusSlot] = []
            slots.append(try! bus.exportObjects(under: "/") { [self] message in answer(message, bus: bus) })
            slots.append(
                try! bus.addMatch("type='signal',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged'") { [self] message in
                    guard let path = message.path, GattLayout.characteristic(path: path)?.notifies == true,
                        let value = (try? message.arguments())?[1].stringKeyedEntries?["Value"]?.bytesValue
                    else { return }
                    with { $0.notifications.append(value) }
                })
            self.requestName(bus)
            while !with({ _ in stopRequestedValue() }) {
                while (try? bus.process()) == true {}
                let pending: [(Bus) throws -> Void] = {
                    lock.lock(); defer { commands.removeAll(); lock.unlock() }; return commands
                }()
                for command in pending { try? command(bus) }
                usleep(2_000)
            }
            _ = slots
        }
        self.thread = thread
        thread.start()
    }

    private func stopRequestedValue() -> Bool { stopRequested }
    func stop() { with { _ in stopRequested = true } }

    func requestName(_ bus: Bus) {
        try? bus.call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            member: "RequestName", arguments: [.string("org.bluez"), .uint32(0)]
        ) { [self] _ in with { $0.owned = true } }
    }

    func releaseName() {
        enqueue { bus in
            try bus.call(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "ReleaseName", arguments: [.string("org.bluez")]
            ) { [self] _ in with { $0.owned = false } }
        }
    }

    func answer(_ message: BusMessage, bus: Bus) -> ObjectAnswer {
        switch (message.path, message.member) {
        case ("/", "GetManagedObjects"):
            return .reply([
                .dictionary(
                    keySignature: "o", valueSignature: "a{sa{sv}}",
                    [
                        DBusDictEntry(
                            key: .objectPath("/org/bluez/hci0"),
                            value: .dictionary(
                                keySignature: "s", valueSignature: "a{sv}",
                                [
                                    DBusDictEntry(
                                        key: .string("org.bluez.Adapter1"),
                                        value: .properties([("Address", .string("00:AA:01:00:00:00")), ("Powered", .bool(true))])),
                                    DBusDictEntry(key: .string("org.bluez.GattManager1"), value: .properties([])),
                                    DBusDictEntry(key: .string("org.bluez.LEAdvertisingManager1"), value: .properties([])),
                                ])),
                        // A nearby LE device (public address, no Class of Device), not connected.
                        DBusDictEntry(
                            key: .objectPath("/org/bluez/hci0/dev_00_AA_01_01_00_01"),
                            value: .dictionary(
                                keySignature: "s", valueSignature: "a{sv}",
                                [
                                    DBusDictEntry(
                                        key: .string("org.bluez.Device1"),
                                        value: .properties([
                                            ("Address", .string("00:AA:01:01:00:01")), ("AddressType", .string("public")),
                                            ("Adapter", .objectPath("/org/bluez/hci0")), ("Connected", .bool(false)),
                                        ]))
                                ])),
                    ])
            ])
        case ("/org/bluez/hci0", "RemoveDevice"):
            let device = (try? message.arguments())?.first?.stringValue ?? ""
            with { $0.removedDevices.append(device) }
            return .reply([])
        case ("/org/bluez/hci0", "RegisterApplication"):
            // Like bluetoothd: read the application's objects before answering.
            let sender = message.sender ?? ""
            try? bus.call(destination: sender, path: GattObjects.root, interface: "org.freedesktop.DBus.ObjectManager", member: "GetManagedObjects") {
                [self] result in
                with {
                    $0.objectsOfApplication = try? result.get().first; $0.registeredApplications += 1
                }
            }
            return .reply([])
        case ("/org/bluez/hci0", "RegisterAdvertisement"):
            with { $0.registeredAdvertisements += 1 }
            return .reply([])
        case ("/org/bluez/hci0", "UnregisterAdvertisement"), ("/org/bluez/hci0", "UnregisterApplication"):
            with { $0.unregistered += 1 }
            return .reply([])
        case ("/org/bluez", "RegisterAgent"):
            let args = (try? message.arguments()) ?? []
            with {
                $0.agent = (message.sender ?? "", args.first?.stringValue ?? "")
                $0.agentCapability = args.count > 1 ? args[1].stringValue : nil
                $0.agentRegistrations += 1
                $0.agentUnregistered = false
            }
            return .reply([])
        case ("/org/bluez", "RequestDefaultAgent"):
            with { $0.agentDefault = true }
            return .reply([])
        case ("/org/bluez", "UnregisterAgent"):
            with {
                $0.agentUnregistered = true; $0.agentDefault = false
            }
            return .reply([])
        case ("/org/bluez/hci0", "Get") where message.interface == "org.freedesktop.DBus.Properties":
            return .reply([.variant(.bool(with { $0.pairable }))])
        case ("/org/bluez/hci0", "Set") where message.interface == "org.freedesktop.DBus.Properties":
            guard let args = try? message.arguments(), args.count == 3, args[1].stringValue == "Pairable", let on = args[2].boolValue else {
                return .error(DBusError(name: "org.freedesktop.DBus.Error.InvalidArgs", message: "not Pairable"))
            }
            with { $0.pairable = on }
            return .reply([])
        default:
            return .notHandled
        }
    }

    /// Calls a method on the worker's objects as bluetoothd would, recording the answer under `key`.
    func call(
        _ key: String, to destination: String, path: String, interface: String = "org.bluez.GattCharacteristic1",
        member: String, arguments: [DBusValue]
    ) {
        enqueue { [self] bus in
            try bus.call(destination: destination, path: path, interface: interface, member: member, arguments: arguments) { [self] result in
                with { $0.replies[key] = result }
            }
        }
    }
}

/// The daemon's side, reduced to what the tests look at: requests served with a fixed answer.
actor RecordingHost: PeripheralHost {
    var served: [BluetoothRequest] = []
    var statuses: [BluetoothStatus] = []
    func serve(
        _ request: BluetoothRequest, client: String, cancellation: ServeCancellation,
        onPartial: @escaping @Sendable (String) async -> Void
    ) async -> PeripheralOutcome {
        served.append(request)
        return PeripheralOutcome(ok: true, output: "echo: " + request.prompt, error: nil, durationMs: 1)
    }
    func statusValues() async -> (modelState: String, batteryPct: Int?) { ("ready", nil) }
    func report(_ status: BluetoothStatus) async { statuses.append(status) }
    var last: BluetoothStatus? { statuses.last }
}

func eventually(_ what: String, seconds: Double = 10, _ condition: () async -> Bool) async {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if await condition() { return }
        try? await Task.sleep(nanoseconds: 20_000_000)
    }
    Issue.record("timed out waiting for \(what)")
}

/// A private bus with the stand-in bluetoothd owning org.bluez on it.
func startFakeBluez() async throws -> (PrivateBus, FakeBluez) {
    let daemon = try PrivateBus()
    let bluez = FakeBluez(address: daemon.address)
    bluez.start()
    await eventually("the fake to own org.bluez") { bluez.with { $0.owned } }
    return (daemon, bluez)
}

/// The worker's peripheral settings for a test, on the private bus.
func peripheralSettings(on daemon: PrivateBus) -> PeripheralSettings {
    var settings = PeripheralSettings(config: WorkerConfig.Bluetooth(), agentID: "test-0123456789abcdefgh")
    settings.busAddress = daemon.address
    return settings
}

@Suite(.serialized) struct PeripheralFakeBluezTests {
    @Test func mockedBluezSendsMalformedCallsAndRestartsTheWorkerRegistersAgainAndServesOn() async throws {
        let (daemon, bluez) = try await startFakeBluez()
        defer { bluez.stop(); daemon.stop() }
        var settings = peripheralSettings(on: daemon)
        settings.chunkPacingMs = 0
        settings.retryMs = 200
        let host = RecordingHost()
        let peripheral = GattPeripheral(settings: settings, host: host, logger: Logger(label: "test", level: .error))
        let session = Task { await peripheral.run() }

        await eventually("registration") { bluez.with { $0.registeredApplications == 1 && $0.registeredAdvertisements == 1 } }
        await eventually("status advertising") { await host.last?.state == .advertising }
        let objects = try #require(bluez.with { $0.objectsOfApplication })
        #expect(objects.signature == "a{oa{sa{sv}}}")

        // Find the worker's unique name through the bus: the only other connection.
        let name = try #require(await uniqueNameOfWorker(daemon: daemon, excluding: bluez))
        let device: DBusValue = .properties([("device", .objectPath("/org/bluez/hci0/dev_00_AA_01_01_00_01")), ("mtu", .uint16(185))])
        bluez.call("no-args", to: name, path: GattObjects.request, member: "WriteValue", arguments: [])
        bluez.call("wrong-types", to: name, path: GattObjects.request, member: "WriteValue", arguments: [.string("{}"), .int32(1)])
        bluez.call("bad-offset", to: name, path: GattObjects.status, member: "ReadValue", arguments: [.properties([("offset", .uint16(60_000))])])
        bluez.call("unknown", to: name, path: GattObjects.request, member: "Explode", arguments: [])
        bluez.call(
            "garbage", to: name, path: GattObjects.request, member: "WriteValue", arguments: [.bytes(Array("{\"id\":\"g\", nope}".utf8)), device])
        bluez.call(
            "good", to: name, path: GattObjects.request, member: "WriteValue",
            arguments: [.bytes(Array(#"{"id":"r-1","prompt":"hello"}"#.utf8)), device])
        await eventually("all answers") { bluez.with { $0.replies.count == 6 } }
        let replies = bluez.with { $0.replies }
        #expect(replies["no-args"].map { if case .failure = $0 { true } else { false } } == true)
        #expect(replies["wrong-types"].map { if case .failure = $0 { true } else { false } } == true)
        #expect(replies["bad-offset"].map { if case .failure(let e) = $0 { e.name == "org.bluez.Error.InvalidOffset" } else { false } } == true)
        #expect(replies["unknown"].map { if case .failure(let e) = $0 { e.name == "org.bluez.Error.NotSupported" } else { false } } == true)
        #expect(replies["good"].map { if case .success = $0 { true } else { false } } == true)

        // The two messages come back whole, in chunks of at most MTU − 5 = 180 bytes.
        await eventually("two responses") { messages(in: bluez).count >= 2 }
        let answers = messages(in: bluez)
        #expect(
            answers.contains { $0["id"]?.stringValue == "g" && $0["ok"] == false && $0["error"]?.stringValue?.hasPrefix("malformed_json") == true })
        #expect(answers.contains { $0["id"]?.stringValue == "r-1" && $0["ok"] == true && $0["output"]?.stringValue == "echo: hello" })
        #expect(bluez.with { $0.notifications }.allSatisfy { $0.count <= 180 })
        #expect(await host.served.map(\.id) == ["r-1"])

        // A caller that is not bluetoothd is refused.
        let stranger = try Bus.connect(address: daemon.address)
        var strangerAnswer: Result<[DBusValue], DBusError>?
        try stranger.call(
            destination: name, path: GattObjects.request, interface: "org.bluez.GattCharacteristic1", member: "WriteValue",
            arguments: [.bytes(Array(#"{"id":"x","prompt":"p"}"#.utf8)), device]
        ) { strangerAnswer = $0 }
        for _ in 0..<500 where strangerAnswer == nil {
            while try stranger.process() {}
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        #expect(strangerAnswer.map { if case .failure(let e) = $0 { e.name.hasSuffix("AccessDenied") } else { false } } == true)

        // bluetoothd goes away and comes back: the worker registers again by itself.
        bluez.releaseName()
        await eventually("waiting without bluetoothd") { await host.last?.state == .waiting }
        bluez.enqueue { bus in bluez.requestName(bus) }
        await eventually("registered again") { bluez.with { $0.registeredApplications == 2 && $0.registeredAdvertisements == 2 } }
        await eventually("advertising again") { await host.last?.state == .advertising }
        #expect(await host.last?.registrations == 2, "both registrations counted")

        // Stopping takes both back.
        await peripheral.stop()
        #expect(bluez.with { $0.unregistered } == 2)
        session.cancel()
        _ = await session.value
    }

    func uniqueNameOfWorker(daemon: PrivateBus, excluding bluez: FakeBluez) async throws -> String? {
        let probe = try Bus.connect(address: daemon.address)
        var names: [String] = []
        var done = false
        try probe.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", member: "ListNames") {
            result in
            names = ((try? result.get().first?.arrayValue) ?? []).compactMap(\.stringValue)
            done = true
        }
        var owner: String?
        try probe.call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", member: "GetNameOwner",
            arguments: [.string("org.bluez")]
        ) { owner = try? $0.get().first?.stringValue }
        for _ in 0..<500 where !(done && owner != nil) {
            while try probe.process() {}
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        return names.first { $0.hasPrefix(":") && $0 != owner && $0 != probe.uniqueName }
    }
}

/// Reassembles the notified chunks the way EdgeCoder's proxy does: append until the
/// bytes parse as one JSON object.
func messages(in bluez: FakeBluez) -> [JSONValue] {
    var out: [JSONValue] = []
    var buffer: [UInt8] = []
    for chunk in bluez.with({ $0.notifications }) {
        buffer += chunk
        if let value = try? JSON.parse(buffer) { out.append(value); buffer.removeAll() }
    }
    return out
}

/// A host whose answers are long and slow, as a real model's are.
actor SlowHost: PeripheralHost {
    let delayMs: UInt64
    let outputBytes: Int
    init(delayMs: UInt64, outputBytes: Int) {
        self.delayMs = delayMs
        self.outputBytes = outputBytes
    }
    func serve(
        _ request: BluetoothRequest, client: String, cancellation: ServeCancellation,
        onPartial: @escaping @Sendable (String) async -> Void
    ) async -> PeripheralOutcome {
        try? await Task.sleep(nanoseconds: delayMs * 1_000_000)
        return PeripheralOutcome(ok: true, output: String(repeating: "w", count: outputBytes), error: nil, durationMs: Int64(delayMs))
    }
    func statusValues() async -> (modelState: String, batteryPct: Int?) { ("ready", nil) }
    func report(_ status: BluetoothStatus) async {}
}

@Suite(.serialized) struct PeripheralPacingTests {
    @Test func pacedAnswersAndStatusArriveWholeOverARealBus() async throws {
        let (daemon, bluez) = try await startFakeBluez()
        defer { bluez.stop(); daemon.stop() }
        var settings = peripheralSettings(on: daemon)
        settings.chunkPacingMs = 10
        let peripheral = GattPeripheral(
            settings: settings, host: SlowHost(delayMs: 1_500, outputBytes: 6_000), logger: Logger(label: "test", level: .error))
        let session = Task { await peripheral.run() }
        await eventually("registration") { bluez.with { $0.registeredApplications == 1 && $0.registeredAdvertisements == 1 } }
        let name = try #require(await PeripheralFakeBluezTests().uniqueNameOfWorker(daemon: daemon, excluding: bluez))
        let device: DBusValue = .properties([("device", .objectPath("/org/bluez/hci0/dev_00_AA_01_01_00_01")), ("mtu", .uint16(48))])
        bluez.call("subscribe", to: name, path: GattObjects.status, member: "StartNotify", arguments: [])
        bluez.call(
            "write", to: name, path: GattObjects.request, member: "WriteValue",
            arguments: [.bytes(Array(#"{"id":"long-1","prompt":"hello"}"#.utf8)), device])
        await eventually("the answer", seconds: 30) { messages(in: bluez).contains { $0["id"]?.stringValue == "long-1" } }
        let all = messages(in: bluez)
        #expect(all.contains { $0["modelState"]?.stringValue == "ready" }, "the status arrived whole")
        #expect(all.first { $0["id"]?.stringValue == "long-1" }?["output"]?.stringValue?.utf8.count == 6_000)
        #expect(bluez.with { $0.notifications }.allSatisfy { $0.count <= 43 })
        await peripheral.stop()
        session.cancel()
        _ = await session.value
    }
}

/// A host that produces a token every `everyMs`, as a model streams, until cancelled.
actor TokenHost: PeripheralHost {
    let everyMs: UInt64
    let tokens: Int
    var stoppedBecause: String?
    var tokensSent = 0
    init(everyMs: UInt64, tokens: Int) {
        self.everyMs = everyMs
        self.tokens = tokens
    }
    func serve(
        _ request: BluetoothRequest, client: String, cancellation: ServeCancellation,
        onPartial: @escaping @Sendable (String) async -> Void
    ) async -> PeripheralOutcome {
        for n in 0..<tokens {
            do { try await Task.sleep(nanoseconds: everyMs * 1_000_000) } catch {
                stoppedBecause = cancellation.reason ?? "cancelled without a reason"
                return PeripheralOutcome(ok: false, output: "", error: stoppedBecause, durationMs: 0)
            }
            tokensSent += 1
            await onPartial("tok\(n) ")
        }
        return PeripheralOutcome(ok: true, output: "", error: nil, durationMs: Int64(tokens) * Int64(everyMs), evalCount: tokens)
    }
    func statusValues() async -> (modelState: String, batteryPct: Int?) { ("ready", nil) }
    func report(_ status: BluetoothStatus) async {}
}

@Suite(.serialized) struct PeripheralStreamingBusTests {
    @Test func aStreamedAnswerArrivesInPartialsAndACancelStopsTheHostOverARealBus() async throws {
        let (daemon, bluez) = try await startFakeBluez()
        defer { bluez.stop(); daemon.stop() }
        let host = TokenHost(everyMs: 20, tokens: 500)
        let peripheral = GattPeripheral(settings: peripheralSettings(on: daemon), host: host, logger: Logger(label: "test", level: .error))
        let session = Task { await peripheral.run() }
        await eventually("registration") { bluez.with { $0.registeredApplications == 1 && $0.registeredAdvertisements == 1 } }
        let name = try #require(await PeripheralFakeBluezTests().uniqueNameOfWorker(daemon: daemon, excluding: bluez))
        let device: DBusValue = .properties([("device", .objectPath("/org/bluez/hci0/dev_00_AA_01_01_00_01")), ("mtu", .uint16(185))])
        let started = Date()
        bluez.call(
            "write", to: name, path: GattObjects.request, member: "WriteValue",
            arguments: [.bytes(Array(#"{"id":"s-1","prompt":"hello","stream":true}"#.utf8)), device])
        await eventually("partials") { messages(in: bluez).filter { $0["delta"] != nil }.count >= 3 }
        let firstPartialAfter = Date().timeIntervalSince(started)
        #expect(firstPartialAfter < 5, "partials come while the model runs (500 tokens take 10 s)")
        bluez.call(
            "cancel", to: name, path: GattObjects.request, member: "WriteValue",
            arguments: [.bytes(Array(#"{"id":"s-1","cancel":true}"#.utf8)), device])
        await eventually("the end") { messages(in: bluez).contains { $0["done"] == true } }
        #expect(Date().timeIntervalSince(started) < 8)
        #expect(await host.stoppedBecause == "cancelled", "the host's task was cancelled, with the client's reason")
        #expect(await host.tokensSent < 500)
        let all = messages(in: bluez).filter { $0["id"] == "s-1" }
        #expect(all.last == ["id": "s-1", "ok": false, "done": true, "error": "cancelled"])
        let deltas = all.compactMap { $0["delta"]?.stringValue }.joined()
        #expect(deltas.hasPrefix("tok0 tok1 tok2 "), "in order, none lost")
        await peripheral.stop()
        session.cancel()
        _ = await session.value
    }
}
