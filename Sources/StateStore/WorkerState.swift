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

/// The coordinator's journal and outbox (protocol-coordinator §5, "Nothing is lost"): one file per subtask,
/// `journal-sha256.<hash of the id>.json` written before it runs,
/// `outbox-sha256.<hash of the id>.json` before its result is posted; each removed only
/// once its successor exists or the post got a 2xx. The id is inside the file; the name
/// has one length whatever the id. Writes and removals go through `writer` and return
/// once durable.
public struct WorkJournal: Sendable {
    public let directory: StateDirectory
    /// Performs the journal's writes and removals off the caller's thread.
    public let writer: DurableWriter
    public init(writer: DurableWriter) {
        self.directory = writer.directory
        self.writer = writer
    }

    static let journalPrefix = "journal-"
    static let outboxPrefix = "outbox-"
    /// Legacy names (below) never hold a '.': this marker keeps the two schemes apart,
    /// so an id chosen to look like a hash can never name another subtask's file.
    static let hashMarker = "sha256."

    /// The file of `id` under `prefix`: a hash, so a hostile id can neither name another
    /// file nor make a name longer than NAME_MAX (ENAMETOOLONG looped the coordinator).
    public static func fileName(prefix: String, id: String) -> String {
        prefix + hashMarker + SHA256.hex(id.utf8) + ".json"
    }

    /// The name 0.1.0 used: the id with anything beyond [A-Za-z0-9_-]
    /// percent-encoded. Files found under it at start are read, and removed with the
    /// hashed one, so an upgrade loses nothing and reruns nothing.
    public static func legacyFileName(prefix: String, id: String) -> String {
        var out = prefix
        for byte in id.utf8 {
            let c = Character(Unicode.Scalar(byte))
            if c.isASCII && (c.isLetter || c.isNumber || c == "-" || c == "_") {
                out.append(c)
            } else {
                out += "%" + String(byte, radix: 16, uppercase: true)
            }
        }
        return out + ".json"
    }

    /// Raised before writing a file that its reader would refuse: the limits agree by
    /// construction, and this keeps them agreeing.
    public struct TooLarge: Error, Sendable, CustomStringConvertible {
        public var file: String
        public var bytes: Int
        public var limit: Int
        public var description: String { "\(file) would be \(bytes) bytes, over its limit of \(limit)" }
    }

    /// Removes a file under both names (the legacy one only where it could exist).
    private func remove(prefix: String, id: String) async throws {
        try await writer.remove(WorkJournal.fileName(prefix: prefix, id: id))
        let legacy = WorkJournal.legacyFileName(prefix: prefix, id: id)
        if legacy.utf8.count <= 255 && directory.exists(legacy) { try await writer.remove(legacy) }
    }

    public func record(_ entry: RecoveryPlan.JournalEntry) async throws {
        let name = WorkJournal.fileName(prefix: WorkJournal.journalPrefix, id: entry.subtask.id)
        let bytes = Array(entry.json.serialized.utf8)
        if bytes.count > RecoveryPlan.JournalEntry.maxStoredBytes {
            throw TooLarge(file: name, bytes: bytes.count, limit: RecoveryPlan.JournalEntry.maxStoredBytes)
        }
        try await writer.write(name, bytes)
    }

    /// Moves a finished subtask from the journal to the outbox: the outbox is written
    /// first, so a crash in between leaves both (the outbox wins at replay). What is
    /// stored (and returned, to be posted) is the result `bounded` to what is posted.
    @discardableResult
    public func complete(_ result: SubtaskResult) async throws -> SubtaskResult {
        let bounded = result.bounded
        let name = WorkJournal.fileName(prefix: WorkJournal.outboxPrefix, id: bounded.subtaskID)
        let bytes = Array(bounded.json.serialized.utf8)
        if bytes.count > SubtaskResult.maxStoredBytes { throw TooLarge(file: name, bytes: bytes.count, limit: SubtaskResult.maxStoredBytes) }
        try await writer.write(name, bytes)
        try await remove(prefix: WorkJournal.journalPrefix, id: bounded.subtaskID)
        return bounded
    }

    /// A claim given back unanswered: its journal entry goes and nothing is posted, so the
    /// coordinator re-queues the subtask for another agent.
    public func release(_ subtaskID: String) async throws {
        try await remove(prefix: WorkJournal.journalPrefix, id: subtaskID)
    }

    /// After a 2xx: the result is delivered. The journal entry goes too: a kill between
    /// `complete`'s two steps leaves both files, and a journal entry that outlived its
    /// delivered result would run the subtask again at the next start.
    public func delivered(_ subtaskID: String) async throws {
        try await remove(prefix: WorkJournal.journalPrefix, id: subtaskID)
        try await remove(prefix: WorkJournal.outboxPrefix, id: subtaskID)
    }

    /// Everything found at start; unreadable files are quarantined by the loader and reported.
    public func load(nowMs: Int64) -> (journal: [RecoveryPlan.JournalEntry], outbox: [SubtaskResult], recovered: [RecoveredStateFile]) {
        let files = WorkerStateFiles(directory: directory)
        var journal: [RecoveryPlan.JournalEntry] = []
        var outbox: [SubtaskResult] = []
        var recovered: [RecoveredStateFile] = []
        for name in directory.names() where name.hasSuffix(".json") {
            if name.hasPrefix(WorkJournal.journalPrefix) {
                switch files.loadJSON(
                    name, nowMs: nowMs, limit: WorkJournal.readLimit(name, RecoveryPlan.JournalEntry.maxStoredBytes),
                    decode: { RecoveryPlan.JournalEntry.from(json: $0) })
                {
                case .loaded(let entry): journal.append(entry)
                case .recovered(let file): recovered.append(file)
                case .absent: break
                }
            } else if name.hasPrefix(WorkJournal.outboxPrefix) {
                switch files.loadJSON(
                    name, nowMs: nowMs, limit: WorkJournal.readLimit(name, SubtaskResult.maxStoredBytes), decode: { SubtaskResult.from(json: $0) })
                {
                case .loaded(let result): outbox.append(result)
                case .recovered(let file): recovered.append(file)
                case .absent: break
                }
            }
        }
        // A subtask whose result is in the outbox has finished: its journal entry (left by
        // a kill between writing the outbox and removing the entry) must not run it again.
        let finished = Set(outbox.map(\.subtaskID))
        journal.removeAll { finished.contains($0.subtask.id) }
        return (journal, outbox, recovered)
    }

    /// A hashed name was written within `limit`; a legacy one may hold a whole subtask
    /// (up to coordinator.maxResponseBytes, 64 MiB) or a whole output (up to
    /// backend.maxOutputBytes, 16 MiB, escaped at worst six bytes a byte): still read,
    /// so an upgrade loses nothing.
    static func readLimit(_ name: String, _ limit: Int) -> Int {
        name.contains(hashMarker) ? limit : 6 * 16_777_216 + 65_536
    }

    public var outboxDepth: Int { directory.names().filter { $0.hasPrefix(WorkJournal.outboxPrefix) && $0.hasSuffix(".json") }.count }
}
