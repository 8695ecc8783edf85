import Foundation
import Synchronization
import TestSupport
import Testing
import Posix
@testable import StateStore

/// Holds the writer's thread before a chosen file, so that submissions pile up behind
/// it, and records the order of the physical operations.
final class WriterGate: Sendable {
    let holdBefore: String
    private let released = DispatchSemaphore(value: 0)
    private let seen = Mutex<[String]>([])

    init(holdBefore: String) { self.holdBefore = holdBefore }

    func beforeEach(_ name: String) {
        seen.withLock { $0.append(name) }
        if name == holdBefore { released.wait() }
    }

    var order: [String] { seen.withLock { $0 } }
    func release() { released.signal() }

    /// Waits (without blocking a test thread) until the writer is held.
    func waitUntilHeld() async throws {
        while !order.contains(holdBefore) { try await Task.sleep(nanoseconds: 1_000_000) }
    }
}

/// A value shared with the writer's thread.
final class Shared<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    var value: Value {
        get { mutex.withLock { $0 } }
        set { mutex.withLock { $0 = newValue } }
    }
    func update(_ change: (inout Value) -> Void) { mutex.withLock { change(&$0) } }
}

final class ProblemLog: Sendable {
    private let reports = Mutex<[String?]>([])
    func report(_ problem: String?) { reports.withLock { $0.append(problem) } }
    var all: [String?] { reports.withLock { $0 } }
}

@Suite struct DurableWrites {
    func gatedWriter(_ tmp: TemporaryDirectory, holdBefore: String = "hold", problems: ProblemLog = ProblemLog()) throws -> (
        DurableWriter, WriterGate
    ) {
        let gate = WriterGate(holdBefore: holdBefore)
        let writer = DurableWriter(
            directory: try StateDirectory(path: tmp.path), onProblem: { problems.report($0) },
            beforeEach: { gate.beforeEach($0) })
        return (writer, gate)
    }

