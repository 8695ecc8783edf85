import HTTP
import Logging
import ModelBackend
import Posix
import Tasks
import WorkerCore

/// The coordinator's model switch (protocol-coordinator §7): a heartbeat answer asks for a model; the
/// worker pulls it through Ollama's `/api/pull` (forwarding progress to
/// `/orchestration/agents/:agentId/status`, rate-limited), switches, persists the choice
/// and acknowledges on `/orchestration/agents/:agentId/ack`; or acknowledges `ok: false`
/// with the reason. One switch at a time per session; the heartbeats go on meanwhile.
struct ModelSwitcher: Sendable {
    let link: CoordinatorLink
    let daemon: WorkerState
    let backend: ModelBackend
    let config: WorkerConfig
    let clock: any WorkerClock
    let logger: Logger
    /// How often a held switch looks at the power policy again.
    var holdPollMs: Int64
    /// Progress goes to the coordinator at most this often (a new phase at once).
    var progressIntervalMs: Int64 = 2_000
    /// Tries of the acknowledgement before it waits for the next heartbeat's reminder.
    static let ackAttempts = 4

    /// Carries out one request to the end: the ack is sent (or remembered for the next
    /// heartbeat, which still carries the request while it is unacknowledged).
    func run(_ request: ModelSwitchRequest) async {
        await handle(request)
        await link.switchEnded(request.key)
    }

    private func handle(_ request: ModelSwitchRequest) async {
        if let outcome = await link.switchOutcome(request.key) {
            // Done before, but the coordinator did not take the ack: say it again.
            await acknowledge(request, ok: outcome.ok, error: outcome.error)
            return
        }
        let reporter = SwitchReporter(link: link, throttle: ProgressThrottle(intervalMs: progressIntervalMs), clock: clock)
        let nowMs = clock.wallMs()
        switch request.plan(
            allowed: await daemon.allowsRemoteModelSwitch, backend: config.backend.kind,
            allowedRegistries: config.backend.allowedModelRegistries)
        {
        case .refuse(let reason):
            logger.warning("refused the coordinator's model switch to \(request.model.map { printable($0) } ?? "?"): \(reason)")
            await daemon.updateModelSwitch(
                ModelSwitchStatus(
                    phase: .refused, model: request.model, rolloutID: request.rolloutID,
                    message: reason, sinceMs: nowMs))
            await reporter.post(phase: "refused", message: reason, progressPct: nil, force: true)
            await finish(request, ok: false, error: reason)
        case .pull(let model):
            await carryOut(request, model: model, pull: true, reporter: reporter)
        case .switchInstalled(let model):
            await carryOut(request, model: model, pull: false, reporter: reporter)
        }
    }

