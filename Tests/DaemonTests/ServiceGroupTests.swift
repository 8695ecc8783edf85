#if canImport(Glibc)
import Glibc
#endif
import Logging
import Posix
import Synchronization
import TestSupport
import Testing
@testable import Daemon

/// Signals sent in-process: `next` waits for the next one and throws when cancelled, as
/// the signal pipe does. Several tasks may wait at once (the group keeps a reader while it
/// stops); a signal goes to the one that has waited longest.
final class ScriptedSignals: Sendable {
    private struct State {
        var queued: [Int32] = []
        var waiters: [(id: Int, continuation: CheckedContinuation<Int32, any Error>)] = []
        var nextID = 0
        var cancelled: Set<Int> = []
    }
    private let state = Mutex(State())

    func send(_ signo: Int32) {
        let waiter = state.withLock { state -> CheckedContinuation<Int32, any Error>? in
            if !state.waiters.isEmpty { return state.waiters.removeFirst().continuation }
            state.queued.append(signo)
            return nil
        }
        waiter?.resume(returning: signo)
    }

    func next() async throws -> Int32 {
        let id = state.withLock { state -> Int in
            state.nextID += 1
            return state.nextID
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Int32, any Error>) in
                enum Now { case signal(Int32), cancelled, wait }
                let now = state.withLock { state -> Now in
                    if state.cancelled.remove(id) != nil { return .cancelled }
                    if !state.queued.isEmpty { return .signal(state.queued.removeFirst()) }
                    state.waiters.append((id, continuation))
                    return .wait
                }
                switch now {
                case .signal(let signo): continuation.resume(returning: signo)
                case .cancelled: continuation.resume(throwing: CancellationError())
                case .wait: break
                }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<Int32, any Error>? in
                if let index = state.waiters.firstIndex(where: { $0.id == id }) { return state.waiters.remove(at: index).continuation }
                state.cancelled.insert(id)
                return nil
            }
            waiter?.resume(throwing: CancellationError())
        }
    }
}

/// What the services did, in order.
final class ServiceLog: Sendable {
    private let lines = Mutex<[String]>([])
    func append(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }
    func count(_ suffix: String) -> Int { all.filter { $0.hasSuffix(suffix) }.count }
}

/// Stops when asked, taking `stopMs` to finish what it has in hand.
struct PoliteService: Service {
    let name: String
    let journal: ServiceLog
    var stopMs: UInt64 = 10

    func run(shutdown: GracefulShutdown) async throws {
        journal.append("\(name) started")
        await shutdown.wait()
        guard shutdown.isTriggered else { return journal.append("\(name) cancelled") }
        journal.append("\(name) stopping")
        try? await Task.sleep(nanoseconds: stopMs * 1_000_000)
        journal.append("\(name) stopped")
    }
}

/// Ignores the graceful stop; only cancellation ends it.
struct StubbornService: Service {
    let name: String
    let journal: ServiceLog

    func run(shutdown: GracefulShutdown) async throws {
        journal.append("\(name) started")
        do {
            try await Task.sleep(nanoseconds: 3_600_000_000_000)
        } catch {
            journal.append("\(name) cancelled")
        }
    }
}

/// Ends on its own once started: with an error, or returning as no service should.
struct EndingService: Service {
    struct Broke: Error, CustomStringConvertible { var description: String { "the disk is gone" } }
    let name: String
    let journal: ServiceLog
    let fails: Bool

    func run(shutdown: GracefulShutdown) async throws {
        journal.append("\(name) started")
        try await Task.sleep(nanoseconds: 20_000_000)
        if fails { throw Broke() }
    }
}

struct GroupRun {
    let signals = ScriptedSignals()
    let journal = ServiceLog()
    let logs = MemoryLogHandler()
    let shutdownStarts = HitCounter()
    let reloads = HitCounter()

    func start(_ services: [any Service], deadlineMs: UInt64) -> Task<ServiceGroupExit, Never> {
        let group = ServiceGroup(
            services: services, logger: Logger(label: "group", handler: logs),
            gracefulDeadlineNanoseconds: deadlineMs * 1_000_000,
            onShutdownStart: { [shutdownStarts] in shutdownStarts.increment() },
            onReload: { [reloads] in reloads.increment() })
        let signals = self.signals
        return Task { await group.run(nextSignal: { try await signals.next() }) }
    }

    func allStarted(_ count: Int) async -> Bool {
        await eventually("\(count) services to start") { journal.count("started") == count }
    }

    func warned(_ text: String) -> Bool {
        logs.records.contains { $0.level == .warning && $0.message.contains(text) }
    }
}

func milliseconds(since start: UInt64) -> UInt64 { (monotonicNanoseconds() - start) / 1_000_000 }

