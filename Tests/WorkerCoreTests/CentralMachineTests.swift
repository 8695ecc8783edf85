import TestSupport
import Testing
@testable import WorkerCore

/// The proxy's link (the central) driven through scanning, connecting, subscribing,
/// chunked writes, answers, timeouts, the link's loss and the proxy's stop, with the
/// clock and the jitter in the test's hand (`MachineDriver` feeds it).
struct CentralHarness: MachineDriver {
    typealias Command = CentralMachine.Command
    static let hci1 = "/org/bluez/hci1"
    static let bluez = ":1.3"
    static func worker(_ n: Int) -> String { "/org/bluez/hci1/dev_00_AA_01_00_00_0\(n)" }
    static func service(_ n: Int) -> String { worker(n) + "/service0010" }
    static func characteristic(_ n: Int, _ role: GattLayout.Role) -> String {
        service(n) + "/char" + String(GattLayout.characteristics.firstIndex { $0.role == role }!)
    }

    var machine: CentralMachine
    var now: Int64 = 50_000
    var all: [Command] = []

    init(device: String? = nil) {
        machine = CentralMachine(settings: .init(adapter: nil, device: device), seed: 42)
    }

    static func feed(_ event: CentralMachine.Event, to machine: inout CentralMachine, now: Int64) -> [Command] {
        machine.on(event, now: now)
    }
    static func nextDeadlineMs(of machine: CentralMachine) -> Int64 { machine.nextDeadlineMs }
    static var tick: CentralMachine.Event { .tick }

    static func advertising(_ n: Int, rssi: Int, connected: Bool = false) -> BlueZInterfaces {
        BlueZInterfaces(
            device: .init(
                address: "00:AA:01:00:00:0\(n)", adapter: hci1, connected: connected, name: "EdgeCoder-w\(n)",
                rssi: rssi, uuids: [GattLayout.serviceUUID.uppercased()]))
    }

    /// The worker's remote GATT objects as bluetoothd shows them once services resolved.
    static func workerTree(_ n: Int, mtu: Int) -> [String: BlueZInterfaces] {
        var tree: [String: BlueZInterfaces] = [
            hci1: BlueZInterfaces(adapter: .init(address: "00:AA:01:01:00:01", powered: true)),
            service(n): BlueZInterfaces(gattService: (GattLayout.serviceUUID, worker(n))),
        ]
        var device = advertising(n, rssi: -40, connected: true)
        device.device?.servicesResolved = true
        tree[worker(n)] = device
        for characteristic in GattLayout.characteristics {
            tree[Self.characteristic(n, characteristic.role)] = BlueZInterfaces(
                gattCharacteristic: .init(
                    uuid: characteristic.uuid.uppercased(), service: service(n), mtu: characteristic.role == .request ? mtu : nil))
        }
        return tree
    }

    /// bluetoothd present with a powered hci1.
    mutating func start() {
        on(.busOpened)
        on(.bluez(.owner(Self.bluez)))
        on(.bluez(.managedObjects([Self.hci1: BlueZInterfaces(adapter: .init(address: "00:AA:01:01:00:01", powered: true))])))
    }

    /// Scan, find worker 1, connect, resolve, subscribe: connected at `mtu`.
    mutating func connect(mtu: Int = 185) {
        start()
        on(.bluez(.interfacesAdded(path: Self.worker(1), Self.advertising(1, rssi: -50))))
        advance(3_000)
        on(.connectAnswered(device: Self.worker(1), error: nil))
        on(.bluez(.managedObjects(Self.workerTree(1, mtu: mtu))))
        on(.deviceProperties(device: Self.worker(1), .init(connected: true, servicesResolved: true)))
        // The response characteristic's notifications come on an acquired socket, the
        // status characteristic's by StartNotify.
        on(.notifyAcquired(path: Self.characteristic(1, .response), error: nil))
        on(.subscribeAnswered(path: Self.characteristic(1, .status), error: nil))
    }

    static func resolved(_ commands: [Command]) -> [String: GenerateResult] {
        var out: [String: GenerateResult] = [:]
        for case .resolve(let id, let result) in commands { out[id] = result }
        return out
    }

