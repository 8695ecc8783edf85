/// The one backoff of the worker: the pause before the next try after `failures` failures
/// in a row, doubling from `baseMs` up to `capMs`, with a jitter that says how much of it
/// is drawn at random. Used by the coordinator link (full jitter: a fleet that lost its
/// coordinator does not come back in lock-step), the proxy's Bluetooth link (up to half
/// again) and the loops whose wait itself fails (none: `FailureBackoff`).
public struct Backoff: Sendable, Equatable {
    public enum Jitter: Sendable, Equatable {
        /// Exactly the ceiling.
        case none
        /// Uniform in [0, ceiling] (AWS's "full jitter").
        case full
        /// The ceiling plus uniform [0, ceiling / 2].
        case upToHalf
    }

    public var baseMs: Int64
    public var capMs: Int64
    public var jitter: Jitter

    public init(baseMs: Int64 = 1_500, capMs: Int64 = 60_000, jitter: Jitter = .full) {
        self.baseMs = baseMs
        self.capMs = capMs
        self.jitter = jitter
    }

    /// The pause without jitter after the n-th consecutive failure (n ≥ 1; less counts as 1).
    public func ceiling(failures: Int) -> Int64 {
        let exponent = min(max(failures - 1, 0), 30)
        // Compared before shifting: a base near Int64.max shifted would lose its high bits.
        if baseMs > capMs >> exponent { return capMs }
        return baseMs << exponent
    }

    /// The pause after the n-th consecutive failure; `random` draws from a range (injected:
    /// the clock's generator in the daemon, a seeded one in tests).
    public func delay(failures: Int, random: (ClosedRange<Int64>) -> Int64) -> Int64 {
        let ceiling = ceiling(failures: failures)
        switch jitter {
        case .none: return ceiling
        case .full: return random(0...ceiling)
        case .upToHalf: return ceiling + random(0...(ceiling / 2))
        }
    }
}
