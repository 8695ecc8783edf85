import Synchronization

/// A boolean that tasks can wait on (until it becomes true, or false), cancellably:
/// the daemon sets it, services wait for it without holding the actor.
public final class StateSignal: Sendable {
    private struct State {
        var value: Bool
        var nextID = 0
        var waiters: [Int: (want: Bool, continuation: CheckedContinuation<Void, Never>)] = [:]
    }
    private let state: Mutex<State>

    public init(_ value: Bool) { state = Mutex(State(value: value)) }

    public var value: Bool { state.withLock { $0.value } }

    public func set(_ value: Bool) {
        let ready = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.value = value
            let matching = state.waiters.filter { $0.value.want == value }
            for id in matching.keys { state.waiters.removeValue(forKey: id) }
            return matching.values.map(\.continuation)
        }
        for continuation in ready { continuation.resume() }
    }

    /// Returns once the value equals `want`, or when the task is cancelled.
    public func wait(for want: Bool) async {
        let id = state.withLock { state -> Int in
            state.nextID += 1
            return state.nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { state -> Bool in
                    if state.value == want || Task.isCancelled { return true }
                    state.waiters[id] = (want, continuation)
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
            waiter?.continuation.resume()
        }
    }
}