    static func writes(_ commands: [Command]) -> [(id: String, chunk: [UInt8])] {
        commands.compactMap { if case .write(let id, _, let chunk) = $0 { (id, chunk) } else { nil } }
    }

    /// Answers every write as the worker's side does, until the request is written whole.
    mutating func acceptWrites(of id: String) -> [UInt8] {
        var bytes: [UInt8] = []
        var pending = Self.writes(all).filter { $0.id == id }.last
        while let write = pending {
            bytes += write.chunk
            let next = Self.writes(on(.writeAnswered(id: id, error: nil)))
            pending = next.first
        }
        return bytes
    }
}

@Suite struct CentralMachineTests {
    typealias H = CentralHarness

    @Test func scansThenConnectsToTheStrongestWorkerWhenTheWindowCloses() {
        var h = H()
        h.start()
        #expect(h.all.contains(.startDiscovery(adapterPath: H.hci1)))
        #expect(h.machine.status.scanning)
        h.on(.bluez(.interfacesAdded(path: H.worker(1), H.advertising(1, rssi: -70))))
        h.on(.bluez(.interfacesAdded(path: H.worker(2), H.advertising(2, rssi: -40))))
        let early = h.advance(2_000)
        #expect(!early.contains { if case .connect = $0 { true } else { false } }, "the window is 2.5 s")
        let chosen = h.advance(600)
        #expect(chosen.contains(.connect(device: H.worker(2), timeoutMs: 30_000)))
        #expect(chosen.contains(.stopDiscovery(adapterPath: H.hci1)))
        #expect(h.machine.phase == .connecting)
        #expect(h.machine.status.deviceAddress == "00:AA:01:00:00:02")
    }

