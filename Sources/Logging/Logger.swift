#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// Log levels with their syslog priorities, which journald reads from a `<N>` prefix.
public enum LogLevel: Int, Sendable, Comparable, CaseIterable {
    case debug = 7, info = 6, notice = 5, warning = 4, error = 3, critical = 2

    /// Lower syslog numbers are more severe; "a < b" means "a is less severe".
    public static func < (a: LogLevel, b: LogLevel) -> Bool { a.rawValue > b.rawValue }

    public init?(name: String) {
        switch name {
        case "debug": self = .debug
        case "info": self = .info
        case "notice": self = .notice
        case "warning": self = .warning
        case "error": self = .error
        case "critical": self = .critical
        default: return nil
        }
    }
}

/// Where log records go.
public protocol LogHandler: Sendable {
    func log(level: LogLevel, label: String, message: String, metadata: [(String, String)])
}

/// A minimum level shared by every copy of a logger, so a config reload (`log.level`)
/// reaches the loggers the daemon's parts already hold.
public final class LogLevelSetting: Sendable {
    private let raw: Atomic<Int>
    public init(_ level: LogLevel) { raw = Atomic(level.rawValue) }
    public var level: LogLevel { LogLevel(rawValue: raw.load(ordering: .relaxed)) ?? .info }
    public func set(_ level: LogLevel) { raw.store(level.rawValue, ordering: .relaxed) }
}

/// A logger value in the shape of swift-log: a label, a minimum level, a handler.
/// Messages are autoclosures, so a disabled debug line costs nothing. Metadata are the
/// record's structured fields (`event`, `mode`, `subtask`, …): key=value on a line,
/// `EDGECODER_<KEY>` fields in the journal.
public struct Logger: Sendable {
    public var label: String
    public var level: LogLevel
    public var handler: any LogHandler
    /// When set, the minimum level comes from here instead of `level`.
    public var sharedLevel: LogLevelSetting?

    public init(label: String, level: LogLevel = .info, handler: any LogHandler = StderrLogHandler()) {
        self.label = label
        self.level = level
        self.handler = handler
    }

    /// The same logger under another label (a part of the daemon).
    public func labeled(_ label: String) -> Logger {
        var copy = self
        copy.label = label
        return copy
    }

    /// The minimum level in force now.
    public var effectiveLevel: LogLevel { sharedLevel?.level ?? level }

    @inlinable
    public func log(_ level: LogLevel, _ message: @autoclosure () -> String, _ metadata: [(String, String)] = []) {
        guard level >= effectiveLevel else { return }
        handler.log(level: level, label: label, message: message(), metadata: metadata)
    }

    @inlinable public func debug(_ message: @autoclosure () -> String, _ metadata: [(String, String)] = []) { log(.debug, message(), metadata) }
    @inlinable public func info(_ message: @autoclosure () -> String, _ metadata: [(String, String)] = []) { log(.info, message(), metadata) }
    @inlinable public func notice(_ message: @autoclosure () -> String, _ metadata: [(String, String)] = []) { log(.notice, message(), metadata) }
    @inlinable public func warning(_ message: @autoclosure () -> String, _ metadata: [(String, String)] = []) { log(.warning, message(), metadata) }
    @inlinable public func error(_ message: @autoclosure () -> String, _ metadata: [(String, String)] = []) { log(.error, message(), metadata) }
}

/// Where the process's log records go, decided once at start (service §2).
public enum LogSink: Sendable, Equatable {
    /// stderr is journald's stream: structured records through sd_journal_sendv.
    case journal
    /// stderr is a terminal: plain lines, no `<N>` priority prefixes.
    case terminal
    /// Anywhere else (a file, a pipe, a stream another supervisor reads): `<N>` prefixes.
    case prefixed

    /// The choice, from the environment's `JOURNAL_STREAM` (`device:inode`), stderr's
    /// device and inode (nil when fstat failed) and whether stderr is a terminal. journald
    /// sets JOURNAL_STREAM for the stream it hands the service; a child that inherited
    /// the variable with stderr redirected elsewhere must not log to the journal.
    public static func choose(journalStream: String?, stderr: (device: UInt64, inode: UInt64)?, stderrIsTerminal: Bool) -> LogSink {
        if let journalStream, let stderr {
            let parts = journalStream.split(separator: ":", omittingEmptySubsequences: false)
            if parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]),
                device == stderr.device, inode == stderr.inode
            {
                return .journal
            }
        }
        return stderrIsTerminal ? .terminal : .prefixed
    }

    /// The choice for this process's fd 2 now.
    public static func current() -> LogSink {
        var info = stat()
        let identity: (device: UInt64, inode: UInt64)? = fstat(2, &info) == 0 ? (UInt64(info.st_dev), UInt64(info.st_ino)) : nil
        let stream = getenv("JOURNAL_STREAM").map { String(cString: $0) }
        return choose(journalStream: stream, stderr: identity, stderrIsTerminal: isatty(2) == 1)
    }
}

