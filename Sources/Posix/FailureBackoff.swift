#if canImport(Glibc)
import Glibc
#endif
import WorkerCore

/// The pause of a loop whose wait itself keeps failing (poll(2), curl_multi_poll): 10 ms,
/// doubling to 1 s while the failure persists (the one `Backoff`, no jitter), so a broken
/// wait never spins a core; and which failure to log, so a persistent one is said once,
/// not a hundred times a second.
public struct FailureBackoff: Sendable, Equatable {
    static let backoff = Backoff(baseMs: 10, capMs: 1_000, jitter: .none)
    public static let firstPauseNanoseconds = UInt64(backoff.ceiling(failures: 1)) * 1_000_000
    public static let longestPauseNanoseconds = UInt64(backoff.capMs) * 1_000_000

    /// Failures in a row so far.
    public private(set) var failures = 0

    public init() {}

    /// Counts a failure and returns the pause before the next try; `isFirst` is true for
    /// the first failure of a run, the one to log.
    public mutating func failed() -> (pauseNanoseconds: UInt64, isFirst: Bool) {
        failures += 1
        return (UInt64(Self.backoff.ceiling(failures: failures)) * 1_000_000, failures == 1)
    }

    /// Counts a success; returns how many failures the run it ended had, if any (to log
    /// the recovery once).
    public mutating func succeeded() -> Int? {
        defer { failures = 0 }
        return failures > 0 ? failures : nil
    }
}

/// Blocks the calling thread (a loop's own thread, never a Swift-concurrency one).
public func sleepNanoseconds(_ nanoseconds: UInt64) {
    var request = timespec(tv_sec: Int(nanoseconds / 1_000_000_000), tv_nsec: Int(nanoseconds % 1_000_000_000))
    var remaining = timespec()
    while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
}
