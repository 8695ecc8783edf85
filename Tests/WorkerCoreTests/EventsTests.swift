import Testing
@testable import WorkerCore

@Suite struct EventLogBounds {
    @Test func keepsOnlyTheNewestThousand() {
        var log = EventLog()
        for i in 0..<1_250 { log.append(EventDraft(kind: .modeChange, from: .off, to: .on, reason: "n\(i)"), timeMs: Int64(i)) }
        #expect(log.events.count == 1_000)
        #expect(log.events.first?.reason == "n250")
        #expect(log.events.last?.reason == "n1249")
        #expect(log.events.last?.seq == 1_250)
        #expect(log.nextSeq == 1_251)
    }

    @Test func sequenceNumbersSurviveAReload() throws {
        var log = EventLog(capacity: 3)
        for i in 0..<5 { log.append(EventDraft(kind: .daemonStarted, reason: "\(i)"), timeMs: 7) }
        let reloaded = try #require(EventLog.from(json: try JSON.parse(log.json.serialized), capacity: 3))
        #expect(reloaded == log)
        var next = reloaded
        #expect(next.append(EventDraft(kind: .daemonStopped, reason: "x"), timeMs: 8).seq == 6)
    }

    @Test func afterReturnsOnlyNewerEvents() {
        var log = EventLog()
        for i in 0..<5 { log.append(EventDraft(kind: .modeChange, reason: "\(i)"), timeMs: 1) }
        #expect(log.after(3).map(\.seq) == [4, 5])
        #expect(log.after(99).isEmpty)
    }

    @Test func aDamagedEntryRejectsTheWholeFile() throws {
        let text = #"{"nextSeq": 3, "events": [{"seq":1,"timeMs":1,"kind":"mode-change","reason":"a"}, {"seq":2,"kind":"bogus"}]}"#
        #expect(EventLog.from(json: try JSON.parse(text)) == nil)
    }

    @Test func formatsTimesInUTC() {
        #expect(formatUTC(milliseconds: 0) == "1970-01-01T00:00:00.000Z")
        #expect(formatUTC(milliseconds: 951_782_400_123) == "2000-02-29T00:00:00.123Z")
        #expect(formatUTC(milliseconds: 1_798_551_352_120) == "2026-12-29T13:35:52.120Z")
        #expect(formatUTC(milliseconds: -1) == "1969-12-31T23:59:59.999Z")
        #expect(fileStampUTC(milliseconds: 951_782_400_123) == "20000229T000000Z")
    }
}
