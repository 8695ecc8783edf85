import TestSupport
import Testing
@testable import StateStore
import WorkerCore

@Suite struct WorkerStateRestoreTests {
    @Test func anEmptyDirectoryStartsFromDefaultsWithANewAgentID() throws {
        let tmp = TemporaryDirectory(prefix: "ecw-state-")
        let files = WorkerStateFiles(directory: try StateDirectory(path: tmp.path))
        let restored = files.restore(nowMs: 5_000, configuredAgentID: nil, deriveAgentID: { "host-new" })
        #expect(restored.mode == .fresh(nowMs: 5_000))
        #expect(restored.events.events.isEmpty)
        #expect(restored.tasks.records.isEmpty)
        #expect(restored.activeModel == nil)
        #expect(restored.agentID == "host-new")
        #expect(restored.recovered.isEmpty)
    }

    @Test func aConfiguredAgentIDIsUsedWithoutReadingTheFile() throws {
        let tmp = TemporaryDirectory(prefix: "ecw-state-")
        tmp.write(WorkerStateFiles.agentIDFile, "not a valid id!\n")
        let files = WorkerStateFiles(directory: try StateDirectory(path: tmp.path))
        let restored = files.restore(nowMs: 5_000, configuredAgentID: "configured-1", deriveAgentID: { "host-new" })
        #expect(restored.agentID == "configured-1")
        #expect(restored.recovered.isEmpty, "the file is not the configured id's business")
    }

    @Test func unreadableFilesAreMovedAsideInReadingOrderAndStartFromDefaults() throws {
        let tmp = TemporaryDirectory(prefix: "ecw-state-")
        tmp.write(WorkerStateFiles.modeFile, "{")
        tmp.write(WorkerStateFiles.eventsFile, "garbage")
        tmp.write(WorkerStateFiles.agentIDFile, "not a valid id!\n")
        let files = WorkerStateFiles(directory: try StateDirectory(path: tmp.path))
        let restored = files.restore(nowMs: 5_000, configuredAgentID: nil, deriveAgentID: { "host-new" })
        #expect(restored.recovered.map(\.file) == [WorkerStateFiles.eventsFile, WorkerStateFiles.modeFile, WorkerStateFiles.agentIDFile])
        #expect(restored.mode.mode == .off)
        #expect(restored.mode.reason.contains("moved aside"))
        #expect(restored.agentID == "host-new")
        #expect(!tmp.names.contains(WorkerStateFiles.modeFile))
    }

    @Test func runningTasksAreInterruptedAndOrphanedTextsRemoved() throws {
        let tmp = TemporaryDirectory(prefix: "ecw-state-")
        let directory = try StateDirectory(path: tmp.path)
        var history = TaskHistory()
        _ = history.upsert(TaskRecord(id: "t1", source: .coordinator, origin: "c", prompt: "p", startedAtMs: 1_000))
        try directory.write(WorkerStateFiles.tasksFile, WorkerStateFiles.tasksBytes(history))
        let orphan = TaskText.fileName(source: .bluetooth, id: "gone")
        tmp.write(orphan, "{}")
        let restored = WorkerStateFiles(directory: directory).restore(nowMs: 5_000, configuredAgentID: "a-1", deriveAgentID: { "unused" })
        #expect(restored.tasks.records.map(\.state) == [.interrupted])
        #expect(!tmp.names.contains(orphan))
    }
}