    @Test func listOnlyReportsEveryWorkerInRangeStrongestFirstAndConnectsToNone() {
        var settings = CentralMachine.Settings(adapter: nil, device: nil)
        settings.listOnly = true
        var h = H()
        h.machine = CentralMachine(settings: settings, seed: 42)
        h.start()
        #expect(h.all.contains(.startDiscovery(adapterPath: H.hci1)))
        h.on(.bluez(.interfacesAdded(path: H.worker(1), H.advertising(1, rssi: -70))))
        h.on(.bluez(.interfacesAdded(path: H.worker(2), H.advertising(2, rssi: -40))))
        // Remembered by bluetoothd from an earlier scan, not heard now: no RSSI.
        var stale = H.advertising(3, rssi: -10)
        stale.device?.rssi = nil
        h.on(.bluez(.interfacesAdded(path: H.worker(3), stale)))
        // Not a worker: another service.
        var other = H.advertising(4, rssi: -30)
        other.device?.uuids = ["0000180d-0000-1000-8000-00805f9b34fb"]
        h.on(.bluez(.interfacesAdded(path: H.worker(4), other)))
        #expect(!h.advance(2_000).contains { if case .listed = $0 { true } else { false } }, "not before the window ends")
        let done = h.advance(600)
        #expect(
            done.contains(
                .listed([
                    .init(address: "00:AA:01:00:00:02", name: "EdgeCoder-w2", rssi: -40, connected: false),
                    .init(address: "00:AA:01:00:00:01", name: "EdgeCoder-w1", rssi: -70, connected: false),
                ])))
        #expect(done.contains(.stopDiscovery(adapterPath: H.hci1)))
        #expect(h.advance(60_000).isEmpty || !h.all.contains { if case .connect = $0 { true } else { false } }, "never a connect")
        #expect(!h.all.contains { if case .connect = $0 { true } else { false } })
        #expect(h.all.filter { if case .listed = $0 { true } else { false } }.count == 1, "one list")
    }

    @Test func listOnlyWithNoWorkerInRangeListsNothing() {
        var settings = CentralMachine.Settings(adapter: nil, device: nil)
        settings.listOnly = true
        settings.scanWindowMs = 1_000
        var h = H()
        h.machine = CentralMachine(settings: settings, seed: 42)
        h.start()
        #expect(h.advance(1_100).contains(.listed([])))
    }

    @Test func aNamedWorkerIsConnectedAtOnceWithoutWaitingForTheWindow() {
        var h = H(device: "00:aa:01:00:00:01")
        h.start()
        let found = h.on(.bluez(.interfacesAdded(path: H.worker(1), H.advertising(1, rssi: -90))))
        #expect(found.contains(.connect(device: H.worker(1), timeoutMs: 30_000)))
    }

    @Test func connectedOnlyOnceEveryNotifiedCharacteristicIsSubscribed() {
        var h = H()
        h.start()
        h.on(.bluez(.interfacesAdded(path: H.worker(1), H.advertising(1, rssi: -50))))
        h.advance(3_000)
        let answered = h.on(.connectAnswered(device: H.worker(1), error: nil))
        #expect(answered.contains(.refreshDevice(H.worker(1))))
        #expect(h.machine.phase == .resolving)
        let tree = h.on(.bluez(.managedObjects(H.workerTree(1, mtu: 247))))
        #expect(tree.contains(.acquireNotify(path: H.characteristic(1, .response))))
        #expect(tree.contains(.startNotify(path: H.characteristic(1, .status))))
        #expect(!tree.contains(.startNotify(path: H.characteristic(1, .response))))
        h.on(.notifyAcquired(path: H.characteristic(1, .response), error: nil))
        #expect(h.machine.phase == .subscribing)
        let out = h.on(.subscribeAnswered(path: H.characteristic(1, .status), error: nil))
        #expect(h.machine.phase == .connected)
        #expect(out.contains(.readMTU(path: H.characteristic(1, .request))))
        #expect(out.contains(.readStatus(path: H.characteristic(1, .status))))
        #expect(h.machine.status.connected && h.machine.status.mtu == 247)
    }

    /// AcquireNotify refused (another program on the proxy's host subscribed first, an
    /// older bluetoothd): the response characteristic is subscribed by StartNotify instead.
    @Test func aRefusedAcquireNotifyFallsBackToStartNotify() {
        var h = H()
        h.start()
        h.on(.bluez(.interfacesAdded(path: H.worker(1), H.advertising(1, rssi: -50))))
        h.advance(3_000)
        h.on(.connectAnswered(device: H.worker(1), error: nil))
        h.on(.bluez(.managedObjects(H.workerTree(1, mtu: 247))))
        h.on(.subscribeAnswered(path: H.characteristic(1, .status), error: nil))
        let refused = h.on(.notifyAcquired(path: H.characteristic(1, .response), error: "org.bluez.Error.NotPermitted: Notify acquired"))
        #expect(refused.contains(.startNotify(path: H.characteristic(1, .response))))
        #expect(h.machine.phase == .subscribing)
        h.on(.subscribeAnswered(path: H.characteristic(1, .response), error: nil))
        #expect(h.machine.phase == .connected)
    }

    /// Values read from the acquired socket are the response's chunks; the socket closing
    /// under a connected link (bluetoothd dropped it) is the link's loss: requests fail,
    /// the worker is disconnected and connected again after the backoff.
    @Test func notificationsFromTheAcquiredSocketAnswerAndItsClosingLosesTheLink() {
        var h = H()
        h.connect()
        h.on(.request(id: "r", bytes: Array(#"{"id":"r","prompt":"hi"}"#.utf8), timeoutMs: 60_000))
        _ = h.acceptWrites(of: "r")
        let answered = h.on(.notification(path: H.characteristic(1, .response), Array(#"{"id":"r","ok":true,"output":"hello"}"#.utf8)))
        #expect(H.resolved(answered)["r"] == .answered(ok: true, output: "hello", error: nil, workerDurationMs: 0))
        h.on(.request(id: "s", bytes: Array(#"{"id":"s","prompt":"hi"}"#.utf8), timeoutMs: 60_000))
        _ = h.acceptWrites(of: "s")
        let closed = h.on(.notifySocketClosed(path: H.characteristic(1, .response)))
        guard case .answered(false, _, let error?, _)? = H.resolved(closed)["s"] else {
            Issue.record("the waiting request fails with the link: \(closed)")
            return
        }
        #expect(error.hasPrefix("link_lost: "))
        #expect(closed.contains(.disconnect(device: H.worker(1))))
        #expect(closed.contains(.releaseNotify))
        #expect(h.machine.phase == .idle && !h.machine.status.connected)
        // A socket closing after the link is already gone changes nothing.
        #expect(h.on(.notifySocketClosed(path: H.characteristic(1, .response))).isEmpty)
        // A socket acquired too late (the link went while AcquireNotify was answered) is
        // released at once; a late refusal needs nothing.
        #expect(h.on(.notifyAcquired(path: H.characteristic(1, .response), error: nil)) == [.releaseNotify])
        #expect(h.on(.notifyAcquired(path: H.characteristic(1, .response), error: "late")).isEmpty)
    }

    @Test func aRequestIsWrittenInChunksOfMTUMinus3CappedAt508OneAtATime() throws {
        for (mtu, size) in [(23, 20), (185, 182), (517, 508)] {
            var h = H()
            h.connect(mtu: mtu)
            let body = Array(String(repeating: "p", count: 1_300).utf8)
            let first = h.on(.request(id: "r", bytes: body, timeoutMs: 60_000))
            #expect(H.writes(first).count == 1, "one chunk in flight")
            #expect(H.writes(first).first?.chunk.count == size)
            #expect(h.acceptWrites(of: "r") == body)
        }
    }

    @Test func anAnswerSplitAcrossNotificationsIsMatchedByItsId() {
        var h = H()
        h.connect()
        h.on(.request(id: "a", bytes: Array(#"{"id":"a","prompt":"x"}"#.utf8), timeoutMs: 60_000))
        _ = h.acceptWrites(of: "a")
        let answer = Array(#"{"id":"other","ok":true,"output":"no"}{"id":"a","ok":true,"output":"hello","durationMs":12}"#.utf8)
        var results: [String: GenerateResult] = [:]
        for start in stride(from: 0, to: answer.count, by: 20) {
            let chunk = Array(answer[start..<min(start + 20, answer.count)])
            results.merge(H.resolved(h.on(.bluez(.characteristicValue(path: H.characteristic(1, .response), chunk))))) { $1 }
        }
        #expect(results == ["a": .answered(ok: true, output: "hello", error: nil, workerDurationMs: 12)])
        #expect(h.machine.inFlight == 0)
    }

    @Test func aRequestTimesOutAtItsDeadlineAndItsLateAnswerIsIgnored() {
        var h = H()
        h.connect()
        h.on(.request(id: "slow", bytes: Array(#"{"id":"slow"}"#.utf8), timeoutMs: 5_000))
        #expect(h.machine.nextDeadlineMs <= h.now + 5_000)
        #expect(H.resolved(h.advance(4_999)).isEmpty)
        #expect(H.resolved(h.advance(2)) == ["slow": .timedOut(5_000)])
        let late = h.on(.bluez(.characteristicValue(path: H.characteristic(1, .response), Array(#"{"id":"slow","ok":true}"#.utf8))))
        #expect(H.resolved(late).isEmpty)
    }

    @Test func losingTheLinkFailsWaitingRequestsAndBacksOffWithJitter() {
        var h = H()
        h.connect()
        h.on(.request(id: "w", bytes: Array("{}".utf8), timeoutMs: 60_000))
        let lost = h.on(.bluez(.propertiesChanged(path: H.worker(1), BlueZInterfaces(device: .init(connected: false)))))
        guard case .answered(false, _, let error?, _)? = H.resolved(lost)["w"] else {
            Issue.record("the waiting request must fail at once")
            return
        }
        #expect(error.hasPrefix("link_lost: the worker disconnected"))
        #expect(h.machine.status.reconnects == 1 && !h.machine.status.connected)
        // The next attempt waits 1 s plus up to half of it, then scans again.
        #expect(!h.advance(900).contains(.startDiscovery(adapterPath: H.hci1)))
        #expect(h.machine.nextDeadlineMs <= h.now + 700)
    }

    @Test func theBackoffDoublesUpToItsCap() {
        var h = H()
        h.start()
        var waits: [Int64] = []
        for _ in 0..<8 {
            h.on(.bluez(.interfacesAdded(path: H.worker(1), H.advertising(1, rssi: -50))))
            while h.machine.phase != .connecting { h.advance(100) }
            let failedAt = h.now
            h.on(.connectAnswered(device: H.worker(1), error: "org.bluez.Error.Failed: le-connection-abort-by-local"))
            waits.append(h.machine.reconnection.nextAttemptAtMs - failedAt)
        }
        for (index, wait) in waits.enumerated() {
            let base = min(30_000, Int64(1_000) << index)
            #expect(wait >= base && wait <= base + base / 2, "attempt \(index): \(wait) ms")
        }
    }

    @Test func aRefusedWriteFailsTheRequestAndStartsTheLinkOver() {
        var h = H()
        h.connect()
        h.on(.request(id: "x", bytes: Array("{}".utf8), timeoutMs: 60_000))
        let refused = h.on(.writeAnswered(id: "x", error: "org.bluez.Error.Failed: Not connected"))
        #expect(
            H.resolved(refused)["x"]
                == .answered(ok: false, output: "", error: "write_failed: org.bluez.Error.Failed: Not connected", workerDurationMs: 0))
        #expect(refused.contains(.disconnect(device: H.worker(1))))
        #expect(h.machine.phase == .idle)
    }

    @Test func theWorkersServiceGoingAwayEndsTheLink() {
        var h = H()
        h.connect()
        let gone = h.on(.bluez(.interfacesRemoved(path: H.characteristic(1, .response), [.gattCharacteristic])))
        #expect(gone.contains(.disconnect(device: H.worker(1))))
        #expect(h.machine.status.problem?.contains("service went away") == true)
    }

    @Test func aRequestWithoutAWorkerIsAnsweredAtOnce() {
        var h = H()
        h.start()
        guard case .notConnected(let why)? = H.resolved(h.on(.request(id: "n", bytes: [], timeoutMs: 1_000)))["n"] else {
            Issue.record("no worker: notConnected")
            return
        }
        #expect(why.hasPrefix("no worker connected"))
    }

    @Test func stoppingFailsEveryWaitingRequestAtOnce() {
        var h = H()
        h.connect()
        h.on(.request(id: "1", bytes: Array("{}".utf8), timeoutMs: 600_000))
        h.on(.request(id: "2", bytes: Array("{}".utf8), timeoutMs: 600_000))
        let stopped = H.resolved(h.on(.stop))
        #expect(stopped.keys.sorted() == ["1", "2"])
        #expect(stopped.values.allSatisfy { $0 == .notConnected("the proxy is stopping") })
        #expect(h.machine.inFlight == 0)
    }

    @Test func bluetoothdLeavingDropsTheLinkAndItsReturnScansAgain() {
        var h = H()
        h.connect()
        h.on(.bluez(.owner(nil)))
        #expect(!h.machine.status.connected)
        #expect(h.machine.status.problem?.hasPrefix("bluetoothd is not running") == true)
        h.on(.bluez(.owner(":1.9")))
        h.on(.bluez(.managedObjects([H.hci1: BlueZInterfaces(adapter: .init(powered: true))])))
        #expect(h.advance(2_000).contains(.startDiscovery(adapterPath: H.hci1)))
    }

    @Test func statusNotificationsUpdateWhatTheProxyShows() {
        var h = H()
        h.connect()
        h.on(
            .bluez(
                .characteristicValue(
                    path: H.characteristic(1, .status), Array(#"{"modelState":"ready","batteryPct":-1,"name":"EdgeCoder-abc"}"#.utf8))))
        #expect(h.machine.status.modelState == "ready")
        #expect(h.machine.status.batteryPct == nil)
        #expect(h.machine.status.deviceName == "EdgeCoder-abc")
        h.on(.statusRead(Array(#"{"modelState":"\#(String(repeating: "L", count: 100))","batteryPct":250}"#.utf8)))
        #expect(h.machine.status.modelState.count == 32)
        #expect(h.machine.status.batteryPct == 100)
    }

    @Test func anAdapterProblemIsShownUntilTheAdapterIsBack() {
        var h = H()
        h.on(.busOpened)
        h.on(.bluez(.owner(H.bluez)))
        h.on(.bluez(.managedObjects([H.hci1: BlueZInterfaces(adapter: .init(powered: false))])))
        #expect(h.machine.setupProblem == .noAdapter(configured: nil, known: ["hci1"]))
        h.on(.bluez(.propertiesChanged(path: H.hci1, BlueZInterfaces(adapter: .init(powered: true)))))
        #expect(h.machine.setupProblem == nil)
        #expect(h.machine.status.scanning)
    }
}
