import Posix
import Synchronization

/// The clock a test hands to what it tests, of one of two kinds.
///
/// Manual (`TestClock()`): time moves only when the test says so; sleepers wait until
/// `advance` takes the time past their deadline; the jitter is a function the test picks.
///
/// Real time (`TestClock.realTime { … }`): the machine's monotonic clock, sleeps and chance,
/// with a wall clock the test sets: the daemon records fixed times while the power policy's
/// hysteresis runs on real time.
public final class TestClock: WorkerClock {
    private struct Sleeper {
        var deadline: Int64
        var duration: Int64
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var now: Int64 = 0
        var nextID = 0
        var sleepers: [Int: Sleeper] = [:]
        var cancelled: Set<Int> = []
        var jitterRanges: [ClosedRange<Int64>] = []
    }

    private let state = Mutex(State())
    private let wallOffset: Int64
    private let jitter: @Sendable (ClosedRange<Int64>) -> Int64
    /// The wall clock of a real-time clock; nil for a manual one.
    private let realTimeWall: (@Sendable () -> Int64)?

    /// A manual clock: monotonic time starts at 0, wall time at `wallMs`.
    public init(wallMs: Int64 = 1_750_000_000_000, jitter: @escaping @Sendable (ClosedRange<Int64>) -> Int64 = { $0.upperBound }) {
        self.wallOffset = wallMs
        self.jitter = jitter
        self.realTimeWall = nil
    }

    private init(wall: @escaping @Sendable () -> Int64) {
        self.wallOffset = 0
        self.jitter = { SystemClock().random(in: $0) }
        self.realTimeWall = wall
    }

    /// The machine's monotonic clock, sleeps and chance, with `wall` as the wall clock.
    public static func realTime(_ wall: @escaping @Sendable () -> Int64) -> TestClock { TestClock(wall: wall) }

    public func monotonicMs() -> Int64 {
        if realTimeWall != nil { return SystemClock().monotonicMs() }
        return state.withLock { $0.now }
    }

    public func wallMs() -> Int64 {
        if let realTimeWall { return realTimeWall() }
        return wallOffset + monotonicMs()
    }

    public func random(in range: ClosedRange<Int64>) -> Int64 {
        if realTimeWall != nil { return SystemClock().random(in: range) }
        state.withLock { $0.jitterRanges.append(range) }
        return jitter(range)
    }

    public func sleep(milliseconds: Int64) async throws {
        if realTimeWall != nil { return try await SystemClock().sleep(milliseconds: milliseconds) }
        if milliseconds <= 0 { return try Task.checkCancellation() }
        let id = state.withLock { state -> Int in
            state.nextID += 1
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let cancelled = state.withLock { state -> Bool in
                    if state.cancelled.remove(id) != nil { return true }
                    state.sleepers[id] = Sleeper(deadline: state.now + milliseconds, duration: milliseconds, continuation: continuation)
                    return false
                }
                if cancelled { continuation.resume(throwing: CancellationError()) }
            }
        } onCancel: {
            let sleeper = state.withLock { state -> Sleeper? in
                if let sleeper = state.sleepers.removeValue(forKey: id) { return sleeper }
                state.cancelled.insert(id)
                return nil
            }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Moves a manual clock's time forward and wakes every sleeper whose deadline has come.
    public func advance(by milliseconds: Int64) {
        precondition(realTimeWall == nil, "a real-time TestClock moves on its own")
        let due = state.withLock { state -> [CheckedContinuation<Void, any Error>] in
            state.now += milliseconds
            let due = state.sleepers.filter { $0.value.deadline <= state.now }
            for id in due.keys { state.sleepers.removeValue(forKey: id) }
            return due.values.map(\.continuation)
        }
        for continuation in due { continuation.resume() }
    }

    /// The durations of the sleeps in progress, shortest first.
    public var sleeping: [Int64] { state.withLock { $0.sleepers.values.map(\.duration).sorted() } }

    /// The ranges the jitter was drawn from, in order.
    public var jitterRanges: [ClosedRange<Int64>] { state.withLock { $0.jitterRanges } }
}
