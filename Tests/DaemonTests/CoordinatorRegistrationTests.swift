import Foundation
import Logging
import StateStore
import TestSupport
import Testing
import WorkerCore
@testable import Daemon

/// Holds a `CoordinatorLink.Registration` the way the link does (in an actor), so callers
/// can wait on it.
actor RegistrationHolder {
    var registration: CoordinatorLink.Registration

    init(_ registration: CoordinatorLink.Registration) { self.registration = registration }

    func wait() async { await withCheckedContinuation { registration.wait($0) } }

    /// How many wait for the attempt under way; nil when none is under way.
    var waiting: Int? { if case .registering(_, let waiters) = registration { waiters.count } else { nil } }

    func change<T: Sendable>(_ body: @Sendable (inout CoordinatorLink.Registration) -> T) -> T { body(&registration) }
}

/// `CoordinatorLink.Registration`: one attempt at a time, its waiters always going on,
/// the mesh token carried through every state.
@Suite(.timeLimit(.minutes(1))) struct CoordinatorRegistrationTests {
    typealias Registration = CoordinatorLink.Registration

    @Test func onlyAnUnregisteredSessionBeginsAnAttemptAndTheTokenComesAlong() {
        var registration = Registration.unregistered(meshToken: "earlier")
        let begun = [registration.beginAttempt(), registration.beginAttempt()]
        #expect(begun == [true, false], "one attempt at a time")
        #expect(registration.meshToken == "earlier" && !registration.isRegistered)
        registration.attemptEnded()
        #expect(registration.meshToken == "earlier" && !registration.isRegistered)
        let again = registration.beginAttempt()
        registration.registered(with: nil)
        #expect(again && registration.isRegistered && registration.meshToken == nil, "a coordinator may register without a token")
        let onceRegistered = registration.beginAttempt()
        registration.attemptEnded()
        #expect(!onceRegistered && registration.isRegistered, "ending no attempt changes nothing")
    }

    @Test func aLapseForgetsTheTokenOnlyFor401() {
        var rejected = Registration.registered(meshToken: "t")
        rejected.lapse(keepingMeshToken: true)
        #expect(!rejected.isRegistered && rejected.meshToken == "t")
        var forgotten = Registration.registered(meshToken: "t")
        forgotten.lapse(keepingMeshToken: false)
        #expect(!forgotten.isRegistered && forgotten.meshToken == nil)
        let begun = forgotten.beginAttempt()
        #expect(begun)
    }

    @Test func waitersGoOnWhenTheAttemptFailsAndWhenItRegisters() async {
        let holder = RegistrationHolder(.unregistered(meshToken: nil))
        #expect(await holder.change { $0.beginAttempt() })
        async let first: Void = holder.wait()
        async let second: Void = holder.wait()
        await eventually("two waiters") { await holder.waiting == 2 }
        await holder.change { $0.attemptEnded() }
        _ = await (first, second)
        #expect(await holder.waiting == nil)
        #expect(await !holder.registration.isRegistered)

        #expect(await holder.change { $0.beginAttempt() })
        async let third: Void = holder.wait()
        await eventually("a waiter") { await holder.waiting == 1 }
        await holder.change { $0.registered(with: "new") }
        await third
        #expect(await holder.registration.meshToken == "new")
    }

    /// A 401 answered to another call while a registration is under way (the token goes)
    /// must not end that attempt: its waiters would wait forever, or a second caller
    /// would register beside it.
    @Test func aLapseDuringAnAttemptKeepsItAndItsWaiters() async {
        let holder = RegistrationHolder(.unregistered(meshToken: "old"))
        #expect(await holder.change { $0.beginAttempt() })
        async let waiter: Void = holder.wait()
        await eventually("a waiter") { await holder.waiting == 1 }
        await holder.change { $0.lapse(keepingMeshToken: false) }
        #expect(await holder.waiting == 1)
        #expect(await holder.registration.meshToken == nil)
        #expect(await !holder.change { $0.beginAttempt() })
        await holder.change { $0.registered(with: "new") }
        await waiter
        #expect(await holder.registration.isRegistered)
    }

    @Test func waitingWithNoAttemptUnderWayGoesOnAtOnce() async {
        let holder = RegistrationHolder(.registered(meshToken: "t"))
        await holder.wait()
        #expect(await holder.registration.isRegistered)
    }

    /// How many callers wait for the link's registration attempt.
    static func waiting(_ link: CoordinatorLink) async -> Int {
        if case .registering(_, let waiters) = await link.registration { waiters.count } else { 0 }
    }

    static func link(_ bed: CoordinatorBed) async -> CoordinatorLink {
        CoordinatorLink(
            config: await bed.daemon.config, agentID: await bed.daemon.agentID, files: WorkerStateFiles(directory: bed.directory),
            daemon: bed.daemon, logger: Logger(label: "test", handler: MemoryLogHandler()), transport: bed.transport, clock: bed.clock)
    }

    /// Callers that ask while the first one registers (here: waiting out a failure's
    /// backoff) wait for it and register nothing themselves.
    @Test func concurrentCallersShareOneRegistration() async throws {
        let bed = try CoordinatorBed()
        bed.transport.script("/register", .failure(.couldNotConnect))
        let link = await Self.link(bed)
        async let first: Void = link.ensureRegistered()
        #expect(await bed.clock.waitForSleep(1_500), "the failure's backoff")
        async let second: Void = link.ensureRegistered()
        async let third: Void = link.ensureRegistered()
        await eventually("two callers waiting") { await Self.waiting(link) == 2 }
        #expect(bed.transport.calls(to: "/register").count == 1)
        bed.clock.advance(by: 1_500)
        try await first
        try await second
        try await third
        #expect(bed.transport.calls(to: "/register").count == 2, "the failed one and one more")
        #expect(await link.registered)
        #expect(await link.meshToken == "mesh-1")
        #expect(await bed.status["registered"] == true)
        try? FileManager.default.removeItem(atPath: bed.dir)
    }

    /// A 401 while the registration waits out its backoff takes the token; the
    /// registration goes on and its answer's token is the one kept.
    @Test func aForgottenRegistrationDuringAnAttemptIsTheAttemptsToFinish() async throws {
        let bed = try CoordinatorBed()
        try WorkerStateFiles(directory: bed.directory).saveMeshToken("mesh-old")
        bed.transport.script("/register", .failure(.couldNotConnect))
        let link = await Self.link(bed)
        #expect(await link.meshToken == "mesh-old")
        async let first: Void = link.ensureRegistered()
        #expect(await bed.clock.waitForSleep(1_500))
        async let second: Void = link.ensureRegistered()
        await eventually("a caller waiting") { await Self.waiting(link) == 1 }
        await link.forgetRegistration("token rotated")
        #expect(await Self.waiting(link) == 1, "still waiting for the attempt under way")
        #expect(await link.meshToken == nil)
        #expect(await !link.registered)
        bed.clock.advance(by: 1_500)
        try await first
        try await second
        #expect(bed.transport.calls(to: "/register").count == 2)
        #expect(await link.meshToken == "mesh-1")
        #expect(bed.storedMeshToken() == "mesh-1")
        try? FileManager.default.removeItem(atPath: bed.dir)
    }
}

