/// One task the worker ran or is running, coordinator or Bluetooth (docs/reference/protocol-coordinator.md, protocol-bluetooth §1, `tasks`).
public struct TaskRecord: Sendable, Equatable {
    public enum Source: String, Sendable { case coordinator, bluetooth }
    /// `cancelled`: stopped at its Bluetooth client's request, or because the client left (protocol-bluetooth §2).
    public enum State: String, Sendable {
        case running, posting, done, failed, interrupted, cancelled
        /// A coordinator subtask given back unanswered (the failure was the host's): the
        /// coordinator hands it to another agent.
        case released
    }

    public var id: String
    public var source: Source
    /// The coordinator's task id, or the Bluetooth client's address.
    public var origin: String
    public var prompt: String
    public var startedAtMs: Int64
    public var endedAtMs: Int64?
    public var state: State
    public var ok: Bool?
    public var error: String?
    public var output: String?
    public var durationMs: Int64?
    /// The whole prompt and answer (each up to `TaskText.limitBytes`) while the record goes
    /// from its service to the daemon, which keeps them in a file of their own for `tasks
    /// show` and drops them from the history: never in `json`.
    public var text: TaskText?

    /// Prompts and outputs are kept short in the history; `tasks show` reads the whole text.
    public static let previewLimit = 500

    public init(id: String, source: Source, origin: String, prompt: String, startedAtMs: Int64, state: State = .running) {
        self.id = id
        self.source = source
        self.origin = origin
        self.prompt = String(prompt.prefix(TaskRecord.previewLimit))
        self.startedAtMs = startedAtMs
        self.state = state
        self.text = TaskText(prompt: prompt)
    }

    public var json: JSONValue {
        var object = JSONObject([
            ("id", .string(id)), ("source", .string(source.rawValue)), ("origin", .string(origin)),
            ("prompt", .string(prompt)), ("startedAtMs", .int(startedAtMs)),
            ("started", .string(formatUTC(milliseconds: startedAtMs))), ("state", .string(state.rawValue)),
        ])
        if let endedAtMs { object["endedAtMs"] = .int(endedAtMs); object["ended"] = .string(formatUTC(milliseconds: endedAtMs)) }
        if let ok { object["ok"] = .bool(ok) }
        if let error { object["error"] = .string(error) }
        if let output { object["output"] = .string(output) }
        if let durationMs { object["durationMs"] = .int(durationMs) }
        return .object(object)
    }

    public static func from(json value: JSONValue) -> TaskRecord? {
        guard let id = value["id"]?.stringValue, let source = value["source"]?.stringValue.flatMap(Source.init(rawValue:)),
            let origin = value["origin"]?.stringValue, let prompt = value["prompt"]?.stringValue,
            let started = value["startedAtMs"]?.intValue, let state = value["state"]?.stringValue.flatMap(State.init(rawValue:))
        else { return nil }
        var record = TaskRecord(id: id, source: source, origin: origin, prompt: prompt, startedAtMs: started, state: state)
        record.text = nil
        record.endedAtMs = value["endedAtMs"]?.intValue
        record.ok = value["ok"]?.boolValue
        record.error = value["error"]?.stringValue
        record.output = value["output"]?.stringValue
        record.durationMs = value["durationMs"]?.intValue
        return record
    }

    public mutating func finish(ok: Bool, output: String, error: String?, atMs: Int64, state: State? = nil) {
        self.ok = ok
        self.output = String(output.prefix(TaskRecord.previewLimit))
        // A record read back from the history has no whole text; its file keeps the prompt.
        text?.setOutput(output)
        self.error = error
        endedAtMs = atMs
        durationMs = max(0, atMs - startedAtMs)
        self.state = state ?? (ok ? .done : .failed)
    }
}

/// The newest tasks per source, oldest first.
public struct TaskHistory: Sendable, Equatable {
    public static let keepPerSource = 50
    public private(set) var records: [TaskRecord] = []

    public init(records: [TaskRecord] = []) { self.records = records }

    /// Inserts or replaces (by source and id) and trims each source to its newest entries;
    /// returns the records trimmed (their whole-text files go too).
    @discardableResult
    public mutating func upsert(_ record: TaskRecord) -> [TaskRecord] {
        var record = record
        record.text = nil
        var dropped: [TaskRecord] = []
        if let index = records.firstIndex(where: { $0.id == record.id && $0.source == record.source }) {
            records[index] = record
        } else {
            records.append(record)
        }
        for source in [TaskRecord.Source.coordinator, .bluetooth] {
            let mine = records.filter { $0.source == source }
            if mine.count > TaskHistory.keepPerSource {
                let drop = Set(mine.prefix(mine.count - TaskHistory.keepPerSource).map(\.id))
                dropped += records.filter { $0.source == source && drop.contains($0.id) }
                records.removeAll { $0.source == source && drop.contains($0.id) }
            }
        }
        return dropped
    }

