import Synchronization
import Testing
import Tasks
import TestSupport

@Suite struct StateSignalWaits {
    @Test func aWaitForTheCurrentValueReturnsAtOnce() async {
        let signal = StateSignal(true)
        await signal.wait(for: true)
        #expect(signal.value)
    }

    @Test func aWaitResumesOnlyWhenTheWantedValueIsSet() async {
        let signal = StateSignal(false)
        let resumed = HitCounter()
        let waiter = Task {
            await signal.wait(for: true)
            resumed.increment()
        }
        try? await Task.sleep(nanoseconds: 10_000_000)
        signal.set(false)
        try? await Task.sleep(nanoseconds: 10_000_000)
        #expect(resumed.count == 0, "setting the same value wakes nobody")
        signal.set(true)
        await waiter.value
        #expect(resumed.count == 1)
    }

    @Test func settingAValueWakesEveryWaiterForItAndNoOther() async {
        let signal = StateSignal(false)
        let wantTrue = HitCounter(), wantFalse = HitCounter()
        let trues = (0..<3).map { _ in
            Task {
                await signal.wait(for: true); wantTrue.increment()
            }
        }
        try? await Task.sleep(nanoseconds: 10_000_000)
        signal.set(true)
        for task in trues { await task.value }
        #expect(wantTrue.count == 3)

        let falses = (0..<2).map { _ in
            Task {
                await signal.wait(for: false); wantFalse.increment()
            }
        }
        try? await Task.sleep(nanoseconds: 10_000_000)
        signal.set(true)
        try? await Task.sleep(nanoseconds: 10_000_000)
        #expect(wantFalse.count == 0, "true again wakes no one waiting for false")
        signal.set(false)
        for task in falses { await task.value }
        #expect(wantFalse.count == 2)
        #expect(wantTrue.count == 3)
    }

    @Test func cancellingAWaiterEndsItsWaitWithoutAChange() async {
        let signal = StateSignal(false)
        let waiter = Task { await signal.wait(for: true) }
        try? await Task.sleep(nanoseconds: 10_000_000)
        waiter.cancel()
        await waiter.value
        #expect(!signal.value)
    }

    @Test func aWaitInATaskAlreadyCancelledReturnsAtOnce() async {
        let signal = StateSignal(false)
        let waiter = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            await signal.wait(for: true)
            return Task.isCancelled
        }
        #expect(await waiter.value)
    }
}
