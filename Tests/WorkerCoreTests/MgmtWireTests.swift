import Testing
import WorkerCore

/// The kernel's Bluetooth management messages the worker reads (#26 row 8): the answers to
/// its two commands and the events that change a controller's settings; anything broken,
/// short, long or unknown is an error or ignored, never a guess.
@Suite struct MgmtWireTests {
    static func message(_ code: UInt16, controller: UInt16, _ params: [UInt8]) -> [UInt8] {
        [
            UInt8(code & 0xFF), UInt8(code >> 8), UInt8(controller & 0xFF), UInt8(controller >> 8),
            UInt8(params.count & 0xFF), UInt8(params.count >> 8),
        ] + params
    }

    static func le32(_ v: UInt32) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v >> 16 & 0xFF), UInt8(v >> 24)] }

    /// A Read Controller Information answer as the kernel sends it (280 bytes of reply).
    static func readInfo(controller: UInt16, current: UInt32) -> [UInt8] {
        var reply: [UInt8] = [0x00, 0x00, 0x00, 0x01, 0xAA, 0x00]  // address
        reply += [0x09, 0xF1, 0x05]  // version, manufacturer
        reply += le32(0x0001_FFFF)  // supported
        reply += le32(current)
        reply += [0x0C, 0x01, 0x1C] + [UInt8](repeating: 0, count: 249 + 11)
        return message(0x0001, controller: controller, [0x04, 0x00, 0x00] + reply)
    }

    @Test func commandsAreSixBytesWithTheControllerIndex() {
        #expect(MgmtWire.command(.readIndexList) == [0x03, 0x00, 0xFF, 0xFF, 0x00, 0x00])
        #expect(MgmtWire.command(.readInfo, controller: 2) == [0x04, 0x00, 0x02, 0x00, 0x00, 0x00])
    }

    @Test func theIndexListAnswer() {
        let bytes = Self.message(0x0001, controller: 0xFFFF, [0x03, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x05, 0x00])
        #expect(MgmtWire.parse(bytes) == .success(.controllers([0, 5])))
        let none = Self.message(0x0001, controller: 0xFFFF, [0x03, 0x00, 0x00, 0x00, 0x00])
        #expect(MgmtWire.parse(none) == .success(.controllers([])))
    }

    @Test func aListWhoseCountLiesIsRefused() {
        let more = Self.message(0x0001, controller: 0xFFFF, [0x03, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00])
        #expect(MgmtWire.parse(more) == .failure(.badList(count: 5, bytes: 4)))
        let huge = Self.message(0x0001, controller: 0xFFFF, [0x03, 0x00, 0x00, 0xFF, 0xFF])
        #expect(MgmtWire.parse(huge) == .failure(.badList(count: 65_535, bytes: 2)))
        let noCount = Self.message(0x0001, controller: 0xFFFF, [0x03, 0x00, 0x00, 0x01])
        #expect(MgmtWire.parse(noCount) == .failure(.truncated(event: 1, bytes: 4)))
    }

    @Test func readInfoGivesTheCurrentSettings() {
        // Powered, connectable, bondable, SSP, BR/EDR, LE: a dual-mode adapter paged.
        let paged: UInt32 = 0b10_1101_0011
        guard case .success(.settings(3, let settings)) = MgmtWire.parse(Self.readInfo(controller: 3, current: paged)) else {
            Issue.record("not read"); return
        }
        #expect(settings.classicConnectable)
        #expect(settings.contains(.powered) && settings.contains(.bondable) && settings.contains(.le))
    }

    @Test func classicConnectableNeedsBothBits() {
        typealias S = MgmtWire.Settings
        #expect(S([.connectable, .bredr]).classicConnectable)
        #expect(!S([.connectable, .le]).classicConnectable, "an LE-only controller's connectable is its advertising")
        #expect(!S([.bredr, .le, .powered, .bondable]).classicConnectable, "bluetoothd's default: not paged")
        #expect(!S([]).classicConnectable)
    }

    @Test func newSettingsEvent() {
        let bytes = Self.message(0x0006, controller: 0, Self.le32(0x0000_0283))
        #expect(MgmtWire.parse(bytes) == .success(.settings(controller: 0, MgmtWire.Settings(rawValue: 0x283))))
        #expect(MgmtWire.parse(Self.message(0x0006, controller: 0, [0x83, 0x02])) == .failure(.truncated(event: 6, bytes: 2)))
    }

    @Test func controllersComeAndGo() {
        #expect(MgmtWire.parse(Self.message(0x0004, controller: 1, [])) == .success(.controllerAdded(1)))
        #expect(MgmtWire.parse(Self.message(0x0005, controller: 1, [])) == .success(.controllerRemoved(1)))
    }

    @Test func failuresSayWhichCommand() {
        #expect(
            MgmtWire.parse(Self.message(0x0002, controller: 7, [0x04, 0x00, 0x11])) == .success(.failed(command: 4, controller: 7, status: 0x11)))
        #expect(
            MgmtWire.parse(Self.message(0x0001, controller: 7, [0x04, 0x00, 0x14])) == .success(.failed(command: 4, controller: 7, status: 0x14)))
        #expect(MgmtWire.parse(Self.message(0x0002, controller: 7, [0x04])) == .failure(.truncated(event: 2, bytes: 1)))
    }

    @Test func aShortReadInfoIsRefused() {
        let short = Self.message(0x0001, controller: 0, [0x04, 0x00, 0x00] + [UInt8](repeating: 0, count: 16))
        #expect(MgmtWire.parse(short) == .failure(.truncated(event: 1, bytes: 19)))
    }

    @Test func otherEventsAndUnknownAnswersAreIgnored() {
        #expect(MgmtWire.parse(Self.message(0x0007, controller: 0, [0x0C, 0x01, 0x1C])) == .success(.other(event: 7)))
        #expect(MgmtWire.parse(Self.message(0x0001, controller: 0, [0x05, 0x00, 0x00, 0x01])) == .success(.other(event: 1)))
        #expect(MgmtWire.parse(Self.message(0xFFFF, controller: 0xFFFF, [0xFF])) == .success(.other(event: 0xFFFF)))
    }

    @Test func brokenEmptyAndOversizedDatagrams() {
        #expect(MgmtWire.parse([]) == .failure(.tooShort(0)))
        #expect(MgmtWire.parse([0x06, 0x00, 0x00]) == .failure(.tooShort(3)))
        // The header claims more (or less) than came.
        #expect(MgmtWire.parse([0x06, 0x00, 0x00, 0x00, 0x04, 0x00, 0x01]) == .failure(.lengthMismatch(header: 4, actual: 1)))
        #expect(MgmtWire.parse([0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01]) == .failure(.lengthMismatch(header: 0, actual: 1)))
        let oversized = Self.message(0x0006, controller: 0, [UInt8](repeating: 0xFF, count: MgmtWire.maxMessageBytes))
        #expect(MgmtWire.parse(oversized) == .failure(.tooLong(MgmtWire.maxMessageBytes + 6)))
    }

    @Test func everyTruncationOfARealAnswerIsAnErrorNotACrash() {
        let whole = Self.readInfo(controller: 0, current: 0x283)
        for cut in 0..<whole.count {
            if case .success = MgmtWire.parse(Array(whole.prefix(cut))) { Issue.record("a cut at \(cut) parsed") }
        }
    }
}
