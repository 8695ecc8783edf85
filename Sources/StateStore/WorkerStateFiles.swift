#if canImport(Glibc)
import Glibc
#endif
import Posix
import WorkerCore

/// A state file that could not be used and was moved aside (service §1.3: never refuse to
/// start over it, never drop it silently).
public struct RecoveredStateFile: Sendable, Equatable {
    public var file: String
    public var movedTo: String
    public var problem: String
    public var timeMs: Int64

    public var json: JSONValue {
        ["file": .string(file), "movedTo": .string(movedTo), "problem": .string(problem), "time": .string(formatUTC(milliseconds: timeMs))]
    }
}

/// The typed files of the state directory: mode, event log, agent id.
public struct WorkerStateFiles: Sendable {
    public static let modeFile = "mode.json"
    public static let eventsFile = "events.json"
    public static let agentIDFile = "agent-id"
    public static let policyFile = "policy.json"
    public static let tasksFile = "tasks.json"
    public static let meshTokenFile = "mesh-token"
    /// The model a coordinator switched this worker to (protocol-coordinator §7).
    public static let activeModelFile = "active-model.json"
    /// What the coordinator's behaviour monitor has seen of this worker in the last hour.
    public static let conductFile = "conduct.json"

    /// No state file of ours is legitimately larger (the journal and outbox have limits
    /// of their own); a bigger one is corrupt.
    public static let maxStateFileBytes = 4 * 1_048_576

    public let directory: StateDirectory
    public init(directory: StateDirectory) { self.directory = directory }

    public enum Loaded<T: Sendable>: Sendable {
        case absent
        case loaded(T)
        case recovered(RecoveredStateFile)
    }

    /// Reads and decodes one state file; a file that cannot be read or decoded is
    /// quarantined and reported, and the caller starts from its default.
    public func load<T: Sendable>(
        _ name: String, nowMs: Int64, limit: Int = WorkerStateFiles.maxStateFileBytes,
        decode: ([UInt8]) -> Result<T, StateFileProblem>
    ) -> Loaded<T> {
        let problem: String
        do {
            guard let bytes = try directory.read(name, limit: limit) else { return .absent }
            switch decode(bytes) {
            case .success(let value): return .loaded(value)
            case .failure(let why): problem = why.message
            }
        } catch {
            problem = "cannot be read: \(error)"
        }
        do {
            let movedTo = try directory.quarantine(name, nowMs: nowMs)
            return .recovered(RecoveredStateFile(file: name, movedTo: movedTo, problem: problem, timeMs: nowMs))
        } catch {
            return .recovered(RecoveredStateFile(file: name, movedTo: "", problem: "\(problem); and moving it aside failed: \(error)", timeMs: nowMs))
        }
    }

    /// `load` for JSON files decoded by `decode`.
    public func loadJSON<T: Sendable>(
        _ name: String, nowMs: Int64, limit: Int = WorkerStateFiles.maxStateFileBytes,
        decode: (JSONValue) -> T?
    ) -> Loaded<T> {
        load(name, nowMs: nowMs, limit: limit) { bytes in
            do {
                let value = try JSON.parse(bytes)
                if let decoded = decode(value) { return .success(decoded) }
                return .failure(StateFileProblem("valid JSON but not the expected content"))
            } catch {
                return .failure(StateFileProblem("not valid JSON: \(error)"))
            }
        }
    }

    /// The content of the mode file.
    public static func modeBytes(_ state: ModeState) -> [UInt8] {
        Array((state.json.serialized + "\n").utf8)
    }

    /// The content of the event log's file.
    public static func eventsBytes(_ log: EventLog) -> [UInt8] {
        // One event per line inside the array keeps the file readable with less/grep.
        var text = "{\"nextSeq\":\(log.nextSeq),\"events\":[\n"
        for (i, event) in log.events.enumerated() {
            text += event.json.serialized
            text += i + 1 < log.events.count ? ",\n" : "\n"
        }
        text += "]}\n"
        return Array(text.utf8)
    }

