/// Which of two raced operations ended first, with its result.
public enum RaceWinner<First: Sendable, Second: Sendable>: Sendable {
    case first(First)
    case second(Second)
}

extension RaceWinner: Equatable where First: Equatable, Second: Equatable {}

/// Runs `first` and `second` as child tasks and returns the result of whichever ends
/// first; the other is cancelled and awaited before this returns, so nothing outlives
/// the call. Cancelling the caller cancels both.
public func race<First: Sendable, Second: Sendable>(
    _ first: @escaping @Sendable () async -> First,
    _ second: @escaping @Sendable () async -> Second
) async -> RaceWinner<First, Second> {
    await withTaskGroup(of: RaceWinner<First, Second>.self) { group in
        group.addTask { .first(await first()) }
        group.addTask { .second(await second()) }
        // Both tasks were added, so there is a first one to end.
        let winner = await group.next()!
        group.cancelAll()
        return winner
    }
}

/// `race` for operations that throw: an error ends the race like a value would (it is
/// rethrown once the other is cancelled and awaited); what the cancelled loser returns
/// or throws is discarded.
public func race<First: Sendable, Second: Sendable>(
    _ first: @escaping @Sendable () async throws -> First,
    _ second: @escaping @Sendable () async throws -> Second
) async throws -> RaceWinner<First, Second> {
    try await withThrowingTaskGroup(of: RaceWinner<First, Second>.self) { group in
        group.addTask { .first(try await first()) }
        group.addTask { .second(try await second()) }
        let winner = try await group.next()!
        group.cancelAll()
        return winner
    }
}

/// Suspends until the current task is cancelled: the side of a race that must never win
/// on its own once its work is done.
public func suspendUntilCancelled() async {
    while !Task.isCancelled {
        // A cancelled sleep ends at once; the length only bounds the loop's turns.
        try? await Task.sleep(nanoseconds: 3_600_000_000_000)
    }
}
