import Testing
@testable import WorkerCore

/// `CentralMachine.Requests`: one write at a time, chunk by chunk, dropped with the link or
/// with its request unless detached; deadlines and the two ways of forgetting everything.
@Suite struct CentralMachineRequestsTests {
    typealias Requests = CentralMachine.Requests

    /// The next write's id and bytes ("" and none when there is no write).
    static func next(_ requests: inout Requests, size: Int, path: String? = "/r") -> String {
        guard case .write(let id, _, let chunk)? = requests.nextWrite(chunkSize: size, path: path) else { return "" }
        return id + ":" + chunk.map(String.init).joined()
    }

    @Test func oneChunkInFlightAndNoOtherRequestsChunksUntilTheWriteEnds() {
        var requests = Requests()
        requests.add(id: "a", bytes: Array(repeating: 1, count: 5), timeoutMs: 1_000, now: 0)
        requests.add(id: "b", bytes: [2], timeoutMs: 1_000, now: 0)
        var writes = [Self.next(&requests, size: 3), Self.next(&requests, size: 3)]
        let answers = [
            requests.writeAnswered(id: "b", failed: false), requests.writeAnswered(id: "a", failed: false),
            requests.writeAnswered(id: "a", failed: false),
        ]
        writes.append(Self.next(&requests, size: 3))
        _ = requests.writeAnswered(id: "a", failed: false)
        writes.append(Self.next(&requests, size: 3))
        #expect(writes == ["a:111", "", "a:11", "b:2"], "the chunk in flight is answered before the next")
        #expect(answers == [false, true, false], "only the chunk in flight is answered, once")
    }

    @Test func aFailedChunkEndsItsWrite() {
        var requests = Requests()
        requests.add(id: "a", bytes: Array(repeating: 1, count: 5), timeoutMs: 1_000, now: 0)
        _ = Self.next(&requests, size: 3)
        let answered = requests.writeAnswered(id: "a", failed: true)
        #expect(answered && requests.writing == nil)
        #expect(Self.next(&requests, size: 3) == "")
    }

    @Test func withoutALinkEveryQueuedWriteIsDropped() {
        var requests = Requests()
        requests.add(id: "a", bytes: [1], timeoutMs: 1_000, now: 0)
        requests.add(id: "b", bytes: [2], timeoutMs: 1_000, now: 0)
        #expect(Self.next(&requests, size: 20, path: nil) == "")
        #expect(requests.queue.isEmpty && requests.writing == nil)
        #expect(Self.next(&requests, size: 20) == "", "nothing left to write once the link is back")
    }

    /// A write whose request no one waits for stops; a detached one (a cancel, or a
    /// request abandoned mid-write) is written to its end.
    @Test func onlyDetachedWritesOutliveTheirRequest() {
        var requests = Requests()
        requests.add(id: "gone", bytes: [1, 1, 1, 1], timeoutMs: 1_000, now: 0)
        requests.add(id: "next", bytes: [3], timeoutMs: 1_000, now: 0)
        _ = Self.next(&requests, size: 2)
        requests.pending["gone"] = nil
        _ = requests.writeAnswered(id: "gone", failed: false)
        #expect(Self.next(&requests, size: 2) == "next:3", "the rest of gone is not written")

        var abandoned = Requests()
        abandoned.add(id: "mid", bytes: [1, 1, 1, 1], timeoutMs: 1_000, now: 0)
        abandoned.add(id: "queued", bytes: [3], timeoutMs: 1_000, now: 0)
        _ = Self.next(&abandoned, size: 2)
        abandoned.pending["mid"] = nil
        abandoned.queueCancel(id: "mid")
        var writes: [String] = []
        for _ in 0..<3 {
            _ = abandoned.writeAnswered(id: "mid", failed: false)
            writes.append(Self.next(&abandoned, size: 100))
        }
        let cancel = "mid:" + BluetoothMessage.cancel(id: "mid").map(String.init).joined()
        #expect(writes == ["mid:11", cancel, "queued:3"], "the abandoned request is finished, then the cancel goes before the queued write")
    }

    @Test func aQueuedWriteIsRemovedOnlyBeforeItStarts() {
        var requests = Requests()
        requests.add(id: "a", bytes: [1, 1], timeoutMs: 1_000, now: 0)
        requests.add(id: "b", bytes: [2], timeoutMs: 1_000, now: 0)
        _ = Self.next(&requests, size: 1)
        let removed = [requests.removeQueuedWrite(id: "a"), requests.removeQueuedWrite(id: "b")]
        #expect(removed == [false, true], "a is under way, b still queued")
        #expect(requests.queue.isEmpty)
    }

    @Test func requestsExpireAtTheirDeadlineInIdOrder() {
        var requests = Requests()
        requests.add(id: "b", bytes: [], timeoutMs: 100, now: 1_000)
        requests.add(id: "a", bytes: [], timeoutMs: 100, now: 1_000)
        requests.add(id: "c", bytes: [], timeoutMs: 500, now: 1_000)
        requests.add(id: "zero", bytes: [], timeoutMs: 0, now: 1_000)
        let atOnce = requests.removeExpired(now: 1_000).map(\.id)
        let first = requests.removeExpired(now: 1_100).map(\.id)
        let again = requests.removeExpired(now: 1_100).map(\.id)
        #expect(atOnce.isEmpty, "a timeout of 0 still waits 1 ms")
        #expect(first == ["a", "b", "zero"] && again.isEmpty)
        #expect(requests.pending.keys.sorted() == ["c"])
        let last = requests.removeExpired(now: 1_500)
        #expect(last.map(\.id) == ["c"] && last.map(\.timeoutMs) == [500])
    }

    @Test func forgettingEverythingKeepsTheWriteUnderWayOnlyWhenAsked() {
        var stopping = Requests()
        stopping.add(id: "b", bytes: [1, 1], timeoutMs: 1_000, now: 0)
        stopping.add(id: "a", bytes: [2], timeoutMs: 1_000, now: 0)
        _ = Self.next(&stopping, size: 1)
        let stopped = stopping.removeAll(keepingWriteUnderWay: true)
        #expect(stopped == ["a", "b"])
        #expect(stopping.pending.isEmpty && stopping.queue.isEmpty && stopping.writing?.id == "b")

        var lost = Requests()
        lost.add(id: "b", bytes: [1, 1], timeoutMs: 1_000, now: 0)
        _ = Self.next(&lost, size: 1)
        let dropped = lost.removeAll(keepingWriteUnderWay: false)
        #expect(dropped == ["b"] && lost.writing == nil)
    }
}