    /// The content of the policy overrides' file.
    public static func policyBytes(_ overrides: PolicyOverrides) -> [UInt8] {
        Array((overrides.json.serialized + "\n").utf8)
    }

    /// The content of the active model's file.
    public static func activeModelBytes(_ active: ActiveModel) -> [UInt8] {
        Array((active.json.serialized + "\n").utf8)
    }

    /// The content of the conduct record's file.
    public static func conductBytes(_ conduct: CoordinatorConduct) -> [UInt8] {
        Array((conduct.json.serialized + "\n").utf8)
    }

    /// The content of the task history's file.
    public static func tasksBytes(_ history: TaskHistory) -> [UInt8] {
        Array((history.json.serialized + "\n").utf8)
    }

    /// The content of the agent id's file.
    public static func agentIDBytes(_ id: String) -> [UInt8] { Array((id + "\n").utf8) }
    /// Readable by anyone: the id is shown to coordinators anyway.
    public static let agentIDMode: mode_t = 0o644
    /// The mesh token is a credential.
    public static let meshTokenMode: mode_t = 0o600

    public func saveMode(_ state: ModeState) throws {
        try directory.write(WorkerStateFiles.modeFile, WorkerStateFiles.modeBytes(state))
    }

    public func saveEvents(_ log: EventLog) throws {
        try directory.write(WorkerStateFiles.eventsFile, WorkerStateFiles.eventsBytes(log))
    }

    public func savePolicy(_ overrides: PolicyOverrides) throws {
        try directory.write(WorkerStateFiles.policyFile, WorkerStateFiles.policyBytes(overrides))
    }

    public func saveTasks(_ history: TaskHistory) throws {
        try directory.write(WorkerStateFiles.tasksFile, WorkerStateFiles.tasksBytes(history))
    }

    /// The mesh token is a credential: 0600.
    public func saveMeshToken(_ token: String?) throws {
        if let token {
            try directory.write(WorkerStateFiles.meshTokenFile, Array(token.utf8), mode: WorkerStateFiles.meshTokenMode)
        } else {
            try directory.remove(WorkerStateFiles.meshTokenFile)
        }
    }

    /// `saveMeshToken` through the writer's thread; returns once durable.
    public static func saveMeshToken(_ token: String?, with writer: DurableWriter) async throws {
        if let token {
            try await writer.write(WorkerStateFiles.meshTokenFile, mode: WorkerStateFiles.meshTokenMode, Array(token.utf8))
        } else {
            try await writer.remove(WorkerStateFiles.meshTokenFile)
        }
    }

    public func loadMeshToken(nowMs: Int64) -> Loaded<String> {
        load(WorkerStateFiles.meshTokenFile, nowMs: nowMs, limit: 8192) { bytes in
            let token = String(decoding: bytes, as: UTF8.self)
            guard !token.isEmpty, token.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
                return .failure(StateFileProblem("not a usable mesh token"))
            }
            return .success(token)
        }
    }

    public func saveAgentID(_ id: String) throws {
        try directory.write(WorkerStateFiles.agentIDFile, WorkerStateFiles.agentIDBytes(id), mode: WorkerStateFiles.agentIDMode)
    }

    public func loadAgentID(nowMs: Int64) -> Loaded<String> {
        load(WorkerStateFiles.agentIDFile, nowMs: nowMs, limit: 4096) { bytes in
            let text = String(decoding: bytes, as: UTF8.self)
            let id = text.hasSuffix("\n") ? String(text.dropLast()) : text
            if let why = AgentID.validationProblem(id) { return .failure(StateFileProblem("not a valid agent id: \(why)")) }
            return .success(id)
        }
    }
}

/// Why a state file's content is unusable.
public struct StateFileProblem: Error, Sendable {
    public var message: String
    public init(_ message: String) { self.message = message }
}