@Suite struct ServiceGroupStopping {
    @Test func sighupReloadsAndEveryServiceKeepsRunning() async {
        let run = GroupRun()
        let task = run.start(["a", "b"].map { PoliteService(name: $0, journal: run.journal) }, deadlineMs: 10_000)
        #expect(await run.allStarted(2))
        run.signals.send(SIGHUP)
        run.signals.send(SIGHUP)
        #expect(await eventually("two reloads") { run.reloads.count == 2 })
        #expect(run.shutdownStarts.count == 0)
        #expect(
            run.journal.all == ["a started", "b started"] || run.journal.all == ["b started", "a started"], "nothing stopped: \(run.journal.all)")
        run.signals.send(SIGTERM)
        #expect(await task.value == .signal(SIGTERM))
        #expect(run.reloads.count == 2)
    }

    @Test func sighupDuringTheStopNeitherReloadsNorHurriesTheStop() async {
        let run = GroupRun()
        let task = run.start([PoliteService(name: "a", journal: run.journal, stopMs: 300)], deadlineMs: 10_000)
        #expect(await run.allStarted(1))
        run.signals.send(SIGTERM)
        await eventually("the graceful stop to begin") { run.journal.all.contains("a stopping") }
        run.signals.send(SIGHUP)
        #expect(await task.value == .signal(SIGTERM))
        #expect(run.journal.all.contains("a stopped"), "the stop stayed graceful")
        #expect(run.reloads.count == 0)
    }

    @Test func aSignalStopsEveryServiceGracefullyInReverseOrderOfStart() async {
        let run = GroupRun()
        let task = run.start(["a", "b", "c"].map { PoliteService(name: $0, journal: run.journal) }, deadlineMs: 10_000)
        #expect(await run.allStarted(3))
        #expect(run.shutdownStarts.count == 0)
        run.signals.send(SIGTERM)
        #expect(await task.value == .signal(SIGTERM))
        #expect(
            Array(run.journal.all.dropFirst(3)) == ["c stopping", "c stopped", "b stopping", "b stopped", "a stopping", "a stopped"],
            "each service is asked only once the one started after it has returned")
        #expect(run.shutdownStarts.count == 1)
    }

    @Test func theDeadlineCancelsWhatHasNotStopped() async {
        let run = GroupRun()
        let task = run.start([PoliteService(name: "a", journal: run.journal), StubbornService(name: "b", journal: run.journal)], deadlineMs: 100)
        #expect(await run.allStarted(2))
        let start = monotonicNanoseconds()
        run.signals.send(SIGINT)
        #expect(await task.value == .signal(SIGINT))
        let took = milliseconds(since: start)
        #expect(took >= 100 && took < 5_000, "took \(took) ms")
        #expect(run.journal.all.contains("b cancelled"))
        #expect(run.journal.all.contains("a cancelled"), "a was never asked to stop gracefully: the deadline ended the stop")
        #expect(!run.journal.all.contains("a stopping"))
        #expect(run.warned("graceful stop took longer than 100 ms; cancelling a, b"))
    }

    @Test func aSecondSignalStopsAtOnceWithoutWaitingForTheDeadline() async {
        let run = GroupRun()
        let task = run.start([PoliteService(name: "a", journal: run.journal), StubbornService(name: "b", journal: run.journal)], deadlineMs: 60_000)
        #expect(await run.allStarted(2))
        let start = monotonicNanoseconds()
        run.signals.send(SIGTERM)
        await eventually("the graceful stop to begin") { run.shutdownStarts.count == 1 }
        run.signals.send(SIGINT)
        #expect(await task.value == .signal(SIGTERM), "the exit names the first signal")
        #expect(milliseconds(since: start) < 5_000)
        #expect(run.journal.all.contains("b cancelled"))
        #expect(run.journal.all.contains("a cancelled"))
        #expect(run.warned("received SIGINT again; stopping now"))
        #expect(run.shutdownStarts.count == 1)
    }

    @Test func aFailingServiceStopsTheOthersInReverseOrder() async {
        let run = GroupRun()
        let task = run.start(
            [
                PoliteService(name: "a", journal: run.journal), EndingService(name: "b", journal: run.journal, fails: true),
                PoliteService(name: "c", journal: run.journal),
            ], deadlineMs: 10_000)
        #expect(await task.value == .serviceFailed("b: the disk is gone"))
        #expect(Array(run.journal.all.dropFirst(3)) == ["c stopping", "c stopped", "a stopping", "a stopped"])
        #expect(run.shutdownStarts.count == 1)
    }

    @Test func aServiceThatReturnsOnItsOwnIsAFailure() async {
        let run = GroupRun()
        let task = run.start(
            [PoliteService(name: "a", journal: run.journal), EndingService(name: "b", journal: run.journal, fails: false)], deadlineMs: 10_000)
        #expect(await task.value == .serviceFailed("b: returned unexpectedly"))
        #expect(run.journal.all.suffix(2) == ["a stopping", "a stopped"])
    }
}

@Suite struct GracefulShutdownToken {
    @Test func cancellingReturnsTheBodysValueWhenItFinishesFirst() async throws {
        let shutdown = GracefulShutdown()
        #expect(try await shutdown.cancelling { 42 } == 42)
        #expect(!shutdown.isTriggered)
    }

    @Test func cancellingCancelsTheBodyAndReturnsNilWhenTriggered() async throws {
        let shutdown = GracefulShutdown()
        let journal = ServiceLog()
        let task = Task {
            try await shutdown.cancelling {
                do {
                    try await Task.sleep(nanoseconds: 3_600_000_000_000)
                } catch {
                    journal.append("body cancelled")
                    throw error
                }
                return 1
            }
        }
        try await Task.sleep(nanoseconds: 10_000_000)
        shutdown.trigger()
        #expect(try await task.value == nil)
        #expect(journal.all == ["body cancelled"])
        #expect(shutdown.isTriggered)
        await shutdown.wait()
    }
}