@Suite struct ModelSwitchLedgerTests {
    static func request(_ key: String) -> ModelSwitchRequest {
        ModelSwitchRequest(rolloutID: key, provider: "ollama-local", model: "m", autoInstall: true, key: key)
    }

    @Test func aRequestIsTakenOnceAndNoneWhileOneRuns() {
        var ledger = ModelSwitchLedger()
        ledger.pending = Self.request("a")
        let taken = ledger.take()
        let again = ledger.take()
        #expect(taken == Self.request("a") && ledger.running == "a")
        #expect(again == nil, "taken once")
        ledger.pending = Self.request("b")
        let whileRunning = ledger.take()
        #expect(whileRunning == nil, "a runs")
        ledger.ended("other")
        #expect(ledger.running == "a", "only its own key ends it")
        ledger.ended("a")
        let next = ledger.take()
        #expect(next == Self.request("b"), "the one asked meanwhile is not lost")
    }

    @Test func anAcknowledgedRequestIsNeverCarriedOutAgain() {
        var ledger = ModelSwitchLedger()
        let key = "a"
        ledger.record(key, ok: true, error: nil)
        #expect(ledger.outcomes[key]?.ok == true)
        ledger.acknowledge(key)
        #expect(ledger.outcomes[key] == nil && ledger.acknowledged.contains(key))
        ledger.pending = Self.request("a")
        let taken = ledger.take()
        #expect(taken == nil, "a heartbeat answered before the ack was taken still says pending")
        #expect(ledger.pending == nil && ledger.running == nil)
    }
}
