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

/// A logger value in the shape of swift-log: a label, a minimum level, a handler.
/// Messages are autoclosures, so a disabled debug line costs nothing.
public struct Logger: Sendable {
    public var label: String
    public var level: LogLevel
    public var handler: any LogHandler

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

    @inlinable
    public func log(_ level: LogLevel, _ message: @autoclosure () -> String, _ metadata: [(String, String)] = []) {
        guard level >= self.level else { return }
        handler.log(level: level, label: label, message: message(), metadata: metadata)
    }

    @inlinable public func debug(_ message: @autoclosure () -> String, _ metadata: [(String, String)] = []) { log(.debug, message(), metadata) }
    @inlinable public func info(_ message: @autoclosure () -> String, _ metadata: [(String, String)] = []) { log(.info, message(), metadata) }
    @inlinable public func notice(_ message: @autoclosure () -> String, _ metadata: [(String, String)] = []) { log(.notice, message(), metadata) }
    @inlinable public func warning(_ message: @autoclosure () -> String, _ metadata: [(String, String)] = []) { log(.warning, message(), metadata) }
    @inlinable public func error(_ message: @autoclosure () -> String, _ metadata: [(String, String)] = []) { log(.error, message(), metadata) }
}

/// Formats one record as a single line: `<6>label: message key=value`. Newlines in the
/// message are escaped so one record is always one journal entry.
public func formatLogLine(level: LogLevel, label: String, message: String, metadata: [(String, String)]) -> String {
    var line = "<\(level.rawValue)>\(label): "
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

    /// `repeats: nil` writes every record (the command-line tools' one-shot output).
    public init(repeats: RepeatLimiter? = RepeatLimiter()) {
        limiter = repeats.map(SharedRepeatLimiter.init)
    }

    public func log(level: LogLevel, label: String, message: String, metadata: [(String, String)]) {
        let line = formatLogLine(level: level, label: label, message: message, metadata: metadata)
        guard let limiter else { return Self.write(line) }
        let (notes, admitted) = limiter.admit(level: level, label: label, message: message, now: monotonicNow())
        for note in notes { Self.write(note) }
        if admitted { Self.write(line) }
    }

    private static func write(_ line: String) {
        var bytes = Array(line.utf8)
        _ = bytes.withUnsafeMutableBytes { Glibc.write(2, $0.baseAddress, $0.count) }
    }

    private func monotonicNow() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }
}

/// One limiter shared by every copy of a handler (loggers are values, copied per label).
final class SharedRepeatLimiter: Sendable {
    private let state: Mutex<RepeatLimiter>
    init(_ limiter: RepeatLimiter) { state = Mutex(limiter) }
    func admit(level: LogLevel, label: String, message: String, now: UInt64) -> (notes: [String], admitted: Bool) {
        state.withLock { $0.admit(level: level, label: label, message: message, now: now) }
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

    public init(burst: Int = 10, windowNanoseconds: UInt64 = 30_000_000_000, capacity: Int = 64) {
        self.burst = burst
        self.windowNanoseconds = windowNanoseconds
        self.capacity = capacity
    }

    /// Notes to write first (windows that ended with dropped lines), and whether this
    /// record itself is written.
    public mutating func admit(level: LogLevel, label: String, message: String, now: UInt64) -> (notes: [String], admitted: Bool) {
        var notes: [String] = []
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

    private static func note(_ key: Key, _ window: Window, now: UInt64) -> String? {
        guard window.dropped > 0 else { return nil }
        let seconds = (now - window.startedAt + 500_000_000) / 1_000_000_000
        return formatLogLine(level: key.level, label: key.label,
                             message: "last message repeated \(window.dropped) more times in \(seconds) s (not logged): \(key.message)",
                             metadata: [])
    }
}

/// Keeps records in memory, for tests to read.
public final class MemoryLogHandler: LogHandler {
    public struct Record: Sendable, Equatable {
        public var level: LogLevel
        public var label: String
        public var message: String
    }
    private let storage = Mutex<[Record]>([])
    public init() {}
    public func log(level: LogLevel, label: String, message: String, metadata: [(String, String)]) {
        storage.withLock { $0.append(Record(level: level, label: label, message: message)) }
    }
    public var records: [Record] { storage.withLock { $0 } }
}
