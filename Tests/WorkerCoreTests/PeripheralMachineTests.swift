import TestSupport
import Testing
@testable import WorkerCore

/// The peripheral's state machine driven through the paths the BlueZ VM suite covers on
/// the real stack (bluetoothd leaving and returning, the adapter power-cycled, a refused
/// registration, a client over the limit, a disconnect mid-request and mid-answer, an idle
/// partial request), in microseconds and with the clock in the test's hand (`MachineDriver`
/// feeds it).
struct PeripheralHarness: MachineDriver {
    typealias Command = PeripheralMachine.Command
    static let hci0 = "/org/bluez/hci0"
    static let bluez = ":1.7"
    static func device(_ n: Int) -> String { "/org/bluez/hci0/dev_00_AA_01_01_00_0\(n)" }

    static func logs(_ commands: [Command]) -> [String] {
        commands.compactMap { if case .log(_, let text) = $0 { text } else { nil } }
    }

    var machine: PeripheralMachine
    var now: Int64 = 10_000
    var all: [Command] = []

    init(
        maxClients: Int = 1, maxQueued: Int = 8, pacingMs: Int64 = 10, pacing: BluetoothPacingMode = .auto,
        pairingAgent: PairingAgentChoice? = nil
    ) {
        var settings = PeripheralMachine.Settings(
            adapter: nil, localName: "EdgeCoder-test", maxRequestBytes: 65_536,
            maxQueuedRequests: maxQueued, chunkPacingMs: pacingMs, maxClients: maxClients)
        settings.pacing = pacing
        if let pairingAgent { settings.pairingAgent = pairingAgent }
        machine = PeripheralMachine(settings: settings)
    }

    static func feed(_ event: PeripheralMachine.Event, to machine: inout PeripheralMachine, now: Int64) -> [Command] {
        machine.on(event, now: now)
    }
    static func nextDeadlineMs(of machine: PeripheralMachine) -> Int64 { machine.nextDeadlineMs }
    static var tick: PeripheralMachine.Event { .tick }

    static func adapter(powered: Bool = true) -> BlueZInterfaces {
        BlueZInterfaces(adapter: .init(address: "00:AA:01:00:00:00", powered: powered), advertisingManager: true)
    }

    static func connected(_ n: Int) -> BlueZInterfaces {
        BlueZInterfaces(device: .init(address: "00:AA:01:01:00:0\(n)", adapter: hci0, connected: true))
    }

    /// Bus open, bluetoothd present with a powered hci0, application and advertisement accepted.
    mutating func bringUp() {
        on(.busOpened)
        on(.bluez(.owner(Self.bluez)))
        on(.bluez(.managedObjects([Self.hci0: Self.adapter()])))
        on(.registration(.application, epoch: machine.epoch, .accepted))
        on(.registration(.advertisement, epoch: machine.epoch, .accepted))
    }

    mutating func write(_ text: String, from n: Int, mtu: Int = 185) -> [Command] {
        // bluetoothd has the device's object before the device can write.
        if machine.follower.objects.devices[Self.device(n)] == nil { on(.bluez(.interfacesAdded(path: Self.device(n), Self.connected(n)))) }
        return on(.call(sender: Self.bluez, .write(.request, bytes: Array(text.utf8), device: Self.device(n), mtu: mtu, expectsReply: false)))
    }

    static func registrations(_ commands: [Command]) -> [PeripheralMachine.Registered] {
        commands.compactMap { if case .register(let what, _, _) = $0 { what } else { nil } }
    }

    static func notified(_ commands: [Command], _ role: GattLayout.Role = .response) -> [[UInt8]] {
        commands.compactMap { if case .notify(role, let chunk) = $0 { chunk } else { nil } }
    }

    static func served(_ commands: [Command]) -> [(ticket: Int, request: BluetoothRequest)] {
        commands.compactMap { if case .serve(let ticket, let request, _) = $0 { (ticket, request) } else { nil } }
    }

