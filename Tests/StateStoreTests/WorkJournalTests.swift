import Foundation
import TestSupport
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
        let tmp = try TemporaryDirectory(prefix: "ecw-state-")
        let journal = WorkJournal(writer: DurableWriter(directory: try StateDirectory(path: tmp.path)))
        try await journal.record(Self.entry("done"))
        try await journal.record(Self.entry("running"))
        // What a kill -9 between the outbox write and the journal removal leaves behind.
        try await journal.writer.write(
            WorkJournal.fileName(prefix: WorkJournal.outboxPrefix, id: "done"),
            Array(SubtaskResult(subtaskID: "done", taskID: "t", ok: true, output: "o", durationMs: 1).json.serialized.utf8))
        let loaded = journal.load(nowMs: 2_000)
        #expect(loaded.outbox.map(\.subtaskID) == ["done"])
        #expect(loaded.journal.map(\.subtask.id) == ["running"])
    }

    @Test func deliveringAResultRemovesItsJournalEntryToo() async throws {
        let tmp = try TemporaryDirectory(prefix: "ecw-state-")
        let journal = WorkJournal(writer: DurableWriter(directory: try StateDirectory(path: tmp.path)))
        try await journal.record(Self.entry("x"))
        try await journal.writer.write(
            WorkJournal.fileName(prefix: WorkJournal.outboxPrefix, id: "x"),
            Array(SubtaskResult(subtaskID: "x", taskID: "t", ok: true, output: "o", durationMs: 1).json.serialized.utf8))
        try await journal.delivered("x")
        let loaded = journal.load(nowMs: 2_000)
        #expect(loaded.journal.isEmpty && loaded.outbox.isEmpty)
        #expect(journal.directory.names().filter { $0.hasSuffix(".json") }.isEmpty)
    }

    @Test func fileNamesHaveOneLengthWhateverTheIdAndNeverMeetALegacyName() {
        let names = ["s1", String(repeating: ":", count: 90), String(repeating: "%", count: 200), "a/../../etc"].map {
            WorkJournal.fileName(prefix: WorkJournal.journalPrefix, id: $0)
        }
        #expect(Set(names.map(\.utf8.count)) == [names[0].utf8.count])
        #expect(names[0].utf8.count < 100)
        #expect(Set(names).count == names.count)
        #expect(names.allSatisfy { $0.hasPrefix("journal-sha256.") && $0.hasSuffix(".json") && !$0.dropLast(5).dropFirst(15).contains(".") })
        // An id made to look like another id's hash still gets a name of its own.
        let lookalike = String(names[0].dropFirst("journal-sha256.".count).dropLast(5))
        #expect(WorkJournal.legacyFileName(prefix: WorkJournal.journalPrefix, id: "sha256." + lookalike) != names[0])
    }

    @Test func filesUnderLegacyNamesAreReadAtStartAndRemovedWithTheirSubtask() async throws {
        let tmp = try TemporaryDirectory(prefix: "ecw-state-")
        let journal = WorkJournal(writer: DurableWriter(directory: try StateDirectory(path: tmp.path)))
        // What 0.1.0 left: a journal entry, and an outbox result of another subtask.
        let old = Self.entry("old:1")
        try await journal.writer.write(WorkJournal.legacyFileName(prefix: WorkJournal.journalPrefix, id: "old:1"), Array(old.json.serialized.utf8))
        try await journal.writer.write(
            WorkJournal.legacyFileName(prefix: WorkJournal.outboxPrefix, id: "old:2"),
            Array(SubtaskResult(subtaskID: "old:2", taskID: "t", ok: true, output: "o", durationMs: 1).json.serialized.utf8))
        #expect(journal.directory.names().contains("journal-old%3A1.json"))
        let loaded = journal.load(nowMs: 2_000)
        #expect(loaded.journal.map(\.subtask.id) == ["old:1"])
        #expect(loaded.outbox.map(\.subtaskID) == ["old:2"])
        #expect(loaded.recovered.isEmpty)
        try await journal.complete(SubtaskResult(subtaskID: "old:1", taskID: "t", ok: true, output: "rerun", durationMs: 1))
        try await journal.delivered("old:1")
        try await journal.delivered("old:2")
        #expect(journal.directory.names().filter { $0.hasSuffix(".json") }.isEmpty, "\(journal.directory.names())")
        let again = journal.load(nowMs: 3_000)
        #expect(again.journal.isEmpty && again.outbox.isEmpty, "nothing runs or posts twice after the upgrade")
    }

    @Test func theLargestJournalEntryAndOutboxResultAcceptedAreReadBack() async throws {
        let tmp = try TemporaryDirectory(prefix: "ecw-state-")
        let journal = WorkJournal(writer: DurableWriter(directory: try StateDirectory(path: tmp.path)))
        // The input at its limit, every byte escaped at worst (six bytes each), plus
        // whatever else a coordinator adds to the subtask (64 MiB max): kept out.
        let input = String(repeating: "\u{1}", count: Subtask.maxInputBytes)
        let raw: JSONValue = [
            "id": .string(String(repeating: "\"", count: 200)), "taskId": .string(String(repeating: "\"", count: 199) + "t"),
            "kind": "single_step", "input": .string(input), "timeoutMs": 60_000,
            "projectMeta": .string(String(repeating: "m", count: 5 * 1_048_576)),
        ]
        guard case .success(let subtask) = Subtask.parse(raw) else { Issue.record("a valid subtask"); return }
        let entry = RecoveryPlan.JournalEntry(subtask: subtask, pulledAtMs: 1_000)
        #expect(entry.json.serialized.utf8.count > WorkerStateFiles.maxStateFileBytes, "over the 4 MiB that once quarantined it")
        #expect(entry.json.serialized.utf8.count <= RecoveryPlan.JournalEntry.maxStoredBytes)
        try await journal.record(entry)
        // The model's output at backend.maxOutputBytes' limit (16 MiB), escaped at worst.
        let output = String(repeating: "\u{1}", count: 16_777_216)
        let stored = try await journal.complete(
            SubtaskResult(
                subtaskID: "big", taskID: "t", ok: true, output: output,
                error: String(repeating: "e", count: 100_000), durationMs: 1))
        #expect(stored.json.serialized.utf8.count <= SubtaskResult.maxStoredBytes)
        #expect(stored.output.utf8.count > 100_000 && stored.error?.utf8.count == SubtaskResult.maxErrorBytes)
        let loaded = journal.load(nowMs: 2_000)
        #expect(loaded.recovered.isEmpty, "nothing quarantined: \(loaded.recovered)")
        #expect(loaded.journal.first?.subtask.input == input)
        #expect(loaded.journal.first?.subtask.id == subtask.id)
        #expect(loaded.outbox.first == stored, "the outbox holds exactly what is posted")
    }

    @Test func aJournalEntryKeepsWhatARerunNeedsAndNothingElse() throws {
        let raw: JSONValue = [
            "id": "a", "taskId": "t", "kind": .string(String(repeating: "k", count: 65)), "input": "p", "timeoutMs": 5_000,
            "snapshotRef": "huge", "projectMeta": ["projectId": "x"],
        ]
        guard case .success(let subtask) = Subtask.parse(raw) else { Issue.record("a valid subtask"); return }
        let json = RecoveryPlan.JournalEntry(subtask: subtask, pulledAtMs: 7).json
        #expect(json["subtask"]?.objectValue?.keys == ["id", "taskId", "kind", "input", "timeoutMs"], "the coordinator's other fields are not kept")
        #expect(json["subtask"]?["kind"]?.stringValue == String(repeating: "k", count: 64), "an over-long kind is cut when parsed")
        let back = try #require(RecoveryPlan.JournalEntry.from(json: json))
        #expect(back.subtask == subtask, "a rerun gets the subtask that was pulled")
        #expect(back.pulledAtMs == 7)
    }
}