/// A record as native journal fields (`KEY=value`), what sd_journal_sendv sends: MESSAGE
/// (`label: message`, as the line had it), PRIORITY, SYSLOG_IDENTIFIER, the part of the
/// daemon as EDGECODER_COMPONENT, and each metadata key as `EDGECODER_<KEY>`.
public enum JournalFields {
    public static func encode(
        level: LogLevel, label: String, message: String, metadata: [(String, String)],
        identifier: String
    ) -> [String] {
        var fields = [
            "MESSAGE=\(label): \(message)",
            "PRIORITY=\(level.rawValue)",
            "SYSLOG_IDENTIFIER=\(identifier)",
            "EDGECODER_COMPONENT=\(label)",
        ]
        for (key, value) in metadata {
            guard let name = fieldName(key) else { continue }
            fields.append("\(name)=\(value)")
        }
        return fields
    }

    /// `EDGECODER_` and the key in journald's alphabet (A–Z, 0–9, `_`; at most 64
    /// bytes); nil for a key with nothing left.
    public static func fieldName(_ key: String) -> String? {
        var name = ""
        for scalar in key.unicodeScalars {
            switch scalar {
            case "a"..."z": name.unicodeScalars.append(Unicode.Scalar(scalar.value - 32)!)
            case "A"..."Z", "0"..."9": name.unicodeScalars.append(scalar)
            default: if !name.isEmpty && !name.hasSuffix("_") { name += "_" }
            }
        }
        while name.hasSuffix("_") { name.removeLast() }
        guard !name.isEmpty else { return nil }
        return String(("EDGECODER_" + name).prefix(64))
    }
}

/// Formats one record as a single line: `<6>label: message key=value` (without the
/// `<6>` for a terminal). Newlines in the message are escaped so one record is always
/// one journal entry.
public func formatLogLine(level: LogLevel, label: String, message: String, metadata: [(String, String)], prefixed: Bool = true) -> String {
    var line = (prefixed ? "<\(level.rawValue)>" : "") + "\(label): "
    func escaped(_ text: String) -> String {
        var out = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            default: out.unicodeScalars.append(scalar.value < 0x20 ? "?" : scalar)
            }
        }
        return out
    }
    line += escaped(message)
    for (key, value) in metadata {
        let v = escaped(value)
        line += " \(key)=" + (v.contains(" ") || v.isEmpty ? "\"\(v)\"" : v)
    }
    return line + "\n"
}

/// Writes records to stderr with one write(2) each, so lines from threads never interleave.
/// Repeats of one line are limited (see `RepeatLimiter`): a loop that logs the same lines
/// forever fills the journal with counts, not with gigabytes.
public struct StderrLogHandler: LogHandler {
    private let limiter: SharedRepeatLimiter?
    private let prefixed: Bool
    private let clock: Bool

    /// `repeats: nil` writes every record (the command-line tools' one-shot output).
    /// `prefixed`: the `<N>` priority prefixes, which journald and syslog read and a
    /// person at a terminal does not need (default: unless stderr is a terminal).
    public init(
        repeats: RepeatLimiter? = RepeatLimiter(), prefixed: Bool = LogSink.current() != .terminal,
        clock: Bool = StderrLogHandler.clockFromEnvironment
    ) {
        limiter = repeats.map(SharedRepeatLimiter.init)
        self.prefixed = prefixed
        self.clock = clock
    }

    /// `EDGECODER_LOG_CLOCK=1`: every line carries the wall clock it was logged at, in
    /// seconds with microseconds (`[1796301365.817901]` after the priority), to follow one
    /// request through the daemon and the proxy (the BlueZ VM suite's stamped logs). The
    /// journal stamps its records itself; this is for stderr going anywhere else.
    public static let clockFromEnvironment = getenv("EDGECODER_LOG_CLOCK").map { String(cString: $0) == "1" } ?? false

    public func log(level: LogLevel, label: String, message: String, metadata: [(String, String)]) {
        var line = formatLogLine(level: level, label: label, message: message, metadata: metadata, prefixed: prefixed)
        if clock {
            var now = timespec()
            clock_gettime(CLOCK_REALTIME, &now)
            line = Self.stamped(line, prefixed: prefixed, seconds: Int(now.tv_sec), nanoseconds: Int(now.tv_nsec))
        }
        guard let limiter else { return Self.write(line) }
        let (notes, admitted) = limiter.admit(level: level, label: label, message: message, now: monotonicNow())
        for note in notes { Self.write(prefixed ? note.line : note.plainLine) }
        if admitted { Self.write(line) }
    }

    /// `line` with `[seconds.micros] ` after its `<N>` priority (syslog and journald read
    /// the priority only at the very start), or first when it has none.
    public static func stamped(_ line: String, prefixed: Bool, seconds: Int, nanoseconds: Int) -> String {
        let stamp = "[\(seconds).\(String(nanoseconds / 1_000 + 1_000_000).dropFirst())] "
        var line = line
        let cut = prefixed ? line.firstIndex(of: ">").map(line.index(after:)) ?? line.startIndex : line.startIndex
        line.insert(contentsOf: stamp, at: cut)
        return line
    }