    static func replies(_ commands: [Command]) -> [PeripheralMachine.Reply] {
        commands.compactMap { if case .reply(let reply) = $0 { reply } else { nil } }
    }

    static func disconnects(_ commands: [Command]) -> [String] {
        commands.compactMap { if case .disconnect(let device, _) = $0 { device } else { nil } }
    }

    /// The JSON messages in a run of chunks, reassembled the way a client does.
    static func messages(_ chunks: [[UInt8]]) -> [JSONValue] {
        var framer = JSONObjectFramer(maxBytes: 1 << 20)
        return chunks.flatMap { framer.feed($0, nowMs: 0) }.compactMap { if case .object(let bytes) = $0 { try? JSON.parse(bytes) } else { nil } }
    }
}

@Suite struct PeripheralMachineTests {
    typealias H = PeripheralHarness

    @Test func registersTheApplicationThenTheAdvertisementOnTheFirstPoweredAdapter() {
        var h = H()
        #expect(h.machine.status.state == .waiting)
        h.on(.busOpened)
        #expect(h.on(.bluez(.owner(H.bluez))).contains(.loadObjects))
        let first = h.on(.bluez(.managedObjects([H.hci0: H.adapter()])))
        #expect(H.registrations(first) == [.application], "the advertisement waits for the application")
        #expect(h.machine.status.state == .registering)
        let second = h.on(.registration(.application, epoch: h.machine.epoch, .accepted))
        #expect(H.registrations(second) == [.advertisement])
        h.on(.registration(.advertisement, epoch: h.machine.epoch, .accepted))
        #expect(h.machine.status.state == .advertising)
        #expect(h.machine.status.applicationRegistered && h.machine.status.advertising)
        #expect(h.machine.status.registrations == 1)
        #expect(h.all.contains { if case .publish(let status) = $0 { status.state == .advertising } else { false } })
    }

