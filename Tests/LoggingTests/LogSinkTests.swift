#if canImport(Glibc)
import Glibc
#endif
import Logging
import Synchronization
import Systemd
import Testing

/// Where the daemon's records go (service §2): journald when stderr is its stream, plain
/// lines on a terminal, prefixed lines elsewhere.
@Suite struct LogSinkChoice {
    /// EDGECODER_LOG_CLOCK=1: the wall clock goes after the priority, which must stay the
    /// line's first bytes for journald and syslog; microseconds keep their leading zeros.
    @Test func aClockStampGoesAfterThePriorityWithMicroseconds() {
        let line = formatLogLine(level: .debug, label: "bluetooth", message: "write of 113 bytes", metadata: [])
        #expect(
            StderrLogHandler.stamped(line, prefixed: true, seconds: 1_796_301_365, nanoseconds: 17_901_999)
                == "<7>[1796301365.017901] bluetooth: write of 113 bytes\n")
        let plain = formatLogLine(level: .info, label: "proxy", message: "up", metadata: [], prefixed: false)
        #expect(StderrLogHandler.stamped(plain, prefixed: false, seconds: 5, nanoseconds: 0) == "[5.000000] proxy: up\n")
    }

    @Test func stderrThatIsJournaldsStreamGetsTheJournal() {
        #expect(LogSink.choose(journalStream: "64769:123456", stderr: (64769, 123456), stderrIsTerminal: false) == .journal)
    }

    @Test(arguments: [
        ("64769:123457", false, LogSink.prefixed),  // inherited from a parent whose stderr was the journal
        ("64769:123457", true, .terminal),
        ("garbage", false, .prefixed),
        ("64769", false, .prefixed),
        (":", false, .prefixed),
    ])
    func aJournalStreamThatIsNotStderrIsIgnored(stream: String, terminal: Bool, expected: LogSink) {
        #expect(LogSink.choose(journalStream: stream, stderr: (64769, 123456), stderrIsTerminal: terminal) == expected)
    }

    @Test func withoutJournalStreamATerminalGetsPlainLinesAndAnythingElsePrefixes() {
        #expect(LogSink.choose(journalStream: nil, stderr: (1, 2), stderrIsTerminal: true) == .terminal)
        #expect(LogSink.choose(journalStream: nil, stderr: (1, 2), stderrIsTerminal: false) == .prefixed)
        #expect(LogSink.choose(journalStream: "1:2", stderr: nil, stderrIsTerminal: false) == .prefixed)
    }

    @Test func aTerminalLineHasNoPriorityPrefix() {
        #expect(
            formatLogLine(level: .notice, label: "edgecoder-worker", message: "ready", metadata: [], prefixed: false) == "edgecoder-worker: ready\n")
        #expect(formatLogLine(level: .notice, label: "edgecoder-worker", message: "ready", metadata: []) == "<5>edgecoder-worker: ready\n")
    }
}

@Suite struct JournalFieldEncoding {
    @Test func aRecordBecomesMessagePriorityIdentifierAndTheEventsOwnKeys() {
        let fields = JournalFields.encode(
            level: .notice, label: "edgecoder-worker", message: "mode on -> bluetooth: network lost",
            metadata: [("event", "downgrade"), ("mode", "bluetooth"), ("from", "on")], identifier: "edgecoder-worker")
        #expect(
            fields == [
                "MESSAGE=edgecoder-worker: mode on -> bluetooth: network lost",
                "PRIORITY=5",
                "SYSLOG_IDENTIFIER=edgecoder-worker",
                "EDGECODER_COMPONENT=edgecoder-worker",
                "EDGECODER_EVENT=downgrade",
                "EDGECODER_MODE=bluetooth",
                "EDGECODER_FROM=on",
            ])
    }

    @Test func newlinesStayInTheValueBecauseTheNativeProtocolCarriesThem() {
        let fields = JournalFields.encode(level: .error, label: "c", message: "two\nlines", metadata: [], identifier: "x")
        #expect(fields.first == "MESSAGE=c: two\nlines")
    }

    @Test(arguments: [
        ("event", "EDGECODER_EVENT"), ("subtask", "EDGECODER_SUBTASK"), ("needs-restart", "EDGECODER_NEEDS_RESTART"),
        ("a.b c", "EDGECODER_A_B_C"), ("_x_", "EDGECODER_X"),
    ])
    func metadataKeysBecomeValidJournalFieldNames(key: String, name: String) {
        #expect(JournalFields.fieldName(key) == name)
    }

    @Test func aKeyWithNothingUsableIsDroppedAndLongOnesAreCut() {
        #expect(JournalFields.fieldName("--") == nil)
        #expect(JournalFields.fieldName(String(repeating: "k", count: 100))?.utf8.count == 64)
        let fields = JournalFields.encode(level: .info, label: "l", message: "m", metadata: [("ü", "v")], identifier: "x")
        #expect(fields.count == 4)
    }
}

/// The journal handler with its sender replaced: what it hands sd_journal_sendv.
final class SentFields: Sendable {
    private let entries = Mutex<[[String]]>([])
    func append(_ fields: [String]) { entries.withLock { $0.append(fields) } }
    var all: [[String]] { entries.withLock { $0 } }
}

@Suite struct JournalHandlerSends {
    @Test func eachRecordIsOneEntryWithItsFields() {
        let sent = SentFields()
        let logger = Logger(
            label: "coordinator",
            handler: JournalLogHandler(send: {
                sent.append($0); return 0
            }))
        logger.notice("subtask s1 done", [("subtask", "s1")])
        #expect(
            sent.all == [
                [
                    "MESSAGE=coordinator: subtask s1 done", "PRIORITY=5", "SYSLOG_IDENTIFIER=edgecoder-worker",
                    "EDGECODER_COMPONENT=coordinator", "EDGECODER_SUBTASK=s1",
                ]
            ])
    }

    @Test func repeatsAreLimitedAsOnStderr() {
        let sent = SentFields()
        let logger = Logger(
            label: "l",
            handler: JournalLogHandler(
                repeats: RepeatLimiter(burst: 2),
                send: {
                    sent.append($0); return 0
                }))
        for _ in 0..<50 { logger.info("same") }
        #expect(sent.all.count == 2)
    }
}
