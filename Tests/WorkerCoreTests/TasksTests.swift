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

/// The whole prompt and answer behind `tasks show`: cut at 64 KiB on a character boundary,
/// sized, kept out of the history, decoded only when every field fits.
@Suite struct TaskWholeText {
    @Test func aRecordCarriesItsWholeTextButTheHistoryKeepsOnlyThePreview() throws {
        let prompt = String(repeating: "p", count: 2_000)
        var record = TaskRecord(id: "s1", source: .coordinator, origin: "t", prompt: prompt, startedAtMs: 1)
        record.finish(ok: true, output: String(repeating: "a", count: 3_000), error: nil, atMs: 5)
        #expect(record.prompt.count == TaskRecord.previewLimit && record.output?.count == TaskRecord.previewLimit)
        #expect(record.text?.prompt == prompt && record.text?.output?.count == 3_000 && record.text?.outputBytes == 3_000)
        #expect(record.json["text"] == nil && !record.json.serialized.contains(String(repeating: "p", count: 501)))
        var history = TaskHistory()
        history.upsert(record)
        #expect(history.records[0].text == nil)
        #expect(TaskRecord.from(json: record.json)?.text == nil, "a record read back has no whole text to overwrite its file with")
    }

    @Test(arguments: [0, 1, 100, TaskText.limitBytes - 1, TaskText.limitBytes])
    func textUpToTheLimitIsKeptWhole(size: Int) {
        let text = TaskText(prompt: String(repeating: "x", count: size), output: String(repeating: "y", count: size))
        #expect(text.prompt.utf8.count == size && text.promptBytes == size && !text.promptCut)
        #expect(text.output?.utf8.count == size && text.outputBytes == size && !text.outputCut)
    }

    @Test func anOversizedTextIsCutAtTheLimitWithItsWholeSize() {
        let huge = String(repeating: "z", count: 5 * TaskText.limitBytes + 7)
        let text = TaskText(prompt: huge, output: huge)
        #expect(text.prompt.utf8.count == TaskText.limitBytes && text.promptBytes == huge.utf8.count && text.promptCut)
        #expect(text.output?.utf8.count == TaskText.limitBytes && text.outputCut)
    }

    @Test func theCutNeverSplitsACharacter() {
        // "é" is 2 bytes, "👍🏽" one character of 8: a cut inside either keeps the characters before it.
        #expect(TaskText.cut("aé", limit: 2) == "a")
        #expect(TaskText.cut("aé", limit: 3) == "aé")
        #expect(TaskText.cut("👍🏽b", limit: 7) == "")
        #expect(TaskText.cut("👍🏽b", limit: 8) == "👍🏽")
        #expect(TaskText.cut("", limit: 0) == "")
        let emoji = String(repeating: "👍🏽", count: TaskText.limitBytes / 8 + 3)
        let cut = TaskText.cut(emoji)
        #expect(cut.utf8.count <= TaskText.limitBytes && cut.utf8.count % 8 == 0 && cut.unicodeScalars.last == "🏽")
    }

    @Test func itsJSONReadsBack() throws {
        let text = TaskText(prompt: "line 1\nline \"2\"\u{0}", output: String(repeating: "é", count: TaskText.limitBytes))
        #expect(TaskText.from(json: try JSON.parse(text.json.serialized)) == text)
        let promptOnly = TaskText(prompt: "")
        #expect(TaskText.from(json: try JSON.parse(promptOnly.json.serialized)) == promptOnly)
        #expect(text.json.serialized.utf8.count <= TaskText.maxFileBytes)
    }

    @Test(arguments: [
        #"{}"#, #"[]"#, #"null"#, #"{"prompt": 1, "promptBytes": 1}"#, #"{"prompt": "a"}"#,
        #"{"prompt": "ab", "promptBytes": 1}"#, #"{"prompt": "a", "promptBytes": -1}"#,
        #"{"prompt": "a", "promptBytes": 99999999999999}"#, #"{"prompt": "a", "promptBytes": 1.5}"#,
        #"{"prompt": "a", "promptBytes": 1, "output": "b"}"#, #"{"prompt": "a", "promptBytes": 1, "outputBytes": 1}"#,
        #"{"prompt": "a", "promptBytes": 1, "output": 7, "outputBytes": 1}"#,
        #"{"prompt": "a", "promptBytes": 1, "output": "bb", "outputBytes": 1}"#,
    ])
    func brokenOrHostileFilesAreNotText(json: String) throws {
        #expect(TaskText.from(json: try JSON.parse(Array(json.utf8))) == nil)
    }

    @Test func aTextOverTheLimitInAFileIsRefused() throws {
        let over = String(repeating: "o", count: TaskText.limitBytes + 1)
        let json = "{\"prompt\": \"\(over)\", \"promptBytes\": \(over.utf8.count)}"
        #expect(TaskText.from(json: try JSON.parse(Array(json.utf8))) == nil)
    }

    @Test func fileNamesHaveOneLengthWhateverTheIdAndDifferBySource() {
        let short = TaskText.fileName(source: .coordinator, id: "a")
        let hostile = TaskText.fileName(source: .coordinator, id: "../../etc/passwd\n" + String(repeating: "x", count: 10_000))
        #expect(short.utf8.count == hostile.utf8.count && !hostile.contains("/") && !hostile.contains("\n"))
        #expect(TaskText.fileName(source: .bluetooth, id: "a") != short)
        #expect(TaskText.isFileName(short) && !TaskText.isFileName("tasks.json") && !TaskText.isFileName("task-text-x.json.tmp"))
    }

    @Test func trimmingReturnsTheDroppedRecordsAndTheKeptFileNames() {
        var history = TaskHistory()
        var dropped: [TaskRecord] = []
        for i in 0..<(TaskHistory.keepPerSource + 2) {
            dropped += history.upsert(TaskRecord(id: "c\(i)", source: .coordinator, origin: "t", prompt: "p", startedAtMs: Int64(i)))
        }
        #expect(dropped.map(\.id) == ["c0", "c1"])
        #expect(history.textFileNames.count == TaskHistory.keepPerSource)
        #expect(!history.textFileNames.contains(TaskText.fileName(source: .coordinator, id: "c0")))
        #expect(history.record(id: "c51")?.id == "c51" && history.record(id: "c0") == nil && history.record(id: "") == nil)
    }
}
