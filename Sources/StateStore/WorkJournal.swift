#if canImport(Glibc)
import Glibc
#endif
import Posix
import WorkerCore

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
