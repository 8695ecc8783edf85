import Foundation
import HTTP
import Logging
import Posix
import Sandbox
import Synchronization
@testable import StateStore
import Tasks
import TestSupport
import Testing
import WorkerCore
@testable import Daemon

/// One coordinator session in-process: the real loop, a scripted coordinator and model
/// server, a manual clock. The same cases run against the dev coordinator in
/// IntegrationTests/suites/coordinator.sh; here they take milliseconds and pin exact delays.
final class CoordinatorBed: Sendable {
    static let subtask = #"{"id":"s1","taskId":"t1","kind":"single_step","input":"say hi","timeoutMs":30000}"#
    static let heartbeatMs: Int64 = 15_000
    static let pullMs: Int64 = 5_000

    let dir = NSTemporaryDirectory() + "ecw-coordinator-" + UUID().uuidString
    let clock: TestClock
    let transport: ScriptedTransport
    let directory: StateDirectory
    let daemon: WorkerState
    let service: CoordinatorService
    let stop = GracefulShutdown()
    let ended = StateSignal(false)
    /// What the service told systemd's notification socket.
    let notified = ServiceLog()

    /// `fault` mocks a failing disk: the daemon's writer fails each operation it returns an error for;
    /// `configure` changes the config before the daemon is made.
    init(
        jitter: @escaping @Sendable (ClosedRange<Int64>) -> Int64 = { $0.upperBound },
        fault: (@Sendable (_ name: String, _ removal: Bool) -> (any Error)?)? = nil,
        configure: (inout WorkerConfig) -> Void = { _ in }, sandbox: (any ProgramSandbox)? = nil
    ) throws {
        clock = TestClock(jitter: jitter)
        transport = ScriptedTransport(defaults: [
            "/register": .json(200, #"{"accepted":true,"meshToken":"mesh-1"}"#),
            "/heartbeat": .json(200, #"{"ok":true}"#),
            "/pull": .json(200, #"{"subtask":null}"#),
            "/result": .json(200, #"{"ok":true}"#),
            "/api/generate": .json(200, #"{"response":"hi there","done":true}"#),
        ])
        var config = WorkerConfig()
        config.coordinator.url = "http://coordinator.test/"
        config.coordinator.heartbeatIntervalMs = CoordinatorBed.heartbeatMs
        config.coordinator.pullIntervalMs = CoordinatorBed.pullMs
        config.backend.kind = .ollama
        config.backend.url = "http://model.test"
        configure(&config)
        directory = try StateDirectory(path: dir)
        let paths = DaemonPaths(configPath: "/dev/null", stateDirectory: dir, runtimeDirectory: dir + "/run", sysfsRoot: "/")
        let logger = Logger(label: "coordinator", handler: MemoryLogHandler())
        let clock = self.clock
        let stateDirectory = directory
        let writer = fault.map { DurableWriter(directory: stateDirectory, onProblem: { _ in }, beforeEach: nil, fault: $0) }
        daemon = WorkerState(
            config: config, paths: paths, directory: directory, logger: logger, clock: TestClock.realTime { clock.wallMs() }, writer: writer)
        let notified = self.notified
        service = CoordinatorService(
            daemon: daemon, config: config, directory: directory, logger: logger, transport: transport, clock: clock,
            notify: { notified.append($0) }, sandbox: sandbox)
    }

    var journal: WorkJournal { WorkJournal(writer: daemon.writer) }

    /// Starts the session with the model backend ready (`modelReady` false: not probed yet).
    func start(modelReady: Bool = true) {
        let service = self.service, stop = self.stop, ended = self.ended, daemon = self.daemon
        Task {
            if modelReady { await daemon.updateModel(state: "ready", detail: "the bed's model server") }
            await service.session(stop: stop)
            ended.set(true)
        }
    }

    /// Stops the session gracefully and checks that it ends without the clock moving.
    func finish(sourceLocation: SourceLocation = #_sourceLocation) async {
        stop.trigger()
        await eventually("the session to end on stop", sourceLocation: sourceLocation) { self.ended.value }
        try? FileManager.default.removeItem(atPath: dir)
    }

    var status: JSONValue {
        get async { await daemon.statusJSON()["coordinator"] ?? .null }
    }

    /// The paths called so far, heartbeats left out (they run on their own cadence).
    var workCalls: [String] { transport.calls.map(\.path).filter { $0 != "/heartbeat" } }

    func storedMeshToken() -> String? {
        if case .loaded(let token) = WorkerStateFiles(directory: directory).loadMeshToken(nowMs: 0) { return token }
        return nil
    }

    func entry(pulledAgoMs: Int64) throws -> RecoveryPlan.JournalEntry {
        guard case .success(let subtask) = Subtask.parse(try JSON.parse(CoordinatorBed.subtask)) else { throw CancellationError() }
        return RecoveryPlan.JournalEntry(subtask: subtask, pulledAtMs: clock.wallMs() - pulledAgoMs)
    }
}

@Suite struct CoordinatorSessionInProcess {
    @Test func aHeartbeatAskedForIsSentAtOnceAndAcknowledged() async throws {
        let bed = try CoordinatorBed()
        bed.start()
        #expect(await bed.clock.waitForSleep(CoordinatorBed.heartbeatMs))
        let before = bed.transport.calls(to: "/heartbeat").count
        bed.daemon.signals.heartbeatRequested.set(true)
        #expect(await eventually("the asked-for heartbeat") { bed.transport.calls(to: "/heartbeat").count == before + 1 })
        #expect(await eventually("its acknowledgement") { !bed.daemon.signals.heartbeatRequested.value })
        #expect(await bed.clock.waitForSleep(CoordinatorBed.heartbeatMs), "then the usual cadence")
        await bed.finish()
    }

    @Test func heartbeatsAreCountedSentAndFailedForMetrics() async throws {
        let bed = try CoordinatorBed()
        bed.transport.script("/heartbeat", .json(500, #"{"error":"boom"}"#))
        bed.start()
        #expect(await bed.clock.waitForSleep(CoordinatorBed.heartbeatMs))
        bed.clock.advance(by: CoordinatorBed.heartbeatMs)
        #expect(await eventually("the second heartbeat") { bed.transport.calls(to: "/heartbeat").count == 2 })
        #expect(await eventually("both counted") { await bed.daemon.statusJSON()["counters"]?["heartbeatsSent"] == 2 })
        #expect(await bed.daemon.statusJSON()["counters"]?["heartbeatsFailed"] == 1)
        await bed.finish()
    }

    @Test func heartbeatNowBeforeASuspendReturnsOnceTheSessionSentIt() async throws {
        let bed = try CoordinatorBed()
        #expect(await bed.daemon.heartbeatNow(timeoutMs: 50) == false, "mode off: no session to heartbeat")
        await bed.daemon.request(.operatorSet(.on, by: "test"))
        bed.start()
        #expect(await bed.clock.waitForSleep(CoordinatorBed.heartbeatMs))
        let before = bed.transport.calls(to: "/heartbeat").count
        #expect(await bed.daemon.heartbeatNow(timeoutMs: 5_000))
        #expect(bed.transport.calls(to: "/heartbeat").count == before + 1, "sent before heartbeatNow returned")
        await bed.finish()
    }

    @Test func aMeteredConnectionUnderHoldStopsPullsWithADropReasonAndAllowDoesNot() async throws {
        let bed = try CoordinatorBed()
        var host = HostServices()
        host.meteredRaw = 1
        await bed.daemon.updateHost(host)
        bed.start()
        #expect(await bed.clock.waitForSleep(CoordinatorBed.pullMs))
        #expect(bed.transport.calls(to: "/pull").isEmpty, "no pull on a metered connection")
        #expect(await bed.status["deferredReason"]?.stringValue?.hasPrefix("held: metered") == true)
        #expect(await bed.daemon.statusJSON()["power"]?["held"]?["metered"]?.intValue == 1)
        host.meteredRaw = 2
        await bed.daemon.updateHost(host)
        bed.clock.advance(by: CoordinatorBed.pullMs)
        #expect(await eventually("a pull once not metered") { bed.transport.calls(to: "/pull").count == 1 })
        await bed.finish()
    }

    @Test func aStopWaitingForASubtaskExtendsSystemdsStopTimeoutStepByStepUntilTheGraceEnds() async throws {
        let bed = try CoordinatorBed(configure: { $0.coordinator.stopGraceMs = 12_000 })
        bed.transport.script("/pull", .json(200, #"{"subtask":\#(CoordinatorBed.subtask)}"#))
        bed.transport.script("/api/generate", .hang)
        bed.start()
        #expect(await eventually("the subtask to run") { bed.transport.calls(to: "/api/generate").count == 1 })
        #expect(bed.notified.all.isEmpty, "nothing is extended before a stop")
        bed.stop.trigger()
        #expect(await bed.clock.waitForSleep(5_000))
        bed.clock.advance(by: 5_000)
        #expect(await eventually("the second extension") { bed.notified.all.count == 2 })
        bed.clock.advance(by: 5_000)
        #expect(await bed.clock.waitForSleep(2_000))
        #expect(
            bed.notified.all == [
                "EXTEND_TIMEOUT_USEC=10000000\nSTATUS=stopping: waiting up to 12000 ms for subtask s1",
                "EXTEND_TIMEOUT_USEC=10000000\nSTATUS=stopping: waiting up to 7000 ms for subtask s1",
                "EXTEND_TIMEOUT_USEC=7000000\nSTATUS=stopping: waiting up to 2000 ms for subtask s1",
            ], "each covers the next step and one more, until stopGraceMs is spent")
        bed.clock.advance(by: 2_000)
        #expect(await eventually("the session to end when the grace is spent") { bed.ended.value })
        #expect(bed.notified.all.count == 3)
        await bed.finish()
    }

    @Test func aSubtaskAnsweredWithoutAStopExtendsNothingAndSaysNothingOfStopping() async throws {
        let bed = try CoordinatorBed(configure: { $0.coordinator.stopGraceMs = 12_000 })
        bed.transport.script("/pull", .json(200, #"{"subtask":\#(CoordinatorBed.subtask)}"#))
        bed.start()
        #expect(await eventually("the result to be posted") { bed.transport.calls(to: "/result").count >= 1 })
        // The race's losing side (the stop's waiter) is cancelled when the answer wins: it
        // must not go on as if a stop had begun.
        #expect(await bed.clock.waitForSleep(CoordinatorBed.pullMs), "the loop goes on to its next pull")
        #expect(bed.notified.all.isEmpty, "no EXTEND_TIMEOUT_USEC and no STATUS=stopping without a stop: \(bed.notified.all)")
        await bed.finish()
    }

    @Test func registersOnceThenSendsTheMeshTokenOnEveryOtherCall() async throws {
        let bed = try CoordinatorBed()
        bed.start()
        #expect(await bed.clock.waitForSleep(CoordinatorBed.pullMs))
        #expect(await bed.clock.waitForSleep(CoordinatorBed.heartbeatMs))
        let calls = bed.transport.calls
        #expect(calls.filter { $0.path == "/register" }.count == 1)
        #expect(calls.first?.path == "/register")
        #expect(calls.first?.header("x-mesh-token") == nil)
        let agentID = await bed.daemon.agentID
        #expect(calls.first?.body?["agentId"]?.stringValue == agentID)
        for call in calls.dropFirst() { #expect(call.header("x-mesh-token") == "mesh-1", "\(call.path)") }
        #expect(bed.storedMeshToken() == "mesh-1")
        #expect(await bed.status["registered"] == true)
        #expect(await bed.status["lastHeartbeat"]?.stringValue == formatUTC(milliseconds: bed.clock.wallMs()))

        // The cadences come from the clock: nothing more until it moves.
        let before = bed.transport.calls.count
        await settle()
        #expect(bed.transport.calls.count == before)
        bed.clock.advance(by: CoordinatorBed.pullMs)
        await eventually("a second pull") { bed.transport.calls(to: "/pull").count == 2 }
        #expect(bed.transport.calls(to: "/heartbeat").count == 1)
        await bed.finish()
    }

    @Test(arguments: ["/pull", "/heartbeat"])
    func unauthorizedForgetsTheMeshTokenAndRegistersAgain(path: String) async throws {
        let bed = try CoordinatorBed()
        bed.transport.script(path, .json(401, #"{"error":"mesh_unauthorized","reason":"token rotated"}"#))
        bed.transport.script(
            "/register", .json(200, #"{"accepted":true,"meshToken":"mesh-1"}"#), .failure(.couldNotConnect),
            .json(200, #"{"accepted":true,"meshToken":"mesh-2"}"#))
        bed.start()
        // The registration after the 401 fails once: the old token is gone meanwhile.
        #expect(await bed.clock.waitForSleep(1_500))
        #expect(bed.storedMeshToken() == nil)
        #expect(await bed.status["registered"] == false)
        bed.clock.advance(by: 1_500)
        await eventually("a third registration") { bed.transport.calls(to: "/register").count == 3 }
        #expect(await bed.clock.waitForSleep(CoordinatorBed.pullMs))
        let registrations = bed.transport.calls(to: "/register")
        #expect(registrations.allSatisfy { $0.header("x-mesh-token") == nil }, "register never carries the old token")
        await eventually("a call with the new token") { bed.transport.calls(to: path).last?.header("x-mesh-token") == "mesh-2" }
        #expect(bed.storedMeshToken() == "mesh-2")
        #expect(await bed.status["registered"] == true)
        await bed.finish()
    }

    @Test(arguments: [
        ("/register", #"{"error":"forbidden","reason":"revoked by the operator"}"#, 403, "forbidden: revoked by the operator"),
        ("/heartbeat", #"{"ok":true,"blacklisted":true,"reason":"abuse"}"#, 200, "blacklisted: abuse"),
        ("/pull", #"{"subtask":null,"blocked":true,"reason":"abuse"}"#, 200, "blocked: abuse"),
    ])
    func aRejectionStopsWithTheReasonAndRetriesNoFasterThanFiveMinutes(path: String, body: String, httpStatus: Int, reason: String) async throws {
        let bed = try CoordinatorBed()
        bed.transport.script(path, .json(httpStatus, body))
        bed.start()
        #expect(await bed.clock.waitForSleep(CoordinatorLink.rejectionRetryMs))
        let rejectedAt = bed.clock.wallMs()
        #expect(await bed.status["rejection"]?.stringValue == reason)
        #expect(await bed.status["retryAt"]?.stringValue == formatUTC(milliseconds: rejectedAt + 300_000))
        #expect(await bed.status["registered"] == false)
        #expect(bed.clock.sleeping == [300_000], "no heartbeat or pull keeps running while rejected")

        let calls = bed.transport.calls.count
        bed.clock.advance(by: 299_999)
        await settle()
        #expect(bed.transport.calls.count == calls, "nothing is sent before the five minutes are up")
        bed.clock.advance(by: 1)
        await eventually("registering again after five minutes") { bed.transport.calls(to: "/register").count == 2 }
        #expect(await bed.clock.waitForSleep(CoordinatorBed.pullMs))
        #expect(await bed.status["rejection"] == .null)
        #expect(await bed.status["registered"] == true)
        await bed.finish()
    }

    @Test func networkFailuresBackOffWithFullJitterUpToTheCap() async throws {
        // Half of the ceiling: what is slept must be the jitter's draw, not the ceiling.
        let bed = try CoordinatorBed(jitter: { $0.upperBound / 2 })
        let ceilings: [Int64] = [1_500, 3_000, 6_000, 12_000, 24_000, 48_000, 60_000, 60_000]
        for _ in ceilings { bed.transport.script("/register", .failure(.couldNotConnect)) }
        bed.start()
        for (n, ceiling) in ceilings.enumerated() {
            try #require(await bed.clock.waitForSleep(ceiling / 2), "failure \(n + 1)")
            #expect(bed.clock.jitterRanges.last == 0...ceiling)
            #expect(await bed.status["consecutiveFailures"] == .int(Int64(n + 1)))
            #expect(await bed.status["backoffMs"] == .int(ceiling / 2))
            #expect(await bed.status["lastError"]?.stringValue?.hasPrefix("register: could-not-connect") == true)
            #expect(bed.transport.calls(to: "/register").count == n + 1)
            bed.clock.advance(by: ceiling / 2 - 1)
            await settle()
            #expect(bed.transport.calls(to: "/register").count == n + 1, "no retry before the backoff is over")
            bed.clock.advance(by: 1)
        }
        #expect(await bed.clock.waitForSleep(CoordinatorBed.pullMs))
        #expect(bed.clock.jitterRanges.count == ceilings.count)
        #expect(await bed.status["consecutiveFailures"] == 0)
        #expect(await bed.status["backoffMs"] == .null)
        #expect(await bed.status["registered"] == true)
        await bed.finish()
    }

    @Test func aFailedPullBacksOffAndANoWorkAnswerResetsTheCount() async throws {
        let bed = try CoordinatorBed()
        bed.transport.script("/pull", .json(503, #"{"error":"overloaded"}"#), .failure(.timedOut))
        bed.start()
        #expect(await bed.clock.waitForSleep(1_500))
        #expect(await bed.status["lastError"]?.stringValue == "pull: pull answered HTTP 503: overloaded")
        bed.clock.advance(by: 1_500)
        #expect(await bed.clock.waitForSleep(3_000))
        #expect(await bed.status["consecutiveFailures"] == 2)
        bed.clock.advance(by: 3_000)
        #expect(await bed.clock.waitForSleep(CoordinatorBed.pullMs))
        #expect(await bed.status["consecutiveFailures"] == 0)
        await bed.finish()
    }

    @Test(arguments: [(#","deferMs":42000"#, Int64(42_000)), ("", CoordinatorBed.pullMs)])
    func aPowerDeferredPullWaitsItsDeferMs(deferMs: String, expected: Int64) async throws {
        let bed = try CoordinatorBed()
        bed.transport.script("/pull", .json(200, #"{"subtask":null,"powerDeferred":true,"reason":"grid_peak"\#(deferMs)}"#))
        bed.start()
        #expect(await bed.clock.waitForSleep(expected))
        #expect(await bed.status["deferredReason"]?.stringValue == "coordinator: grid_peak")
        bed.clock.advance(by: expected - 1)
        await settle()
        #expect(bed.transport.calls(to: "/pull").count == 1, "no pull before deferMs is over")
        bed.clock.advance(by: 1)
        await eventually("the next pull") { bed.transport.calls(to: "/pull").count == 2 }
        await eventually("the deferral to clear") { await bed.status["deferredReason"] == .null }
        await bed.finish()
    }

    @Test func aPulledSubtaskIsJournaledRunOnTheModelAndItsResultPosted() async throws {
        let bed = try CoordinatorBed()
        bed.transport.script("/pull", .json(200, #"{"subtask":\#(CoordinatorBed.subtask)}"#))
        bed.start()
        await eventually("the result") { bed.transport.calls(to: "/result").count == 1 }
        #expect(await bed.clock.waitForSleep(CoordinatorBed.pullMs))
        #expect(bed.workCalls == ["/register", "/pull", "/api/generate", "/result", "/pull"], "a result is followed by a pull at once")
        let result = try #require(bed.transport.calls(to: "/result").first?.body)
        #expect(result["subtaskId"] == "s1")
        #expect(result["taskId"] == "t1")
        #expect(result["ok"] == true)
        #expect(result["output"] == "hi there")
        let loaded = bed.journal.load(nowMs: bed.clock.wallMs())
        #expect(loaded.journal.isEmpty && loaded.outbox.isEmpty, "delivered: neither journal nor outbox keeps it")
        #expect(await bed.status["subtasksDone"] == 1)
        #expect(await bed.daemon.tasksJSON(limit: nil)["tasks"]?.arrayValue?.first?["state"] == "done")
        await bed.finish()
    }

    @Test func anUndeliveredResultStaysInTheOutboxAndIsPostedAgainAfterBackoff() async throws {
        let bed = try CoordinatorBed()
        bed.transport.script("/pull", .json(200, #"{"subtask":\#(CoordinatorBed.subtask)}"#))
        bed.transport.script("/result", .failure(.couldNotConnect))
        bed.start()
        #expect(await bed.clock.waitForSleep(1_500))
        let waiting = bed.journal.load(nowMs: bed.clock.wallMs())
        #expect(waiting.outbox.map(\.subtaskID) == ["s1"])
        #expect(waiting.journal.isEmpty)
        #expect(await bed.status["outboxDepth"] == 1)
        bed.clock.advance(by: 1_500)
        await eventually("the second post") { bed.transport.calls(to: "/result").count == 2 }
        await eventually("the outbox to empty") { bed.journal.outboxDepth == 0 }
        #expect(bed.transport.calls(to: "/api/generate").count == 1, "the model runs once")
        await bed.finish()
    }
}

@Suite struct CoordinatorCrashRecoveryInProcess {
    @Test func theOutboxIsDeliveredBeforeAJournaledSubtaskRunsAgainAndBeforeAnyPull() async throws {
        let bed = try CoordinatorBed()
        try await bed.journal.record(try bed.entry(pulledAgoMs: 60_000))
        try await bed.journal.complete(SubtaskResult(subtaskID: "s1", taskID: "t1", ok: true, output: "from before", durationMs: 900))
        var second = try bed.entry(pulledAgoMs: 10_000)
        second.subtask.id = "s2"
        try await bed.journal.record(second)
        bed.start()
        #expect(await bed.clock.waitForSleep(CoordinatorBed.pullMs))
        #expect(bed.workCalls == ["/register", "/result", "/api/generate", "/result", "/pull"])
        let posted = bed.transport.calls(to: "/result").compactMap(\.body)
        #expect(posted.map { $0["subtaskId"] } == ["s1", "s2"])
        #expect(posted.first?["output"] == "from before", "the outbox result is posted as it was written")
        #expect(posted.last?["ok"] == true)
        let loaded = bed.journal.load(nowMs: bed.clock.wallMs())
        #expect(loaded.journal.isEmpty && loaded.outbox.isEmpty)
        #expect(await bed.status["subtasksDone"] == 2)
        await bed.finish()
    }

    @Test func aJournaledSubtaskWhoseClaimLivesRunsAgainBoundedByTheBackendTimeoutNotItsOwn() async throws {
        let bed = try CoordinatorBed()
        try await bed.journal.record(try bed.entry(pulledAgoMs: 10_000))
        bed.start()
        await eventually("the rerun's result") { bed.transport.calls(to: "/result").count == 1 }
        let generate = try #require(bed.transport.calls(to: "/api/generate").first)
        #expect(
            generate.totalTimeoutMs == WorkerConfig.Backend().timeoutMs, "the subtask's timeoutMs is advisory; backend.timeoutMs bounds the answer")
        #expect(generate.body?["prompt"] == "say hi")
        #expect(bed.transport.calls(to: "/result").first?.body?["ok"] == true)
        await bed.finish()
    }

    @Test func aJournaledSubtaskWhoseClaimExpiredIsReleasedNeverReportedFailed() async throws {
        let bed = try CoordinatorBed()
        try await bed.journal.record(try bed.entry(pulledAgoMs: 30_000))
        bed.start()
        #expect(await bed.clock.waitForSleep(CoordinatorBed.pullMs))
        #expect(bed.transport.calls(to: "/api/generate").isEmpty, "the coordinator has given it to another agent")
        #expect(bed.transport.calls(to: "/result").isEmpty, "a result would complete it for the whole swarm")
        #expect(bed.transport.calls(to: "/pull").count == 1, "and work goes on")
        #expect(bed.journal.load(nowMs: bed.clock.wallMs()).journal.isEmpty)
        #expect(await bed.daemon.statusJSON()["coordinator"]?["conduct"]?["released"] == 1)
        #expect(await bed.daemon.statusJSON()["counters"]?["subtasksReleased"]?["claim-expired"] == 1)
        let task = try #require(await bed.daemon.tasksJSON(limit: 1)["tasks"]?.arrayValue?.first)
        #expect(task["state"] == "released" && task["id"] == "s1")
        await bed.finish()
    }
}

/// A disk that fails on demand: while `failing`, the operations `matches` picks fail
/// with `errno` (ENOSPC unless told), as the kernel would report them.
final class MockDiskFailure: Sendable {
    private let state = Mutex(false)
    let matches: @Sendable (String, Bool) -> Bool
    let errno: Int32

    init(errno: Int32 = ENOSPC, matches: @escaping @Sendable (_ name: String, _ removal: Bool) -> Bool = { _, _ in true }) {
        self.matches = matches
        self.errno = errno
    }

    var failing: Bool {
        get { state.withLock { $0 } }
        set { state.withLock { $0 = newValue } }
    }

    var fault: @Sendable (String, Bool) -> (any Error)? {
        { [self] name, removal in
            failing && matches(name, removal) ? SystemError(removal ? "unlink" : "open", errno: errno, detail: name) : nil
        }
    }
}

@Suite struct CoordinatorLocalFaultsInProcess {
    static let hostileID = String(repeating: ":", count: 90)

    @Test func aSubtaskIdOfNinetyColonsIsJournaledUnderAFixedLengthNameRunAndAnswered() async throws {
        let bed = try CoordinatorBed()
        let subtask = CoordinatorBed.subtask.replacingOccurrences(of: "\"s1\"", with: "\"\(Self.hostileID)\"")
        bed.transport.script("/pull", .json(200, #"{"subtask":\#(subtask)}"#))
        bed.transport.script("/result", .failure(.couldNotConnect))
        bed.start()
        // The first post fails: the result waits in the outbox, under a name of fixed length.
        #expect(await bed.clock.waitForSleep(1_500))
        let names = bed.directory.names().filter { $0.hasPrefix("outbox-") }
        #expect(names.count == 1)
        #expect(names.first?.utf8.count == WorkJournal.fileName(prefix: "outbox-", id: "s1").utf8.count, "\(names)")
        #expect(names.first == WorkJournal.fileName(prefix: "outbox-", id: Self.hostileID))
        #expect(WorkJournal.legacyFileName(prefix: "outbox-", id: Self.hostileID).utf8.count > 255, "the old name was too long for any file system")
        #expect(bed.journal.load(nowMs: bed.clock.wallMs()).outbox.map(\.subtaskID) == [Self.hostileID], "the id is kept inside the file")
        #expect(bed.transport.calls(to: "/pull").count == 1, "no spin: one pull")
        #expect(bed.transport.calls(to: "/api/generate").count == 1)
        #expect(bed.daemon.writer.problem == nil)
        bed.clock.advance(by: 1_500)
        await eventually("the second post") { bed.transport.calls(to: "/result").count == 2 }
        let result = try #require(bed.transport.calls(to: "/result").last?.body)
        #expect(result["subtaskId"]?.stringValue == Self.hostileID)
        #expect(result["ok"] == true)
        await eventually("the outbox to empty") { bed.journal.outboxDepth == 0 }
        #expect(await bed.clock.waitForSleep(CoordinatorBed.pullMs))
        await bed.finish()
    }

    @Test func aMockedFullDiskReleasesTheSubtaskUnansweredBacksOffAndPullsNothingUntilAWriteSucceeds() async throws {
        // The conduct record is written at registration: failing it too would hold the pull
        // before anything is claimed (the state-unwritable hold), not reach the journal.
        let disk = MockDiskFailure { name, _ in name != WorkerStateFiles.conductFile }
        let bed = try CoordinatorBed(fault: disk.fault)
        await bed.daemon.writer.flush()
        disk.failing = true
        // Registered without a new mesh token: nothing is written before the pull.
        bed.transport.script("/register", .json(200, #"{"accepted":true}"#))
        bed.transport.script("/pull", .json(200, #"{"subtask":\#(CoordinatorBed.subtask)}"#))
        bed.start()
        #expect(await bed.clock.waitForSleep(1_500), "the journal failure backs off like a network failure")
        // Our disk's fault, not the subtask's: no result (it would complete the subtask for
        // the whole swarm); the coordinator gives it to another agent after 30 s.
        #expect(bed.transport.calls(to: "/result").isEmpty)
        #expect(bed.transport.calls(to: "/api/generate").isEmpty, "an unjournaled subtask is never run")
        #expect(await bed.status["consecutiveFailures"] == 1)
        #expect(await bed.status["lastError"]?.stringValue?.hasPrefix("journal s1: ") == true)
        #expect(await bed.status["subtasksFailed"] == 0)
        #expect(await bed.daemon.statusJSON()["counters"]?["subtasksReleased"]?["journal-unwritable"] == 1)
        let task = try #require(await bed.daemon.tasksJSON(limit: 1)["tasks"]?.arrayValue?.first)
        #expect(task["state"] == "released")
        #expect(task["error"]?.stringValue?.contains("ENOSPC") == true || task["error"]?.stringValue?.contains("space") == true, "\(task)")

        // Each further step: one write attempt, no pull, a longer backoff.
        for (step, ceiling) in [(Int64(1_500), Int64(3_000)), (3_000, 6_000), (6_000, 12_000)] {
            bed.clock.advance(by: step)
            #expect(await bed.clock.waitForSleep(ceiling))
            #expect(bed.transport.calls(to: "/pull").count == 1, "no pull while the state directory refuses writes")
        }
        let status = await bed.daemon.statusJSON()
        #expect(status["power"]?["held"]?["state-unwritable"] == 3)
        #expect(status["coordinator"]?["deferredReason"]?.stringValue?.hasPrefix("held: state-unwritable: ") == true)
        #expect(status["daemon"]?["persistenceProblem"]?.stringValue != nil)
        #expect(status["summary"]?.stringValue?.contains("state not writable") == true)
        #expect(await bed.status["consecutiveFailures"] == 4)

        disk.failing = false
        bed.clock.advance(by: 12_000)
        await eventually("a pull once a write succeeds") { bed.transport.calls(to: "/pull").count == 2 }
        #expect(await bed.clock.waitForSleep(CoordinatorBed.pullMs))
        #expect(await bed.status["consecutiveFailures"] == 0)
        #expect(await bed.status["deferredReason"] == .null)
        #expect(bed.daemon.writer.problem == nil)
        #expect(!bed.directory.names().contains(CoordinatorService.probeFile), "the probe is removed")
        await bed.finish()
    }

    @Test func aMockedOutboxFailureForAnUnrunnableSubtaskAnswersItOnceFromMemoryAndBacksOff() async throws {
        let disk = MockDiskFailure { name, removal in !removal && name.hasPrefix("outbox-") }
        let bed = try CoordinatorBed(fault: disk.fault)
        disk.failing = true
        bed.transport.script("/pull", .json(200, #"{"subtask":{"id":"u1","taskId":"t1","kind":"single_step"}}"#))
        bed.start()
        #expect(await bed.clock.waitForSleep(1_500))
        let answers = bed.transport.calls(to: "/result").compactMap(\.body)
        #expect(answers.map { $0["subtaskId"] } == ["u1"], "answered once")
        #expect(answers.first?["ok"] == false)
        #expect(await bed.status["lastError"]?.stringValue?.hasPrefix("outbox u1: ") == true)
        #expect(bed.transport.calls(to: "/pull").count == 1)
        disk.failing = false
        bed.clock.advance(by: 1_500)
        await eventually("pulling again once a write succeeds") { bed.transport.calls(to: "/pull").count == 2 }
        #expect(bed.transport.calls(to: "/result").count == 1)
        await bed.finish()
    }

    @Test func aMockedRemovalFailureAfterDeliveryBacksOffAndNeverPostsTheResultTwice() async throws {
        let disk = MockDiskFailure(errno: EROFS) { name, removal in removal && name.hasPrefix("outbox-") }
        let bed = try CoordinatorBed(fault: disk.fault)
        disk.failing = true
        bed.transport.script("/pull", .json(200, #"{"subtask":\#(CoordinatorBed.subtask)}"#))
        bed.start()
        #expect(await bed.clock.waitForSleep(1_500), "the session restarts after a backoff, not at once")
        #expect(await bed.status["lastError"]?.stringValue?.hasPrefix("local failure: ") == true)
        #expect(bed.transport.calls(to: "/result").count == 1)
        #expect(bed.journal.outboxDepth == 1, "the read-only directory kept the file")
        #expect(await bed.status["subtasksDone"] == 1)

        disk.failing = false
        bed.clock.advance(by: 1_500)
        await eventually("the delivered file to go") { bed.journal.outboxDepth == 0 }
        #expect(await bed.clock.waitForSleep(CoordinatorBed.pullMs))
        #expect(bed.transport.calls(to: "/result").count == 1, "delivered once: the session remembers what the coordinator took")
        #expect(bed.transport.calls(to: "/api/generate").count == 1)
        await bed.finish()
    }
}

/// Stands in for the container engine in the one failure a test cannot cause on purpose at
/// the right moment: the engine that passed the check is gone when the program runs.
final class MockedVanishingEngine: ProgramSandbox, Sendable {
    let checks = Mutex(0)
    func check() async -> SandboxAvailability {
        checks.withLock { $0 += 1 }
        return .usable("mocked engine")
    }
    func run(_ language: CodeLanguage, code: String) async -> ProgramRun {
        ProgramRun(ending: .engineFailed("mocked: the engine vanished"))
    }
}

@Suite struct CodeSubtasksInProcess {
    static let codeSubtask = #"{"id":"c1","taskId":"t1","input":"print one","language":"python","timeoutMs":30000}"#

    @Test func aMockedEngineVanishingMidSubtaskReleasesItUnpostedAndLooksAtTheEngineAgain() async throws {
        let engine = MockedVanishingEngine()
        let bed = try CoordinatorBed(sandbox: engine)
        bed.transport.script("/pull", .json(200, #"{"subtask":\#(Self.codeSubtask)}"#))
        bed.start()
        await eventually("the registration") { !bed.transport.calls(to: "/register").isEmpty }
        #expect(bed.transport.calls(to: "/register").first?.body?["sandboxMode"] == "docker", "a usable engine is registered as docker")
        await eventually("the release") { await bed.daemon.statusJSON()["counters"]?["subtasksReleased"]?["host-failure"] == 1 }
        #expect(bed.transport.calls(to: "/result").isEmpty, "the host's fault completes nothing for the swarm")
        #expect(bed.transport.calls(to: "/api/generate").count == 2, "a plan and a program were asked for, then the engine failed")
        let task = try #require(await bed.daemon.tasksJSON(limit: 1)["tasks"]?.arrayValue?.first)
        #expect(
            task["state"] == "released" && task["error"]?.stringValue?.hasPrefix("sandbox_unavailable: mocked: the engine vanished") == true,
            "\(task)")
        await eventually("a second look at the engine") { engine.checks.withLock { $0 } >= 2 }
        await bed.finish()
    }

    @Test func withoutASandboxACodeSubtaskIsAnsweredWithTheModelsText() async throws {
        let bed = try CoordinatorBed()
        bed.transport.script("/pull", .json(200, #"{"subtask":\#(Self.codeSubtask)}"#))
        bed.start()
        await eventually("the result") { !bed.transport.calls(to: "/result").isEmpty }
        let result = try #require(bed.transport.calls(to: "/result").first?.body)
        #expect(result["ok"] == true && result["output"] == "hi there")
        #expect(bed.transport.calls(to: "/register").first?.body?["sandboxMode"] == "none")
        #expect(await bed.daemon.statusJSON()["execution"]?["answering"] == "text")
        await bed.finish()
    }

    @Test func withoutAnEngineModeOnLooksAgainLessAndLessOftenAndAtOnceWhenAsked() async throws {
        // A real ContainerSandbox whose engine is not installed: unusable, found without a spawn.
        let bed = try CoordinatorBed(sandbox: ContainerSandbox(.init(engine: "/nonexistent/podman")))
        bed.start()
        func checked() async -> Int64 { await bed.daemon.execution.checkedAtMs ?? -1 }
        await eventually("the first look") { await checked() >= 0 }
        #expect(await bed.daemon.execution.sandbox == .unusable("/nonexistent/podman is not an executable file (apt-get install podman)"))
        for wait: Int64 in [60_000, 120_000, 240_000] {
            #expect(await bed.clock.waitForSleep(wait), "the next look after \(wait) ms")
            let before = await checked()
            bed.clock.advance(by: wait)
            await eventually("the look after \(wait) ms") { await checked() > before }
        }
        #expect(await bed.clock.waitForSleep(480_000))
        let before = await checked()
        // The clock moves first: a look made at once, before it moved, would be stamped with
        // the time of the last one and never count as a new look (seen under load, run54).
        bed.clock.advance(by: 1)
        bed.daemon.signals.sandboxCheckRequested.set(true)
        await eventually("a look at once when asked (a reload)") { await checked() > before }
        #expect(await bed.clock.waitForSleep(960_000), "asking is no success: the pause goes on growing, up to 16 minutes")
        await bed.finish()
    }

    @Test func executionModeContainerWithoutAnEngineHoldsPulls() async throws {
        let bed = try CoordinatorBed(configure: { $0.execution.mode = .container })
        bed.start()
        await eventually("the hold") { await bed.daemon.statusJSON()["execution"]?["answering"] == "held" }
        #expect(await bed.clock.waitForSleep(CoordinatorBed.pullMs))
        #expect(bed.transport.calls(to: "/pull").isEmpty, "nothing is claimed that could not run")
        let status = await bed.status
        #expect(status["deferredReason"]?.stringValue?.contains("sandbox-unavailable") == true, "\(status)")
        await bed.finish()
    }
}
