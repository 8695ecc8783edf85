import Testing
@testable import WorkerCore

/// Issue #26 row 14: bluetoothd before 5.69 refuses written values over 508 bytes, so a
/// client writing 512-byte chunks (EdgeCoder's Mac proxy) delivers only the pieces that
/// fit. What arrives is answered with the request's id when the arriving bytes carry it
/// (that proxy drops answers without its id, and its caller waits 90 s), and the error
/// says which chunk size works.
@Suite struct BluetoothChunkLoss {
    /// The proxy's request, `{"id","prompt","maxTokens"}` in some key order, cut in
    /// 512-byte writes of which only those of at most 508 bytes arrive.
    static func arriving(_ text: String, chunk: Int = 512, limit: Int = 508) -> [[UInt8]] {
        let bytes = Array(text.utf8)
        return stride(from: 0, to: bytes.count, by: chunk).map { Array(bytes[$0..<min($0 + chunk, bytes.count)]) }.filter { $0.count <= limit }
    }

    static let prompt = String(repeating: "explain this code, please; ", count: 40)

    @Test func aTailThatCarriesTheIdIsAnsweredWithItAndSaysWhichChunkSizeWorks() throws {
        let text = #"{"prompt":""# + Self.prompt + #"","maxTokens":512,"id":"6F1C2A4E-0B7D-4C55-9A31-2D8E5B7F1A00"}"#
        let writes = Self.arriving(text)
        #expect(writes.count == 1, "only the short tail gets through")
        var assembler = RequestAssembler()
        let events = writes.flatMap { assembler.feed($0, nowMs: 0) }
        guard case .rejected(let id, let error)? = events.first, events.count == 1 else { Issue.record("\(events)"); return }
        #expect(id == "6F1C2A4E-0B7D-4C55-9A31-2D8E5B7F1A00")
        #expect(error.hasPrefix("malformed_request"))
        #expect(error.contains("508"), "\(error)")
    }

    @Test func theVMSuitesTailWithSpacesAfterColonsIsAnsweredWithItsId() {
        // What IntegrationTests/bluez/worker_central.py's bad-input phase sends (Python's json.dumps).
        let text = #"{"prompt": ""# + String(repeating: "a", count: 1_073) + #"", "maxTokens": 8, "id": "mac-proxy-1"}"#
        #expect(text.utf8.count == 1_124)
        var assembler = RequestAssembler()
        let events = Self.arriving(text).flatMap { assembler.feed($0, nowMs: 0) }
        guard case .rejected(let id, let error)? = events.first, events.count == 1 else { Issue.record("\(events)"); return }
        #expect(id == "mac-proxy-1")
        #expect(error.hasPrefix("malformed_request:") && error.contains("at most 508 bytes per write"))
    }

    @Test func aTailWithoutTheIdStillSaysWhichChunkSizeWorks() {
        let text = #"{"id":"first","prompt":""# + Self.prompt + #"","maxTokens":512}"#
        var assembler = RequestAssembler()
        let events = Self.arriving(text).flatMap { assembler.feed($0, nowMs: 0) }
        guard case .rejected(let id, let error)? = events.first, events.count == 1 else { Issue.record("\(events)"); return }
        #expect(id == nil)
        #expect(error.hasPrefix("malformed_request") && error.contains("at most 508 bytes per write"), "\(error)")
    }

