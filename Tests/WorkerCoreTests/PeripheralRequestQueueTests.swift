import Testing
@testable import WorkerCore

/// The request queue's `Current`: one request runs at a time in arrival order, a streamed
/// one gathers partials while it runs, and a stop (cancel, departure, the service
/// stopping) decides what its `.served` still answers.
struct PeripheralRequestQueueTests {
    static func request(_ id: String, stream: Bool = false) -> BluetoothRequest {
        var request = BluetoothRequest(id: id, prompt: "p", maxTokens: 512)
        request.stream = stream
        return request
    }

    static func queue(maxQueued: Int = 8, _ requests: [(String, client: String, stream: Bool)]) -> PeripheralRequestQueue {
        var queue = PeripheralRequestQueue(policy: RequestQueuePolicy(maxQueued: maxQueued))
        for (id, client, stream) in requests { queue.append(request(id, stream: stream), client: client) }
        return queue
    }

    /// Takes the next request off the queue and runs it.
    static func runNext(_ queue: inout PeripheralRequestQueue) throws -> PeripheralRequestQueue.Queued {
        let next = queue.next()
        let item = try #require(next)
        queue.run(item, partialDelayMs: 100)
        return item
    }

    @Test func oneRunsAtATimeInArrivalOrderWithTicketsThatGrow() throws {
        var queue = Self.queue([("a", client: "A", stream: false), ("b", client: "B", stream: false)])
        let first = try Self.runNext(&queue)
        #expect(first.request.id == "a" && queue.count == 2)
        let another = queue.next()
        #expect(another == nil, "nothing starts while one runs")
        let otherEnd = queue.finish(ticket: first.ticket + 1)
        #expect(otherEnd == nil, "another ticket's end changes nothing")
        let finished = queue.finish(ticket: first.ticket)
        let ended = try #require(finished)
        #expect(ended.item == first && ended.stopped == nil)
        #expect(queue.current == .idle)
        let following = queue.next()
        let second = try #require(following)
        #expect(second.request.id == "b" && second.ticket > first.ticket)
    }

    @Test func theRunningRequestCountsAgainstTheBound() throws {
        var queue = Self.queue(maxQueued: 2, [("a", client: "A", stream: false)])
        _ = try Self.runNext(&queue)
        #expect(queue.admitsAnother)
        queue.append(Self.request("b"), client: "A")
        #expect(!queue.admitsAnother, "one running and one waiting fill a queue of 2")
    }

    @Test func onlyAStreamedRunningRequestGathersItsText() throws {
        var queue = Self.queue([("s", client: "A", stream: true)])
        let item = try Self.runNext(&queue)
        queue.add("hello", ticket: item.ticket + 1, nowMs: 1_000)
        #expect(queue.partialDueAtMs == nil, "text of another ticket is not this request's")
        queue.add("hello", ticket: item.ticket, nowMs: 1_000)
        #expect(queue.partialDueAtMs == 1_000, "the answer's first partial is due at once")
        let taken = queue.takePartial(nowMs: 1_000, mtu: 185)
        let partial = try #require(taken)
        #expect(partial.client == "A" && String(decoding: partial.bytes, as: UTF8.self).contains("hello"))

        var plain = Self.queue([("p", client: "A", stream: false)])
        let unstreamed = try Self.runNext(&plain)
        plain.add("hello", ticket: unstreamed.ticket, nowMs: 1_000)
        let none = plain.takePartial(nowMs: 2_000, mtu: 185)
        #expect(none == nil)
    }

    @Test func aStoppedRequestsTextIsNotWantedAndItsEndSaysWhy() throws {
        var queue = Self.queue([("s", client: "A", stream: true)])
        let item = try Self.runNext(&queue)
        queue.add("before", ticket: item.ticket, nowMs: 1_000)
        let stopped = queue.stopRunning(.cancelled)
        #expect(stopped == item)
        #expect(queue.current == .stopping(item, .cancelled))
        #expect(queue.partialDueAtMs == nil)
        queue.add("after", ticket: item.ticket, nowMs: 1_001)
        let partial = queue.takePartial(nowMs: 5_000, mtu: 185)
        #expect(partial == nil)
        let finished = queue.finish(ticket: item.ticket)
        let ended = try #require(finished)
        #expect(ended.stopped == .cancelled && ended.partials == nil)
    }

    @Test func aSecondCancelStopsNothingButADepartureAfterACancelDoes() throws {
        var queue = Self.queue([("a", client: "A", stream: false)])
        let item = try Self.runNext(&queue)
        let stops = [queue.stopRunning(.cancelled), queue.stopRunning(.cancelled), queue.stopRunning(.clientGone), queue.stopRunning(.clientGone)]
        // A second cancel has nothing more to stop; the client leaving after its cancel
        // does: nothing is answered any more.
        #expect(stops == [item, nil, item, nil])
        let ended = queue.finish(ticket: item.ticket)
        #expect(ended?.stopped == .clientGone)
    }

    @Test func abandoningDropsTheWaitingAndTheRunningTextButNotItsEnd() throws {
        var queue = Self.queue([("s", client: "A", stream: true), ("b", client: "B", stream: false)])
        let item = try Self.runNext(&queue)
        queue.add("text", ticket: item.ticket, nowMs: 1_000)
        queue.abandon()
        #expect(queue.waiting.isEmpty && queue.count == 1)
        #expect(queue.current == .running(item, partials: nil))
        let finished = queue.finish(ticket: item.ticket)
        let ended = try #require(finished)
        #expect(ended.stopped == nil && ended.partials == nil)
    }

    @Test func aClientsWaitingRequestsLeaveByIdOrAllAtOnce() throws {
        var queue = Self.queue([("a", client: "A", stream: false), ("b", client: "B", stream: false), ("c", client: "A", stream: false)])
        let othersID = queue.removeWaiting(id: "b", client: "A")
        #expect(othersID == nil, "another client's id is not this client's to cancel")
        let own = queue.removeWaiting(id: "a", client: "A")
        #expect(own?.request.id == "a")
        #expect(queue.holds("A") && queue.holds("B"))
        let dropped = queue.removeWaiting(of: "A")
        #expect(dropped == 1)
        #expect(!queue.holds("A") && queue.count == 1)
    }
}
