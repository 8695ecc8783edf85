import TestSupport
import Testing
@testable import WorkerCore

/// How notifications are paced (docs/operating/bluetooth.md, "Pacing"): a pause after every chunk while
/// bluetoothd may spread them over EATT bearers, a pause per 512 bytes on one bearer.
struct NotificationPacingTests {
    typealias H = PeripheralHarness

    @Test func autoPacesBytesOnlyOnASingleBearer() {
        #expect(NotificationPacer.rule(mode: .auto, attBearers: 1) == .bytes)
        for bearers in [2, 3, 5, nil] as [Int?] {
            #expect(NotificationPacer.rule(mode: .auto, attBearers: bearers) == .chunks, "bearers \(String(describing: bearers))")
        }
        for bearers in [1, 3, nil] as [Int?] {
            #expect(NotificationPacer.rule(mode: .bytes, attBearers: bearers) == .bytes)
            #expect(NotificationPacer.rule(mode: .chunks, attBearers: bearers) == .chunks)
        }
    }

    @Test func chunksPauseAfterEveryChunkWhateverItsSize() {
        var pacer = NotificationPacer(mode: .auto, pauseMs: 10, attBearers: 3)
        #expect([43, 43, 512, 1, 0].map { pacer.pause(afterChunkOf: $0) } == [10, 10, 10, 10, 10])
        #expect(pacer.owedBytes == 0)
    }

    @Test func bytesPauseOncePer512BytesAndCarryTheRest() {
        var pacer = NotificationPacer(mode: .auto, pauseMs: 10, attBearers: 1)
        let pauses = (0..<36).map { _ in pacer.pause(afterChunkOf: 43) }
        // 43 × 12 = 516: the twelfth chunk pays for 512 bytes and carries 4.
        #expect(pauses.enumerated().filter { $0.element > 0 }.map(\.offset) == [11, 23, 35])
        #expect(pauses.allSatisfy { $0 == 0 || $0 == 10 })
        #expect(pacer.owedBytes == 36 * 43 - 3 * 512)
        // At MTU 517 it is today's pacing: every 512-byte chunk pays one pause.
        var full = NotificationPacer(mode: .bytes, pauseMs: 10)
        #expect((0..<4).map { _ in full.pause(afterChunkOf: 512) } == [10, 10, 10, 10])
        // A chunk bigger than a window (never made, but the count stays right) pays for each.
        #expect(full.pause(afterChunkOf: 1_100) == 20 && full.owedBytes == 76)
        #expect(full.pause(afterChunkOf: -5) == 0 && full.owedBytes == 76, "a negative size counts as nothing")
    }

    @Test func learningTheBearersSwitchesTheRuleAndForgetsWhatWasOwed() {
        var pacer = NotificationPacer(mode: .auto, pauseMs: 7)
        #expect(pacer.rule == .chunks, "unknown bearers: taken as EATT")
        pacer.learn(attBearers: 1)
        #expect(pacer.rule == .bytes)
        _ = pacer.pause(afterChunkOf: 300)
        pacer.learn(attBearers: 1)
        #expect(pacer.owedBytes == 0)
        pacer.learn(attBearers: nil)
        #expect(pacer.rule == .chunks && pacer.pause(afterChunkOf: 1) == 7)
    }