    private func carryOut(_ request: ModelSwitchRequest, model: String, pull: Bool, reporter: SwitchReporter) async {
        let started = clock.wallMs()
        func show(_ phase: ModelSwitchStatus.Phase, _ message: String, _ pct: Double? = nil) async {
            await daemon.updateModelSwitch(
                ModelSwitchStatus(
                    phase: phase, model: model, rolloutID: request.rolloutID, message: message,
                    progressPct: pct, sinceMs: started))
        }
        logger.notice(
            "the coordinator asks for model \(model)\(request.rolloutID.map { " (rollout \($0))" } ?? ""); \(pull ? "pulling it" : "switching without a download (autoInstall false)")"
        )
        await show(.starting, "preparing to switch to \(model)")
        await reporter.post(phase: "starting", message: "preparing to switch to \(model)", progressPct: nil, force: true)

        // A pull downloads gigabytes and keeps the disk and network busy: it waits on every
        // hold the work loop obeys (the power policy, a metered connection, a suspend, the
        // charge gate), and the permission is read again after each wait (hardening #26
        // rows 1 and 2). Once started, it runs to the end unless the permission is
        // turned off or the session ends.
        var announced: ModelSwitchHold?
        while true {
            guard await daemon.allowsRemoteModelSwitch else { return await refuseNow(request, model: model, started: started, reporter: reporter) }
            guard let held = await daemon.modelSwitchHold else { break }
            if held != announced {
                announced = held
                logger.notice("model switch to \(model) \(held.message)")
                await show(.held, held.message)
                await reporter.post(phase: "held", message: held.message, progressPct: nil, force: true)
            }
            do { try await clock.sleep(milliseconds: holdPollMs) } catch {
                return await interrupted(request, model: model, started: started, reporter: reporter)
            }
        }

        let puller = backend.puller
        do {
            if pull {
                await show(.pulling, "pulling \(model)")
                let daemon = self.daemon
                let stillAllowed = try await whileAllowed {
                    try await puller.pull(model) { progress in
                        let message = progress.message(model: model)
                        await daemon.updateModelSwitch(
                            ModelSwitchStatus(
                                phase: .pulling, model: model, rolloutID: request.rolloutID,
                                message: message, progressPct: progress.percent, sinceMs: started))
                        await reporter.post(phase: "pulling_model", message: message, progressPct: progress.percent, force: false)
                    }
                }
                guard stillAllowed else { return await refuseNow(request, model: model, started: started, reporter: reporter) }
                await reporter.flush()
            } else if try await !puller.isInstalled(model) {
                throw ModelError(
                    .modelNotFound, "model \(model) is not on the Ollama server at \(puller.root) and the request says autoInstall false")
            }
        } catch let error as ModelError where error.kind != .cancelled && !Task.isCancelled {
            logger.error("model switch to \(model) failed: \(error.message)")
            await show(.failed, error.message)
            await reporter.post(phase: "error", message: error.message, progressPct: nil, force: true)
            await finish(request, ok: false, error: error.message)
            return
        } catch {
            return await interrupted(request, model: model, started: started, reporter: reporter)
        }
        guard await daemon.allowsRemoteModelSwitch else { return await refuseNow(request, model: model, started: started, reporter: reporter) }
        await show(.switching, "switching to \(model)")
        await daemon.switchModel(to: model, rolloutID: request.rolloutID)
        await show(.done, "running \(model)", pull ? 100 : nil)
        await reporter.post(phase: "done", message: "model switch complete: running \(model)", progressPct: pull ? 100 : nil, force: true)
        await finish(request, ok: true, error: nil)
    }

    /// Runs `body` to its end, or until the permission is turned off (then cancels it and
    /// answers false).
    private func whileAllowed(_ body: @escaping @Sendable () async throws -> Void) async throws -> Bool {
        let daemon = self.daemon, clock = self.clock, pollMs = holdPollMs
        switch try await race(body, { while await daemon.allowsRemoteModelSwitch { try await clock.sleep(milliseconds: pollMs) } }) {
        case .first: return true
        case .second: return false
        }
    }

    /// The permission was turned off after the switch began: refused, acked `ok: false`.
    private func refuseNow(_ request: ModelSwitchRequest, model: String, started: Int64, reporter: SwitchReporter) async {
        let reason = ModelSwitchRequest.notAllowed
        logger.warning("model switch to \(model) cancelled before it switched: \(reason)")
        await daemon.updateModelSwitch(
            ModelSwitchStatus(phase: .refused, model: model, rolloutID: request.rolloutID, message: reason, sinceMs: started))
        await reporter.post(phase: "refused", message: reason, progressPct: nil, force: true)
        await finish(request, ok: false, error: reason)
    }

    /// The session ended (mode off, shutdown) before the switch: a final phase, so status
    /// and heartbeats stop saying a swap runs (hardening #26 row 4). No ack: the
    /// coordinator keeps the request pending and asks the next session again.
    private func interrupted(_ request: ModelSwitchRequest, model: String, started: Int64, reporter: SwitchReporter) async {
        let message = "interrupted before the switch (mode off or the session ended); the coordinator asks again"
        logger.notice("model switch to \(model) \(message)")
        await daemon.updateModelSwitch(
            ModelSwitchStatus(phase: .interrupted, model: model, rolloutID: request.rolloutID, message: message, sinceMs: started))
        // The session's cancellation would end the call at once: the word goes out from a
        // task of its own, bounded by the coordinator request timeout.
        await Task { await reporter.post(phase: "interrupted", message: message, progressPct: nil, force: true) }.value
    }

    private func finish(_ request: ModelSwitchRequest, ok: Bool, error: String?) async {
        await link.recordSwitchOutcome(request.key, ok: ok, error: error)
        await acknowledge(request, ok: ok, error: error)
    }

