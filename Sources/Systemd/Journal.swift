#if canImport(Glibc)
import Glibc
#endif
import CSystemd
import Logging
import Synchronization

/// The native journal protocol, over libsystemd's sd_journal_sendv: the only file that
/// touches CSystemd's journal calls.
public enum Journal {
    /// Sends one entry made of `KEY=value` fields (values may hold newlines: sd-journal
    /// sends those in its binary form). Returns 0, or a negative errno.
    public static func send(_ fields: [String]) -> Int32 {
        // One buffer for every field, so the iovecs point into memory that lives
        // for the whole call.
        var bytes: [UInt8] = []
        var ranges: [(offset: Int, count: Int)] = []
        for field in fields {
            ranges.append((bytes.count, field.utf8.count))
            bytes.append(contentsOf: field.utf8)
        }
        return bytes.withUnsafeMutableBytes { raw -> Int32 in
            var vectors = ranges.map { range in iovec(iov_base: raw.baseAddress.map { $0 + range.offset }, iov_len: range.count) }
            return vectors.withUnsafeMutableBufferPointer { sd_journal_sendv($0.baseAddress, Int32($0.count)) }
        }
    }
}

/// Log records as structured journal entries (service §2): `journalctl EDGECODER_EVENT=…`
/// finds them. Repeats are limited as on stderr. When journald does not take an entry
/// (its socket gone, a full buffer), the record goes to stderr as a prefixed line, and
/// the first such failure says so once.
public struct JournalLogHandler: LogHandler {
    public let identifier: String
    private let limiter: SharedRepeatLimiter?
    private let send: @Sendable ([String]) -> Int32
    private let fellBack = FallbackFlag()

    /// `send` is `Journal.send` except in tests.
    public init(
        identifier: String = "edgecoder-worker", repeats: RepeatLimiter? = RepeatLimiter(),
        send: @escaping @Sendable ([String]) -> Int32 = { Journal.send($0) }
    ) {
        self.identifier = identifier
        self.limiter = repeats.map(SharedRepeatLimiter.init)
        self.send = send
    }

    public func log(level: LogLevel, label: String, message: String, metadata: [(String, String)]) {
        if let limiter {
            let (notes, admitted) = limiter.admit(level: level, label: label, message: message, now: SharedRepeatLimiter.now())
            for note in notes { emit(level: note.level, label: note.label, message: note.message, metadata: []) }
            guard admitted else { return }
        }
        emit(level: level, label: label, message: message, metadata: metadata)
    }

    private func emit(level: LogLevel, label: String, message: String, metadata: [(String, String)]) {
        let rc = send(JournalFields.encode(level: level, label: label, message: message, metadata: metadata, identifier: identifier))
        guard rc < 0 else { return }
        if fellBack.setOnce() {
            StderrLogHandler.write(
                formatLogLine(
                    level: .warning, label: label,
                    message: "journald did not take a record (sd_journal_sendv: \(String(cString: strerror(-rc)))); writing lines to stderr instead",
                    metadata: []))
        }
        StderrLogHandler.write(formatLogLine(level: level, label: label, message: message, metadata: metadata))
    }
}

private final class FallbackFlag: Sendable {
    private let done = Atomic(false)
    /// True the first time only.
    func setOnce() -> Bool { !done.exchange(true, ordering: .relaxed) }
}

extension LogSink {
    /// The handler for this sink: the journal's, or stderr lines with or without prefixes.
    public func handler(repeats: RepeatLimiter? = RepeatLimiter()) -> any LogHandler {
        switch self {
        case .journal: return JournalLogHandler(repeats: repeats)
        case .terminal: return StderrLogHandler(repeats: repeats, prefixed: false)
        case .prefixed: return StderrLogHandler(repeats: repeats, prefixed: true)
        }
    }
}
