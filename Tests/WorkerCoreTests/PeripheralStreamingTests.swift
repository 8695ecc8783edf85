import TestSupport
import Testing
@testable import WorkerCore

/// The peripheral speaking protocol-bluetooth §2: partials coalesced by size and by time, the final
/// message, failures part-way, cancels (own, foreign, unknown, a flood), a departing
/// client's requests, and `bluetooth.maxTokens`, with the clock in the test's hand.
@Suite struct PeripheralStreamingTests {
    typealias H = PeripheralHarness
    static let id = "0f8fad5b-d9cb-469f-a165-70867728950e"

    static func cancels(_ commands: [PeripheralMachine.Command]) -> [(ticket: Int, reason: String)] {
        commands.compactMap { if case .cancel(let ticket, let reason) = $0 { (ticket, reason) } else { nil } }
    }

    /// A streamed request from client 1 running at `mtu`; its ticket.
    static func streaming(_ h: inout H, mtu: Int = 185, extra: String = "") -> Int {
        h.bringUp()
        _ = h.write(#"{"id":""# + id + #"","prompt":"p","stream":true"# + extra + "}", from: 1, mtu: mtu)
        return H.served(h.all).last!.ticket
    }

    @Test func aPartialGoesOutOnceItsTextWouldFillANotification() throws {
        var h = H()
        let ticket = Self.streaming(&h)
        let budget = BluetoothMessage.partialBudget(id: Self.id, mtu: 185)
        #expect(budget == 180, "one notification at MTU 185")
        var sent: [[UInt8]] = []
        // Tokens of 7 bytes, each a quote (escaped) and a two-byte letter among them.
        // 2 ms apart: 80 ms in all, so only a full partial can go out before the timer's 100 ms.
        for _ in 0..<40 {
            sent += H.notified(h.on(.partial(ticket: ticket, "ab\"é d")))
            h.now += 2
            sent += H.notified(h.on(.tick))
        }
        let messages = H.messages(sent)
        #expect(messages.first?["delta"]?.stringValue == "ab\"é d", "the answer's first partial goes at once")
        #expect(messages.count == 3, "then full partials went out without waiting for the timer")
        for chunk in sent { #expect(chunk.count <= 180) }
        // Whole notifications: every full partial is one notification, filled to within one token's escape.
        let full = try #require(messages.dropFirst().first)
        #expect(full["done"] == false && full["id"]?.stringValue == Self.id)
        #expect(BluetoothMessage.partial(id: Self.id, delta: full["delta"]!.stringValue!).count > 180 - 3)
        #expect(h.machine.queued == 1)
    }

    @Test func theFirstPartialGoesAtOnceThenOnes100msAfterTheirFirstByte() {
        var h = H()
        let ticket = Self.streaming(&h)
        #expect(H.notified(h.on(.partial(ticket: ticket, ""))).isEmpty, "no text, no partial")
        let first = H.messages(H.notified(h.on(.partial(ticket: ticket, "Hel"))))
        #expect(first == [["id": .string(Self.id), "delta": "Hel", "done": false]], "the answer's first text goes at once")
        h.now += 5
        #expect(H.notified(h.on(.partial(ticket: ticket, "lo"))).isEmpty)
        h.now += 60
        #expect(H.notified(h.on(.partial(ticket: ticket, " you"))).isEmpty)
        #expect(h.machine.nextDeadlineMs <= h.now + 40, "the loop wakes for the partial's deadline")
        #expect(H.notified(h.advance(39)).isEmpty)
        let due = H.messages(H.notified(h.advance(1)))
        #expect(due == [["id": .string(Self.id), "delta": "lo you", "done": false]])
    }

    @Test func theFinalMessageFollowsEveryPartialWithoutOutput() {
        var h = H()
        let ticket = Self.streaming(&h)
        var chunks: [[UInt8]] = []
        chunks += H.notified(h.on(.partial(ticket: ticket, "one ")))
        chunks += H.notified(h.advance(150))
        chunks += H.notified(h.on(.partial(ticket: ticket, "two")))
        chunks += H.notified(h.on(.served(ticket: ticket, PeripheralOutcome(ok: true, output: "one two", error: nil, durationMs: 420, evalCount: 2))))
        chunks += H.notified(h.advance(1_000))
        let messages = H.messages(chunks)
        #expect(messages.compactMap { $0["delta"]?.stringValue }.joined() == "one two")
        #expect(messages.last == ["id": .string(Self.id), "ok": true, "done": true, "durationMs": 420, "evalCount": 2])
        #expect(messages.allSatisfy { $0["output"] == nil }, "a streamed answer has no output")
        #expect(h.machine.status.requestsServed == 1)
    }

    @Test func aFailurePartWayEndsWithOkFalseAfterTheTextSoFar() {
        var h = H()
        let ticket = Self.streaming(&h)
        h.on(.partial(ticket: ticket, "partial text"))
        h.on(.served(ticket: ticket, PeripheralOutcome(ok: false, output: "", error: "model_unavailable: reset", durationMs: 9)))
        h.advance(1_000)
        let messages = H.messages(H.notified(h.all))
        #expect(messages.map { $0["delta"]?.stringValue } == ["partial text", nil])
        #expect(messages.last == ["id": .string(Self.id), "ok": false, "done": true, "error": "model_unavailable: reset"])
    }

    @Test func aSlowLinkMakesBiggerPartialsNotALongerQueue() {
        var h = H(pacingMs: 10)
        let ticket = Self.streaming(&h, mtu: 23)
        let budget = BluetoothMessage.partialBudget(id: Self.id, mtu: 23)
        #expect(budget % 18 == 0 && budget > BluetoothMessage.partial(id: Self.id, delta: "").count, "whole notifications at MTU 23")
        var text = ""
        var chunks: [[UInt8]] = []
        for n in 0..<300 {
            let token = "t\(n) "
            text += token
            chunks += H.notified(h.on(.partial(ticket: ticket, token)))
            #expect(h.machine.outbox.messages.count <= 1, "at most the partial being prepared waits")
            h.now += 2
            chunks += H.notified(h.on(.tick))
        }
        h.on(.served(ticket: ticket, PeripheralOutcome(ok: true, output: text, error: nil, durationMs: 600)))
        h.advance(60_000)
        chunks = H.notified(h.all)
        let messages = H.messages(chunks)
        #expect(messages.compactMap { $0["delta"]?.stringValue }.joined() == text, "no text lost or reordered")
        #expect(messages.last?["done"] == true)
        #expect(chunks.allSatisfy { $0.count <= 18 })
    }

    @Test func messagesOfDifferentRequestsNeverInterleaveTheirChunks() {
        var h = H(maxClients: 2)
        let ticket = Self.streaming(&h, mtu: 23)
        h.on(.partial(ticket: ticket, String(repeating: "x", count: 40)))
        // Client 2's bad request is answered while client 1's partials are on the way.
        _ = h.write(#"{"id":"bad","prompt":""}"#, from: 2, mtu: 23)
        h.on(.partial(ticket: ticket, String(repeating: "y", count: 40)))
        h.on(.served(ticket: ticket, PeripheralOutcome(ok: true, output: "", error: nil, durationMs: 1)))
        h.advance(10_000)
        let chunks = H.notified(h.all)
        var framer = JSONObjectFramer(maxBytes: 1 << 20)
        for chunk in chunks {
            for event in framer.feed(chunk, nowMs: 0) {
                guard case .object(let bytes) = event else { Issue.record("\(event)"); continue }
                #expect((try? JSON.parse(bytes)) != nil, "each message parses whole: no other message's chunk inside")
            }
        }
        let messages = H.messages(chunks)
        #expect(messages.contains { $0["id"] == "bad" && $0["ok"] == false })
        #expect(messages.compactMap { $0["delta"]?.stringValue }.joined() == String(repeating: "x", count: 40) + String(repeating: "y", count: 40))
    }

    @Test func aCancelOfAQueuedRequestAnswersCancelledAndItNeverRuns() {
        var h = H()
        h.bringUp()
        _ = h.write(#"{"id":"run","prompt":"p"}{"id":"wait","prompt":"q"}{"id":"wait-s","prompt":"q","stream":true}"#, from: 1)
        _ = h.write(#"{"id":"wait","cancel":true}{"id":"wait-s","cancel":true}"#, from: 1)
        #expect(h.machine.queued == 1)
        h.on(.served(ticket: H.served(h.all)[0].ticket, PeripheralOutcome(ok: true, output: "done", error: nil, durationMs: 1)))
        h.advance(1_000)
        let messages = H.messages(H.notified(h.all))
        #expect(messages.contains(["id": "wait", "output": "", "ok": false, "durationMs": 0, "error": "cancelled"]))
        #expect(messages.contains(["id": "wait-s", "ok": false, "done": true, "error": "cancelled"]))
        #expect(H.served(h.all).map(\.request.id) == ["run"])
        #expect(h.machine.status.requestsFailed == 2)
        #expect(h.machine.status.requestsCancelled == 2)
        // Every byte handed to bluetoothd is counted (metrics' bluetooth_notified_bytes_total).
        #expect(h.machine.status.bytesNotified == Int64(H.notified(h.all).reduce(0) { $0 + $1.count }))
        #expect(h.machine.status.bytesNotified > 0)
    }

    @Test func aCancelOfTheRunningRequestStopsItsBackendAndEndsItCancelled() {
        var h = H()
        let ticket = Self.streaming(&h)
        _ = h.write(#"{"id":"next","prompt":"q"}"#, from: 1)
        h.on(.partial(ticket: ticket, "before"))
        let cancel = h.write(#"{"id":""# + Self.id + #"","cancel":true}"#, from: 1)
        #expect(Self.cancels(cancel).map(\.ticket) == [ticket])
        #expect(Self.cancels(cancel).first?.reason == "cancelled")
        #expect(Self.cancels(h.write(#"{"id":""# + Self.id + #"","cancel":true}"#, from: 1)).isEmpty, "a second cancel stops nothing more")
        h.on(.partial(ticket: ticket, "after the cancel"))
        #expect(H.served(h.all).count == 1, "the next request waits for the model to stop")
        h.on(.served(ticket: ticket, PeripheralOutcome(ok: false, output: "", error: "cancelled", durationMs: 70)))
        #expect(H.served(h.all).map(\.request.id).last == "next")
        h.advance(2_000)
        let messages = H.messages(H.notified(h.all))
        #expect(!messages.contains { $0["delta"]?.stringValue == "after the cancel" })
        #expect(messages.contains(["id": .string(Self.id), "ok": false, "done": true, "error": "cancelled"]))
        #expect(
            !messages.contains { $0["error"]?.stringValue?.hasPrefix("cancel_refused") == true }, "a repeated cancel of a running request is no error"
        )
        #expect(h.machine.status.requestsCancelled == 1, "cancelled once, however many cancels came")
    }

    @Test func aCancelOfAnotherClientsRequestIsRefusedWithoutItsId() {
        var h = H(maxClients: 2)
        let ticket = Self.streaming(&h)
        let foreign = h.write(#"{"id":""# + Self.id + #"","cancel":true}"#, from: 2)
        #expect(Self.cancels(foreign).isEmpty)
        h.advance(1_000)
        let messages = H.messages(H.notified(h.all))
        let refusal = messages.first { $0["ok"] == false }
        #expect(refusal?["id"] == "", "the owner never sees an answer about its own request")
        #expect(refusal?["error"]?.stringValue?.hasPrefix("cancel_refused: ") == true)
        #expect(h.machine.queued == 1)
        h.on(.served(ticket: ticket, PeripheralOutcome(ok: true, output: "", error: nil, durationMs: 5)))
        h.advance(1_000)
        #expect(H.messages(H.notified(h.all)).last?["ok"] == true)
        #expect(h.machine.status.requestsCancelled == 0, "a refused cancel cancels nothing")
    }

    @Test func aFloodOfCancelsCostsOneRefusal() {
        var h = H(pacingMs: 10)
        h.bringUp()
        var flood = ""
        for n in 0..<2_000 { flood += #"{"id":"nope-\#(n)","cancel":true}"# }
        var chunks: [[UInt8]] = []
        for _ in 0..<3 {
            chunks += H.notified(h.write(flood, from: 1, mtu: 23))
            #expect(h.machine.outbox.messages.count <= 1)
        }
        chunks += H.notified(h.advance(5_000))
        let refusals = H.messages(chunks).filter { $0["error"]?.stringValue?.hasPrefix("cancel_refused") == true }
        #expect(refusals.count == 1, "one refusal while the first is on its way, whatever the number of writes")
        #expect(h.machine.status.requestsRejected == 6_000)
        // Once it is out, a later bad cancel is refused again.
        _ = h.write(#"{"id":"nope-again","cancel":true}"#, from: 1, mtu: 23)
        h.advance(5_000)
        #expect(H.messages(H.notified(h.all)).filter { $0["error"]?.stringValue?.hasPrefix("cancel_refused") == true }.count == 2)
        _ = h.write(#"{"id":"fine","prompt":"p"}"#, from: 1, mtu: 23)
        #expect(H.served(h.all).map(\.request.id) == ["fine"])
    }

    @Test func aDisconnectCancelsTheClientsRunningAndQueuedRequestsSilently() {
        var h = H(maxClients: 2)
        let ticket = Self.streaming(&h)
        _ = h.write(#"{"id":"q1","prompt":"p"}{"id":"q2","prompt":"p","stream":true}"#, from: 1)
        _ = h.write(#"{"id":"other","prompt":"p"}"#, from: 2)
        h.on(.partial(ticket: ticket, "text"))
        let gone = h.on(.bluez(.propertiesChanged(path: H.device(1), BlueZInterfaces(device: .init(connected: false)))))
        #expect(Self.cancels(gone).map(\.ticket) == [ticket])
        #expect(Self.cancels(gone).first?.reason.contains("disconnected") == true)
        let before = H.notified(h.all).count
        h.on(.served(ticket: ticket, PeripheralOutcome(ok: false, output: "", error: "cancelled", durationMs: 3)))
        #expect(H.served(h.all).map(\.request.id) == [Self.id, "other"], "the departed client's queue was dropped")
        h.on(.served(ticket: H.served(h.all).last!.ticket, PeripheralOutcome(ok: true, output: "yours", error: nil, durationMs: 1)))
        h.advance(2_000)
        let after = H.messages(Array(H.notified(h.all).dropFirst(before)))
        #expect(after.map { $0["id"]?.stringValue } == ["other"], "nothing of the departed client reaches the one still here")
    }

    @Test func bluetoothdLeavingCancelsTheRunningRequestOfTheClientsItTookAlong() {
        var h = H()
        let ticket = Self.streaming(&h)
        _ = h.write(#"{"id":"queued","prompt":"p"}"#, from: 1)
        let gone = h.on(.bluez(.owner(nil)))
        #expect(Self.cancels(gone).map(\.ticket) == [ticket])
        #expect(h.machine.queued == 1, "only the running request, until it stops")
        h.on(.served(ticket: ticket, PeripheralOutcome(ok: false, output: "", error: "cancelled", durationMs: 1)))
        #expect(h.machine.queued == 0)
        #expect(H.served(h.all).count == 1, "the departed client's queued request never runs")
    }

    @Test func maxTokensIsCappedByTheSetting() {
        var h = H()
        h.machine = PeripheralMachine(
            settings: {
                var settings = PeripheralMachine.Settings(
                    adapter: nil, localName: "EdgeCoder-test", maxRequestBytes: 65_536,
                    maxQueuedRequests: 8, chunkPacingMs: 10, maxClients: 1)
                settings.maxTokens = 100
                return settings
            }())
        h.bringUp()
        _ = h.write(#"{"id":"big","prompt":"p","maxTokens":4000}"#, from: 1)
        #expect(H.served(h.all).first?.request.maxTokens == 100)
        h.on(.served(ticket: H.served(h.all)[0].ticket, PeripheralOutcome(ok: true, output: "", error: nil, durationMs: 1)))
        _ = h.write(#"{"id":"small","prompt":"p","maxTokens":40}"#, from: 1)
        #expect(H.served(h.all).last?.request.maxTokens == 40)
    }

    @Test func aChatWithoutStreamIsAnsweredWithOutputAndReachesTheHostWhole() throws {
        var h = H()
        h.bringUp()
        let request =
            #"{"id":"chat","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"#
            + #""system":"s","format":"json","options":{"temperature":0.2,"top_p":0.9,"top_k":20,"seed":7,"stop":["\n"],"num_ctx":2048},"#
            + #""maxTokens":64,"future":{"ignored":true}}"#
        _ = h.write(request, from: 1)
        let served = try #require(H.served(h.all).first?.request)
        #expect(served.messages == [ChatTurn(role: "system", content: "be brief"), ChatTurn(role: "user", content: "hi")])
        #expect(served.system == "s" && served.format == "json" && !served.stream && served.prompt.isEmpty)
        #expect(served.options.temperature == 0.2 && served.options.topP == 0.9 && served.options.topK == 20)
        #expect(served.options.seed == 7 && served.options.stop == ["\n"] && served.options.numCtx == 2048)
        h.on(.served(ticket: H.served(h.all)[0].ticket, PeripheralOutcome(ok: true, output: "{}", error: nil, durationMs: 8, evalCount: 2)))
        h.advance(1_000)
        let messages = H.messages(H.notified(h.all))
        #expect(messages.last == ["id": "chat", "output": "{}", "ok": true, "durationMs": 8], "protocol-bluetooth §1's response, no evalCount")
    }
}