    @Test func aRequestWhoseMiddleIsLostIsAnsweredWithTheIdOfItsFirstBytes() {
        // The first write arrived, the one after it was refused: what follows is spliced on.
        var assembler = RequestAssembler()
        var events = assembler.feed(Array(#"{"id":"mid-1","maxTokens":512,"#.utf8), nowMs: 0)
        // (An even number of quotes before the brace: the splice closes as an object. With an
        // odd number it stays partial and is dropped as incomplete, the next test.)
        events += assembler.feed(Array(#"the prompt's "last" words}"#.utf8), nowMs: 0)
        guard case .rejected(let id, let error)? = events.first, events.count == 1 else { Issue.record("\(events)"); return }
        #expect(id == "mid-1")
        #expect(error.hasPrefix("malformed_json") && error.contains("508"), "\(error)")
    }

    @Test func aRequestWhoseEndIsLostIsDroppedWithTheIdOfItsFirstBytes() {
        var assembler = RequestAssembler()
        #expect(assembler.feed(Array(#"{"id":"end-1","prompt":"the first 508 bytes"#.utf8), nowMs: 0).isEmpty)
        let events = assembler.tick(nowMs: 10_000)
        guard case .rejected(let id, let error)? = events.first, events.count == 1 else { Issue.record("\(events)"); return }
        #expect(id == "end-1")
        #expect(error.hasPrefix("incomplete_request") && error.contains("508"), "\(error)")
    }

    @Test func anIdInsideThePromptsTextIsNotTakenForTheRequests() {
        // Escaped quotes in the prompt are not the request's own key.
        var assembler = RequestAssembler()
        let events = assembler.feed(Array(#"tail of a prompt with \"id\":\"not-me\" in it", "maxTokens": 5}"#.utf8), nowMs: 0)
        guard case .rejected(let id, _)? = events.first else { Issue.record("\(events)"); return }
        #expect(id == nil)
    }

    @Test(arguments: [
        #"","id":"bad id with spaces"}"#,
        #"","id":"../../etc/passwd"}"#,
        #"","id":""}"#,
        #"","id":"unterminated"#,
        #"","id":12}"#,
    ])
    func anUnsafeOrUnreadableIdInGarbageIsNotEchoed(_ tail: String) {
        var assembler = RequestAssembler()
        let events = assembler.feed(Array(tail.utf8), nowMs: 0)
        guard case .rejected(let id, let error)? = events.first, events.count == 1 else { Issue.record("\(events)"); return }
        #expect(id == nil)
        #expect(error.hasPrefix("malformed_request"))
    }

    @Test func anOversizedGarbageRunIsReadOnlyInItsFirstBytes() {
        // Hostile: a long write of garbage with an id far in; the scan is bounded.
        var assembler = RequestAssembler()
        let tail = String(repeating: "x", count: RequestAssembler.garbageScanBytes + 10) + #"","id":"late"}"#
        let events = assembler.feed(Array(tail.utf8), nowMs: 0)
        guard case .rejected(let id, _)? = events.first, events.count == 1 else { Issue.record("\(events)"); return }
        #expect(id == nil)
        // And the assembler serves the next request.
        #expect(
            assembler.feed(Array(#"{"id":"n","prompt":"p"}"#.utf8), nowMs: 0) == [.request(BluetoothRequest(id: "n", prompt: "p", maxTokens: 512))])
    }

    @Test func emptyAndWhitespaceWritesAreNotGarbage() {
        var assembler = RequestAssembler()
        #expect(assembler.feed([UInt8](), nowMs: 0).isEmpty)
        #expect(assembler.feed(Array(" \n\t\r".utf8), nowMs: 0).isEmpty)
    }

    @Test func garbageThenARequestInOneWriteGivesBothAndTheGarbageKeepsItsId() {
        var assembler = RequestAssembler()
        let events = assembler.feed(Array(#"lost","id":"g1"} {"id":"g2","prompt":"p"}"#.utf8), nowMs: 0)
        #expect(events.count == 2)
        if case .rejected(let id, let error)? = events.first {
            #expect(id == "g1" && error.hasPrefix("malformed_request"))
        } else {
            Issue.record("\(events)")
        }
        #expect(events.last == .request(BluetoothRequest(id: "g2", prompt: "p", maxTokens: 512)))
    }

    @Test func aGarbageRunAcrossWritesIsReportedOnce() {
        var assembler = RequestAssembler()
        var events = assembler.feed(Array("no object here ".utf8), nowMs: 0)
        events += assembler.feed(Array(#"still none","id":"x2"}"#.utf8), nowMs: 0)
        #expect(events.count == 1)
    }
}
