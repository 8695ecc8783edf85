import HTTP
import Logging
import ModelBackend
import Posix
import StateStore
import Systemd
import Tasks
import WorkerCore

/// Mode `on`: registers, heartbeats, pulls, runs subtasks on the model backend and
/// posts results, with the journal and outbox of docs/reference/protocol-coordinator.md. Runs only while the daemon's
/// `on` runtime is active; the session ends gracefully when it is not.
public struct CoordinatorService: Service {
    public let name = "coordinator"
    let daemon: WorkerState
    let config: WorkerConfig
    let directory: StateDirectory
    let logger: Logger
    let backend: ModelBackend
    let transport: any HTTPTransport
    let clock: any WorkerClock
    /// The service manager's notification socket (sd_notify), for EXTEND_TIMEOUT_USEC.
    let notify: @Sendable (String) -> Void
    /// Where code subtasks' programs run; nil: never (every subtask answered as text).
    let sandbox: (any ProgramSandbox)?
    /// While no container engine is usable, mode on looks again this often.
    let sandboxRecheckMs: Int64

    /// While a stop waits for a subtask, systemd is told this often that the stop goes on.
    static let stopExtensionStepMs: Int64 = 5_000

    /// `transport` carries both the coordinator's calls and the model server's; `clock`
    /// paces heartbeats, pulls and backoff and stamps the journal; `notify` reaches systemd.
    public init(
        daemon: WorkerState, config: WorkerConfig, directory: StateDirectory, logger: Logger,
        transport: any HTTPTransport = HTTPClient.shared, clock: any WorkerClock = SystemClock(),
        notify: @escaping @Sendable (String) -> Void = { ServiceManager.notify($0) },
        sandbox: (any ProgramSandbox)? = nil, sandboxRecheckMs: Int64 = 60_000
    ) {
        self.sandbox = sandbox
        self.sandboxRecheckMs = sandboxRecheckMs
        self.daemon = daemon
        self.config = config
        self.directory = directory
        self.logger = logger
        self.backend = ModelBackend(config: config.backend, client: transport)
        self.transport = transport
        self.clock = clock
        self.notify = notify
    }

    /// The pull interval in force (a reload changes it without ending the session).
    func pullIntervalMs() async -> Int64 { await daemon.config.coordinator.pullIntervalMs }

    public func run(shutdown: GracefulShutdown) async throws {
        // The session is stopped gracefully (it finishes its subtask), never cancelled.
        await runWhileActive(daemon.signals.runtime(for: Self.mode), shutdown: shutdown) { stop in
            await session(stop: stop)
            await daemon.updateCoordinator(nil)
        }
    }

    /// One session: recovery, registration, then heartbeats and work until `stop`.
    func session(stop: GracefulShutdown) async {
        // The coordinator's address and token as in force now: a reload takes them while
        // mode on is stopped (configuration, Reloading), and each session starts with them.
        var config = config
        let live = await daemon.config.coordinator
        config.coordinator.url = live.url
        config.coordinator.allowInsecureHttp = live.allowInsecureHttp
        config.coordinator.registrationToken = live.registrationToken
        let link = CoordinatorLink(
            config: config, agentID: daemon.agentID, files: WorkerStateFiles(directory: directory),
            daemon: daemon, logger: logger, transport: transport, clock: clock)
        let journal = WorkJournal(writer: daemon.writer)
        await link.update { $0.outboxDepth = journal.outboxDepth }
        logger.info("coordinator session starting (\(config.coordinator.url ?? "?"))")
        // The registration says whether programs run in a container (sandboxMode), so the
        // engine is looked at first; the look is bounded by its own timeouts.
        await daemon.forgetSandbox()
        daemon.signals.sandboxCheckRequested.set(false)  // this look answers any asked while mode on was stopped
        _ = try? await stop.cancelling { await checkSandbox() }
        while !stop.isTriggered {
            do {
                // Registration and the heartbeat loop end at once on stop; the work loop
                // finishes its running subtask first (bounded by stopGraceMs).
                _ = try await stop.cancelling { try await link.ensureRegistered() }
                if stop.isTriggered { break }
                // The session lasts as long as the work loop, which finishes its subtask on
                // stop; heartbeats end at once, and a heartbeat rejection ends the work too.
                _ = try await race(
                    { try await work(link, journal: journal, stop: stop) },
                    {
                        _ = try await stop.cancelling { try await heartbeats(link) }
                        await suspendUntilCancelled()
                    })
            } catch CoordinatorLink.Stop.rejected(let reason) {
                await link.rejected(reason)
                _ = try? await stop.cancelling { try await clock.sleep(milliseconds: CoordinatorLink.rejectionRetryMs) }
                await link.clearRejection()
            } catch {
                if stop.isTriggered { break }
                // A local failure (journal or outbox not writable, …) waits like a network
                // one: restarting at once pulled a thousand times a second.
                let delay = await link.failed("local failure: \(error)")
                _ = try? await pause(delay, stop: stop)
            }
        }
        logger.info("coordinator session stopped")
    }

