import Foundation
import Testing
import Telemetry

private func datagram(_ parts: [String]) -> [UInt8] {
    parts.flatMap { Array($0.utf8) + [0] }
}

@Suite struct UeventParserTests {
    static let plug = datagram([
        "change@/devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0003:00/power_supply/AC", "ACTION=change",
        "DEVPATH=/devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0003:00/power_supply/AC", "SUBSYSTEM=power_supply",
        "POWER_SUPPLY_NAME=AC", "POWER_SUPPLY_TYPE=Mains", "POWER_SUPPLY_ONLINE=1", "SEQNUM=3184",
    ])

    @Test func parsesAKernelPowerSupplyEvent() throws {
        let event = try #require(Uevent.parse(Self.plug))
        #expect(event.action == "change")
        #expect(event.devpath == "/devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0003:00/power_supply/AC")
        #expect(event.subsystem == "power_supply")
        #expect(event.properties["POWER_SUPPLY_ONLINE"] == "1")
        #expect(event.properties.count == 7)
    }

    @Test func valuesMayContainEqualsSignsAndBeEmpty() throws {
        let event = try #require(Uevent.parse(datagram(["add@/x", "SUBSYSTEM=net", "A=b=c", "EMPTY="])))
        #expect(event.properties["A"] == "b=c")
        #expect(event.properties["EMPTY"] == "")
    }

    @Test func malformedVariablesAreSkippedNotFatal() throws {
        let event = try #require(Uevent.parse(datagram(["add@/x", "NOEQUALS", "=novalue", "SUBSYSTEM=power_supply", ""])))
        #expect(event.properties == ["SUBSYSTEM": "power_supply"])
    }

    struct Bad: Sendable, CustomTestStringConvertible {
        var name: String
        var bytes: [UInt8]
        var testDescription: String { name }
    }

    static let bad: [Bad] = [
        Bad(name: "empty", bytes: []),
        Bad(name: "a single NUL", bytes: [0]),
        Bad(name: "truncated inside a variable", bytes: Array(plug.dropLast(5))),
        Bad(name: "truncated inside the header", bytes: Array("change@/devices/LNX".utf8)),
        Bad(name: "libudev re-broadcast", bytes: Array("libudev".utf8) + [0, 0xFE, 0xED, 0xCA, 0xFE] + datagram(["SUBSYSTEM=power_supply"])),
        Bad(name: "header without @", bytes: datagram(["change/devices/x", "SUBSYSTEM=power_supply"])),
        Bad(name: "header with an empty action", bytes: datagram(["@/devices/x", "SUBSYSTEM=power_supply"])),
        Bad(name: "devpath not a path", bytes: datagram(["change@devices", "SUBSYSTEM=power_supply"])),
        Bad(name: "header not UTF-8", bytes: Array("change@/x".utf8) + [0xFF, 0] + datagram(["SUBSYSTEM=power_supply"])),
        Bad(name: "oversized", bytes: datagram(["change@/x", "SUBSYSTEM=power_supply", "PAD=" + String(repeating: "a", count: 8192)])),
        Bad(name: "too many variables", bytes: datagram(["change@/x"] + (0..<200).map { "K\($0)=v" })),
        Bad(name: "random garbage", bytes: (0..<512).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }),
    ]

    @Test(arguments: bad)
    func rejectsWhatIsNotAWholeKernelUevent(bad: Bad) {
        #expect(Uevent.parse(bad.bytes) == nil)
    }

    @Test func acceptsAMessageExactlyAtTheSizeLimit() {
        let header = datagram(["change@/x", "SUBSYSTEM=power_supply"])
        let padding = Uevent.maxBytes - header.count - "PAD=".utf8.count - 1
        let bytes = header + datagram(["PAD=" + String(repeating: "a", count: padding)])
        #expect(bytes.count == Uevent.maxBytes)
        #expect(Uevent.parse(bytes)?.subsystem == "power_supply")
    }

    @Test func neverCrashesOnAnyPrefixOfARealEvent() {
        for length in 0...Self.plug.count {
            let parsed = Uevent.parse(Self.plug.prefix(length))
            // Only prefixes that end right after a NUL can parse.
            if let parsed { #expect(Self.plug[length - 1] == 0 && parsed.action == "change") }
        }
    }
}

/// Writing `change` to a device's uevent file makes the kernel announce it: possible as
/// root with /sys writable, which is how this suite proves the socket for real.
private let canTriggerUevents =
    access("/sys/devices/virtual/mem/null/uevent", W_OK) == 0
    && access("/sys/devices/virtual/mem/zero/uevent", W_OK) == 0

private func trigger(_ device: String) {
    let fd = open("/sys/devices/virtual/mem/\(device)/uevent", O_WRONLY | O_CLOEXEC)
    guard fd >= 0 else { return }
    _ = write(fd, "change", 6)
    close(fd)
}

/// The first notice within `milliseconds`, or nil.
private func firstNotice(_ events: PowerSupplyUevents, within milliseconds: UInt64) async throws -> PowerSupplyUevents.Notice? {
    try await withThrowingTaskGroup(of: PowerSupplyUevents.Notice?.self) { group in
        group.addTask { try await events.next() }
        group.addTask {
            try await Task.sleep(nanoseconds: milliseconds * 1_000_000)
            return nil
        }
        let first = try await group.next() ?? nil
        group.cancelAll()
        return first
    }
}

@Suite(.serialized) struct UeventSocketTests {
    @Test(.enabled(if: canTriggerUevents, "needs root and a writable /sys"))
    func receivesTheKernelsUeventForTheWatchedSubsystem() async throws {
        let events = try PowerSupplyUevents(subsystem: "mem")
        trigger("null")
        let notice = try await firstNotice(events, within: 5_000)
        guard case .event(let event)? = notice else {
            Issue.record("no uevent within 5 s: \(String(describing: notice))")
            return
        }
        #expect(event.subsystem == "mem")
        #expect(event.action == "change")
        #expect(event.devpath.hasPrefix("/devices/virtual/mem/"))
    }

    @Test(.enabled(if: canTriggerUevents, "needs root and a writable /sys"))
    func ignoresUeventsOfOtherSubsystems() async throws {
        let events = try PowerSupplyUevents()
        trigger("zero")
        trigger("null")
        #expect(try await firstNotice(events, within: 500) == nil)
    }

    @Test func waitingIsCancellable() async throws {
        let events = try PowerSupplyUevents(subsystem: "no-such-subsystem")
        let task = Task { try await events.next() }
        try await Task.sleep(nanoseconds: 50_000_000)
        task.cancel()
        await #expect(throws: CancellationError.self) { try await task.value }
    }
}
