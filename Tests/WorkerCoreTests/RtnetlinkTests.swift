import Testing
@testable import WorkerCore

// The captures in RtnetlinkCaptures.swift were recorded in a network namespace with two
// veth links (veth0 198.51.100.2/24 and 2001:db8:1::2/64, veth1 203.0.113.2/24): the
// dumps, then the events of `ip route add default via 198.51.100.1 dev veth0`, `ip -6
// route add default …`, `ip route del default`, a multipath default over veth0 and
// veth1, and `ip link set veth1 down`.

func hexBytes(_ hex: String) -> [UInt8] {
    var out: [UInt8] = []
    var index = hex.startIndex
    while index < hex.endIndex {
        let next = hex.index(index, offsetBy: 2)
        out.append(UInt8(hex[index..<next], radix: 16)!)
        index = next
    }
    return out
}

@Suite struct RtnetlinkParsing {
    let captures = rtnetlinkCaptures.map { (name: $0.name, bytes: hexBytes($0.hex)) }

    @Test func parsesEveryCapturedDatagramCompletely() {
        for capture in captures {
            let (messages, error) = Rtnetlink.parse(capture.bytes)
            #expect(error == nil, "\(capture.name): \(String(describing: error))")
            #expect(!messages.isEmpty)
        }
    }

    @Test func readsLinksWithNamesAndFlags() {
        let links = captures.filter { $0.name.hasPrefix("linkdump") }.flatMap { Rtnetlink.parse($0.bytes).messages }
            .compactMap { message -> RtLink? in if case .link(let link, false) = message { return link }; return nil }
        #expect(links.map(\.name) == ["lo", "veth0", "veth1"])
        #expect(links[0].isLoopback)
        #expect(links[1].isUp && links[1].isRunning && !links[1].isLoopback)
    }

    @Test func readsAddressesOfBothFamilies() {
        let addresses = Rtnetlink.parse(captures.first { $0.name == "addrdump 0" }!.bytes).messages
            .compactMap { message -> RtAddress? in if case .address(let a, false) = message { return a }; return nil }
        #expect(addresses.map(\.text).contains("198.51.100.2"))
        #expect(addresses.map(\.text).contains("2001:db8:1:0:0:0:0:2"))
        #expect(addresses.filter(\.isGlobal).count == 3, "two IPv4 and one IPv6 global; link-local fe80:: is not")
    }

    @Test func readsAMultipathDefaultRoute() {
        let event = captures.filter { $0.name.hasPrefix("event") }[3]
        guard case .route(let route, false)? = Rtnetlink.parse(event.bytes).messages.first else {
            Issue.record("no route in \(event.name)")
            return
        }
        #expect(route.isDefault)
        #expect(route.outputInterfaces == [2, 3])
    }

    @Test func replayedCapturesDriveThePathTable() {
        var table = PathTable()
        var statuses: [PathStatus] = []
        for capture in captures {
            for message in Rtnetlink.parse(capture.bytes).messages { table.apply(message) }
            if capture.name.hasPrefix("routedump 1") || capture.name.hasPrefix("event") { statuses.append(table.evaluate()) }
        }
        // After the dumps: links and addresses, no default route.
        #expect(statuses[0].satisfied == false)
        #expect(statuses[0].reason == "no default route (up: veth0, veth1)")
        // IPv4 default added.
        #expect(statuses[1] == PathStatus(satisfied: true, interface: "veth0", reason: "IPv4 default route via veth0"))
        // IPv6 default added, then the IPv4 one removed: IPv6 carries the path.
        #expect(statuses[3] == PathStatus(satisfied: true, interface: "veth0", reason: "IPv6 default route via veth0"))
        // Multipath, then veth1 down: still satisfied through veth0.
        #expect(statuses[5].satisfied)
    }

    @Test func everyTruncationOfACaptureIsRejectedOrParsedWithoutCrashing() {
        for capture in captures {
            for length in 0..<capture.bytes.count {
                let (messages, error) = Rtnetlink.parse(Array(capture.bytes.prefix(length)))
                if length > 0 && length < Rtnetlink.headerLength { #expect(error != nil) }
                _ = messages
            }
        }
    }

    @Test func lengthFieldsThatLieAreErrors() {
        var datagram = captures.first { $0.name == "event 0" }!.bytes
        datagram[0] = 0xFF  // header length far beyond the datagram
        #expect(Rtnetlink.parse(datagram).error != nil)
        datagram[0] = 4  // shorter than a header
        datagram[1] = 0
        #expect(Rtnetlink.parse(datagram).error != nil)
        var attribute = captures.first { $0.name == "event 0" }!.bytes
        attribute[16 + 12] = 0xF0  // first rtattr length beyond the message
        attribute[16 + 13] = 0x0F
        #expect(Rtnetlink.parse(attribute).error?.message.contains("does not fit") == true)
    }

    /// Found by the rtnetlink fuzz target (Tests/Fuzz/rtnetlink/regressions): negating
    /// an errno field of INT32_MIN trapped.
    @Test func anErrorMessageWithTheMostNegativeErrnoDoesNotTrap() {
        let datagram: [UInt8] = [20, 0, 0, 0, 2, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x00, 0x00, 0x80]
        let parsed = Rtnetlink.parse(datagram)
        #expect(parsed.error == nil)
        #expect(parsed.messages == [.error(errno: Int32.min, sequence: 7)])
        let ordinary: [UInt8] = [20, 0, 0, 0, 2, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0xF5, 0xFF, 0xFF, 0xFF]  // -11
        #expect(Rtnetlink.parse(ordinary).messages == [.error(errno: 11, sequence: 8)])
    }

    @Test func randomBytesNeverCrashTheParser() {
        var generator = SeededGenerator(seed: 42)
        for _ in 0..<20_000 {
            let count = Int(generator.next() % 200)
            var datagram = (0..<count).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
            if count >= 16 && generator.next() % 2 == 0 {
                // Plausible headers reach deeper into the attribute parsing.
                datagram[0] = UInt8(count); datagram[1] = 0; datagram[2] = 0; datagram[3] = 0
                datagram[4] = [16, 20, 24, 21, 25, 2, 3][Int(generator.next() % 7)]; datagram[5] = 0
            }
            _ = Rtnetlink.parse(datagram)
        }
    }

    @Test func dumpRequestIsAWellFormedHeader() {
        let request = Rtnetlink.dumpRequest(type: 26, sequence: 7)
        #expect(request.count == 20)
        #expect(request[0] == 20 && request[4] == 26 && request[6] == 0x01 && request[7] == 0x03 && request[8] == 7)
    }
}

/// A small deterministic generator (SplitMix64) so fuzz-style tests repeat exactly.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

@Suite struct PathTableRules {
    let up: UInt32 = 0x1 | 0x40
    func link(_ index: Int32, _ name: String, flags: UInt32) -> RtnetlinkMessage { .link(RtLink(index: index, name: name, flags: flags), deleted: false) }
    func address(_ index: Int32, _ family: AddressFamily = .ipv4, scope: UInt8 = 0, flags: UInt32 = 0) -> RtnetlinkMessage {
        .address(RtAddress(family: family, index: index, prefixLength: 24, scope: scope, flags: flags, address: family == .ipv4 ? [198, 51, 100, 2] : [UInt8](repeating: 1, count: 16)), deleted: false)
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
        #expect(ModeRules.decide(.pathRestored(interface: "eth0"), current: lost.state, context: ModeContext(nowMs: now + 3)).events.map(\.kind) == [.networkRestored])
    }
}