    /// Looks at the container engine (when `execution.mode` may use it) and publishes what
    /// it found; a change of `sandboxMode` is sent with a heartbeat at once.
    func checkSandbox() async {
        guard let sandbox else {
            await daemon.updateSandbox(.unusable("this daemon was started without a container sandbox"))
            return
        }
        guard await daemon.config.execution.mode != .text else {
            await daemon.updateSandbox(.unusable("not looked at: execution.mode is text"))
            return
        }
        let before = await daemon.execution.decision.sandboxMode
        let previous = await daemon.execution.sandbox
        let found = await sandbox.check()
        await daemon.updateSandbox(found)
        // Said once per session and reason, not at every look of the minute.
        if case .unusable(let why) = found, found != previous { logger.warning("no container engine for code subtasks: \(why)") }
        if await daemon.execution.decision.sandboxMode != before { daemon.signals.heartbeatRequested.set(true) }
    }

    /// Beside the heartbeats: while no engine is usable, looks again after
    /// `sandboxRecheckMs`, doubling up to 16 times that (each look starts the engine: on a
    /// host that never builds the image, a minute's look would cost more CPU than the
    /// heartbeats); at once when asked (a reload, a run that says the engine failed). While
    /// one is usable, only when asked.
    func watchSandbox() async throws {
        guard sandbox != nil else { return }
        let asked = daemon.signals.sandboxCheckRequested
        var misses = 0
        while true {
            let usable = if case .usable = await daemon.execution.sandbox { true } else { false }
            misses = usable ? 0 : misses + 1
            let clock = self.clock, wait = sandboxRecheckMs << Int64(min(max(misses - 1, 0), 4))
            _ = try await race(
                {
                    if usable { await suspendUntilCancelled() } else { try await clock.sleep(milliseconds: wait) }
                }, { await asked.wait(for: true) })
            try Task.checkCancellation()
            asked.set(false)
            await checkSandbox()
        }
    }

