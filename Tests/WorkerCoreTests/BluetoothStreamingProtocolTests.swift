import TestSupport
import Testing
@testable import WorkerCore

/// protocol-bluetooth §2's request keys and messages: what is accepted, what is refused and why, and
/// hostile input on the new keys.
@Suite struct BluetoothStreamingRequestDecoding {
    func decode(_ text: String) -> AssemblerEvent {
        var assembler = RequestAssembler()
        let events = assembler.feed(Array(text.utf8), nowMs: 0)
        #expect(events.count == 1, "\(events)")
        return events.first ?? .rejected(id: nil, error: "nothing")
    }

    func error(_ event: AssemblerEvent) -> String? {
        if case .rejected(_, let error) = event { error } else { nil }
    }

    @Test func aRequestWithNoneOfTheNewKeysDecodesAsBefore() {
        #expect(
            decode(#"{"id":"a","prompt":"x","maxTokens":9,"somethingNew":[1,{"x":2}]}"#)
                == .request(BluetoothRequest(id: "a", prompt: "x", maxTokens: 9)))
    }

    @Test func everyNewKeyIsDecoded() throws {
        let event = decode(
            #"{"id":"s","messages":[{"role":"user","content":"hi","images":[]},{"role":"assistant","content":""}],"#
                + #""stream":true,"system":"sys","format":"json","options":{"temperature":1,"top_p":0.5,"top_k":0,"#
                + #""seed":-1,"stop":"END","num_ctx":4096}}"#)
        guard case .request(let request) = event else { Issue.record("\(event)"); return }
        #expect(request.stream && request.system == "sys" && request.format == "json" && request.prompt == "")
        #expect(request.messages == [ChatTurn(role: "user", content: "hi"), ChatTurn(role: "assistant", content: "")])
        #expect(request.options.temperature == 1 && request.options.topP == 0.5 && request.options.topK == 0)
        #expect(request.options.seed == -1 && request.options.stop == ["END"] && request.options.numCtx == 4096)
        #expect(request.maxTokens == BluetoothRequest.defaultMaxTokens)
        #expect(request.summaryText == "")
    }

    @Test func nullStandsForAnAbsentNewKey() {
        #expect(
            decode(#"{"id":"n","prompt":"x","stream":null,"system":null,"format":null,"options":{"temperature":null},"messages":null,"cancel":null}"#)
                == .request(BluetoothRequest(id: "n", prompt: "x", maxTokens: 512)))
    }

    @Test func aCancelIsDecodedAndOnlyTrueCancels() {
        #expect(decode(#"{"id":"c","cancel":true}"#) == .cancel(id: "c"))
        #expect(decode(#"{"id":"c","cancel":true,"prompt":"ignored"}"#) == .cancel(id: "c"))
        #expect(error(decode(#"{"id":"c","cancel":false,"prompt":"x"}"#))?.hasPrefix("bad_cancel") == true)
        #expect(error(decode(#"{"id":"c","cancel":"yes"}"#))?.hasPrefix("bad_cancel") == true)
        #expect(error(decode(#"{"cancel":true}"#))?.hasPrefix("missing_id") == true)
    }

    @Test(
        arguments: [
            (#"{"id":"o","prompt":"x","options":{"num_predict":5}}"#, "unsupported_option: num_predict"),
            (#"{"id":"o","prompt":"x","options":{"temperature":0.1,"mirostat":2}}"#, "unsupported_option: mirostat"),
            (#"{"id":"o","prompt":"x","options":{"temperature":"hot"}}"#, "bad_option: \"options.temperature\""),
            (#"{"id":"o","prompt":"x","options":{"temperature":1e999}}"#, "malformed_json"),
            (#"{"id":"o","prompt":"x","options":{"top_p":2}}"#, "bad_option: \"options.top_p\""),
            (#"{"id":"o","prompt":"x","options":{"top_k":1.5}}"#, "bad_option: \"options.top_k\""),
            (#"{"id":"o","prompt":"x","options":{"num_ctx":0}}"#, "bad_option: \"options.num_ctx\""),
            (#"{"id":"o","prompt":"x","options":{"seed":99999999999}}"#, "bad_option: \"options.seed\""),
            (#"{"id":"o","prompt":"x","options":{"stop":[""]}}"#, "bad_option: \"options.stop\""),
            (#"{"id":"o","prompt":"x","options":{"stop":[1]}}"#, "bad_option: \"options.stop\""),
            (#"{"id":"o","prompt":"x","options":[]}"#, "bad_options"),
            (#"{"id":"o","prompt":"x","format":"yaml"}"#, "unsupported_format"),
            (#"{"id":"o","prompt":"x","format":{"type":"object"}}"#, "unsupported_format"),
            (#"{"id":"o","prompt":"x","stream":"yes"}"#, "bad_stream"),
            (#"{"id":"o","prompt":"x","system":5}"#, "bad_system"),
            (#"{"id":"o","messages":[]}"#, "bad_messages"),
            (#"{"id":"o","messages":"hi"}"#, "bad_messages"),
            (#"{"id":"o","messages":[{"role":"tool","content":"x"}]}"#, "bad_messages: messages[0].role"),
            (#"{"id":"o","messages":[{"role":"user","content":"x"},{"role":"user"}]}"#, "bad_messages: messages[1].content"),
            (#"{"id":"o","messages":[{"role":"user","content":["x"]}]}"#, "bad_messages: messages[0].content"),
            (#"{"id":"o","messages":["user"]}"#, "bad_messages: messages[0].role"),
            (#"{"id":"o","prompt":"x","messages":[{"role":"user","content":"x"}]}"#, "prompt_and_messages"),
            (#"{"id":"o","messages":[{"role":"user","content":"x"}],"maxTokens":0}"#, "bad_max_tokens"),
        ] as [(String, String)])
    func badNewKeysAreRefusedNamingTheKey(text: String, expected: String) {
        let event = decode(text)
        guard case .rejected(let id, let message) = event else { Issue.record("accepted: \(event)"); return }
        #expect(message.hasPrefix(expected), "\(message)")
        #expect(id == "o")
    }

    @Test func anUnsupportedOptionsNameIsBoundedInTheError() throws {
        let key = String(repeating: "k", count: 5_000)
        let message = try #require(error(decode(#"{"id":"o","prompt":"x","options":{""# + key + #"":1}}"#)))
        #expect(message == "unsupported_option: " + String(repeating: "k", count: 64))
    }

    @Test func theNumberOfTurnsIsBounded() {
        let turn = #"{"role":"user","content":"x"}"#
        func chat(_ n: Int) -> String { #"{"id":"t","messages":["# + Array(repeating: turn, count: n).joined(separator: ",") + "]}" }
        if case .request(let request) = decode(chat(BluetoothRequest.maxTurns)) {
            #expect(request.messages?.count == BluetoothRequest.maxTurns)
        } else {
            Issue.record("256 turns are a chat")
        }
        #expect(error(decode(chat(BluetoothRequest.maxTurns + 1)))?.hasPrefix("bad_messages") == true)
    }

    @Test func deepNestingInANewKeyIsRefusedAndTheNextRequestServed() {
        var assembler = RequestAssembler()
        let deep =
            #"{"id":"deep","messages":[{"role":"user","content":"x","extra":"# + String(repeating: "[", count: 5_000)
            + String(repeating: "]", count: 5_000) + "}]}"
        let events = assembler.feed(Array((deep + #"{"id":"next","prompt":"p"}"#).utf8), nowMs: 0)
        #expect(events.count == 2)
        if case .rejected(let id, let error)? = events.first {
            #expect(id == "deep" && error.hasPrefix("malformed_json: nested deeper than 16 levels"), "\(error)")
        } else {
            Issue.record("\(events)")
        }
        #expect(events.last == .request(BluetoothRequest(id: "next", prompt: "p", maxTokens: 512)))
    }

    @Test func hugeMessagesAreRefusedWithoutBeingStoredAndTheNextRequestServed() {
        var assembler = RequestAssembler(maxRequestBytes: 65_536)
        let turn = #"{"role":"user","content":""# + String(repeating: "w", count: 10_000) + #""}"#
        let huge = #"{"id":"huge","stream":true,"messages":["# + Array(repeating: turn, count: 100).joined(separator: ",") + "]}"
        var events: [AssemblerEvent] = []
        let bytes = Array(huge.utf8)
        for start in stride(from: 0, to: bytes.count, by: 508) { events += assembler.feed(bytes[start..<min(start + 508, bytes.count)], nowMs: 0) }
        events += assembler.feed(Array(#"{"id":"next","prompt":"p"}"#.utf8), nowMs: 0)
        #expect(events.count == 2)
        if case .rejected(_, let error)? = events.first { #expect(error.hasPrefix("too_large")) } else { Issue.record("\(events)") }
        #expect(events.last == .request(BluetoothRequest(id: "next", prompt: "p", maxTokens: 512)))
    }
}

@Suite struct BluetoothStreamingMessages {
    @Test func partialAndFinalMessagesHaveTheShapesOfSpec61() throws {
        #expect(try JSON.parse(BluetoothMessage.partial(id: "a", delta: "x\"y")) == ["id": "a", "delta": "x\"y", "done": false])
        #expect(
            try JSON.parse(BluetoothMessage.final(id: "a", ok: true, durationMs: 5, evalCount: 3)) == [
                "id": "a", "ok": true, "done": true, "durationMs": 5, "evalCount": 3,
            ])
        #expect(try JSON.parse(BluetoothMessage.final(id: "a", ok: true, durationMs: 5)) == ["id": "a", "ok": true, "done": true, "durationMs": 5])
        #expect(
            try JSON.parse(BluetoothMessage.final(id: "a", ok: false, durationMs: 5, error: "cancelled")) == [
                "id": "a", "ok": false, "done": true, "error": "cancelled",
            ])
        #expect(try JSON.parse(BluetoothMessage.cancel(id: "a")) == ["id": "a", "cancel": true])
    }

    @Test func theEscapedLengthOfEveryScalarIsWhatTheSerializerWrites() {
        var scalars: [Unicode.Scalar] = (0..<0x80).compactMap(Unicode.Scalar.init)
        scalars += ["é", "€", "\u{2028}", "\u{2029}", "😀", "\u{FEFF}", "中"]
        for scalar in scalars {
            let written = JSONValue.string(String(Character(scalar))).serializedBytes.count - 2
            #expect(PartialCoalescer.escapedLength(scalar) == written, "U+\(String(scalar.value, radix: 16))")
        }
    }

    @Test(arguments: [23, 48, 185, 517])
    func takenPartialsFitTheirBudgetAndKeepEveryByteInOrder(mtu: Int) {
        let id = "0f8fad5b-d9cb-469f-a165-70867728950e"
        let budget = BluetoothMessage.partialBudget(id: id, mtu: mtu)
        #expect(budget % BluetoothMessage.chunkSize(mtu: mtu) == 0)
        var coalescer = PartialCoalescer(id: id)
        var text = ""
        var taken: [[UInt8]] = []
        var generator = SeededGenerator(seed: UInt64(mtu))
        let alphabet: [String] = ["a", "\"", "\\", "\n", "é", "😀", "\u{1}", "\u{2028}", " ", "z"]
        for step in 0..<2_000 {
            let piece = (0..<Int.random(in: 1...6, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! }.joined()
            text += piece
            coalescer.add(piece, nowMs: Int64(step))
            while let message = coalescer.take(nowMs: Int64(step), budget: budget) {
                #expect(message.count <= budget || (try? JSON.parse(message))?["delta"]?.stringValue?.unicodeScalars.count == 1)
                taken.append(message)
            }
        }
        taken += coalescer.drain(budget: budget)
        #expect(coalescer.isEmpty && coalescer.escapedBytes == 0 && coalescer.dueAtMs == nil)
        let joined = taken.compactMap { (try? JSON.parse($0))?["delta"]?.stringValue }.joined()
        #expect(joined == text)
        // Full partials fill the budget to within one scalar's escape (at most 6 bytes).
        let full = taken.dropLast().filter { $0.count > budget - 6 }
        #expect(full.count >= taken.count / 2)
    }

    @Test func theFirstPartialGoesAtOnceAndLaterOnesWaitFromTheirFirstByte() {
        var coalescer = PartialCoalescer(id: "a", delayMs: 100)
        #expect(coalescer.take(nowMs: 0, budget: 512) == nil)
        coalescer.add("", nowMs: 500)
        #expect(coalescer.isEmpty && coalescer.dueAtMs == nil, "an empty piece is no first partial")
        #expect(coalescer.take(nowMs: 500, budget: 512) == nil)
        coalescer.add("x", nowMs: 1_000)
        #expect(coalescer.dueAtMs == 1_000, "the answer's first text is due at once")
        #expect(coalescer.take(nowMs: 1_000, budget: 512) == BluetoothMessage.partial(id: "a", delta: "x"))
        coalescer.add("y", nowMs: 1_010)
        coalescer.add("z", nowMs: 1_090)
        #expect(coalescer.dueAtMs == 1_110)
        #expect(coalescer.take(nowMs: 1_109, budget: 512) == nil, "the second partial coalesces")
        #expect(coalescer.take(nowMs: 1_110, budget: 512) == BluetoothMessage.partial(id: "a", delta: "yz"))
        #expect(coalescer.dueAtMs == nil)
        coalescer.add("", nowMs: 1_200)
        #expect(coalescer.isEmpty, "an empty piece starts no timer")
        coalescer.add("w", nowMs: 1_300)
        #expect(coalescer.dueAtMs == 1_400, "only the answer's first partial skips the wait")
    }

    @Test func theFirstPartialAtOnceKeepsTheWholeAnswersBytes() {
        var coalescer = PartialCoalescer(id: "b", delayMs: 100)
        let pieces = ["Hé", "llo \\", "\"w\"", "\n😀", "", "d"]
        var deltas: [String] = []
        for (n, piece) in pieces.enumerated() {
            coalescer.add(piece, nowMs: Int64(n * 30))
            while let message = coalescer.take(nowMs: Int64(n * 30), budget: 512) {
                deltas.append((try? JSON.parse(message))?["delta"]?.stringValue ?? "<unparsable>")
            }
        }
        deltas += coalescer.drain(budget: 512).map { (try? JSON.parse($0))?["delta"]?.stringValue ?? "<unparsable>" }
        #expect(deltas.first == "Hé", "the first piece went alone, at once")
        #expect(deltas.count == 2, "the rest came within 100 ms and coalesced")
        #expect(deltas.joined() == pieces.joined())
    }
}
