import StateStore
import WorkerCore

/// The task history (`tasks`, `tasks show`) and the whole-text files beside it.
extension WorkerState {
    public func upsertTask(_ record: TaskRecord) {
        if let text = record.text {
            writer.submit(TaskText.fileName(source: record.source, id: record.id)) { Array((text.json.serialized + "\n").utf8) }
        }
        for gone in tasks.upsert(record) {
            writer.submitRemoval(TaskText.fileName(source: gone.source, id: gone.id))
        }
        submitTasks()
    }

    /// One task whole for `tasks show`: the history's record with the whole prompt and
    /// answer from its file (`promptCut`/`outputCut` when they were over the limit;
    /// `wholeText` false when the file is gone and the previews are all there is); nil
    /// when the history has no task with that id.
    public func taskJSON(id: String) async -> JSONValue? {
        guard let record = tasks.record(id: id) else { return nil }
        // The file may still be queued behind the writer.
        await writer.flush()
        let name = TaskText.fileName(source: record.source, id: record.id)
        let text = (try? writer.directory.read(name, limit: TaskText.maxFileBytes))
            .flatMap { $0 }.flatMap { try? JSON.parse($0) }.flatMap(TaskText.from(json:))
        var object = record.json.objectValue ?? JSONObject()
        object["wholeText"] = .bool(text != nil)
        if let text {
            object["prompt"] = .string(text.prompt)
            object["promptBytes"] = .int(Int64(text.promptBytes))
            object["promptCut"] = .bool(text.promptCut)
            if let output = text.output, let bytes = text.outputBytes {
                object["output"] = .string(output)
                object["outputBytes"] = .int(Int64(bytes))
                object["outputCut"] = .bool(text.outputCut)
            }
        }
        return ["task": .object(object)]
    }

    func submitTasks() {
        writer.submit(WorkerStateFiles.tasksFile) { [tasks] in WorkerStateFiles.tasksBytes(tasks) }
    }

    public func markTaskPosted(_ id: String, ok: Bool) {
        guard var record = tasks.records.last(where: { $0.id == id && $0.source == .coordinator }) else { return }
        record.state = ok ? .done : .failed
        upsertTask(record)
    }

    public func tasksJSON(limit: Int?) -> JSONValue {
        let records = limit.map { Array(tasks.records.suffix($0)) } ?? tasks.records
        return ["tasks": .array(records.map(\.json))]
    }
}
