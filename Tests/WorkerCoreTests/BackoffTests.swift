import TestSupport
import Testing
import WorkerCore

/// The one backoff (#27): the coordinator link's full jitter is in CoordinatorProtocolTests;
/// here the other two jitters and the ceiling's bounds.
@Suite struct BackoffTests {
    @Test func withoutJitterTheDelayIsTheCeiling() {
        let backoff = Backoff(baseMs: 10, capMs: 1_000, jitter: .none)
        let delays = (1...9).map { n in
            backoff.delay(failures: n) { _ in
                Issue.record("drew at random"); return 0
            }
        }
        #expect(delays == [10, 20, 40, 80, 160, 320, 640, 1_000, 1_000])
    }

    @Test func upToHalfAddsAtMostHalfTheCeiling() {
        let backoff = Backoff(baseMs: 1_000, capMs: 30_000, jitter: .upToHalf)
        var ranges: [ClosedRange<Int64>] = []
        let delay = backoff.delay(failures: 3) { range in
            ranges.append(range); return range.upperBound
        }
        #expect(ranges == [0...2_000])
        #expect(delay == 6_000)
        var generator = SeededGenerator(seed: 3)
        for n in 1...12 {
            let ceiling = backoff.ceiling(failures: n)
            let draw = backoff.delay(failures: n) { Int64.random(in: $0, using: &generator) }
            #expect(draw >= ceiling && draw <= ceiling + ceiling / 2, "failure \(n): \(draw)")
        }
    }

    @Test func theCeilingNeverOverflowsAndCountsLessThanOneFailureAsOne() {
        let backoff = Backoff(baseMs: 1_500, capMs: 60_000)
        #expect(backoff.ceiling(failures: 0) == 1_500)
        #expect(backoff.ceiling(failures: -5) == 1_500)
        #expect(backoff.ceiling(failures: Int.max) == 60_000)
        let huge = Backoff(baseMs: Int64.max / 4, capMs: Int64.max, jitter: .none)
        #expect(huge.ceiling(failures: 40) > 0, "a base that would overflow shifted 30 times")
    }
}