    @Test func queuedWritesOfOneFileAreMergedTheNewestWinsAndEveryWaiterIsResumed() async throws {
        let tmp = TemporaryDirectory(prefix: "ecw-state-")
        let (writer, gate) = try gatedWriter(tmp)
        writer.submit("hold", Array("h".utf8))
        try await gate.waitUntilHeld()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<3 {
                group.addTask { try await writer.write("events.json", Array("awaited \(i)".utf8)) }
            }
            while writer.queuedWaiters < 3 { try await Task.sleep(nanoseconds: 1_000_000) }
            for i in 0..<100 { writer.submit("events.json", Array("submitted \(i)".utf8)) }
            gate.release()
            try await group.waitForAll()
        }
        await writer.flush()
        #expect(tmp.read("events.json") == "submitted 99")
        #expect(writer.performedOperations == 2, "103 queued writes of one file should be one physical write")
        #expect(gate.order == ["hold", "events.json"])
    }

    @Test func contentIsRenderedOnceForMergedSubmissions() async throws {
        let tmp = TemporaryDirectory(prefix: "ecw-state-")
        let (writer, gate) = try gatedWriter(tmp)
        let renders = Shared(0)
        writer.submit("hold", [])
        try await gate.waitUntilHeld()
        for i in 0..<50 {
            writer.submit("events.json") {
                renders.update { $0 += 1 }
                return Array("log \(i)".utf8)
            }
        }
        gate.release()
        await writer.flush()
        #expect(renders.value == 1)
        #expect(tmp.read("events.json") == "log 49")
    }

    @Test func differentFilesAreWrittenInTheOrderOfTheirLatestSubmission() async throws {
        let tmp = TemporaryDirectory(prefix: "ecw-state-")
        let (writer, gate) = try gatedWriter(tmp)
        writer.submit("hold", [])
        try await gate.waitUntilHeld()
        writer.submit("a", Array("a1".utf8))
        writer.submit("b", Array("b1".utf8))
        writer.submit("c", Array("c1".utf8))
        writer.submit("a", Array("a2".utf8))
        writer.submit("d", Array("d1".utf8))
        gate.release()
        await writer.flush()
        #expect(gate.order == ["hold", "b", "c", "a", "d"])
        #expect(tmp.read("a") == "a2")
        #expect(tmp.read("d") == "d1")
    }

    @Test func aRemovalQueuedAfterAWriteWinsAndNothingIsWritten() async throws {
        let tmp = TemporaryDirectory(prefix: "ecw-state-")
        let (writer, gate) = try gatedWriter(tmp)
        tmp.write("outbox-1.json", "old")
        writer.submit("hold", [])
        try await gate.waitUntilHeld()
        writer.submit("outbox-1.json", Array("new".utf8))
        async let removed: Void = writer.remove("outbox-1.json")
        while writer.queuedWaiters < 1 { try await Task.sleep(nanoseconds: 1_000_000) }
        gate.release()
        try await removed
        #expect(tmp.read("outbox-1.json") == nil)
        #expect(gate.order == ["hold", "outbox-1.json"])
        // Removing what is absent is not an error.
        try await writer.remove("outbox-1.json")
    }

    @Test func awaitedWritesAreOnDiskAndAtomicWhenTheyReturn() async throws {
        let tmp = TemporaryDirectory(prefix: "ecw-state-")
        let writer = DurableWriter(directory: try StateDirectory(path: tmp.path))
        try await writer.write("mode.json", Array("first version, long content\n".utf8))
        #expect(tmp.read("mode.json") == "first version, long content\n")
        try await writer.write("mesh-token", mode: 0o600, Array("secret".utf8))
        try await writer.write("mode.json", Array("second\n".utf8))
        #expect(tmp.read("mode.json") == "second\n")
        #expect(tmp.names == ["mesh-token", "mode.json"], "no temp file may be left behind")
        let attributes = try FileManager.default.attributesOfItem(atPath: tmp.path + "/mesh-token")
        #expect((attributes[.posixPermissions] as? Int).map { $0 & 0o077 } == 0)
    }

    @Test func aWriteIntoAVanishedDirectoryThrowsToTheAwaitingCallerAndIsReported() async throws {
        let tmp = TemporaryDirectory(prefix: "ecw-state-")
        let problems = ProblemLog()
        let writer = DurableWriter(directory: try StateDirectory(path: tmp.path), onProblem: { problems.report($0) })
        try FileManager.default.removeItem(atPath: tmp.path)
        await #expect(throws: SystemError.self) { try await writer.write("mode.json", Array("on".utf8)) }
        #expect(writer.problem?.contains("cannot write the state directory \(tmp.path)") == true)
        #expect(problems.all.count == 1)
    }

    @Test func aRemovalThatFailsThrowsToTheAwaitingCaller() async throws {
        let tmp = TemporaryDirectory(prefix: "ecw-state-")
        let writer = DurableWriter(directory: try StateDirectory(path: tmp.path))
        try FileManager.default.createDirectory(atPath: tmp.path + "/outbox-1.json/inside", withIntermediateDirectories: true)
        await #expect(throws: SystemError.self) { try await writer.remove("outbox-1.json") }
        #expect(writer.problem != nil)
    }

    @Test func aFailedSubmissionIsReportedAndClearedByTheNextSuccess() async throws {
        let tmp = TemporaryDirectory(prefix: "ecw-state-")
        let problems = ProblemLog()
        let writer = DurableWriter(directory: try StateDirectory(path: tmp.path), onProblem: { problems.report($0) })
        // A directory where the file should be: the rename over it fails.
        try FileManager.default.createDirectory(atPath: tmp.path + "/events.json", withIntermediateDirectories: false)
        writer.submit("events.json", Array("{}".utf8))
        await writer.flush()
        let problem = try #require(writer.problem)
        #expect(problem.contains("events.json"))
        #expect(problems.all == [problem])
        try await writer.write("mode.json", Array("on".utf8))
        #expect(writer.problem == nil)
        #expect(problems.all == [problem, nil])
    }

    @Test func flushReturnsOnlyWhenEverythingSubmittedIsOnDisk() async throws {
        let tmp = TemporaryDirectory(prefix: "ecw-state-")
        let (writer, gate) = try gatedWriter(tmp)
        writer.submit("hold", [])
        try await gate.waitUntilHeld()
        for i in 0..<20 { writer.submit("file-\(i)", Array("\(i)".utf8)) }
        let flushed = Shared(false)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                await writer.flush()
                flushed.value = true
            }
            try await Task.sleep(nanoseconds: 50_000_000)
            #expect(flushed.value == false, "flush returned while the writer was held")
            gate.release()
            try await group.waitForAll()
        }
        for i in 0..<20 { #expect(tmp.read("file-\(i)") == "\(i)") }
        // With nothing queued, flush returns at once.
        await writer.flush()
    }

    @Test func theWriterRunsOnAThreadOfItsOwn() async throws {
        let tmp = TemporaryDirectory(prefix: "ecw-state-")
        let caller = pthread_self()
        let writerThread = Shared<pthread_t?>(nil)
        let writer = DurableWriter(
            directory: try StateDirectory(path: tmp.path), onProblem: { _ in },
            beforeEach: { _ in writerThread.value = pthread_self() })
        try await writer.write("x", [1])
        let thread = try #require(writerThread.value)
        #expect(pthread_equal(thread, caller) == 0)
        // The same thread serves every write.
        try await writer.write("y", [2])
        #expect(pthread_equal(writerThread.value!, thread) != 0)
    }
}
