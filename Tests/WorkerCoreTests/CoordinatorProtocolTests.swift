import TestSupport
import Testing
@testable import WorkerCore

@Suite struct CoordinatorBodies {
    let telemetry: JSONValue = ["onExternalPower": true, "batteryPct": 80, "deviceType": "laptop", "updatedAtMs": 1]

    @Test func registerCarriesTheSchemaFieldsAndNoNulls() throws {
        let body = CoordinatorWire.register(agentID: "host-1", version: "0.1.0", registrationToken: nil, provider: .ollama, telemetry: telemetry)
        #expect(body["agentId"] == "host-1" && body["os"] == "linux" && body["version"] == "0.1.0" && body["mode"] == "swarm-only")
        #expect(body["localModelProvider"] == "ollama-local")
        #expect(body["clientType"] == "edgecoder-linux-worker")
        #expect(body["maxConcurrentTasks"] == 1)
        #expect(body["registrationToken"] == nil, "absent, never null")
        #expect(!body.serialized.contains("null"))
        let withToken = CoordinatorWire.register(agentID: "a", version: "v", registrationToken: "t", provider: .openai, telemetry: telemetry)
        #expect(withToken["registrationToken"] == "t" && withToken["localModelProvider"] == "edgecoder-local")
    }

    @Test func resultOutputIsCutToStayUnderTheBodyLimit() {
        let huge = String(repeating: "\u{1}x", count: 700_000)  // escapes to 7 bytes per pair
        let body = CoordinatorWire.result(SubtaskResult(subtaskID: "s", taskID: "t", ok: true, output: huge, durationMs: 5), agentID: "a")
        #expect(body.serialized.utf8.count <= CoordinatorWire.maxBodyBytes)
        #expect((body["output"]?.stringValue?.count ?? 0) > 100_000)
        let small = CoordinatorWire.result(
            SubtaskResult(subtaskID: "s", taskID: "t", ok: false, output: "", error: "worker_restarted", durationMs: 5), agentID: "a")
        #expect(small["output"] == "" && small["error"] == "worker_restarted" && small["ok"] == false && small["durationMs"] == 5)
    }
}

@Suite struct CoordinatorAnswers {
    func classify(_ call: CoordinatorAnswer.Call, _ status: Int, _ body: String) -> CoordinatorAnswer {
        CoordinatorAnswer.classify(call, status: status, body: Array(body.utf8))
    }