    /// Writes one line to fd 2 in one write(2).
    public static func write(_ line: String) {
        var bytes = Array(line.utf8)
        _ = bytes.withUnsafeMutableBytes { Glibc.write(2, $0.baseAddress, $0.count) }
    }

    func monotonicNow() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }
}

/// One limiter shared by every copy of a handler (loggers are values, copied per label).
public final class SharedRepeatLimiter: Sendable {
    private let state: Mutex<RepeatLimiter>
    public init(_ limiter: RepeatLimiter) { state = Mutex(limiter) }
    public func admit(level: LogLevel, label: String, message: String, now: UInt64) -> (notes: [RepeatLimiter.Note], admitted: Bool) {
        state.withLock { $0.admitNotes(level: level, label: label, message: message, now: now) }
    }

    /// CLOCK_MONOTONIC in nanoseconds, the limiter's time.
    public static func now() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }
}

/// Lets each distinct line (level, label, message) through `burst` times per window and
/// counts the rest; once a window with dropped lines is over, one note says how many
/// were dropped ("… repeated N more times"). Catches cycles of several lines too, which
/// a "same as the previous line" rule would not. Pure: time comes in as an argument.
public struct RepeatLimiter: Sendable {
    public var burst: Int
    public var windowNanoseconds: UInt64
    /// Distinct lines tracked at once; the oldest window is closed early past this.
    public var capacity: Int

    private struct Key: Hashable {
        var level: LogLevel
        var label: String
        var message: String
    }
    private struct Window {
        var startedAt: UInt64
        var count: Int
        var dropped: Int
    }
    private var windows: [Key: Window] = [:]
    /// The latest time seen. Threads read the clock before they take the limiter's lock,
    /// so a record can come in with a time older than a window opened by another thread
    /// just before: it counts as this time, never as a negative age (a UInt64 underflow
    /// that would stop the process).
    private var latest: UInt64 = 0

    public init(burst: Int = 10, windowNanoseconds: UInt64 = 30_000_000_000, capacity: Int = 64) {
        self.burst = burst
        self.windowNanoseconds = windowNanoseconds
        self.capacity = capacity
    }

    /// A note that lines were dropped, as a record of its own.
    public struct Note: Sendable, Equatable {
        public var level: LogLevel
        public var label: String
        public var message: String
        public var line: String { formatLogLine(level: level, label: label, message: message, metadata: []) }
        public var plainLine: String { formatLogLine(level: level, label: label, message: message, metadata: [], prefixed: false) }
    }

    /// Notes to write first (windows that ended with dropped lines), and whether this
    /// record itself is written.
    public mutating func admit(level: LogLevel, label: String, message: String, now: UInt64) -> (notes: [String], admitted: Bool) {
        let (notes, admitted) = admitNotes(level: level, label: label, message: message, now: now)
        return (notes.map(\.line), admitted)
    }

    /// `admit`, with the notes as records (the journal sends them as fields).
    public mutating func admitNotes(level: LogLevel, label: String, message: String, now clock: UInt64) -> (notes: [Note], admitted: Bool) {
        latest = max(latest, clock)
        let now = latest
        var notes: [Note] = []
        for (key, window) in windows where now - window.startedAt >= windowNanoseconds {
            if let note = Self.note(key, window, now: now) { notes.append(note) }
            windows.removeValue(forKey: key)
        }
        let key = Key(level: level, label: label, message: message)
        if var window = windows[key] {
            window.count += 1
            let admitted = window.count <= burst
            if !admitted { window.dropped += 1 }
            windows[key] = window
            return (notes, admitted)
        }
        if windows.count >= capacity, let oldest = windows.min(by: { $0.value.startedAt < $1.value.startedAt }) {
            if let note = Self.note(oldest.key, oldest.value, now: now) { notes.append(note) }
            windows.removeValue(forKey: oldest.key)
        }
        windows[key] = Window(startedAt: now, count: 1, dropped: 0)
        return (notes, true)
    }

    private static func note(_ key: Key, _ window: Window, now: UInt64) -> Note? {
        guard window.dropped > 0 else { return nil }
        let seconds = (now - window.startedAt + 500_000_000) / 1_000_000_000
        return Note(
            level: key.level, label: key.label,
            message: "last message repeated \(window.dropped) more times in \(seconds) s (not logged): \(key.message)")
    }
}

/// Keeps records in memory, for tests to read.
public final class MemoryLogHandler: LogHandler {
    public struct Record: Sendable, Equatable {
        public var level: LogLevel
        public var label: String
        public var message: String
        public var metadata: [String: String] = [:]
    }
    private let storage = Mutex<[Record]>([])
    public init() {}
    public func log(level: LogLevel, label: String, message: String, metadata: [(String, String)]) {
        storage.withLock {
            $0.append(
                Record(
                    level: level, label: label, message: message,
                    metadata: Dictionary(metadata, uniquingKeysWith: { $1 })))
        }
    }
    public var records: [Record] { storage.withLock { $0 } }
}
