import Foundation
import Testing
import WorkerCore
@testable import StateStore

/// The journal and outbox across a kill between `complete`'s two steps (outbox written,
/// journal entry not yet removed): the subtask must never run again.
@Suite struct WorkJournalTests {
    static func entry(_ id: String) -> RecoveryPlan.JournalEntry {
        let raw: JSONValue = ["id": .string(id), "taskId": "t", "kind": "micro_loop", "input": "p", "timeoutMs": 60_000]
        guard case .success(let subtask) = Subtask.parse(raw) else { fatalError("a valid subtask") }
        return RecoveryPlan.JournalEntry(subtask: subtask, pulledAtMs: 1_000)
    }

    @Test func aJournalEntryWhoseResultIsInTheOutboxIsNotRunAgain() async throws {
        let tmp = try TempDir()
        let journal = WorkJournal(writer: DurableWriter(directory: try StateDirectory(path: tmp.path)))
        try await journal.record(Self.entry("done"))
        try await journal.record(Self.entry("running"))
        // What a kill -9 between the outbox write and the journal removal leaves behind.
        try await journal.writer.write(WorkJournal.fileName(prefix: WorkJournal.outboxPrefix, id: "done"),
                                       Array(SubtaskResult(subtaskID: "done", taskID: "t", ok: true, output: "o", durationMs: 1).json.serialized.utf8))
        let loaded = journal.load(nowMs: 2_000)
        #expect(loaded.outbox.map(\.subtaskID) == ["done"])
        #expect(loaded.journal.map(\.subtask.id) == ["running"])
    }

    @Test func deliveringAResultRemovesItsJournalEntryToo() async throws {
        let tmp = try TempDir()
        let journal = WorkJournal(writer: DurableWriter(directory: try StateDirectory(path: tmp.path)))
        try await journal.record(Self.entry("x"))
        try await journal.writer.write(WorkJournal.fileName(prefix: WorkJournal.outboxPrefix, id: "x"),
                                       Array(SubtaskResult(subtaskID: "x", taskID: "t", ok: true, output: "o", durationMs: 1).json.serialized.utf8))
        try await journal.delivered("x")
        let loaded = journal.load(nowMs: 2_000)
        #expect(loaded.journal.isEmpty && loaded.outbox.isEmpty)
        #expect(journal.directory.names().filter { $0.hasSuffix(".json") }.isEmpty)
    }
}
