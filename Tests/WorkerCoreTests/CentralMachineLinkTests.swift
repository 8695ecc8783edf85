import TestSupport
import Testing
@testable import WorkerCore

/// `CentralMachine.Link` carries what each phase of the link knows, so losing it leaves
/// nothing of the last worker behind; `Reconnection` paces the attempts after.
@Suite struct CentralMachineLinkTests {
    typealias H = CentralHarness
    typealias Link = CentralMachine.Link

    @Test func eachPhaseHoldsOnlyWhatIsTrueInIt() {
        let paths: [GattLayout.Role: String] = [.request: "/r", .response: "/a", .status: "/s"]
        let links: [Link] = [
            .idle, .connecting(device: "/d", deadlineMs: 7), .resolving(device: "/d", deadlineMs: 7),
            .subscribing(device: "/d", deadlineMs: 7, characteristics: paths, subscribed: ["/a"]),
            .connected(device: "/d", characteristics: paths),
        ]
        #expect(links.map(\.phase) == [.idle, .connecting, .resolving, .subscribing, .connected])
        #expect(links.map(\.device) == [nil, "/d", "/d", "/d", "/d"])
        #expect(links.map(\.deadlineMs) == [nil, 7, 7, 7, nil], "a deadline only while the link is being made")
        #expect(links.map(\.characteristics) == [[:], [:], [:], paths, paths], "paths only once services resolved")
    }

    /// The deadline is the connect's plus `connectTimeoutMs` through every phase after it,
    /// not restarted by resolving or subscribing.
    @Test func theConnectDeadlineCoversResolvingAndSubscribingToo() {
        var h = H()
        h.start()
        h.on(.bluez(.interfacesAdded(path: H.worker(1), H.advertising(1, rssi: -50))))
        h.advance(3_000)
        guard case .connecting(_, let deadlineMs) = h.machine.link else {
            Issue.record("connecting: \(h.machine.link)")
            return
        }
        h.advance(20_000)
        h.on(.connectAnswered(device: H.worker(1), error: nil))
        h.on(.bluez(.managedObjects(H.workerTree(1, mtu: 185))))
        #expect(h.machine.link.deadlineMs == deadlineMs && h.machine.phase == .subscribing)
        let late = h.advance(deadlineMs - h.now + 1)
        #expect(late.contains(.disconnect(device: H.worker(1))))
        #expect(h.machine.link == .idle)
        #expect(h.machine.status.problem?.contains("took over 30000 ms") == true)
    }

    /// Lost while subscribing: the old worker's answers (a subscription, a notification)
    /// arriving afterwards change nothing.
    @Test func losingTheLinkMidSubscribeForgetsTheWorkersPaths() {
        var h = H()
        h.start()
        h.on(.bluez(.interfacesAdded(path: H.worker(1), H.advertising(1, rssi: -50))))
        h.advance(3_000)
        h.on(.connectAnswered(device: H.worker(1), error: nil))
        h.on(.bluez(.managedObjects(H.workerTree(1, mtu: 185))))
        h.on(.notifyAcquired(path: H.characteristic(1, .response), error: nil))
        h.on(.bluez(.propertiesChanged(path: H.worker(1), BlueZInterfaces(device: .init(connected: false)))))
        #expect(h.machine.link == .idle)
        #expect(h.on(.subscribeAnswered(path: H.characteristic(1, .status), error: nil)).isEmpty)
        #expect(h.machine.link == .idle && !h.machine.status.connected)
        #expect(h.on(.notification(path: H.characteristic(1, .status), Array(#"{"modelState":"late"}"#.utf8))).isEmpty)
        #expect(h.machine.status.modelState != "late")
    }

    @Test func theBackoffDoublesWithUpToHalfAgainAndAConnectionStartsItOver() {
        var reconnection = CentralMachine.Reconnection(maxBackoffMs: 4_000, seed: 7)
        #expect(reconnection.nextPauseCeilingMs == 1_000)
        var pauses: [Int64] = []
        for _ in 0..<4 {
            reconnection.failed(now: 100)
            pauses.append(reconnection.nextAttemptAtMs - 100)
        }
        for (pause, ceiling) in zip(pauses, [Int64(1_000), 2_000, 4_000, 4_000]) {
            #expect(pause >= ceiling && pause <= ceiling + ceiling / 2, "\(pauses)")
        }
        #expect(reconnection.failures == 4 && reconnection.nextPauseCeilingMs == 4_000)
        reconnection.connected()
        #expect(reconnection.failures == 0 && reconnection.nextPauseCeilingMs == 1_000)
        reconnection.failed(now: 10_000)
        #expect((11_000...11_500).contains(reconnection.nextAttemptAtMs))
    }

    @Test func theSameSeedDrawsTheSamePauses() {
        var first = CentralMachine.Reconnection(maxBackoffMs: 30_000, seed: 42)
        var second = CentralMachine.Reconnection(maxBackoffMs: 30_000, seed: 42)
        for now in [Int64(0), 5_000, 9_000] {
            first.failed(now: now)
            second.failed(now: now)
            #expect(first.nextAttemptAtMs == second.nextAttemptAtMs)
        }
    }
}
