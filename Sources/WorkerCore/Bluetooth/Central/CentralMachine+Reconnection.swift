extension CentralMachine {
    /// When the next attempt at a link may start: each failed attempt since the last
    /// connection doubles the pause (from 1 s up to `maxBackoffMs`, plus up to half again
    /// at random); a connection starts the count over.
    struct Reconnection: Sendable, Equatable {
        let backoff: Backoff
        /// Failed attempts since the last connection: they set the pause before the next one.
        private(set) var failures = 0
        private(set) var nextAttemptAtMs: Int64 = 0
        /// The jitter's source, seeded by the machine's creator (tests use a constant).
        private var random: SplitMix64

        init(maxBackoffMs: Int64, seed: UInt64) {
            backoff = Backoff(baseMs: 1_000, capMs: maxBackoffMs, jitter: .upToHalf)
            random = SplitMix64(seed: seed)
        }

        /// The pause the next failure sets, without its jitter (for the log line saying it).
        var nextPauseCeilingMs: Int64 { backoff.ceiling(failures: failures + 1) }

        /// An attempt failed or a link was lost at `now`: the next attempt waits the backoff.
        mutating func failed(now: Int64) {
            failures += 1
            nextAttemptAtMs =
                now
                + backoff.delay(failures: failures) { range in
                    range.lowerBound + Int64(random.next() % UInt64(range.upperBound - range.lowerBound + 1))
                }
        }

        mutating func connected() { failures = 0 }
    }
}
