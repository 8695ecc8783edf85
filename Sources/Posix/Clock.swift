/// Time and chance as a loop that waits and backs off sees them, injected so tests drive
/// backoff, cadences and timeouts with a manual clock instead of waiting for them.
public protocol WorkerClock: Sendable {
    /// Milliseconds on a clock that never jumps: durations and latencies.
    func monotonicMs() -> Int64
    /// Milliseconds since the Unix epoch: what files and `status` record.
    func wallMs() -> Int64
    /// Suspends for `milliseconds`; throws `CancellationError` when the task is cancelled.
    func sleep(milliseconds: Int64) async throws
    /// A number drawn uniformly from `range`: the jitter of a backoff.
    func random(in range: ClosedRange<Int64>) -> Int64
}

/// The machine's clocks and the system's random numbers.
public struct SystemClock: WorkerClock {
    public init() {}

    public func monotonicMs() -> Int64 { Int64(monotonicNanoseconds() / 1_000_000) }

    public func wallMs() -> Int64 { wallClockMilliseconds() }

    public func sleep(milliseconds: Int64) async throws {
        try await Task.sleep(nanoseconds: UInt64(max(0, milliseconds)) * 1_000_000)
    }

    public func random(in range: ClosedRange<Int64>) -> Int64 { Int64.random(in: range) }
}