    /// The newest record with `id`, from either source.
    public func record(id: String) -> TaskRecord? {
        records.last { $0.id == id }
    }

    /// The whole-text files the history refers to, for pruning files it no longer keeps.
    public var textFileNames: Set<String> {
        Set(records.map { TaskText.fileName(source: $0.source, id: $0.id) })
    }

    /// Tasks still `running` when the daemon stopped did not finish (protocol-bluetooth §1: `interrupted`).
    public mutating func markRunningInterrupted(atMs: Int64) {
        for index in records.indices where records[index].state == .running || records[index].state == .posting {
            if records[index].source == .bluetooth || records[index].state == .running {
                records[index].finish(ok: false, output: records[index].output ?? "", error: "interrupted", atMs: atMs, state: .interrupted)
            }
        }
    }

    public var json: JSONValue { ["tasks": .array(records.map(\.json))] }

    public static func from(json value: JSONValue) -> TaskHistory? {
        guard let array = value["tasks"]?.arrayValue else { return nil }
        var records: [TaskRecord] = []
        for item in array {
            guard let record = TaskRecord.from(json: item) else { return nil }
            records.append(record)
        }
        return TaskHistory(records: records)
    }
}

/// The whole prompt and answer of one task, each cut at `limitBytes` of UTF-8 (on a
/// character boundary) with the size it had, kept in a state file of its own
/// (`fileName`) so that `tasks show ID` can print them whole while `tasks` lists previews.
public struct TaskText: Sendable, Equatable {
    /// Per text: a prompt or answer larger than this is kept cut, with a note of its size.
    public static let limitBytes = 64 * 1024
    /// A file is two texts at their limit, JSON-escaped at worst (six bytes each), plus keys.
    public static let maxFileBytes = 2 * 6 * limitBytes + 4096

    public private(set) var prompt: String
    /// The prompt's whole size in UTF-8 bytes, before any cut.
    public private(set) var promptBytes: Int
    public private(set) var output: String?
    public private(set) var outputBytes: Int?

    public init(prompt: String, output: String? = nil) {
        self.prompt = TaskText.cut(prompt)
        promptBytes = prompt.utf8.count
        if let output { setOutput(output) }
    }

    public mutating func setOutput(_ output: String) {
        self.output = TaskText.cut(output)
        outputBytes = output.utf8.count
    }

    public var promptCut: Bool { promptBytes > prompt.utf8.count }
    public var outputCut: Bool { (outputBytes ?? 0) > (output?.utf8.count ?? 0) }

    /// The longest prefix of `text` of at most `limit` UTF-8 bytes that ends between characters.
    public static func cut(_ text: String, limit: Int = TaskText.limitBytes) -> String {
        guard text.utf8.count > limit else { return text }
        var end = text.startIndex
        var bytes = 0
        for index in text.indices {
            let next = text.index(after: index)
            let size = text.utf8.distance(from: index, to: next)
            if bytes + size > limit { break }
            bytes += size
            end = next
        }
        return String(text[..<end])
    }

    /// The state file of one task's text: the name has one length whatever the id.
    public static func fileName(source: TaskRecord.Source, id: String) -> String {
        "task-text-\(source.rawValue)-sha256.\(SHA256.hex(SHA256.digest(Array(id.utf8)))).json"
    }

    /// Whether a state file's name is one of `fileName`'s.
    public static func isFileName(_ name: String) -> Bool {
        name.hasPrefix("task-text-") && name.hasSuffix(".json")
    }

    public var json: JSONValue {
        var object = JSONObject([("prompt", .string(prompt)), ("promptBytes", .int(Int64(promptBytes)))])
        if let output, let outputBytes {
            object["output"] = .string(output)
            object["outputBytes"] = .int(Int64(outputBytes))
        }
        return .object(object)
    }

    /// Decodes `json`; nil for anything else (wrong types, sizes that do not fit, texts
    /// over the limit), which the daemon treats as no text kept.
    public static func from(json value: JSONValue) -> TaskText? {
        guard let prompt = value["prompt"]?.stringValue, let promptBytes = value["promptBytes"]?.intValue,
            prompt.utf8.count <= limitBytes, promptBytes >= Int64(prompt.utf8.count), promptBytes <= Int64(Int32.max)
        else { return nil }
        var text = TaskText(prompt: prompt)
        text.promptBytes = Int(promptBytes)
        switch (value["output"], value["outputBytes"]) {
        case (nil, nil): break
        case (.string(let output)?, let bytes?):
            guard let bytes = bytes.intValue, output.utf8.count <= limitBytes, bytes >= Int64(output.utf8.count),
                bytes <= Int64(Int32.max)
            else { return nil }
            text.output = output
            text.outputBytes = Int(bytes)
        default: return nil
        }
        return text
    }
}