    @Test func registrationAnswers() {
        #expect(classify(.register, 200, #"{"accepted":true,"meshToken":"abc","policy":{}}"#) == .registered(meshToken: "abc"))
        #expect(classify(.register, 200, #"{"accepted":true}"#) == .registered(meshToken: nil))
        #expect(
            classify(.register, 403, #"{"error":"node_not_activated","reason":"registration_token_required"}"#)
                == .rejected(reason: "node_not_activated: registration_token_required"))
        #expect(classify(.register, 403, #"{"error":"node_not_activated"}"#) == .rejected(reason: "node_not_activated"))
        #expect(classify(.register, 403, "<html>") == .rejected(reason: "forbidden (403) without a reason"))
        if case .failure = classify(.register, 200, #"{"accepted":true,"meshToken":"has space"}"#) {} else { Issue.record("bad token accepted") }
        if case .failure = classify(.register, 200, #"{"accepted":false}"#) {} else { Issue.record("not accepted, yet registered") }
    }

    @Test func heartbeatAnswers() {
        #expect(classify(.heartbeat, 200, #"{"ok":true,"requeued":0}"#) == .accepted)
        #expect(classify(.heartbeat, 200, #"{"ok":false,"blacklisted":true,"reason":"abuse"}"#) == .rejected(reason: "blacklisted: abuse"))
        #expect(
            classify(.heartbeat, 401, #"{"error":"mesh_unauthorized","reason":"agent_not_registered"}"#)
                == .unauthorized(reason: "agent_not_registered"))
        #expect(classify(.heartbeat, 401, "") == .unauthorized(reason: nil))
    }

    @Test func pullAnswers() {
        #expect(classify(.pull, 200, #"{"subtask":null}"#) == .noWork)
        #expect(
            classify(.pull, 200, #"{"subtask":null,"powerDeferred":true,"deferMs":5000,"reason":"high_cpu_defer"}"#)
                == .deferred(reason: "high_cpu_defer", deferMs: 5000))
        #expect(
            classify(.pull, 200, #"{"subtask":null,"powerDeferred":true,"reason":"thermal_throttle"}"#)
                == .deferred(reason: "thermal_throttle", deferMs: nil))
        #expect(classify(.pull, 200, #"{"subtask":null,"blocked":true,"reason":"x"}"#) == .rejected(reason: "blocked: x"))
        guard
            case .work(let subtask) = classify(
                .pull, 200,
                #"{"subtask":{"id":"s1","taskId":"t1","kind":"single_step","language":"python","input":"hi","timeoutMs":1500,"snapshotRef":"debug","extra":[1]}}"#
            )
        else {
            Issue.record("no work parsed")
            return
        }
        #expect(subtask.id == "s1" && subtask.taskID == "t1" && subtask.input == "hi" && subtask.timeoutMs == 1500)
        #expect(
            classify(.pull, 200, #"{"subtask":{"id":"s1","taskId":"t1","input":5}}"#)
                == .unrunnable(id: "s1", taskID: "t1", reason: "malformed_subtask: no input string"))
    }

    @Test(arguments: [
        (200, ""), (200, "{"), (200, "[]"), (200, "null"), (200, #"{"subtask":{"taskId":"t"}}"#),
        (200, #"{"subtask":{"id":"../../etc","taskId":"t","input":"x"}}"#),
        (200, #"{"subtask":{"id":"","taskId":"t","input":"x"}}"#), (500, #"{"error":"boom"}"#), (502, "<html>bad gateway</html>"),
        (200, #"{"nosubtask":1}"#),
        (200, #"{"subtask":5}"#), (204, ""), (302, ""),
    ])
    func brokenPullAnswersAreFailures(status: Int, body: String) {
        if case .failure = classify(.pull, status, body) {} else { Issue.record("\(status) \(body) was \(classify(.pull, status, body))") }
    }

    @Test func hostileReasonsAreShortenedAndStripped() {
        let reason = String(repeating: "\u{1b}[31m", count: 200)
        guard
            case .rejected(let text) = classify(
                .register, 403, "{\"error\":\"x\",\"reason\":\"\(reason.unicodeScalars.map { $0 == "\u{1b}" ? "\\u001b" : String($0) }.joined())\"}")
        else {
            Issue.record("not rejected")
            return
        }
        #expect(!text.contains("\u{1b}"))
        #expect(text.count < 300)
    }

    @Test func timeoutsAreBoundedAndDefaulted() throws {
        let big = try Subtask.parse(JSON.parse(#"{"id":"a","taskId":"b","input":"x","timeoutMs":1e30}"#)).get()
        #expect(big.timeoutMs == 86_400_000)
        let none = try Subtask.parse(JSON.parse(#"{"id":"a","taskId":"b","input":"x"}"#)).get()
        #expect(none.timeoutMs == Subtask.defaultTimeoutMs)
        let negative = try Subtask.parse(JSON.parse(#"{"id":"a","taskId":"b","input":"x","timeoutMs":-5}"#)).get()
        #expect(negative.timeoutMs == Subtask.defaultTimeoutMs)
    }
}

@Suite struct BackoffAndRecovery {
    @Test func backoffGrowsFromOneAndAHalfSecondsToTheCap() {
        let backoff = Backoff()
        #expect((1...8).map { backoff.ceiling(failures: $0) } == [1_500, 3_000, 6_000, 12_000, 24_000, 48_000, 60_000, 60_000])
        #expect(backoff.ceiling(failures: 1_000) == 60_000)
    }

    @Test func jitterIsDrawnFromZeroToTheCeiling() {
        var ranges: [ClosedRange<Int64>] = []
        let delay = Backoff().delay(failures: 3) { range in
            ranges.append(range); return range.upperBound / 2
        }
        #expect(ranges == [0...6_000])
        #expect(delay == 3_000)
        var generator = SeededGenerator(seed: 7)
        let draws = (0..<1_000).map { _ in Backoff().delay(failures: 2) { Int64.random(in: $0, using: &generator) } }
        #expect(draws.allSatisfy { (0...3_000).contains($0) })
        #expect(Set(draws).count > 500, "full jitter spreads a fleet")
    }

    func entry(_ id: String, pulledAt: Int64, timeout: Int64) -> RecoveryPlan.JournalEntry {
        RecoveryPlan.JournalEntry(
            subtask: try! Subtask.parse(["id": .string(id), "taskId": "t", "input": "p", "timeoutMs": .int(timeout)]).get(), pulledAtMs: pulledAt)
    }

    @Test func outboxIsDeliveredFirstThenAJournalEntryRerunWhileItsClaimLivesElseReleased() {
        let posted = SubtaskResult(subtaskID: "done", taskID: "t", ok: true, output: "o", durationMs: 1)
        // The claim's age decides, not the subtask's advisory timeoutMs: the coordinator
        // re-queues a claim without result after 30 s whatever the timeout says.
        let now: Int64 = 100_000
        let plan = RecoveryPlan.plan(
            journal: [
                entry("expired", pulledAt: now - 30_000, timeout: 600_000),
                entry("fresh", pulledAt: now - 29_999, timeout: 1_000),
                entry("done", pulledAt: 0, timeout: 99_999),
                entry("future", pulledAt: now + 5_000, timeout: 1_000),
            ],
            outbox: [posted], nowMs: now)
        #expect(plan.count == 4)
        #expect(plan[0] == .post(posted))
        guard case .release(let expired) = plan[1], case .rerun(let fresh) = plan[2], case .release(let future) = plan[3] else {
            Issue.record("\(plan)")
            return
        }
        #expect(expired.subtask.id == "expired")
        #expect(fresh.subtask.id == "fresh")
        // A clock that went backwards cannot tell the claim's age: released, never run twice.
        #expect(future.subtask.id == "future")
    }

    @Test func aPullAnsweredSandboxRequiredIsItsOwnAnswerNotNoWork() {
        let body = Array(#"{"subtask":null,"sandboxRequired":true,"reason":"agent_lacks_sandbox_capability"}"#.utf8)
        #expect(CoordinatorAnswer.classify(.pull, status: 200, body: body) == .sandboxRequired(reason: "agent_lacks_sandbox_capability"))
        #expect(
            CoordinatorAnswer.classify(.pull, status: 200, body: Array(#"{"subtask":null,"sandboxRequired":true}"#.utf8))
                == .sandboxRequired(reason: "sandbox_required"))
        #expect(CoordinatorAnswer.classify(.pull, status: 200, body: Array(#"{"subtask":null,"sandboxRequired":"yes"}"#.utf8)) == .noWork)
    }

    @Test func anUnrunnableSubtasksAnswerNamesItAndIsNeverEmptyNorTheSameForTwo() {
        let a = SubtaskResult.unrunnable(subtaskID: "s1", taskID: "t", reason: "malformed_subtask: no input string")
        let b = SubtaskResult.unrunnable(subtaskID: "s2", taskID: "t", reason: "malformed_subtask: no input string")
        #expect(!a.output.isEmpty && a.output.contains("s1") && a.output.contains("malformed_subtask"))
        #expect(a.output != b.output && a.ok == false && a.error == "malformed_subtask: no input string")
    }

    @Test func journalEntriesRoundTrip() throws {
        let original = entry("x", pulledAt: 42, timeout: 5_000)
        #expect(RecoveryPlan.JournalEntry.from(json: try JSON.parse(original.json.serialized)) == original)
        #expect(RecoveryPlan.JournalEntry.from(json: ["pulledAtMs": 1]) == nil)
    }

    /// Found by the coordinator fuzz target (make test, run58): a kind over 64 bytes was left
    /// out of the journal, so a rerun read back "single_step", not the pulled subtask.
    @Test func aLongKindIsCutAtTheParseAndTheJournalKeepsIt() throws {
        let kind = "single_" + String(repeating: "$", count: 120) + "é"
        let body = #"{"subtask":{"id":"s-1","taskId":"t-1","kind":"\#(kind)","input":"write a loop","timeoutMs":1500.5}}"#
        guard case .work(let subtask) = CoordinatorAnswer.classify(.pull, status: 200, body: Array(body.utf8)) else {
            Issue.record("a subtask with a long kind is work")
            return
        }
        #expect(subtask.kind.utf8.count <= Subtask.maxKindBytes && kind.hasPrefix(subtask.kind) && subtask.kind.hasPrefix("single_$"))
        let entry = RecoveryPlan.JournalEntry(subtask: subtask, pulledAtMs: 1)
        #expect(RecoveryPlan.JournalEntry.from(json: try JSON.parse(entry.json.serialized)) == entry)
        let cut = try Subtask.parse(["id": "s", "taskId": "t", "kind": .string(String(repeating: "é", count: 40)), "input": "x"]).get()
        #expect(cut.kind == String(repeating: "é", count: 32))
    }
}

@Suite struct SHA256Vectors {
    // FIPS 180-4 examples and the NIST short-message vectors.
    @Test(arguments: [
        ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
        ("The quick brown fox jumps over the lazy dog", "d7a8fbb307d7809469ca9abcb0082e4f8d5651e46d3cdb762d02d0bf37c9e592"),
    ])
    func digestsMatchTheStandardVectors(text: String, hex: String) {
        #expect(SHA256.hex(Array(text.utf8)) == hex)
    }

    @Test func aMillionAsAndEveryPaddingBoundaryHash() {
        #expect(SHA256.hex([UInt8](repeating: 0x61, count: 1_000_000)) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
        // 55, 56 and 64 bytes straddle the length field's block boundary.
        #expect(SHA256.hex([UInt8](repeating: 0x61, count: 55)) == "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318")
        #expect(SHA256.hex([UInt8](repeating: 0x61, count: 56)) == "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a")
        #expect(SHA256.hex([UInt8](repeating: 0x61, count: 64)) == "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb")
        #expect(SHA256.digest([UInt8]()).count == 32)
    }
}

@Suite struct ResultBounds {
    @Test func aBoundedResultIsWhatIsPostedAndFitsTheOutboxLimit() {
        let result = SubtaskResult(
            subtaskID: "s", taskID: "t", ok: false, output: String(repeating: "é\u{1}", count: 3_000_000),
            error: String(repeating: "€", count: 5_000), durationMs: 3)
        let bounded = result.bounded
        #expect(bounded.json.serialized.utf8.count <= SubtaskResult.maxStoredBytes)
        #expect(bounded.error?.utf8.count ?? 0 <= SubtaskResult.maxErrorBytes && (bounded.error?.utf8.count ?? 0) > SubtaskResult.maxErrorBytes - 3)
        #expect(bounded.error?.allSatisfy { $0 == "€" } == true, "cut between characters")
        #expect(result.output.hasPrefix(bounded.output) && bounded.output.utf8.count > 100_000)
        let posted = CoordinatorWire.result(bounded, agentID: String(repeating: "a", count: AgentID.maxBytes))
        #expect(posted["output"]?.stringValue == bounded.output, "posting a bounded result cuts nothing more")
        #expect(posted["error"]?.stringValue == bounded.error)
        let small = SubtaskResult(subtaskID: "s", taskID: "t", ok: true, output: "hi", durationMs: 1)
        #expect(small.bounded == small)
    }
}
