import Testing
@testable import WorkerCore

/// The outbox's bound per client and its refusal bookkeeping, and the client table's
/// deadlines: what the peripheral machine's tests see only through whole rounds.
struct PeripheralOutboxTests {
    static func outbox(maxPerClient: Int = 2) -> PeripheralOutbox {
        PeripheralOutbox(maxPerClient: maxPerClient, pacer: NotificationPacer(mode: .chunks, pauseMs: 10))
    }

    @Test func aFullClientQueueDropsItsOldestRejectionFirstAndNeverAnAnswer() {
        var outbox = Self.outbox()
        let dropped = [
            outbox.enqueue(.response, [1], client: "A", rejection: true), outbox.enqueue(.response, [2], client: "A"),
            // The oldest rejection makes room.
            outbox.enqueue(.response, [3], client: "A"),
        ]
        #expect(dropped == [false, false, true])
        #expect(outbox.messages.map(\.bytes) == [[2], [3]])
        let droppedItself = outbox.enqueue(.response, [4], client: "A", rejection: true)
        #expect(droppedItself, "no older rejection: this one is dropped")
        #expect(outbox.messages.map(\.bytes) == [[2], [3]])
        let otherClient = outbox.enqueue(.response, [5], client: "B")
        #expect(!otherClient, "another client's queue is its own")
    }

    @Test func aRefusalIsQueuedUntilItIsSentOrDropped() {
        var outbox = Self.outbox(maxPerClient: 1)
        _ = outbox.enqueue(.response, [1], client: "A", refusal: true, rejection: true)
        #expect(outbox.hasRefusalQueued(for: "A"))
        let dropped = outbox.enqueue(.response, [2], client: "A")
        #expect(dropped, "the refusal makes room for an answer")
        #expect(!outbox.hasRefusalQueued(for: "A"), "the client may be refused again")

        var requests = PeripheralRequestQueue(policy: RequestQueuePolicy(maxQueued: 8))
        var out: [PeripheralMachine.Command] = []
        var sent = Self.outbox()
        _ = sent.enqueue(.response, [9], client: "B", refusal: true, rejection: true)
        let pumped = sent.pump(nowMs: 0, mtu: 23, noOneBecause: nil, requests: &requests, &out)
        #expect(out.contains(.notify(.response, [9])))
        #expect(pumped == PeripheralOutbox.Pumped(bytesNotified: 1, answered: ["B"]))
        #expect(!sent.hasRefusalQueued(for: "B") && sent.responseOwner == "B")
    }

    @Test func withNoOneToNotifyTheMessageIsDroppedButTheValueShowsIt() {
        var outbox = Self.outbox()
        var requests = PeripheralRequestQueue(policy: RequestQueuePolicy(maxQueued: 8))
        var out: [PeripheralMachine.Command] = []
        _ = outbox.enqueue(.status, [7, 7])
        let pumped = outbox.pump(nowMs: 0, mtu: 23, noOneBecause: "no bus", requests: &requests, &out)
        #expect(!out.contains { if case .notify = $0 { true } else { false } })
        #expect(pumped.bytesNotified == 0 && outbox.sending == nil && outbox.values[.status] == [7, 7])
        #expect(outbox.nextDeadlineMs(after: 0) == nil, "nothing left to send")
    }

    @Test func theClientTablesDeadlineIsTheFirstPendingDisconnectStillAhead() {
        var table = PeripheralClientTable()
        table.refuse("/d1", address: "A1", .busy, disconnectAtMs: 1_000)
        table.refuse("/d2", address: "A2", .busy, disconnectAtMs: 3_000)
        #expect(table.nextDeadlineMs(after: 500) == 1_000)
        #expect(table.nextDeadlineMs(after: 1_000) == 3_000, "one that has passed does not hide a later one")
        let due = table.takeDisconnects(dueAtMs: 1_000)
        #expect(due.map(\.device) == ["/d1"])
        #expect(table.refused["/d1"] == .busy, "refused until it disconnects")
        let session = table.forget("/d2")
        #expect(session == nil && table.nextDeadlineMs(after: 0) == nil)
    }
}