    @Test func bluetoothdLeavingDropsEverythingAndItsReturnRegistersAgain() {
        var h = H()
        h.bringUp()
        _ = h.write(#"{"id":"a","pro"#, from: 1)
        #expect(h.machine.clients == [H.device(1)])
        let oldEpoch = h.machine.epoch
        h.on(.bluez(.owner(nil)))
        #expect(h.machine.status.state == .waiting)
        #expect(h.machine.setupProblem == .bluezAbsent(adapter: nil))
        #expect(!h.machine.status.applicationRegistered && !h.machine.status.advertising)
        #expect(h.machine.clients.isEmpty, "the clients' links went with bluetoothd")
        // An answer to a call made before bluetoothd left is stale.
        h.on(.registration(.application, epoch: oldEpoch, .accepted))
        #expect(h.machine.registrar.application == .none)
        // A stranger's call while bluetoothd is away is refused.
        let refused = h.on(.call(sender: ":1.99", .startNotify(.response)))
        #expect(H.replies(refused).first.map { if case .error(let name, _) = $0 { name.hasSuffix("AccessDenied") } else { false } } == true)

        let back = h.on(.bluez(.owner(":1.8")))
        #expect(back.contains(.loadObjects))
        let again = h.on(.bluez(.managedObjects([H.hci0: H.adapter()])))
        #expect(H.registrations(again) == [.application])
        h.on(.registration(.application, epoch: h.machine.epoch, .accepted))
        h.on(.registration(.advertisement, epoch: h.machine.epoch, .accepted))
        #expect(h.machine.status.state == .advertising)
        #expect(h.machine.status.registrations == 2)
    }

    @Test func anAdapterPowerCycleRegistersAgainAndAlreadyExistsCountsAsRegistered() {
        var h = H()
        h.bringUp()
        h.on(.bluez(.propertiesChanged(path: H.hci0, BlueZInterfaces(adapter: .init(powered: false)))))
        #expect(h.machine.status.state == .waiting)
        // With no adapter configured, the first powered one is used: there is none now.
        #expect(h.machine.setupProblem == .noAdapter(configured: nil, known: ["hci0"]))
        #expect(h.machine.registrar.application == .none)
        let on = h.on(.bluez(.propertiesChanged(path: H.hci0, BlueZInterfaces(adapter: .init(powered: true)))))
        #expect(H.registrations(on) == [.application])
        // bluetoothd kept the application across the power cycle (seen in the VM).
        h.on(.registration(.application, epoch: h.machine.epoch, .alreadyExists("Already Exists")))
        #expect(h.machine.registrar.application == .done)
        h.on(.registration(.advertisement, epoch: h.machine.epoch, .accepted))
        #expect(h.machine.status.state == .advertising)
    }

    @Test func anAdapterThatGoesAwayIsReplacedByTheNextPoweredOne() {
        var h = H()
        h.bringUp()
        h.on(.bluez(.interfacesAdded(path: "/org/bluez/hci1", H.adapter())))
        let gone = h.on(.bluez(.interfacesRemoved(path: H.hci0, [.adapter, .advertisingManager])))
        #expect(gone.contains(.register(.application, adapterPath: "/org/bluez/hci1", epoch: h.machine.epoch)))
        #expect(h.machine.registrar.adapterPath == "/org/bluez/hci1")
    }

    @Test func aRefusedRegistrationIsRetriedAfterRetryMsAndNotBefore() {
        var h = H()
        h.on(.busOpened)
        h.on(.bluez(.owner(H.bluez)))
        h.on(.bluez(.managedObjects([H.hci0: H.adapter()])))
        h.on(.registration(.application, epoch: h.machine.epoch, .refused("org.bluez.Error.Failed: no")))
        #expect(h.machine.status.state == .failed)
        #expect(h.machine.status.problem?.contains("bluetoothd refused the GATT application on hci0") == true)
        #expect(h.machine.nextDeadlineMs <= h.now + 5_000)
        #expect(H.registrations(h.advance(4_900)).isEmpty)
        #expect(H.registrations(h.advance(200)) == [.application])
    }

    @Test func aClientOverTheLimitIsDisconnectedAndCounted() {
        var h = H(maxClients: 1)
        h.bringUp()
        _ = h.write("{}", from: 1)
        #expect(h.machine.clients == [H.device(1)])
        let second = h.write("{}", from: 2)
        #expect(H.disconnects(second).isEmpty, "told why first, disconnected a moment later")
        #expect(H.disconnects(h.advance(1_100)) == [H.device(2)])
        #expect(h.machine.status.clientsRefused == 1)
        #expect(h.machine.clients == [H.device(1)])
        // Once the first leaves, its place is free.
        h.on(.bluez(.propertiesChanged(path: H.device(1), BlueZInterfaces(device: .init(connected: false)))))
        h.on(.bluez(.propertiesChanged(path: H.device(2), BlueZInterfaces(device: .init(connected: false)))))
        _ = h.write("{}", from: 2)
        #expect(h.machine.clients == [H.device(2)])
    }

    @Test func aRequestIsServedOnceAndItsAnswerNotifiedInPacedChunks() throws {
        var h = H(pacingMs: 10)
        h.bringUp()
        let written = h.write(#"{"id":"r1","prompt":"hi","maxTokens":7}"#, from: 1, mtu: 48)
        #expect(H.replies(written) == [.noReply], "write-without-response: bluetoothd acknowledges it itself")
        let serve = try #require(H.served(h.all).first)
        #expect(serve.request == BluetoothRequest(id: "r1", prompt: "hi", maxTokens: 7))
        #expect(h.machine.status.queued == 1)
        let output = String(repeating: "x", count: 200)
        let first = h.on(.served(ticket: serve.ticket, PeripheralOutcome(ok: true, output: output, error: nil, durationMs: 5)))
        #expect(H.notified(first).count == 1, "the first chunk goes at once, the rest paced")
        #expect(h.machine.nextDeadlineMs == h.now + 10)
        let rest = h.advance(1_000)
        let chunks = H.notified(first) + H.notified(rest)
        #expect(chunks.allSatisfy { $0.count <= BluetoothMessage.chunkSize(mtu: 48) })
        let messages = H.messages(chunks)
        #expect(messages.count == 1)
        #expect(messages.first?["id"]?.stringValue == "r1" && messages.first?["output"]?.stringValue == output)
        #expect(h.machine.status.requestsServed == 1 && h.machine.status.queued == 0)
        #expect(h.machine.values[.response] == chunks.last, "the read value is the last chunk sent")
    }

    @Test func twoMessagesNeverInterleaveTheirChunks() {
        var h = H(pacingMs: 5)
        h.bringUp()
        _ = h.write(#"{"id":"bad1"}"#, from: 1, mtu: 23)
        _ = h.write(#"{"id":"bad2"}"#, from: 1, mtu: 23)
        let chunks = H.notified(h.all) + H.notified(h.advance(2_000))
        let messages = H.messages(chunks)
        #expect(messages.map { $0["id"]?.stringValue } == ["bad1", "bad2"])
        #expect(messages.allSatisfy { $0["ok"]?.boolValue == false })
    }

    @Test func pacingZeroSendsAWholeMessageInOneRound() {
        var h = H(pacingMs: 0)
        h.bringUp()
        _ = h.write(#"{"id":"a","prompt":"p"}"#, from: 1, mtu: 23)
        let ticket = H.served(h.all)[0].ticket
        let out = h.on(.served(ticket: ticket, PeripheralOutcome(ok: true, output: String(repeating: "y", count: 100), error: nil, durationMs: 1)))
        #expect(H.messages(H.notified(out)).count == 1)
    }

    @Test func aFullQueueAnswersBusyAtOnce() {
        var h = H(maxQueued: 2)
        h.bringUp()
        _ = h.write(#"{"id":"1","prompt":"a"}{"id":"2","prompt":"b"}{"id":"3","prompt":"c"}"#, from: 1)
        #expect(H.served(h.all).map(\.request.id) == ["1"], "one request runs at a time")
        let messages = H.messages(H.notified(h.all) + H.notified(h.advance(1_000)))
        #expect(messages.count == 1)
        #expect(messages.first?["id"]?.stringValue == "3")
        #expect(messages.first?["error"]?.stringValue == RequestQueuePolicy.busyError)
        #expect(h.machine.status.requestsFailed == 1)
    }

    @Test func anIdlePartialRequestIsDroppedAfterFiveSecondsAndTheNextIsServed() {
        var h = H()
        h.bringUp()
        _ = h.write(#"{"id":"half","prompt":"ab"#, from: 1)
        #expect(H.notified(h.advance(4_000)).isEmpty)
        let dropped = H.messages(H.notified(h.advance(1_600)))
        #expect(dropped.count == 1)
        #expect(dropped.first?["ok"]?.boolValue == false)
        #expect(h.machine.status.requestsRejected == 1)
        _ = h.write(#"{"id":"next","prompt":"x"}"#, from: 1)
        #expect(H.served(h.all).map(\.request.id) == ["next"])
    }

    @Test func aDisconnectMidRequestDropsThePartAndTheNextClientIsServed() {
        var h = H()
        h.bringUp()
        _ = h.write(#"{"id":"cut","prom"#, from: 1)
        let gone = h.on(.bluez(.propertiesChanged(path: H.device(1), BlueZInterfaces(device: .init(connected: false)))))
        #expect(gone.contains(.log(.info, "client 00:AA:01:01:00:01 disconnected in the middle of a request (dropped)")))
        #expect(h.machine.clients.isEmpty)
        _ = h.write(#"{"id":"whole","prompt":"p"}"#, from: 2)
        #expect(H.served(h.all).map(\.request.id) == ["whole"])
    }

    @Test func aDisconnectMidAnswerLeavesTheServiceServingTheNextRequest() {
        var h = H(pacingMs: 10)
        h.bringUp()
        _ = h.write(#"{"id":"long","prompt":"p"}"#, from: 1, mtu: 23)
        let ticket = H.served(h.all)[0].ticket
        h.on(.served(ticket: ticket, PeripheralOutcome(ok: true, output: String(repeating: "z", count: 500), error: nil, durationMs: 1)))
        h.advance(30)
        h.on(.bluez(.propertiesChanged(path: H.device(1), BlueZInterfaces(device: .init(connected: false)))))
        h.advance(2_000)
        _ = h.write(#"{"id":"after","prompt":"q"}"#, from: 2, mtu: 23)
        let next = H.served(h.all).last
        #expect(next?.request.id == "after")
        let out = h.on(.served(ticket: next!.ticket, PeripheralOutcome(ok: true, output: "ok", error: nil, durationMs: 1)))
        let messages = H.messages(H.notified(out) + H.notified(h.advance(1_000)))
        #expect(messages.last?["id"]?.stringValue == "after")
    }

    @Test func onlyBluetoothdMayCallAndBadCallsGetDBusErrors() {
        var h = H()
        h.bringUp()
        func errorName(_ commands: [PeripheralMachine.Command]) -> String? {
            H.replies(commands).first.flatMap { if case .error(let name, _) = $0 { name } else { nil } }
        }
        #expect(
            errorName(h.on(.call(sender: ":1.99", .read(.status, device: nil, mtu: nil, offset: 0)))) == "org.freedesktop.DBus.Error.AccessDenied")
        #expect(errorName(h.on(.call(sender: nil, .startNotify(.status)))) == "org.freedesktop.DBus.Error.AccessDenied")
        #expect(errorName(h.on(.call(sender: H.bluez, .malformedWrite))) == "org.bluez.Error.InvalidArguments")
        #expect(errorName(h.on(.call(sender: H.bluez, .read(.status, device: nil, mtu: nil, offset: 60_000)))) == "org.bluez.Error.InvalidOffset")
        #expect(errorName(h.on(.call(sender: H.bluez, .unsupported(member: "Explode", path: "/x")))) == "org.bluez.Error.NotSupported")
        // A write that names no device takes no client's place.
        let anonymous = h.on(.call(sender: H.bluez, .write(.request, bytes: Array("{}".utf8), device: nil, mtu: nil, expectsReply: true)))
        #expect(H.replies(anonymous) == [.empty])
        #expect(h.machine.clients.isEmpty)
    }

    @Test func statusIsSentOnSubscriptionOnChangeAndToALaterClient() {
        var h = H(maxClients: 2)
        h.bringUp()
        let subscribed = h.on(.call(sender: H.bluez, .startNotify(.status)))
        #expect(subscribed.contains(.fetchStatusValues(force: true)))
        let sent = h.on(.statusValues(modelState: "ready", batteryPct: 80, force: true))
        let status = H.messages(H.notified(sent, .status) + H.notified(h.advance(500), .status))
        #expect(status.first?["modelState"]?.stringValue == "ready")
        #expect(status.first?["batteryPct"]?.intValue == 80)
        // Unchanged values are not sent again before the interval; a change is.
        #expect(H.notified(h.on(.statusValues(modelState: "ready", batteryPct: 80, force: false)), .status).isEmpty)
        #expect(!H.notified(h.on(.statusValues(modelState: "loading", batteryPct: 80, force: false)), .status).isEmpty)
        // A client joining later gets the status 1.5 s after it connects.
        _ = h.write("{}", from: 1)
        _ = h.write("{}", from: 2)
        #expect(h.advance(1_400).contains(.fetchStatusValues(force: true)) == false)
        #expect(h.advance(200).contains(.fetchStatusValues(force: true)))
        let read = h.on(.call(sender: H.bluez, .read(.status, device: H.device(1), mtu: nil, offset: 0)))
        #expect(H.replies(read) == [.value(h.machine.statusCharacteristic.bytes)], "a read returns the whole status, not its last chunk")
    }

    @Test func stopTakesBackWhatWasRegisteredAndDisconnectsOnlyClients() {
        var h = H()
        h.bringUp()
        _ = h.write(#"{"id":"q","prompt":"p"}"#, from: 1)
        let stop = h.on(.stop)
        #expect(stop.contains(.unregister(.advertisement, adapterPath: H.hci0)))
        #expect(stop.contains(.unregister(.application, adapterPath: H.hci0)))
        #expect(H.disconnects(stop) == [H.device(1)])
        #expect(!h.machine.stopped)
        h.on(.unregistered(.advertisement))
        h.on(.unregistered(.application))
        #expect(h.machine.stopped)
        // Nothing registers again while stopping, and a late answer is not notified.
        #expect(H.registrations(h.advance(10_000)).isEmpty)
        #expect(
            H.notified(h.on(.served(ticket: H.served(h.all)[0].ticket, PeripheralOutcome(ok: true, output: "late", error: nil, durationMs: 1))))
                .isEmpty)
    }

    @Test func ourStopSaysTheWorkerWithdrewNeverThatBluetoothdLeft() {
        var h = H()
        h.bringUp()
        h.on(.stop)
        h.on(.unregistered(.advertisement))
        h.on(.unregistered(.application))
        let closed = H.logs(h.on(.busClosed(reason: nil)))
        #expect(closed.isEmpty, "withdrawn in order: nothing to add, and never that bluetoothd left (\(closed))")
        // bluetoothd never answered the unregistration: closing the connection takes it back.
        var silent = H()
        silent.bringUp()
        silent.on(.stop)
        let unanswered = H.logs(silent.on(.busClosed(reason: nil)))
        #expect(unanswered.count == 1)
        #expect(unanswered.allSatisfy { $0.hasPrefix("stopped: closing the bus connection withdraws the worker's application and advertisement") })
    }

    @Test func eachLossOfBluetoothdIsLoggedAsWhatHappened() {
        var left = H()
        left.bringUp()
        #expect(H.logs(left.on(.bluez(.owner(nil)))).contains { $0.hasPrefix("bluetoothd left the bus:") })
        var lost = H()
        lost.bringUp()
        let logs = H.logs(lost.on(.busClosed(reason: "the system bus connection was lost: x")))
        #expect(logs.contains { $0.hasPrefix("the system bus connection closed:") })
        #expect(!logs.contains { $0.contains("bluetoothd left") })
    }

    @Test func aStopWithoutBluetoothdEndsAtOnce() {
        var h = H()
        h.on(.busOpened)
        h.on(.stop)
        #expect(h.machine.stopped)
    }

    @Test func theBusClosingLeavesTheReasonAndForgetsBluetoothd() {
        var h = H()
        h.bringUp()
        h.on(.busClosed(reason: "the system bus connection was lost: x"))
        #expect(h.machine.status.state == .waiting)
        #expect(h.machine.status.problem == "the system bus connection was lost: x")
        #expect(!h.machine.follower.present)
        #expect(h.machine.setupProblem == nil)
    }

    @Test func aChunkFitsTheSmallestMTUAmongClients() {
        var h = H(maxClients: 2)
        h.bringUp()
        _ = h.write("{}", from: 1, mtu: 517)
        #expect(h.machine.notificationMTU == 517)
        _ = h.write("{}", from: 2, mtu: 48)
        #expect(h.machine.notificationMTU == 48)
        _ = h.write("{}", from: 2, mtu: 9_000)
        #expect(h.machine.notificationMTU == 48, "an MTU outside 23…517 is ignored")
    }
}
