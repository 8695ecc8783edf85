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
public struct StderrLogHandler: LogHandler {
    public init() {}
    public func log(level: LogLevel, label: String, message: String, metadata: [(String, String)]) {
        let line = formatLogLine(level: level, label: label, message: message, metadata: metadata)
        var bytes = Array(line.utf8)
        _ = bytes.withUnsafeMutableBytes { write(2, $0.baseAddress, $0.count) }
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
