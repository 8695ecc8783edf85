/// Polls `condition` in real time, every `pollMs`, until it holds: true, or false once
/// `timeoutMs / pollMs` polls failed and a last look too. For what an in-process loop
/// reaches on its own tasks, a few milliseconds later. (The tests' `eventually` records
/// the issue.)
public func waitUntil(timeoutMs: Int = 5_000, pollMs: Int = 2, _ condition: () async -> Bool) async -> Bool {
    for _ in 0..<(timeoutMs / pollMs) {
        if await condition() { return true }
        try? await Task.sleep(nanoseconds: UInt64(pollMs) * 1_000_000)
    }
    return await condition()
}

/// Lets the tasks in flight run for a moment: for asserting that nothing happens.
public func settle() async {
    for _ in 0..<20 {
        await Task.yield()
        try? await Task.sleep(nanoseconds: 1_000_000)
    }
}
