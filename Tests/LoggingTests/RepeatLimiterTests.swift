import Logging
import Testing

/// The repeat limiter behind the daemon's stderr: a loop logging the same lines forever
/// (issue 12 §6: 129 million lines in 83 minutes) must cost a count, not the disk.
@Suite struct RepeatLimiterTests {
    static let second: UInt64 = 1_000_000_000

    @Test func aLineRepeatedPastTheBurstIsDroppedUntilItsWindowEnds() {
        var limiter = RepeatLimiter(burst: 3, windowNanoseconds: 10 * Self.second)
        let admitted = (0..<100).map { i in limiter.admit(level: .notice, label: "bt", message: "starting", now: UInt64(i) * 1_000_000).admitted }
        #expect(admitted.filter { $0 }.count == 3)
        #expect(admitted.prefix(3).allSatisfy { $0 })
    }

    /// Found in the VM: two threads logging at once read the clock before the lock, so
    /// the later reader can come in with the older time. That crashed the proxy with an
    /// arithmetic overflow (a window's age went negative); it must count as "now".
    @Test func aRecordWithAnOlderTimeThanAnOpenWindowIsAdmittedWithoutCrashing() {
        var limiter = RepeatLimiter(burst: 2, windowNanoseconds: 10 * Self.second, capacity: 2)
        #expect(limiter.admit(level: .notice, label: "central", message: "woke", now: 5 * Self.second).admitted)
        #expect(limiter.admit(level: .notice, label: "central", message: "woke", now: 3 * Self.second).admitted)
        #expect(!limiter.admit(level: .notice, label: "central", message: "woke", now: 2 * Self.second).admitted)
        #expect(limiter.admit(level: .notice, label: "proxy", message: "piece", now: 6 * Self.second).admitted)
        // Past capacity, with an old time: the oldest window is closed and its count kept,
        // its age counted to the latest time seen (6 s), not to this record's 1 s.
        let other = limiter.admit(level: .info, label: "other", message: "x", now: 1 * Self.second)
        #expect(other.admitted)
        #expect(other.notes.count == 1 && other.notes[0].contains("repeated 1 more times in 1 s"), "\(other.notes)")
    }

    @Test func theNextLineAfterTheWindowCarriesTheCountOfWhatWasDropped() {
        var limiter = RepeatLimiter(burst: 2, windowNanoseconds: 10 * Self.second)
        for i in 0..<12 { _ = limiter.admit(level: .notice, label: "bt", message: "starting", now: UInt64(i)) }
        let later = limiter.admit(level: .info, label: "control", message: "something else", now: 11 * Self.second)
        #expect(later.admitted)
        #expect(later.notes.count == 1)
        let note = try! #require(later.notes.first)
        #expect(note.hasPrefix("<5>bt: last message repeated 10 more times"), "\(note)")
        #expect(note.hasSuffix(": starting\n"))
    }

    @Test func aCycleOfSeveralDistinctLinesIsLimitedLineByLine() {
        // The loop that was seen alternated three lines: no line equals the previous one.
        var limiter = RepeatLimiter(burst: 5, windowNanoseconds: 10 * Self.second)
        let cycle = ["starting the Bluetooth runtime", "bluetooth waiting: connecting to the system bus", "Bluetooth runtime stopped"]
        var written = 0
        for i in 0..<30_000 where limiter.admit(level: .notice, label: "bluetooth", message: cycle[i % 3], now: UInt64(i) * 1_000).admitted {
            written += 1
        }
        #expect(written == 15)
    }

    @Test func differentLinesAndLevelsAreCountedApart() {
        var limiter = RepeatLimiter(burst: 1, windowNanoseconds: 10 * Self.second)
        #expect(limiter.admit(level: .info, label: "a", message: "x", now: 0).admitted)
        #expect(limiter.admit(level: .warning, label: "a", message: "x", now: 1).admitted)
        #expect(limiter.admit(level: .info, label: "b", message: "x", now: 2).admitted)
        #expect(limiter.admit(level: .info, label: "a", message: "y", now: 3).admitted)
        #expect(!limiter.admit(level: .info, label: "a", message: "x", now: 4).admitted)
    }

    @Test func aLineIsWrittenAgainOnceItsWindowIsOverAndNothingWasDroppedMeansNoNote() {
        var limiter = RepeatLimiter(burst: 2, windowNanoseconds: Self.second)
        #expect(limiter.admit(level: .info, label: "a", message: "x", now: 0).admitted)
        let again = limiter.admit(level: .info, label: "a", message: "x", now: 2 * Self.second)
        #expect(again.admitted)
        #expect(again.notes.isEmpty)
    }

    @Test func beyondItsCapacityTheOldestWindowClosesWithItsNote() {
        var limiter = RepeatLimiter(burst: 1, windowNanoseconds: 100 * Self.second, capacity: 2)
        _ = limiter.admit(level: .info, label: "a", message: "first", now: 0)
        _ = limiter.admit(level: .info, label: "a", message: "first", now: 1)
        _ = limiter.admit(level: .info, label: "a", message: "second", now: 2)
        let third = limiter.admit(level: .info, label: "a", message: "third", now: 3)
        #expect(third.admitted)
        #expect(third.notes.count == 1)
        #expect(third.notes.first?.contains("repeated 1 more times") == true)
        #expect(third.notes.first?.hasSuffix(": first\n") == true)
        // "first" is forgotten, so it is written again.
        #expect(limiter.admit(level: .info, label: "a", message: "first", now: 4).admitted)
    }
}
