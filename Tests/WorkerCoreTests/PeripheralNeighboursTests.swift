import TestSupport
import Testing
@testable import WorkerCore

/// protocol-bluetooth §3 on the peripheral's state machine: admission by use (the host's own devices
/// are never touched), allowed clients, refusals told and disconnected, isolation,
/// idle eviction, and the bounds on bad input. The BlueZ VM suite's phases `neighbours`,
/// `badflood`, `idle` and `leave-mid` drive the same rules through bluetoothd.
@Suite struct PeripheralNeighboursTests {
    typealias H = PeripheralHarness

    static func harness(
        maxClients: Int = 1, pacingMs: Int64 = 10, allowed: BluetoothAllowedClients = .any,
        idleMs: Int64 = 120_000
    ) -> H {
        var h = H(maxClients: maxClients, pacingMs: pacingMs)
        var settings = h.machine.settings
        settings.allowedClients = allowed
        settings.limits.clientIdleMs = idleMs
        h.machine = PeripheralMachine(settings: settings)
        h.bringUp()
        return h
    }

    static func address(_ n: Int) -> String { "00:AA:01:01:00:0\(n)" }

    /// A device that connects to the adapter (bluetoothd's signal) and does nothing else.
    static func connect(_ h: inout H, _ n: Int, bonded: Bool? = nil) {
        var interfaces = H.connected(n)
        interfaces.device?.bonded = bonded
        h.on(.bluez(.interfacesAdded(path: H.device(n), interfaces)))
    }

    static func disconnect(_ h: inout H, _ n: Int) {
        h.on(.bluez(.propertiesChanged(path: H.device(n), BlueZInterfaces(device: .init(connected: false)))))
    }

    static func read(_ h: inout H, _ role: GattLayout.Role, from n: Int) -> PeripheralMachine.Reply? {
        if h.machine.follower.objects.devices[H.device(n)] == nil { connect(&h, n) }
        return H.replies(h.on(.call(sender: H.bluez, .read(role, device: H.device(n), mtu: 185, offset: 0)))).first
    }

    static func writeWithReply(_ h: inout H, _ text: String, from n: Int) -> PeripheralMachine.Reply? {
        if h.machine.follower.objects.devices[H.device(n)] == nil { connect(&h, n) }
        return H.replies(h.on(.call(sender: H.bluez, .write(.request, bytes: Array(text.utf8), device: H.device(n), mtu: 185, expectsReply: true))))
            .first
    }

    static func json(_ reply: PeripheralMachine.Reply?) -> JSONValue? {
        if case .value(let bytes) = reply { try? JSON.parse(bytes) } else { nil }
    }

    static func errorName(_ reply: PeripheralMachine.Reply?) -> String? {
        if case .error(let name, _) = reply { name } else { nil }
    }

    // MARK: Admission by use

