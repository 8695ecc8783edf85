import TestSupport
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
            .compactMap { message -> RtLink? in
                if case .link(let link, false) = message { return link }; return nil
            }
        #expect(links.map(\.name) == ["lo", "veth0", "veth1"])
        #expect(links[0].isLoopback)
        #expect(links[1].isUp && links[1].isRunning && !links[1].isLoopback)
    }

    @Test func readsAddressesOfBothFamilies() {
        let addresses = Rtnetlink.parse(captures.first { $0.name == "addrdump 0" }!.bytes).messages
            .compactMap { message -> RtAddress? in
                if case .address(let a, false) = message { return a }; return nil
            }
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

    /// Found by the rtnetlink fuzz target (Fuzz/rtnetlink/regressions): negating
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
