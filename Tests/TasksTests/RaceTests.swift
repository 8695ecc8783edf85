import Tasks
import Synchronization
import Testing

/// Records whether an operation saw its cancellation.
private final class RaceFlag: Sendable {
    private let state = Mutex(false)
    func set() { state.withLock { $0 = true } }
    var isSet: Bool { state.withLock { $0 } }
}

/// Sleeps up to a minute; records being cancelled.
private func sleeper(_ cancelled: RaceFlag) async -> Int {
    do { try await Task.sleep(nanoseconds: 60_000_000_000) } catch { cancelled.set() }
    return -1
}

private struct Boom: Error, Equatable {}

@Suite struct RaceTests {
    @Test func returnsTheFirstOperationsValueAndCancelsTheSecond() async {
        let loserCancelled = RaceFlag()
        let started = ContinuousClock.now
        let winner = await race({ 7 }, { await sleeper(loserCancelled) })
        #expect(winner == .first(7))
        // The loser was cancelled and had ended before race returned.
        #expect(loserCancelled.isSet)
        #expect(ContinuousClock.now - started < .seconds(10))
    }

    @Test func returnsTheSecondOperationsValueWhenItEndsFirst() async {
        let loserCancelled = RaceFlag()
        let winner = await race({ await sleeper(loserCancelled) }, { "done" })
        #expect(winner == .second("done"))
        #expect(loserCancelled.isSet)
    }

    @Test func cancellingTheCallerCancelsBothOperations() async {
        let first = RaceFlag()
        let second = RaceFlag()
        let caller = Task { await race({ await sleeper(first) }, { await sleeper(second) }) }
        try? await Task.sleep(nanoseconds: 50_000_000)
        caller.cancel()
        let started = ContinuousClock.now
        _ = await caller.value
        #expect(first.isSet)
        #expect(second.isSet)
        #expect(ContinuousClock.now - started < .seconds(10))
    }

    @Test func anErrorEndsTheRaceAndCancelsTheOther() async {
        let loserCancelled = RaceFlag()
        await #expect(throws: Boom.self) {
            _ = try await race({ () async throws -> Int in throw Boom() }, { await sleeper(loserCancelled) })
        }
        #expect(loserCancelled.isSet)
    }

    @Test func theCancelledLosersErrorIsDiscarded() async throws {
        let winner = try await race(
            { () async throws -> Int in
                try await Task.sleep(nanoseconds: 60_000_000_000)  // throws CancellationError when it loses
                return 1
            }, { () async throws -> Int in 2 })
        #expect(winner == .second(2))
    }

    @Test func suspendUntilCancelledNeverWinsARace() async {
        let winner = await race(
            { await suspendUntilCancelled() },
            { () async -> Int in
                try? await Task.sleep(nanoseconds: 20_000_000)
                return 3
            })
        guard case .second(3) = winner else {
            Issue.record("suspendUntilCancelled ended before it was cancelled")
            return
        }
    }
}