    @Test func aDeviceThatOnlyConnectsIsNeverCountedRefusedOrDisconnectedEvenAtStop() {
        var h = Self.harness(maxClients: 1)
        Self.connect(&h, 9)  // the host's own mouse
        h.advance(5_000)
        #expect(h.machine.clients.isEmpty)
        // With maxClients 1 the real client still gets the only slot.
        _ = h.write(#"{"id":"r","prompt":"p"}"#, from: 1)
        #expect(h.machine.clients == [H.device(1)])
        #expect(H.served(h.all).map(\.request.id) == ["r"])
        let stop = h.on(.stop)
        #expect(H.disconnects(h.all) == [H.device(1)], "only the client is disconnected, never the mouse")
        #expect(H.disconnects(stop) == [H.device(1)])
        #expect(h.machine.status.clientsRefused == 0 && h.machine.status.clientsNotAllowed == 0)
    }

    @Test func aReadOfOneOfOurCharacteristicsMakesADeviceAClient() {
        var h = Self.harness()
        Self.connect(&h, 1)
        #expect(h.machine.clients.isEmpty, "connecting is not using")
        #expect(Self.read(&h, .status, from: 1) == .value(h.machine.statusCharacteristic.bytes))
        #expect(h.machine.clients == [H.device(1)])
        #expect(h.machine.status.clients == [BluetoothStatus.Client(address: Self.address(1), mtu: 185)])
    }

    @Test func aBusyRefusalIsToldOnTheResponseReadRefusedElsewhereCountedOnceAndDisconnectedASecondLater() {
        var h = Self.harness(maxClients: 1)
        _ = h.write("{}", from: 1)
        let body = Self.json(Self.read(&h, .response, from: 2))
        #expect(body?["id"]?.stringValue == "")
        #expect(body?["ok"]?.boolValue == false)
        #expect(body?["error"]?.stringValue?.hasPrefix("busy: ") == true)
        #expect(Self.errorName(Self.read(&h, .status, from: 2)) == "org.bluez.Error.NotAuthorized")
        #expect(Self.errorName(Self.writeWithReply(&h, #"{"id":"x","prompt":"p"}"#, from: 2)) == "org.bluez.Error.NotPermitted")
        #expect(H.served(h.all).isEmpty, "a refused device's request never runs")
        #expect(h.machine.status.clientsRefused == 1, "one refusal, however often it knocks")
        #expect(H.disconnects(h.all).isEmpty)
        #expect(H.disconnects(h.advance(900)).isEmpty)
        #expect(H.disconnects(h.advance(200)) == [H.device(2)])
        #expect(h.machine.clients == [H.device(1)])
    }

    @Test func aRefusedDeviceThatLeavesBeforeItsDisconnectIsNotDisconnected() {
        var h = Self.harness(maxClients: 1)
        _ = h.write("{}", from: 1)
        _ = h.write("{}", from: 2)
        Self.disconnect(&h, 2)
        #expect(H.disconnects(h.advance(2_000)).isEmpty)
    }

    @Test func anAddressOutsideAllowedClientsIsRefusedNotAllowedAndCounted() throws {
        let allowed = try WorkerConfig.parse(Array(#"{"bluetooth": {"allowedClients": ["00:aa:01:01:00:01"]}}"#.utf8)).bluetooth.allowedClients
        var h = Self.harness(maxClients: 2, allowed: allowed)
        _ = h.write(#"{"id":"stranger","prompt":"p"}"#, from: 2)
        #expect(Self.json(Self.read(&h, .response, from: 2))?["error"]?.stringValue?.hasPrefix("not_allowed: ") == true)
        #expect(h.machine.status.clientsNotAllowed == 1 && h.machine.status.clientsRefused == 0)
        #expect(H.disconnects(h.advance(1_100)) == [H.device(2)])
        _ = h.write(#"{"id":"friend","prompt":"p"}"#, from: 1)
        #expect(H.served(h.all).map(\.request.id) == ["friend"])
        #expect(h.machine.clients == [H.device(1)])
    }

    @Test func bondedAdmitsOnlyBondedDevices() {
        var h = Self.harness(maxClients: 2, allowed: .bonded)
        Self.connect(&h, 1, bonded: true)
        Self.connect(&h, 2, bonded: false)
        _ = h.write("{}", from: 1)
        _ = h.write("{}", from: 2)
        #expect(h.machine.clients == [H.device(1)])
        #expect(h.machine.clientTable.refused[H.device(2)] == .notAllowed)
        #expect(h.machine.status.clientsNotAllowed == 1)
    }

    @Test func aDeviceTouchingTheServiceWhileItStopsIsNotLeftHalfAdmitted() {
        var h = Self.harness(maxClients: 2)
        _ = h.write("{}", from: 1)
        h.on(.stop)
        let late = h.write(#"{"id":"late","prompt":"p"}"#, from: 2)
        #expect(H.disconnects(late) == [H.device(2)], "disconnected at once, like the clients")
        #expect(h.machine.clients == [H.device(1)] || h.machine.clients.isEmpty)
        #expect(!h.machine.clients.contains(H.device(2)))
        #expect(H.served(h.all).isEmpty)
        #expect(h.machine.status.clientsRefused == 0, "not a refusal: the service is going")
        h.on(.unregistered(.advertisement))
        h.on(.unregistered(.application))
        #expect(h.machine.stopped)
    }

    // MARK: Isolation

    @Test func theResponseReadValueIsEmptyForAnyoneButTheClientItBelongsTo() {
        var h = Self.harness(maxClients: 2)
        _ = h.write(#"{"id":"mine","prompt":"p"}"#, from: 1)
        _ = h.write("", from: 2)
        let ticket = H.served(h.all)[0].ticket
        h.on(.served(ticket: ticket, PeripheralOutcome(ok: true, output: "secret", error: nil, durationMs: 1)))
        h.advance(1_000)
        let last = h.machine.values[.response] ?? []
        #expect(!last.isEmpty)
        #expect(Self.read(&h, .response, from: 1) == .value(last))
        #expect(Self.read(&h, .response, from: 2) == .value([]))
    }

    @Test func aClientLeavingCancelsItsRunningAndQueuedRequestsAndTheNextClientGetsNothingOfThem() {
        var h = Self.harness(maxClients: 1)
        _ = h.write(#"{"id":"a","prompt":"p"}{"id":"b","prompt":"q"}"#, from: 1)
        let ticket = H.served(h.all)[0].ticket
        let gone = h.on(.bluez(.propertiesChanged(path: H.device(1), BlueZInterfaces(device: .init(connected: false)))))
        #expect(gone.contains(.cancel(ticket: ticket, reason: "cancelled: the client disconnected")))
        _ = h.write(#"{"id":"c","prompt":"r"}"#, from: 2)
        let late = h.on(.served(ticket: ticket, PeripheralOutcome(ok: false, output: "", error: "cancelled: the client disconnected", durationMs: 5)))
        #expect(H.served(late).map(\.request.id) == ["c"], "b was dropped with its client")
        let next = H.served(late)[0].ticket
        let out =
            H.notified(late) + H.notified(h.on(.served(ticket: next, PeripheralOutcome(ok: true, output: "for c", error: nil, durationMs: 1))))
            + H.notified(h.advance(1_000))
        #expect(H.messages(out).map { $0["id"]?.stringValue } == ["c"])
        #expect(h.machine.status.requestsFailed == 2)
    }

    @Test func theRestOfAnAnswerBeingSentIsDroppedWhenItsClientLeaves() {
        var h = Self.harness(maxClients: 1, pacingMs: 10)
        _ = h.write(#"{"id":"long","prompt":"p"}"#, from: 1, mtu: 23)
        let ticket = H.served(h.all)[0].ticket
        h.on(.served(ticket: ticket, PeripheralOutcome(ok: true, output: String(repeating: "z", count: 500), error: nil, durationMs: 1)))
        h.advance(30)
        Self.disconnect(&h, 1)
        #expect(H.notified(h.advance(2_000)).isEmpty)
    }

    // MARK: Fairness

    @Test func anIdleClientIsEvictedWhenAnotherDeviceWantsItsSlot() {
        var h = Self.harness(maxClients: 1, idleMs: 5_000)
        _ = h.write(#"{"id":"a","prompt":"p"}"#, from: 1)
        h.on(.served(ticket: H.served(h.all)[0].ticket, PeripheralOutcome(ok: true, output: "x", error: nil, durationMs: 1)))
        h.advance(3_000)
        _ = h.write(#"{"id":"early","prompt":"p"}"#, from: 2)
        #expect(h.machine.clientTable.refused[H.device(2)] == .busy, "idle 3 s of 5: not yet")
        h.advance(1_100)
        Self.disconnect(&h, 2)
        h.advance(2_000)
        let wants = h.write(#"{"id":"b","prompt":"p"}"#, from: 3)
        #expect(H.disconnects(wants) == [H.device(1)])
        #expect(h.machine.status.clientsEvicted == 1)
        #expect(h.machine.clients == [H.device(3)])
        #expect(H.served(h.all).map(\.request.id) == ["a", "b"])
    }

    @Test func aClientWithARequestRunningIsNeverIdle() {
        var h = Self.harness(maxClients: 1, idleMs: 5_000)
        _ = h.write(#"{"id":"slow","prompt":"p"}"#, from: 1)
        h.advance(60_000)
        _ = h.write("{}", from: 2)
        #expect(h.machine.clients == [H.device(1)])
        #expect(h.machine.status.clientsEvicted == 0)
        #expect(h.machine.clientTable.refused[H.device(2)] == .busy)
    }

    @Test func idleTimeCountsFromTheEndOfTheClientsLastAnswerNotFromItsWrite() {
        var h = Self.harness(maxClients: 1, idleMs: 5_000)
        _ = h.write(#"{"id":"long","prompt":"p"}"#, from: 1)
        h.advance(200_000)  // a long generation
        h.on(.served(ticket: H.served(h.all)[0].ticket, PeripheralOutcome(ok: true, output: "done", error: nil, durationMs: 200_000)))
        h.advance(3_000)
        _ = h.write("{}", from: 2)
        #expect(h.machine.clients == [H.device(1)], "idle 3 s since its answer, not 203 s")
        #expect(h.machine.status.clientsEvicted == 0)
    }

    // MARK: Bounds

    @Test func aWriteOfManyBadObjectsIsAnsweredOnce() {
        var h = Self.harness()
        _ = h.write(String(repeating: "{}", count: 254), from: 1, mtu: 517)
        let messages = H.messages(H.notified(h.all) + H.notified(h.advance(2_000)))
        #expect(messages.count == 1)
        #expect(messages.first?["ok"]?.boolValue == false)
        #expect(h.machine.status.requestsRejected == 254)
        #expect(h.all.filter { if case .log(.info, let line) = $0 { line.contains("rejected") } else { false } }.count == 1)
    }

    @Test func theOneAnswerToABadWriteIsTheRejectionThatNamesAnId() {
        // Issue #26 row 14: garbage, then the tail of a request that names its id, in one
        // write: the client matches answers by id, so that one is answered.
        var h = Self.harness()
        _ = h.write(#"lost {"x": } more","id":"tail-9"}"#, from: 1, mtu: 517)
        let messages = H.messages(H.notified(h.all) + H.notified(h.advance(2_000)))
        #expect(messages.count == 1)
        #expect(messages.first?["id"]?.stringValue == "tail-9")
        #expect(messages.first?["error"]?.stringValue?.contains("508") == true)
        #expect(h.machine.status.requestsRejected == 3)
    }

    @Test func aClientsOutboundQueueHoldsAtMostFourDroppingTheOldestRejections() {
        var h = Self.harness(pacingMs: 1_000)
        for n in 1...6 { _ = h.write(#"{"id":"bad\#(n)"}"#, from: 1, mtu: 23) }
        #expect(h.machine.outbox.messages.count { $0.client == Self.address(1) } <= 4)
        #expect(h.machine.status.rejectionsDropped >= 1)
        // The newest rejections are the ones kept.
        #expect(h.machine.outbox.messages.last.flatMap { try? JSON.parse($0.bytes) }?["id"]?.stringValue == "bad6")
    }

    @Test func eightBadWritesWithinTenSecondsCutTheClientOffForSixtySeconds() {
        var h = Self.harness(maxClients: 1)
        for _ in 1...7 {
            _ = h.write("{}", from: 1)
            h.advance(1_000)
        }
        #expect(h.machine.clients == [H.device(1)])
        _ = h.write("{}", from: 1)
        #expect(h.machine.status.clientsCooledDown == 1)
        #expect(h.machine.clients.isEmpty)
        #expect(Self.json(Self.read(&h, .response, from: 1))?["error"]?.stringValue?.hasPrefix("cooling_down: ") == true)
        #expect(H.disconnects(h.advance(1_100)) == [H.device(1)])
        Self.disconnect(&h, 1)
        // Back within the cool-down: refused again; after it, served.
        h.advance(30_000)
        _ = h.write(#"{"id":"again","prompt":"p"}"#, from: 1)
        #expect(h.machine.clientTable.refused[H.device(1)] == .coolingDown)
        h.advance(1_100)
        Self.disconnect(&h, 1)
        h.advance(30_000)
        _ = h.write(#"{"id":"later","prompt":"p"}"#, from: 1)
        #expect(h.machine.clients == [H.device(1)])
        #expect(H.served(h.all).map(\.request.id) == ["later"])
    }

    @Test func badWritesSpreadOutDoNotCoolAClientDown() {
        var h = Self.harness()
        for _ in 1...12 {
            _ = h.write("{}", from: 1)
            h.advance(2_000)
        }
        #expect(h.machine.status.clientsCooledDown == 0)
        #expect(h.machine.clients == [H.device(1)])
    }

    @Test func aFloodOf200WritesOf254BadObjectsStaysBoundedAndAWellBehavedClientIsServed() {
        var h = Self.harness(maxClients: 2)
        let flood = String(repeating: "{}", count: 254)
        for _ in 1...200 { _ = h.write(flood, from: 1, mtu: 517) }
        #expect(h.machine.status.clientsCooledDown == 1)
        #expect(h.machine.outbox.messages.count <= 4)
        #expect(h.machine.status.requestsRejected == 8 * 254, "writes after the cut-off are refused before they are parsed")
        _ = h.write(#"{"id":"good","prompt":"p"}"#, from: 2, mtu: 517)
        #expect(H.served(h.all).map(\.request.id) == ["good"])
    }

    // MARK: Status, flags, config

    @Test func theStatusIsSentAgainAfterANewConnectionWhileSubscribed() {
        var h = Self.harness(maxClients: 1)
        Self.connect(&h, 9)
        #expect(!h.advance(3_000).contains(.fetchStatusValues(force: true)), "no one subscribed: nothing to send")
        _ = h.on(.call(sender: H.bluez, .startNotify(.status)))
        Self.connect(&h, 8)
        #expect(!h.advance(1_400).contains(.fetchStatusValues(force: true)))
        #expect(h.advance(200).contains(.fetchStatusValues(force: true)))
        #expect(h.machine.clients.isEmpty, "the status goes out; the device is still not a client")
    }

    @Test func securityFlagsOpenAreTodaysAndTheOthersEncryptEveryAccess() {
        let open = GattLayout.characteristics.map { BluetoothSecurity.open.flags($0.properties) }
        #expect(open == [["write", "write-without-response"], ["notify", "read"], ["notify", "read"]])
        #expect(open == GattLayout.characteristics.map(\.flags))
        #expect(
            GattLayout.characteristics.map { BluetoothSecurity.encrypted.flags($0.properties) }
                == [["encrypt-write", "write-without-response"], ["encrypt-notify", "encrypt-read"], ["encrypt-notify", "encrypt-read"]])
        #expect(
            GattLayout.characteristics.map { BluetoothSecurity.authenticated.flags($0.properties) }
                == [
                    ["encrypt-authenticated-write", "write-without-response"], ["encrypt-authenticated-notify", "encrypt-authenticated-read"],
                    ["encrypt-authenticated-notify", "encrypt-authenticated-read"],
                ])
    }

    @Test func theNeighbourKeysParseWithDefaults() throws {
        let defaults = try WorkerConfig.parse(Array("{}".utf8))
        #expect(defaults.bluetooth.security == .open)
        #expect(defaults.bluetooth.allowedClients == .any)
        #expect(defaults.bluetooth.clientIdleSec == 120)
        let set = try WorkerConfig.parse(
            Array(#"{"bluetooth": {"security": "encrypted", "allowedClients": ["aa-bb-cc-dd-ee-ff", "00:11:22:33:44:55"], "clientIdleSec": 5}}"#.utf8)
        )
        #expect(set.bluetooth.security == .encrypted)
        #expect(set.bluetooth.allowedClients == .addresses(["AA:BB:CC:DD:EE:FF", "00:11:22:33:44:55"]))
        #expect(set.bluetooth.clientIdleSec == 5)
        #expect(try WorkerConfig.parse(Array(#"{"bluetooth": {"allowedClients": "bonded"}}"#.utf8)).bluetooth.allowedClients == .bonded)
    }

    @Test(arguments: [
        (#"{"bluetooth": {"security": "paranoid"}}"#, "bluetooth.security"),
        (#"{"bluetooth": {"allowedClients": "everyone"}}"#, "bluetooth.allowedClients"),
        (#"{"bluetooth": {"allowedClients": []}}"#, "bluetooth.allowedClients"),
        (#"{"bluetooth": {"allowedClients": ["00:11:22:33:44"]}}"#, "bluetooth.allowedClients[0]"),
        (#"{"bluetooth": {"allowedClients": ["00:11:22:33:44:55", "zz:11:22:33:44:55"]}}"#, "bluetooth.allowedClients[1]"),
        (#"{"bluetooth": {"allowedClients": [5]}}"#, "bluetooth.allowedClients[0]"),
        (#"{"bluetooth": {"allowedClients": 3}}"#, "bluetooth.allowedClients"),
        (#"{"bluetooth": {"clientIdleSec": 4}}"#, "bluetooth.clientIdleSec"),
        (#"{"bluetooth": {"clientIdleSec": 86401}}"#, "bluetooth.clientIdleSec"),
    ])
    func badNeighbourKeysAreRefusedNamingTheKey(_ text: String, _ key: String) {
        do {
            _ = try WorkerConfig.parse(Array(text.utf8))
            Issue.record("accepted \(text)")
        } catch {
            #expect(error.problems.map(\.path) == [key], "\(error.problems)")
        }
    }
}