    /// Serves one answer of `outputBytes` at MTU 48 and returns its chunks and the time from
    /// the first chunk to the last.
    static func answer(bearers: Int?, mode: BluetoothPacingMode = .auto, outputBytes: Int = 2_000) -> (
        chunks: [[UInt8]], ms: Int64, machine: PeripheralMachine
    ) {
        var h = H(pacingMs: 10, pacing: mode)
        h.bringUp()
        h.on(.attBearers(bearers))
        _ = h.write(#"{"id":"p","prompt":"x"}"#, from: 1, mtu: 48)
        let ticket = H.served(h.all)[0].ticket
        let start = h.now
        var chunks = H.notified(
            h.on(.served(ticket: ticket, PeripheralOutcome(ok: true, output: String(repeating: "a", count: outputBytes), error: nil, durationMs: 1))))
        var last = start
        // From deadline to deadline, as the interpreter's loop runs, until the message is out.
        for _ in 0..<10_000 where h.machine.outbox.sending != nil || !h.machine.outbox.messages.isEmpty {
            h.now = h.machine.nextDeadlineMs
            let round = H.notified(h.on(.tick))
            if !round.isEmpty { last = h.now }
            chunks += round
        }
        return (chunks, last - start, h.machine)
    }

    @Test func onOneBearerASmallMTUAnswerIsPacedByItsBytes() {
        let bytes = Self.answer(bearers: 1)
        let chunks = Self.answer(bearers: 3)
        for run in [bytes, chunks] {
            #expect(H.messages(run.chunks).first?["output"]?.stringValue?.count == 2_000, "whole and in order")
            #expect(run.chunks.allSatisfy { $0.count <= BluetoothMessage.chunkSize(mtu: 48) })
        }
        let total = bytes.chunks.reduce(0) { $0 + $1.count }
        #expect(bytes.chunks.count == chunks.chunks.count)
        // By bytes: 10 ms per 512 bytes; by chunks: 10 ms per 43-byte chunk.
        #expect(bytes.ms == Int64(total / 512) * 10, "\(bytes.ms) ms for \(total) bytes")
        #expect(chunks.ms == Int64(chunks.chunks.count - 1) * 10)
        #expect(bytes.machine.status.pacing == "bytes" && bytes.machine.status.attBearers == 1)
        #expect(chunks.machine.status.pacing == "chunks" && chunks.machine.status.attBearers == 3)
    }

    /// Serves one answer at MTU 517 with every round `lateMs` after its deadline, and returns
    /// the times its chunks went out at.
    static func sendTimes(bearers: Int, lateMs: Int64) -> [Int64] {
        var h = H(pacingMs: 10, pacing: .auto)
        h.bringUp()
        h.on(.attBearers(bearers))
        _ = h.write(#"{"id":"p","prompt":"x"}"#, from: 1, mtu: 517)
        let ticket = H.served(h.all)[0].ticket
        var times: [Int64] = []
        if !H.notified(
            h.on(.served(ticket: ticket, PeripheralOutcome(ok: true, output: String(repeating: "a", count: 5_000), error: nil, durationMs: 1)))
        )
        .isEmpty {
            times.append(h.now)
        }
        for _ in 0..<1_000 where h.machine.outbox.sending != nil || !h.machine.outbox.messages.isEmpty {
            h.now = h.machine.nextDeadlineMs + lateMs
            for _ in H.notified(h.on(.tick)) { times.append(h.now) }
        }
        return times
    }

    @Test func onOneBearerARoundAMillisecondLateKeepsTheScheduleAndALaterOneNeverBursts() {
        // By bytes (one bearer): a millisecond late each round (the reactor's wake-up, the
        // send's own time) does not add up; the answer goes at the full 10 ms per chunk.
        let slightlyLate = Self.sendTimes(bearers: 1, lateMs: 1)
        #expect(slightlyLate.count >= 10)
        let gaps = zip(slightlyLate.dropFirst(), slightlyLate).map { $0 - $1 }
        #expect(gaps.allSatisfy { $0 >= 9 }, "\(gaps)")
        #expect(slightlyLate.last! - slightlyLate.first! <= Int64(slightlyLate.count - 1) * 10 + 1, "\(gaps)")
        // Later rounds count from when they ran: at least 10 ms between two chunks, no burst.
        let late = Self.sendTimes(bearers: 1, lateMs: 4)
        #expect(zip(late.dropFirst(), late).allSatisfy { $0 - $1 >= 10 })
        // By chunks (EATT): the pause always counts from the send, however small the delay.
        let chunks = Self.sendTimes(bearers: 3, lateMs: 1)
        #expect(zip(chunks.dropFirst(), chunks).allSatisfy { $0 - $1 >= 11 })
    }

    @Test func theOperatorsChoiceOverridesTheBearers() {
        #expect(Self.answer(bearers: 3, mode: .bytes).machine.status.pacing == "bytes")
        #expect(Self.answer(bearers: 1, mode: .chunks).machine.status.pacing == "chunks")
        let unknown = Self.answer(bearers: nil)
        #expect(unknown.machine.status.pacing == "chunks" && unknown.machine.status.attBearers == nil)
    }

    @Test func theRuleIsLoggedWhenBluetoothdAppearsWithEATT() {
        var h = H(pacingMs: 10)
        h.bringUp()
        let eatt = h.on(.attBearers(3))
        #expect(
            eatt.contains(
                .log(
                    .warning,
                    "pacing notifications by chunks (10 ms after each): bluetoothd has 3 ATT bearer(s); with EATT a client can get a long answer's chunks out of order: set \"Channels = 1\" under [GATT] in /etc/bluetooth/main.conf and restart bluetooth"
                )))
        let one = h.on(.attBearers(1))
        #expect(one.contains(.log(.info, "pacing notifications by bytes (10 ms per 512 bytes): bluetoothd has 1 ATT bearer(s)")))
        #expect(!h.on(.attBearers(1)).contains { if case .log = $0 { true } else { false } }, "nothing new: nothing said")
        #expect(h.machine.status.json["pacing"]?.stringValue == "bytes" && h.machine.status.json["attBearers"]?.intValue == 1)
    }

    @Test func theConfigKeyTakesTheThreeModesAndNothingElse() throws {
        #expect(try WorkerConfig.parse(Array("{}".utf8)).bluetooth.pacing == .auto)
        for mode in BluetoothPacingMode.allCases {
            #expect(try WorkerConfig.parse(Array(#"{"bluetooth": {"pacing": "\#(mode.rawValue)"}}"#.utf8)).bluetooth.pacing == mode)
        }
        for bad in [#""fast""#, "1", "null", #""""#, #""BYTES""#, "[]", #""auto\u0000""#] {
            #expect(throws: ConfigError.self, "\(bad)") { try WorkerConfig.parse(Array(#"{"bluetooth": {"pacing": \#(bad)}}"#.utf8)) }
        }
    }
}
