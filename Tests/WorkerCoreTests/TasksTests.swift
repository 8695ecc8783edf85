import Testing
@testable import WorkerCore

@Suite struct TaskHistoryBounds {
    @Test func keepsTheNewestFiftyPerSource() {
        var history = TaskHistory()
        for i in 0..<80 { history.upsert(TaskRecord(id: "c\(i)", source: .coordinator, origin: "t", prompt: "p", startedAtMs: Int64(i))) }
        for i in 0..<10 { history.upsert(TaskRecord(id: "b\(i)", source: .bluetooth, origin: "00:AA", prompt: "p", startedAtMs: Int64(i))) }
        #expect(history.records.filter { $0.source == .coordinator }.count == 50)
        #expect(history.records.first { $0.source == .coordinator }?.id == "c30")
        #expect(history.records.filter { $0.source == .bluetooth }.count == 10)
    }

    @Test func runningTasksBecomeInterruptedAtAStop() throws {
        var history = TaskHistory()
        history.upsert(TaskRecord(id: "r", source: .bluetooth, origin: "x", prompt: String(repeating: "p", count: 2_000), startedAtMs: 1))
        history.markRunningInterrupted(atMs: 11)
        #expect(history.records[0].state == .interrupted && history.records[0].error == "interrupted" && history.records[0].durationMs == 10)
        #expect(history.records[0].prompt.count == TaskRecord.previewLimit)
        #expect(TaskHistory.from(json: try JSON.parse(history.json.serialized)) == history)
    }
}
