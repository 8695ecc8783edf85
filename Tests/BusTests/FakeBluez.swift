import Foundation
import Testing
@testable import BlueZ
import DBus
import TestSupport
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

/// Polls `condition` (every 20 ms, for about `seconds`) until it holds; records an issue if it never does.
func eventually(_ what: String, seconds: Double = 10, _ condition: () async -> Bool) async {
    if await waitUntil(timeoutMs: Int(seconds * 1_000), pollMs: 20, condition) { return }
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

/// The worker's unique name on the private bus: the only connection other than the fake's and the probe's.
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
