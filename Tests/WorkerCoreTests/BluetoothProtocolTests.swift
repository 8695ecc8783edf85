import TestSupport
import Testing
@testable import WorkerCore

@Suite struct BluetoothRequestAssembly {
    func feedAll(_ text: String, chunk: Int, assembler: inout RequestAssembler, now: Int64 = 0) -> [AssemblerEvent] {
        let bytes = Array(text.utf8)
        return stride(from: 0, to: bytes.count, by: chunk).flatMap { assembler.feed(bytes[$0..<min($0 + chunk, bytes.count)], nowMs: now) }
    }

    @Test(arguments: [1, 20, 182, 508, 512, 100_000])
    func aRequestSplitAcrossWritesOfAnySizeIsAssembledOnce(chunk: Int) {
        var assembler = RequestAssembler()
        let prompt = String(repeating: "write a {tricky} \\\"prompt\\\" with } and ] inside ", count: 60)
        let text = #"{"id": "a-1", "prompt": ""# + prompt + #"", "maxTokens": 64}"#
        let events = feedAll(text, chunk: chunk, assembler: &assembler)
        #expect(events.count == 1)
        guard case .request(let request)? = events.first else { Issue.record("\(events)"); return }
        #expect(request.id == "a-1" && request.maxTokens == 64 && request.prompt.contains("} and ]"))
        #expect(!assembler.isPartial)
    }

    @Test func twoRequestsInOneWriteAreBothServed() {
        var assembler = RequestAssembler()
        let events = assembler.feed(Array(#"{"id":"a","prompt":"x"} {"id":"b","prompt":"y"}"#.utf8), nowMs: 0)
        #expect(
            events == [
                .request(BluetoothRequest(id: "a", prompt: "x", maxTokens: 512)), .request(BluetoothRequest(id: "b", prompt: "y", maxTokens: 512)),
            ])
    }

    @Test(
        arguments: [
            (#"{"id":"a","prompt":}"#, "malformed_json", "a"),
            (#"{"id":"b"}"#, "missing_prompt", "b"),
            (#"{"id":"c","prompt":""}"#, "missing_prompt", "c"),
            (#"{"prompt":"x"}"#, "missing_id", nil),
            (#"{"id":"d","prompt":"x","maxTokens":0}"#, "bad_max_tokens", "d"),
            (#"{"id":"e","prompt":"x","maxTokens":"many"}"#, "bad_max_tokens", "e"),
            (#"{"id":5,"prompt":"x"}"#, "missing_id", nil),
        ] as [(String, String, String?)])
    func badRequestsAreRejectedWithTheirId(text: String, error: String, id: String?) {
        var assembler = RequestAssembler()
        let events = assembler.feed(Array(text.utf8), nowMs: 0)
        guard case .rejected(let gotID, let message)? = events.first, events.count == 1 else { Issue.record("\(events)"); return }
        #expect(message.hasPrefix(error), "\(message)")
        #expect(gotID == id)
    }

    @Test func invalidUTF8IsRejectedAndTheNextRequestIsServed() {
        var assembler = RequestAssembler()
        var bytes = Array(#"{"id":"u","prompt":""#.utf8)
        bytes += [0xFF, 0xFE]
        bytes += Array(#""}{"id":"ok","prompt":"fine"}"#.utf8)
        let events = assembler.feed(bytes, nowMs: 0)
        #expect(events.count == 2)
        if case .rejected(let id, let error)? = events.first {
            #expect(id == "u" && error.hasPrefix("invalid_utf8"))
        } else {
            Issue.record("\(events)")
        }
        #expect(events.last == .request(BluetoothRequest(id: "ok", prompt: "fine", maxTokens: 512)))
    }

    @Test func anOversizedRequestIsRejectedWithoutBeingStoredAndTheNextIsServed() {
        var assembler = RequestAssembler(maxRequestBytes: 1_024)
        let big = #"{"id":"big","prompt":""# + String(repeating: "x", count: 10_000) + #""}"#
        var events = feedAll(big, chunk: 500, assembler: &assembler)
        events += assembler.feed(Array(#"{"id":"next","prompt":"p"}"#.utf8), nowMs: 0)
        #expect(events.count == 2)
        if case .rejected(_, let error)? = events.first { #expect(error.hasPrefix("too_large")) } else { Issue.record("\(events)") }
        #expect(events.last == .request(BluetoothRequest(id: "next", prompt: "p", maxTokens: 512)))
    }

    @Test func garbageBetweenRequestsIsReportedOnce() {
        var assembler = RequestAssembler()
        let events = assembler.feed(Array(#"hello world {"id":"z","prompt":"p"}"#.utf8), nowMs: 0)
        #expect(events.count == 2)
        if case .rejected(nil, let error)? = events.first { #expect(error.hasPrefix("malformed_request")) } else { Issue.record("\(events)") }
        #expect(events.last == .request(BluetoothRequest(id: "z", prompt: "p", maxTokens: 512)))
    }

    @Test func aPartialRequestIdleForFiveSecondsIsDropped() {
        var assembler = RequestAssembler()
        #expect(assembler.feed(Array(#"{"id":"slow","prompt":"half"#.utf8), nowMs: 1_000).isEmpty)
        #expect(assembler.tick(nowMs: 5_999).isEmpty)
        let dropped = assembler.tick(nowMs: 6_000)
        if case .rejected(let id, let error)? = dropped.first {
            #expect(id == "slow" && error.hasPrefix("incomplete_request"))
        } else {
            Issue.record("\(dropped)")
        }
        #expect(!assembler.isPartial)
        #expect(
            assembler.feed(Array(#"{"id":"n","prompt":"p"}"#.utf8), nowMs: 6_001) == [
                .request(BluetoothRequest(id: "n", prompt: "p", maxTokens: 512))
            ])
    }

    @Test func randomBytesNeverWedgeTheAssembler() {
        var generator = SeededGenerator(seed: 99)
        var assembler = RequestAssembler(maxRequestBytes: 2_048)
        for _ in 0..<2_000 {
            let count = Int(generator.next() % 300)
            _ = assembler.feed((0..<count).map { _ in UInt8(truncatingIfNeeded: generator.next()) }, nowMs: 0)
        }
        _ = assembler.tick(nowMs: 10_000)
        #expect(
            assembler.feed(Array(#"{"id":"after","prompt":"p"}"#.utf8), nowMs: 10_001) == [
                .request(BluetoothRequest(id: "after", prompt: "p", maxTokens: 512))
            ])
    }
}

@Suite struct BluetoothChunking {
    @Test(arguments: [23, 185, 247, 517, 9_000])
    func chunksFitTheMTUAndConcatenateToTheMessage(mtu: Int) throws {
        let message = BluetoothMessage.response(id: "r", output: String(repeating: "é", count: 20_000), ok: true, durationMs: 450)
        let chunks = BluetoothMessage.chunks(message, mtu: mtu)
        #expect(chunks.allSatisfy { $0.count <= min(512, mtu - 5) })
        #expect(chunks.flatMap { $0 } == message)
        let whole = try JSON.parse(chunks.flatMap { $0 })
        #expect(whole["id"] == "r" && whole["ok"] == true && whole["durationMs"] == 450)
    }

    @Test func statusAndRejectionsFollowTheSpec() throws {
        #expect(try JSON.parse(BluetoothMessage.status(modelState: "ready", batteryPct: nil)) == ["modelState": "ready", "batteryPct": -1])
        let rejection = try JSON.parse(BluetoothMessage.rejection(id: nil, error: "busy"))
        #expect(rejection["ok"] == false && rejection["error"] == "busy" && rejection["output"] == "")
    }
}
