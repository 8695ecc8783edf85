/// One task the worker ran or is running, coordinator or Bluetooth (docs/reference/protocol-coordinator.md, protocol-bluetooth §1, `tasks`).
public struct TaskRecord: Sendable, Equatable {
    public enum Source: String, Sendable { case coordinator, bluetooth }
    /// `cancelled`: stopped at its Bluetooth client's request, or because the client left (protocol-bluetooth §2).
    public enum State: String, Sendable { case running, posting, done, failed, interrupted, cancelled
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

    /// Prompts and outputs are kept short in the history; the full text went to its requester.
    public static let previewLimit = 500

    public init(id: String, source: Source, origin: String, prompt: String, startedAtMs: Int64, state: State = .running) {
        self.id = id
        self.source = source
        self.origin = origin
        self.prompt = String(prompt.prefix(TaskRecord.previewLimit))
        self.startedAtMs = startedAtMs
        self.state = state
    }

    public var json: JSONValue {
        var object = JSONObject([("id", .string(id)), ("source", .string(source.rawValue)), ("origin", .string(origin)),
                                 ("prompt", .string(prompt)), ("startedAtMs", .int(startedAtMs)),
                                 ("started", .string(formatUTC(milliseconds: startedAtMs))), ("state", .string(state.rawValue))])
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

    /// Inserts or replaces (by source and id) and trims each source to its newest entries.
    public mutating func upsert(_ record: TaskRecord) {
        if let index = records.firstIndex(where: { $0.id == record.id && $0.source == record.source }) {
            records[index] = record
        } else {
            records.append(record)
        }
        for source in [TaskRecord.Source.coordinator, .bluetooth] {
            let mine = records.filter { $0.source == source }
            if mine.count > TaskHistory.keepPerSource {
                let drop = Set(mine.prefix(mine.count - TaskHistory.keepPerSource).map(\.id))
                records.removeAll { $0.source == source && drop.contains($0.id) }
            }
        }
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