    /// Sends the ack, retrying a few times; a 401 registers again first.
    private func acknowledge(_ request: ModelSwitchRequest, ok: Bool, error: String?) async {
        for attempt in 1...ModelSwitcher.ackAttempts {
            switch await link.orchestration("ack", OrchestrationWire.ack(ok: ok, error: error)) {
            case .accepted:
                logger.info("acknowledged the model switch (ok: \(ok))")
                await link.forgetSwitchOutcome(request.key)
                return
            case .gone:
                logger.notice("the coordinator no longer has the model switch request; nothing to acknowledge")
                await link.forgetSwitchOutcome(request.key)
                return
            case .unauthorized:
                await link.forgetRegistration("orchestration ack")
                do { try await link.ensureRegistered() } catch { return }
            case .failure(let why):
                logger.warning("the model switch ack failed (\(why)), attempt \(attempt) of \(ModelSwitcher.ackAttempts)")
                if attempt < ModelSwitcher.ackAttempts {
                    do { try await clock.sleep(milliseconds: 1_000 << Int64(attempt - 1)) } catch { return }
                }
            }
        }
        logger.warning("the model switch ack is not delivered; sending it again when the coordinator asks again")
    }
}

/// Progress to the coordinator, best-effort (as EdgeCoder's agent does) and rate-limited.
actor SwitchReporter {
    let link: CoordinatorLink
    var throttle: ProgressThrottle
    let clock: any WorkerClock

    init(link: CoordinatorLink, throttle: ProgressThrottle, clock: any WorkerClock) {
        self.link = link
        self.throttle = throttle
        self.clock = clock
    }

    /// The last progress the throttle held back, sent by `flush`.
    var held: (phase: String, message: String, progressPct: Double?)?

    /// Posts unless the throttle says it is too soon; `force` posts a phase's last word.
    func post(phase: String, message: String, progressPct: Double?, force: Bool) async {
        let pct = progressPct.map { String(Int($0)) } ?? ""
        // The throttle compares what changed: whole percents, not every byte.
        let send = throttle.shouldSend(phase: phase, message: force ? "\(phase)|\(message)" : "\(phase)|\(pct)", nowMs: clock.monotonicMs())
        guard send || force else {
            held = (phase, message, progressPct)
            return
        }
        held = nil
        _ = await link.orchestration("status", OrchestrationWire.status(phase: phase, message: message, progressPct: progressPct))
    }

    /// Sends the progress held back last, so the coordinator sees where a phase ended.
    func flush() async {
        guard let held else { return }
        self.held = nil
        _ = await link.orchestration("status", OrchestrationWire.status(phase: held.phase, message: held.message, progressPct: held.progressPct))
    }
}

extension CoordinatorLink {
    /// One orchestration call for this agent, classified; a transport failure is `.failure`.
    func orchestration(_ call: String, _ body: JSONValue) async -> OrchestrationWire.Answer {
        var headers = [("content-type", "application/json")]
        if let meshToken { headers.append(("x-mesh-token", meshToken)) }
        let request = HTTP.HTTPRequest(
            method: "POST", url: baseURL + OrchestrationWire.path(call, agentID: agentID), headers: headers,
            body: body.serializedBytes, connectTimeoutMs: config.coordinator.connectTimeoutMs,
            totalTimeoutMs: config.coordinator.requestTimeoutMs, maxResponseBytes: 65_536)
        do {
            let response = try await transport.perform(request)
            return OrchestrationWire.classify(status: response.status, body: response.body)
        } catch let error as HTTPError {
            return .failure("\(error.kind.rawValue): \(error.message)")
        } catch {
            return .failure("cancelled")
        }
    }

    /// The request in the last heartbeat answer, once; nil while a switch runs.
    func takeSwitchRequest() -> ModelSwitchRequest? { switches.take() }

    func switchEnded(_ key: String) { switches.ended(key) }

    func switchOutcome(_ key: String) -> (ok: Bool, error: String?)? { switches.outcomes[key] }

    func recordSwitchOutcome(_ key: String, ok: Bool, error: String?) { switches.record(key, ok: ok, error: error) }

    func forgetSwitchOutcome(_ key: String) { switches.acknowledge(key) }
}
