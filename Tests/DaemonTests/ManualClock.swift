import Posix
import Synchronization
import Testing

/// A clock that moves only when the test says so: sleepers wait until `advance` takes
/// the time past their deadline; the jitter is a function the test picks.
final class ManualClock: WorkerClock {
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

    init(wallMs: Int64 = 1_750_000_000_000, jitter: @escaping @Sendable (ClosedRange<Int64>) -> Int64 = { $0.upperBound }) {
        self.wallOffset = wallMs
        self.jitter = jitter
    }

    func monotonicMs() -> Int64 { state.withLock { $0.now } }

    func wallMs() -> Int64 { wallOffset + monotonicMs() }

    func random(in range: ClosedRange<Int64>) -> Int64 {
        state.withLock { $0.jitterRanges.append(range) }
        return jitter(range)
    }

    func sleep(milliseconds: Int64) async throws {
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

    /// Moves time forward and wakes every sleeper whose deadline has come.
    func advance(by milliseconds: Int64) {
        let due = state.withLock { state -> [CheckedContinuation<Void, any Error>] in
            state.now += milliseconds
            let due = state.sleepers.filter { $0.value.deadline <= state.now }
            for id in due.keys { state.sleepers.removeValue(forKey: id) }
            return due.values.map(\.continuation)
        }
        for continuation in due { continuation.resume() }
    }

    /// The durations of the sleeps in progress, shortest first.
    var sleeping: [Int64] { state.withLock { $0.sleepers.values.map(\.duration).sorted() } }

    /// The ranges the jitter was drawn from, in order.
    var jitterRanges: [ClosedRange<Int64>] { state.withLock { $0.jitterRanges } }

    /// Waits (in real time, briefly) until a sleep of `milliseconds` is in progress.
    func waitForSleep(_ milliseconds: Int64, sourceLocation: SourceLocation = #_sourceLocation) async -> Bool {
        await eventually("a sleep of \(milliseconds) ms (sleeping: \(sleeping))", sourceLocation: sourceLocation) {
            self.sleeping.contains(milliseconds)
        }
    }
}

/// Polls `condition` in real time until it holds; records an issue after `timeoutMs`.
/// For what an in-process loop reaches on its own tasks, a few milliseconds later.
@discardableResult
func eventually(
    _ what: @autoclosure () -> String, timeoutMs: Int = 5_000, sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: () async -> Bool
) async -> Bool {
    for _ in 0..<(timeoutMs / 2) {
        if await condition() { return true }
        try? await Task.sleep(nanoseconds: 2_000_000)
    }
    if await condition() { return true }
    Issue.record("timed out waiting for \(what())", sourceLocation: sourceLocation)
    return false
}

/// Lets the tasks in flight run for a moment: for asserting that nothing happens.
func settle() async {
    for _ in 0..<20 {
        await Task.yield()
        try? await Task.sleep(nanoseconds: 1_000_000)
    }
}