    /// Every heartbeatIntervalMs, with telemetry; 401 re-registers, blacklisting stops.
    /// A model switch asked in an answer runs beside the heartbeats, which go on.
    func heartbeats(_ link: CoordinatorLink) async throws {
        let switcher = ModelSwitcher(
            link: link, daemon: daemon, backend: backend, config: config, clock: clock,
            logger: logger, holdPollMs: config.coordinator.pullIntervalMs)
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { try await watchSandbox() }
            while true {
                try await heartbeat(link)
                link.firstHeartbeat.set(true)
                // A heartbeat asked for (before a suspend, after a resume) is sent.
                let requested = daemon.signals.heartbeatRequested
                if requested.value { requested.set(false) }
                if let request = await link.takeSwitchRequest() {
                    group.addTask { await switcher.run(request) }
                }
                // Read each time: a reload applies it without ending the session.
                let interval = await daemon.config.coordinator.heartbeatIntervalMs
                let clock = self.clock
                _ = try await race({ try await clock.sleep(milliseconds: interval) }, { await requested.wait(for: true) })
            }
        }
    }

    /// One heartbeat (registering first when needed).
    func heartbeat(_ link: CoordinatorLink) async throws {
        while true {
            try await link.ensureRegistered()
            switch try await link.call(.heartbeat, await link.heartbeatBody()) {
            case .accepted:
                // A heartbeat's success says nothing about pulls and results: their
                // failure count (and backoff) is reset only by their own successes.
                await link.update { $0.heartbeatFailures = 0 }
                await daemon.count { $0.heartbeat(accepted: true) }
                await link.heartbeatTaken()
            case .unauthorized(let reason):
                await daemon.count { $0.heartbeat(accepted: false) }
                await link.forgetRegistration(reason)
                continue
            case .rejected(let reason):
                await daemon.count { $0.heartbeat(accepted: false) }
                throw CoordinatorLink.Stop.rejected(reason)
            case let other:
                await link.update {
                    $0.heartbeatFailures += 1; $0.lastError = "heartbeat: \(other.failureText)"
                }
                await daemon.count { $0.heartbeat(accepted: false) }
                logger.warning("heartbeat failed: \(other.failureText)")
            }
            return
        }
    }

    /// Recovery first (outbox, then journal), then pull / run / post until stopped.
    func work(_ link: CoordinatorLink, journal: WorkJournal, stop: GracefulShutdown) async throws {
        // The first heartbeat tells whether the coordinator now sees a gap (mode off, a
        // suspend): a result or a pull before it could be one evaluation too many.
        guard try await stop.cancelling({ await link.firstHeartbeat.wait(for: true) }) != nil else { return }
        let found = journal.load(nowMs: clock.wallMs())
        for file in found.recovered { logger.error("journal file \(file.file) \(file.problem); kept as \(file.movedTo)") }
        let plan = RecoveryPlan.plan(journal: found.journal, outbox: found.outbox, nowMs: clock.wallMs())
        // Subtasks run again at recovery; a released one handed out again is new work.
        var rerun: Set<String> = []
        for case .rerun(let entry) in plan { rerun.insert(entry.subtask.id) }
        for action in plan {
            if stop.isTriggered { return }
            switch action {
            case .post(let result):
                if await link.deliveredNotRemoved.contains(result.subtaskID) {
                    try await journal.delivered(result.subtaskID)
                    await link.markDelivered(result.subtaskID, removed: true)
                    continue
                }
                logger.notice("delivering the result of \(result.subtaskID) left in the outbox", [("subtask", result.subtaskID)])
                try await post(result, link: link, journal: journal, stop: stop)
            case .rerun(let entry):
                logger.notice("running subtask \(entry.subtask.id) again: it was running when the worker stopped", [("subtask", entry.subtask.id)])
                try await runAndPost(entry, link: link, journal: journal, stop: stop)
            case .release(let entry):
                logger.notice(
                    "releasing subtask \(entry.subtask.id): it was claimed \((clock.wallMs() - entry.pulledAtMs) / 1_000) s ago, so the coordinator has given it (or will give it) to another agent",
                    [("subtask", entry.subtask.id)])
                try await journal.release(entry.subtask.id)
                await daemon.updateConduct { $0.releasedWithoutFault() }
                await daemon.count { $0.released(.claimExpired) }
                await recordReleased(entry.subtask, started: entry.pulledAtMs, why: "released: the claim expired while the worker was down")
            }
        }

        while !stop.isTriggered {
            if let held = await daemon.admitNewWork() {
                await link.update { $0.deferredReason = "held by the power policy: \(held.rawValue)" }
                try await pause(await pullIntervalMs(), stop: stop)
                continue
            }
            if let held = await daemon.hostHold() {
                await link.update { $0.deferredReason = "held: \(held.rawValue): \(held.explanation)" }
                try await pause(await pullIntervalMs(), stop: stop)
                continue
            }
            if let problem = await daemon.stateHold() {
                await link.update { $0.deferredReason = "held: \(LocalHoldReason.stateUnwritable.rawValue): \(problem)" }
                if await probeStateDirectory() { continue }
                try await pause(await link.failed("held until the state directory takes writes: \(problem)"), stop: stop)
                continue
            }
            if let (reason, detail, quiet) = await localHold() {
                await daemon.countHold(reason)
                await link.noteWorkHold(reason, detail: detail, event: !quiet)
                if reason == .modelUnavailable {
                    // The hold lifts the moment the probe sees the model ready: pull then.
                    let interval = await pullIntervalMs(), ready = daemon.signals.modelReady
                    _ = try await race({ try await self.pause(interval, stop: stop) }, { await ready.wait(for: true) })
                } else {
                    try await pause(await pullIntervalMs(), stop: stop)
                }
                continue
            }
            await link.noteWorkHold(nil, detail: "")
            guard try await stop.cancelling({ try await link.ensureRegistered() }) != nil else { return }
            // A pull cut short by the stop is re-queued by the coordinator; nothing runs half-claimed.
            guard let answer = try await stop.cancelling({ try await link.call(.pull, CoordinatorWire.pull(agentID: daemon.agentID)) }) else {
                return
            }
            switch answer {
            case .noWork:
                await link.update {
                    $0.deferredReason = nil; $0.consecutiveFailures = 0; $0.backoffMs = nil
                }
                try await pause(await pullIntervalMs(), stop: stop)
            case .work(let subtask):
                await link.update { $0.deferredReason = nil }
                await daemon.updateConduct { $0.claimed(atMs: clock.wallMs()) }
                let entry = RecoveryPlan.JournalEntry(subtask: subtask, pulledAtMs: clock.wallMs())
                if rerun.contains(subtask.id) {
                    // Handled at recovery; pulling again at once would spin on a coordinator that repeats it.
                    try await pause(await pullIntervalMs(), stop: stop)
                    continue
                }
                do {
                    try await journal.record(entry)
                } catch {
                    // Unjournaled, a crash could lose it: not run and not answered (the
                    // fault is our disk's, not the subtask's): the coordinator gives it to
                    // another agent, and the loop backs off and holds new work while the
                    // directory refuses writes.
                    logger.error("subtask \(subtask.id) could not be journaled (\(error)); released for another agent", [("subtask", subtask.id)])
                    await daemon.updateConduct { $0.releasedWithoutFault() }
                    await daemon.count { $0.released(.journalUnwritable) }
                    await recordReleased(
                        subtask, started: entry.pulledAtMs,
                        why: "released: the journal could not be written: \(printable(String(describing: error), limit: 300))")
                    try await pause(await link.failed("journal \(subtask.id): \(error)"), stop: stop)
                    continue
                }
                await link.update {
                    $0.consecutiveFailures = 0; $0.backoffMs = nil
                }
                try await runAndPost(entry, link: link, journal: journal, stop: stop)
            // At once after a result: no pause.
            case .unrunnable(let id, let taskID, let reason):
                await daemon.updateConduct { $0.claimed(atMs: clock.wallMs()) }
                let result = SubtaskResult.unrunnable(subtaskID: id, taskID: taskID, reason: reason)
                if let rules = await monitorWouldFlag(result) {
                    logger.warning(
                        "subtask \(id) cannot be run (\(reason)) but its answer is not posted: the coordinator's monitor would count it (\(rules)); released",
                        [("subtask", id)])
                    await daemon.updateConduct { $0.releasedWithoutFault() }
                    await daemon.count { $0.released(.monitorWouldFlag) }
                    continue
                }
                let stored: SubtaskResult
                do {
                    stored = try await journal.complete(result)
                } catch {
                    logger.error(
                        "the answer to unrunnable subtask \(id) could not be written to the outbox (\(error)); posting it once from memory",
                        [("subtask", id)])
                    await answerUnstored(result, prompt: "", link: link)
                    try await pause(await link.failed("outbox \(id): \(error)"), stop: stop)
                    continue
                }
                try await post(stored, link: link, journal: journal, stop: stop)
            case .sandboxRequired(let reason):
                await daemon.countHold(.sandboxRequired)
                await link.noteWorkHold(.sandboxRequired, detail: "coordinator: \(reason)")
                try await pause(await pullIntervalMs(), stop: stop)
            case .deferred(let reason, let deferMs):
                await link.update { $0.deferredReason = "coordinator: \(reason)" }
                try await pause(deferMs != nil ? deferMs! : await pullIntervalMs(), stop: stop)
            case .unauthorized(let reason):
                await link.forgetRegistration(reason)
            case .rejected(let reason):
                throw CoordinatorLink.Stop.rejected(reason)
            case let other:
                try await pause(await link.failed("pull: \(other.failureText)"), stop: stop)
            }
        }
    }

    /// One small write and its removal: succeeds once the state directory takes writes
    /// again, which ends the hold (the writer's problem clears with any success).
    func probeStateDirectory() async -> Bool {
        do {
            try await daemon.writer.write(CoordinatorService.probeFile, Array(repeating: UInt8(ascii: "\n"), count: 4_096))
            try await daemon.writer.remove(CoordinatorService.probeFile)
            return true
        } catch {
            return false
        }
    }

    static let probeFile = "write-check"

    /// Posts a result that could not be stored, once and best effort: without a file it
    /// cannot be retried across a restart, and the coordinator re-queues an unanswered
    /// subtask on its own timeout.
    func answerUnstored(_ result: SubtaskResult, prompt: String, link: CoordinatorLink) async {
        let started = clock.wallMs() - result.durationMs
        var record = TaskRecord(id: result.subtaskID, source: .coordinator, origin: result.taskID, prompt: prompt, startedAtMs: started)
        record.finish(ok: result.ok, output: result.output, error: result.error, atMs: started + result.durationMs, state: .failed)
        await daemon.upsertTask(record)
        switch try? await link.call(.result, CoordinatorWire.result(result, agentID: daemon.agentID)) {
        case .accepted?:
            await link.update { if result.ok { $0.subtasksDone += 1 } else { $0.subtasksFailed += 1 } }
            await daemon.count { $0.subtaskAnswered(ok: result.ok) }
        case let other:
            logger.warning(
                "the answer to subtask \(result.subtaskID) was not delivered (\(other?.failureText ?? "cancelled")); the coordinator's timeout re-queues it",
                [("subtask", result.subtaskID)])
        }
    }

    /// Sleeps, but wakes when the session stops.
    func pause(_ ms: Int64, stop: GracefulShutdown) async throws {
        let clock = self.clock
        _ = try await stop.cancelling { try await clock.sleep(milliseconds: ms) }
    }

    /// Runs a journaled subtask (bounded by its timeout; on stop, by stopGraceMs), moves
    /// it to the outbox and posts it. A subtask cut off by the stop stays in the journal.
    func runAndPost(_ entry: RecoveryPlan.JournalEntry, link: CoordinatorLink, journal: WorkJournal, stop: GracefulShutdown) async throws {
        let subtask = entry.subtask
        let started = clock.wallMs()
        var record = TaskRecord(id: subtask.id, source: .coordinator, origin: subtask.taskID, prompt: subtask.input, startedAtMs: started)
        await daemon.upsertTask(record)
        logger.info("running subtask \(subtask.id) of task \(subtask.taskID)", [("subtask", subtask.id), ("task", subtask.taskID)])
        await link.update { $0.running = subtask.id }
        // The subtask's timeoutMs is advisory: the coordinator takes a late result, and an
        // answer cut at it would be a failure the swarm gains nothing from. The operator's
        // backend.timeoutMs bounds it.
        let backend = self.backend.using(model: await daemon.activeModel)
        let clock = self.clock
        let grace = config.coordinator.stopGraceMs
        // A code subtask's program runs in the container when one is in force; otherwise
        // (and for a subtask without a language) the model's text answers it.
        let coder: CodeSubtaskRunner? =
            if let sandbox, subtask.language != nil, await daemon.execution.decision.answering == .container {
                CodeSubtaskRunner(backend: backend, sandbox: sandbox, maxTokens: Int(config.backend.maxTokens), timeoutMs: config.backend.timeoutMs)
            } else {
                nil
            }
        if coder != nil {
            logger.info(
                "subtask \(subtask.id) is \(subtask.language?.rawValue ?? "?") code: its program runs in the sandbox", [("subtask", subtask.id)])
        }
        // The work races the stop plus its grace; losing leaves the journal entry.
        let outcome: SubtaskFault?
        switch await race(
            { () async -> SubtaskFault in
                if let coder, let language = subtask.language {
                    let loop = await coder.run(task: subtask.input, language: language)
                    if case .success(.engineFailed) = loop { daemon.signals.sandboxCheckRequested.set(true) }
                    return SubtaskFault.classify(loop)
                }
                let request = ModelRequest(prompt: subtask.input, maxTokens: Int(config.backend.maxTokens), timeoutMs: config.backend.timeoutMs)
                do throws(ModelError) { return SubtaskFault.classify(.success(try await backend.generate(request))) } catch {
                    return SubtaskFault.classify(Result<ModelOutput, ModelError>.failure(error))
                }
            },
            {
                await stop.wait()
                // Cancelled (not stopped) when the answer won the race: nothing to extend.
                guard !Task.isCancelled else { return }
                await extendStop(grace: grace, subtask: subtask.id)
            })
        {
        case .first(let result): outcome = result
        case .second: outcome = nil
        }
        await link.update { $0.running = nil }
        guard let outcome else {
            logger.warning(
                "stopping: subtask \(subtask.id) did not finish within the grace; it stays in the journal and runs again at the next start if its timeout allows",
                [("subtask", subtask.id)])
            record.finish(ok: false, output: "", error: "interrupted", atMs: clock.wallMs(), state: .interrupted)
            await daemon.upsertTask(record)
            throw CancellationError()
        }
        let ended = clock.wallMs()
        let result: SubtaskResult
        switch outcome {
        case .program(true, let output, let error):
            await daemon.updateConduct { $0.localSuccess() }
            result = SubtaskResult(subtaskID: subtask.id, taskID: subtask.taskID, ok: true, output: output, error: error, durationMs: ended - started)
            if let rules = await monitorWouldFlag(result) {
                logger.warning(
                    "subtask \(subtask.id)'s program printed \(output.utf16.count) characters in \(result.durationMs) ms; the coordinator's monitor may count it (\(rules))",
                    [("subtask", subtask.id)])
            }
        case .program(false, let output, let error):
            // The model did its part; the program failed as it would on any agent.
            await daemon.updateConduct { $0.localSuccess() }
            result = SubtaskResult(
                subtaskID: subtask.id, taskID: subtask.taskID, ok: false, output: output, error: error ?? "the program failed",
                durationMs: ended - started)
            if let rules = await monitorWouldFlag(result) {
                logger.warning(
                    "subtask \(subtask.id)'s program failed but the failure is not posted: the coordinator's monitor would count it (\(rules)); released",
                    [("subtask", subtask.id)])
                try await release(subtask, journal: journal, record: &record, why: "program failed", fault: false, counted: .monitorWouldFlag)
                return
            }
        case .none(let text):
            await daemon.updateConduct { $0.localSuccess() }
            result = SubtaskResult(subtaskID: subtask.id, taskID: subtask.taskID, ok: true, output: text, durationMs: ended - started)
            if let rules = await monitorWouldFlag(result) {
                // Honest and posted as it is: padding or delaying it to look human would be the lie.
                logger.warning(
                    "subtask \(subtask.id) answered in \(result.durationMs) ms with \(text.utf16.count) characters; the coordinator's monitor may count it (\(rules))",
                    [("subtask", subtask.id)])
            }
        case .subtask(let reason):
            result = SubtaskResult.unrunnable(subtaskID: subtask.id, taskID: subtask.taskID, reason: reason, durationMs: ended - started)
            if let rules = await monitorWouldFlag(result) {
                logger.warning(
                    "subtask \(subtask.id) failed (\(reason)) but the failure is not posted: the coordinator's monitor would count it (\(rules)); released",
                    [("subtask", subtask.id)])
                try await release(subtask, journal: journal, record: &record, why: reason, fault: true, counted: .monitorWouldFlag)
                return
            }
        case .host(let reason, let backendDown):
            if backendDown { await daemon.updateModel(state: "unavailable", detail: "a subtask's generation failed: \(reason)") }
            try await release(subtask, journal: journal, record: &record, why: reason, fault: true, counted: .hostFailure)
            return
        }
        let stored: SubtaskResult
        do {
            stored = try await journal.complete(result)
        } catch {
            // Posted from memory rather than run again: the journal entry stays until the
            // coordinator has it, so a crash meanwhile still reruns it. The next pull
            // waits for the state directory (the writer's problem holds it).
            logger.error(
                "the result of \(subtask.id) could not be written to the outbox (\(error)); posting it from memory", [("subtask", subtask.id)])
            stored = result.bounded
        }
        await recordResult(stored, prompt: subtask.input, started: started)
        try await post(stored, link: link, journal: journal, stop: stop)
    }

    /// Waits out the stop's grace for a running subtask, telling systemd every few
    /// seconds that the stop goes on (EXTEND_TIMEOUT_USEC), so a stopGraceMs longer
    /// than the unit's TimeoutStopSec is not cut by SIGKILL. Each extension covers the
    /// next step plus one more, for the result's post after the subtask ends.
    func extendStop(grace: Int64, subtask: String) async {
        var left = grace
        logger.notice("stopping: waiting up to \(grace) ms for subtask \(subtask) to finish (coordinator.stopGraceMs)", [("subtask", subtask)])
        while left > 0 {
            let step = min(left, CoordinatorService.stopExtensionStepMs)
            notify(
                "EXTEND_TIMEOUT_USEC=\((step + CoordinatorService.stopExtensionStepMs) * 1_000)\nSTATUS=stopping: waiting up to \(left) ms for subtask \(subtask)"
            )
            do { try await clock.sleep(milliseconds: step) } catch { return }
            left -= step
        }
    }

    func recordResult(_ result: SubtaskResult, prompt: String, started: Int64) async {
        var record = TaskRecord(id: result.subtaskID, source: .coordinator, origin: result.taskID, prompt: prompt, startedAtMs: started)
        record.finish(ok: result.ok, output: result.output, error: result.error, atMs: started + result.durationMs, state: .posting)
        await daemon.upsertTask(record)
    }

    /// Gives a claimed subtask back unanswered: its journal entry goes, nothing is posted,
    /// and the coordinator hands it to another agent once the claim expires (30 s). A
    /// result would complete it for the whole swarm; the fault was this host's.
    func release(
        _ subtask: Subtask, journal: WorkJournal, record: inout TaskRecord, why: String, fault: Bool,
        counted reason: SubtaskReleaseReason
    ) async throws {
        try await journal.release(subtask.id)
        await daemon.count { $0.released(reason) }
        let now = clock.wallMs()
        let failures = await daemon.updateConduct { conduct -> Int in
            if fault { conduct.localFailure(atMs: now) } else { conduct.releasedWithoutFault() }
            return conduct.consecutiveLocalFailures
        }
        record.finish(ok: false, output: "", error: why, atMs: now, state: .released)
        await daemon.upsertTask(record)
        logger.warning("subtask \(subtask.id) released for another agent (\(why)); local failures in a row: \(failures)", [("subtask", subtask.id)])
    }

    /// Records a subtask released before it ran.
    func recordReleased(_ subtask: Subtask, started: Int64, why: String) async {
        var record = TaskRecord(id: subtask.id, source: .coordinator, origin: subtask.taskID, prompt: subtask.input, startedAtMs: started)
        record.finish(ok: false, output: "", error: why, atMs: clock.wallMs(), state: .released)
        await daemon.upsertTask(record)
    }

    /// The monitor's rules that posting `result` now would newly trip, named; nil when none.
    func monitorWouldFlag(_ result: SubtaskResult) async -> String? {
        let now = clock.wallMs()
        let conduct = await daemon.coordinator.conduct
        let before = Set(conduct.findings(nowMs: now))
        let candidate = CoordinatorConduct.Posted(atMs: now, ok: result.ok, output: result.output, durationMs: result.durationMs)
        let new = conduct.findings(nowMs: now, adding: candidate).filter { !before.contains($0) }
        return new.isEmpty ? nil : new.map(\.rawValue).joined(separator: ", ")
    }

    /// Why pulling must wait for a reason of the worker's own: a hold its conduct record
    /// keeps (a heartbeat gap, the circuit breaker), or a model backend that is not ready.
    /// `quiet` when the probe has not looked yet since the mode began (a moment at each mode on).
    func localHold() async -> (LocalHoldReason, String, quiet: Bool)? {
        let now = clock.wallMs()
        if let hold = await daemon.coordinator.conduct.pullHold(nowMs: now) {
            return (hold.reason, "until \(formatUTC(milliseconds: hold.untilMs)): \(hold.reason.explanation)", false)
        }
        if let model = await daemon.modelNotReady { return (.modelUnavailable, model.why, !model.probed) }
        let execution = await daemon.execution
        if execution.decision.answering == .held { return (.sandboxUnavailable, execution.decision.why, execution.sandbox == .unknown) }
        return nil
    }

    /// Posts an outbox result until a 2xx (backing off on failures), then removes it.
    /// Exactly once: it leaves the outbox only after the coordinator took it.
    /// On stop, a result that cannot be delivered stays in the outbox for the next start.
    func post(_ result: SubtaskResult, link: CoordinatorLink, journal: WorkJournal, stop: GracefulShutdown) async throws {
        await link.update { $0.outboxDepth = journal.outboxDepth }
        // While stopping, one attempt is still made (the subtask finished within the
        // grace); if it fails, the result waits in the outbox for the next start.
        var counted = false
        while true {
            if stop.isTriggered {
                guard await link.registered else { throw CancellationError() }
            } else {
                guard try await stop.cancelling({ try await link.ensureRegistered() }) != nil else { throw CancellationError() }
            }
            // Each result is an evaluation by the coordinator's monitor: after a heartbeat
            // gap, one more may be the one that bans. It waits in the outbox instead.
            let now = clock.wallMs()
            let conduct = await daemon.coordinator.conduct
            if !conduct.mayBeEvaluated(nowMs: now) {
                if stop.isTriggered { throw CancellationError() }
                let until = conduct.pullHold(nowMs: now)?.untilMs ?? now + 60_000
                await link.update {
                    $0.deferredReason =
                        "held: \(LocalHoldReason.heartbeatGap.rawValue): the result of \(result.subtaskID) waits in the outbox until \(formatUTC(milliseconds: until))"
                }
                try await pause(max(1_000, min(until - now, 60_000)), stop: stop)
                continue
            }
            if !counted {
                counted = true
                await daemon.updateConduct {
                    $0.posting(CoordinatorConduct.Posted(atMs: now, ok: result.ok, output: result.output, durationMs: result.durationMs))
                }
            }
            switch try await link.call(.result, CoordinatorWire.result(result, agentID: daemon.agentID)) {
            case .accepted:
                // Taken: whatever happens to the files now, this session never posts it again.
                await link.markDelivered(result.subtaskID, removed: false)
                logger.info(
                    "delivered the result of subtask \(result.subtaskID) (ok: \(result.ok))",
                    [("subtask", result.subtaskID), ("task", result.taskID)])
                await daemon.count { $0.subtaskAnswered(ok: result.ok) }
                await daemon.markTaskPosted(result.subtaskID, ok: result.ok)
                var removal: (any Error)?
                do { try await journal.delivered(result.subtaskID) } catch { removal = error }
                // The count and the outbox change in one status update: a reader never sees
                // a result counted as done while it still waits in the outbox.
                await link.update {
                    if result.ok { $0.subtasksDone += 1 } else { $0.subtasksFailed += 1 }
                    $0.outboxDepth = journal.outboxDepth
                }
                if let removal { throw removal }
                await link.markDelivered(result.subtaskID, removed: true)
                return
            case .unauthorized(let reason):
                await link.forgetRegistration(reason)
            case .rejected(let reason):
                throw CoordinatorLink.Stop.rejected(reason)
            case let other:
                let delay = await link.failed("result \(result.subtaskID): \(other.failureText)")
                if stop.isTriggered { throw CancellationError() }
                try await pause(delay, stop: stop)
            }
        }
    }
}

extension CoordinatorAnswer {
    /// An answer that was not the one hoped for, in words for the log and status.
    var failureText: String {
        switch self {
        case .failure(let why): return why
        case .unauthorized(let reason): return "unauthorized (\(reason ?? "no reason"))"
        default: return "unexpected answer \(self)"
        }
    }
}

extension String {
    var trimmingWhitespace: String {
        var scalars = Substring(self)
        while let first = scalars.first, first.isWhitespace { scalars.removeFirst() }
        while let last = scalars.last, last.isWhitespace { scalars.removeLast() }
        return String(scalars)
    }
}
