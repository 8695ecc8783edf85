import Posix

/// The machine's monotonic clock, sleeps and chance, with a wall clock the test sets: the
/// daemon records fixed times while the power policy's hysteresis runs on real time.
struct TestWallClock: WorkerClock {
    let wall: @Sendable () -> Int64

    init(_ wall: @escaping @Sendable () -> Int64) {
        self.wall = wall
    }

    func monotonicMs() -> Int64 { SystemClock().monotonicMs() }

    func wallMs() -> Int64 { wall() }

    func sleep(milliseconds: Int64) async throws { try await SystemClock().sleep(milliseconds: milliseconds) }

    func random(in range: ClosedRange<Int64>) -> Int64 { SystemClock().random(in: range) }
}
