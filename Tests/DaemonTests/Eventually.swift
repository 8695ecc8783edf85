import TestSupport
import Testing

/// Polls `condition` in real time until it holds; records an issue after `timeoutMs`.
/// For what an in-process loop reaches on its own tasks, a few milliseconds later.
@discardableResult
func eventually(
    _ what: @autoclosure () -> String, timeoutMs: Int = 5_000, sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: () async -> Bool
) async -> Bool {
    if await waitUntil(timeoutMs: timeoutMs, condition) { return true }
    Issue.record("timed out waiting for \(what())", sourceLocation: sourceLocation)
    return false
}

extension TestClock {
    /// Waits (in real time, briefly) until a sleep of `milliseconds` is in progress.
    func waitForSleep(_ milliseconds: Int64, sourceLocation: SourceLocation = #_sourceLocation) async -> Bool {
        await eventually("a sleep of \(milliseconds) ms (sleeping: \(sleeping))", sourceLocation: sourceLocation) {
            self.sleeping.contains(milliseconds)
        }
    }
}
