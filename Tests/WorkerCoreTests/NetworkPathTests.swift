import Testing
@testable import WorkerCore

@Suite struct PathTableRules {
    let up: UInt32 = 0x1 | 0x40
    func link(_ index: Int32, _ name: String, flags: UInt32) -> RtnetlinkMessage {
        .link(RtLink(index: index, name: name, flags: flags), deleted: false)
    }
    func address(_ index: Int32, _ family: AddressFamily = .ipv4, scope: UInt8 = 0, flags: UInt32 = 0) -> RtnetlinkMessage {
        .address(
            RtAddress(
                family: family, index: index, prefixLength: 24, scope: scope, flags: flags,
                address: family == .ipv4 ? [198, 51, 100, 2] : [UInt8](repeating: 1, count: 16)), deleted: false)
    }
    func defaultRoute(_ index: Int32, _ family: AddressFamily = .ipv4, table: UInt32 = 254, deleted: Bool = false) -> RtnetlinkMessage {
        .route(RtRoute(family: family, destinationLength: 0, table: table, type: 1, outputInterfaces: [index]), deleted: deleted)
    }

    func status(_ messages: [RtnetlinkMessage]) -> PathStatus {
        var table = PathTable()
        for message in messages { table.apply(message) }
        return table.evaluate()
    }

    @Test func satisfiedNeedsUpRunningGlobalAddressAndDefaultRoute() {
        #expect(status([link(2, "eth0", flags: up), address(2), defaultRoute(2)]).satisfied)
        #expect(status([link(2, "eth0", flags: 0x1), address(2), defaultRoute(2)]).reason == "eth0 has no carrier")
        #expect(status([link(2, "eth0", flags: 0x40), address(2), defaultRoute(2)]).reason == "eth0 is down")
        #expect(status([link(2, "eth0", flags: up), address(2, scope: 253), defaultRoute(2)]).reason == "eth0 has no global IPv4 address")
        #expect(status([link(2, "eth0", flags: up), address(2)]).satisfied == false)
        #expect(status([link(1, "lo", flags: up | 0x8), address(1), defaultRoute(1)]).satisfied == false)
    }

    @Test func theAddressMustMatchTheRouteFamily() {
        #expect(status([link(2, "eth0", flags: up), address(2, .ipv4), defaultRoute(2, .ipv6)]).satisfied == false)
        #expect(status([link(2, "eth0", flags: up), address(2, .ipv6), defaultRoute(2, .ipv6)]).satisfied)
    }

    @Test func tentativeIPv6AddressesDoNotCountYet() {
        #expect(status([link(2, "eth0", flags: up), address(2, .ipv6, flags: 0x40), defaultRoute(2, .ipv6)]).satisfied == false)
    }

    @Test func routesOutsideTheMainTableAreIgnored() {
        #expect(status([link(2, "eth0", flags: up), address(2), defaultRoute(2, table: 100)]).satisfied == false)
    }

    @Test func deletingALinkTakesItsAddressesAndRoutes() {
        var table = PathTable()
        for m in [link(2, "eth0", flags: up), address(2), defaultRoute(2)] { table.apply(m) }
        #expect(table.evaluate().satisfied)
        table.apply(.link(RtLink(index: 2, name: "eth0", flags: up), deleted: true))
        #expect(table.addresses.isEmpty && table.defaultRoutes.isEmpty)
        #expect(!table.evaluate().satisfied)
    }

    @Test func anyUsableRouteSatisfiesThePath() {
        let s = status([link(2, "wlan0", flags: 0x1), address(2), defaultRoute(2), link(3, "eth0", flags: up), address(3), defaultRoute(3)])
        #expect(s == PathStatus(satisfied: true, interface: "eth0", reason: "IPv4 default route via eth0"))
    }
}

@Suite struct PathGrace {
    let good = PathStatus(satisfied: true, interface: "eth0", reason: "IPv4 default route via eth0")
    let bad = PathStatus(satisfied: false, interface: nil, reason: "no default route")

    @Test func lossIsReportedOnlyAfterTheGrace() {
        var watch = PathWatch(graceMs: 1500)
        #expect(watch.observe(good, nowMs: 0) == [.restored(interface: "eth0")])
        #expect(watch.observe(bad, nowMs: 1000).isEmpty)
        #expect(watch.deadlineMs == 2500)
        #expect(watch.tick(nowMs: 2499).isEmpty)
        #expect(watch.tick(nowMs: 2500) == [.lost(reason: "network path lost: no default route")])
        #expect(watch.tick(nowMs: 9000).isEmpty, "reported once per outage")
        #expect(watch.deadlineMs == nil)
        #expect(watch.observe(good, nowMs: 9100) == [.restored(interface: "eth0")])
    }

    @Test func aFlapShorterThanTheGraceIsSilent() {
        var watch = PathWatch(graceMs: 1500)
        _ = watch.observe(good, nowMs: 0)
        #expect(watch.observe(bad, nowMs: 100).isEmpty)
        #expect(watch.observe(good, nowMs: 1599).isEmpty, "no restore for an outage that never counted")
        #expect(watch.tick(nowMs: 5000).isEmpty)
    }

    @Test func theGraceRunsFromTheFirstBadStatusNotTheLatest() {
        var watch = PathWatch(graceMs: 1000)
        _ = watch.observe(good, nowMs: 0)
        _ = watch.observe(bad, nowMs: 100)
        let worse = PathStatus(satisfied: false, interface: "eth0", reason: "eth0 is down")
        #expect(watch.observe(worse, nowMs: 900).isEmpty)
        #expect(watch.observe(worse, nowMs: 1100) == [.lost(reason: "network path lost: eth0 is down")])
    }

    @Test func zeroGraceReportsAtOnce() {
        var watch = PathWatch(graceMs: 0)
        _ = watch.observe(good, nowMs: 0)
        #expect(watch.observe(bad, nowMs: 5) == [.lost(reason: "network path lost: no default route")])
    }

    @Test func startingWithoutAPathStartsTheGraceAtOnce() {
        var watch = PathWatch(graceMs: 500)
        #expect(watch.observe(bad, nowMs: 10).isEmpty)
        #expect(watch.tick(nowMs: 510) == [.lost(reason: "network path lost: no default route")])
    }
}

@Suite struct RestoreNotices {
    let now: Int64 = 5_000

    @Test func aRestoreIsNotedOncePerOutage() {
        let downgraded = ModeState(mode: .bluetooth, sinceMs: 1, reason: "downgrade", downgraded: true)
        let first = ModeRules.decide(.pathRestored(interface: "eth0"), current: downgraded, context: ModeContext(nowMs: now))
        #expect(first.events.map(\.kind) == [.networkRestored])
        #expect(first.state.restoredAtMs == now)
        #expect(first.state.mode == .bluetooth)
        let again = ModeRules.decide(.pathRestored(interface: "eth0"), current: first.state, context: ModeContext(nowMs: now + 1))
        #expect(again.events.isEmpty, "a restart with the path up must not note it again")
        // Lost again, then restored again: news again.
        let lost = ModeRules.decide(.pathLost(reason: "x"), current: first.state, context: ModeContext(nowMs: now + 2))
        #expect(lost.state.restoredAtMs == nil && lost.state.mode == .bluetooth && lost.events.isEmpty)
        #expect(
            ModeRules.decide(.pathRestored(interface: "eth0"), current: lost.state, context: ModeContext(nowMs: now + 3)).events.map(\.kind) == [
                .networkRestored
            ])
    }
}
