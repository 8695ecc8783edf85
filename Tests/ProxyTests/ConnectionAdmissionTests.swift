import Testing
import Proxy

@Suite struct ConnectionAdmissionTests {
    let limits = ConnectionAdmission.Limits(total: 4, perAddress: 2, minimumStillNs: 1_000)

    func open(_ id: Int, _ address: String, _ last: UInt64) -> ConnectionAdmission.Open {
        ConnectionAdmission.Open(id: id, address: address, lastProgressNs: last)
    }

    @Test func belowBothCapsAdmits() {
        #expect(ConnectionAdmission.decide(open: [], address: "a", limits: limits, nowNs: 0) == .admit)
        #expect(ConnectionAdmission.decide(open: [open(1, "a", 0), open(2, "b", 0)], address: "a", limits: limits, nowNs: 0) == .admit)
    }

    @Test func atTheAddressCapTheStalestOfThatAddressIsEvicted() {
        let connections = [open(1, "a", 500), open(2, "b", 0), open(3, "a", 100)]
        #expect(
            ConnectionAdmission.decide(open: connections, address: "a", limits: limits, nowNs: 5_000) == .admitEvicting(id: 3),
            "b's older connection is not a's to take")
    }

    @Test func atTheGlobalCapTheStalestOfAllIsEvicted() {
        let connections = [open(1, "a", 900), open(2, "b", 200), open(3, "c", 700), open(4, "d", 200)]
        #expect(
            ConnectionAdmission.decide(open: connections, address: "e", limits: limits, nowNs: 5_000) == .admitEvicting(id: 2),
            "ties go to the lowest id")
    }

    @Test func connectionsThatMadeProgressRecentlyAreNotEvicted() {
        let connections = [open(1, "a", 4_500), open(2, "b", 4_900), open(3, "c", 4_200), open(4, "d", 4_001)]
        #expect(
            ConnectionAdmission.decide(open: connections, address: "e", limits: limits, nowNs: 5_000) == .refuse("too many connections; try again"))
        #expect(
            ConnectionAdmission.decide(open: [open(1, "a", 4_500), open(2, "a", 4_900)], address: "a", limits: limits, nowNs: 5_000)
                == .refuse("too many connections from a; try again"))
        // Exactly the minimum is enough.
        #expect(ConnectionAdmission.decide(open: connections, address: "e", limits: limits, nowNs: 5_001) == .admitEvicting(id: 4))
    }

    @Test func aClockBeforeTheLastProgressNeverEvicts() {
        let connections = [open(1, "a", 9_000), open(2, "a", 9_000)]
        #expect(
            ConnectionAdmission.decide(open: connections, address: "a", limits: limits, nowNs: 5_000)
                == .refuse("too many connections from a; try again"))
    }

    @Test func zeroOrNegativeCapsRefuseWhenNothingCanBeEvicted() {
        let none = ConnectionAdmission.Limits(total: 0, perAddress: -1, minimumStillNs: 0)
        #expect(ConnectionAdmission.decide(open: [], address: "a", limits: none, nowNs: 0) == .refuse("too many connections from a; try again"))
        let zeroTotal = ConnectionAdmission.Limits(total: 0, perAddress: 5, minimumStillNs: 0)
        #expect(ConnectionAdmission.decide(open: [], address: "a", limits: zeroTotal, nowNs: 0) == .refuse("too many connections; try again"))
    }

    @Test func sixtyFourStalledConnectionsFromOneAddressMakeRoomForANewOne() {
        let stalled = (0..<64).map { open($0, "127.0.0.1", UInt64($0)) }
        let caps = ConnectionAdmission.Limits(total: 64, perAddress: 64, minimumStillNs: 1_000_000_000)
        #expect(ConnectionAdmission.decide(open: stalled, address: "127.0.0.1", limits: caps, nowNs: 2_000_000_000) == .admitEvicting(id: 0))
    }
}
