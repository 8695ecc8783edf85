import HTTP
import Logging
import Posix
import StateStore
import Tasks
import WorkerCore

/// The coordinator's end of one session: HTTP calls with the mesh token, registration
/// (once, however many loops ask), and the failure bookkeeping. An actor: the
/// heartbeat loop and the work loop share it.
actor CoordinatorLink {
    enum Stop: Error { case rejected(String), stopping }

    let baseURL: String
    let config: WorkerConfig
    let agentID: String
    let daemon: WorkerState
    let logger: Logger
    let transport: any HTTPTransport
    let clock: any WorkerClock
    /// Registered or not, and the mesh token: changed only through `Registration`'s steps.
    private(set) var registration: Registration {
        didSet {
            if oldValue.phase != registration.phase { logger.debug("coordinator registration: \(oldValue.phase) -> \(registration.phase)") }
        }
    }
    var status = CoordinatorStatus()
    /// The pause after failures in a row (full jitter), the same for every session.
    static let backoff = Backoff()
    var switches = ModelSwitchLedger()
    /// Results the coordinator took whose outbox file could not be removed yet: never
    /// posted again by this session, only removed again.
    private(set) var deliveredNotRemoved: Set<String> = []
    /// Set once the session's first heartbeat was answered (or failed): until then the
    /// work loop neither pulls nor posts, so a gap the heartbeat reveals holds work first.
    nonisolated let firstHeartbeat = StateSignal(false)
    /// A rejection (403, blacklisted) stops work; retried no faster than this.
    static let rejectionRetryMs: Int64 = 5 * 60 * 1000

    init(
        config: WorkerConfig, agentID: String, files: WorkerStateFiles, daemon: WorkerState, logger: Logger,
        transport: any HTTPTransport, clock: any WorkerClock
    ) {
        var url = config.coordinator.url ?? ""
        while url.hasSuffix("/") { url.removeLast() }
        self.baseURL = url
        self.config = config
        self.agentID = agentID
        self.daemon = daemon
        self.logger = logger
        self.transport = transport
        self.clock = clock
        var earlier: String?
        if case .loaded(let token) = files.loadMeshToken(nowMs: clock.wallMs()) { earlier = token }
        registration = .unregistered(meshToken: earlier)
    }

    var registered: Bool { registration.isRegistered }
    var meshToken: String? { registration.meshToken }

    func publish() async {
        // The status shows the registration; it is not a second record of it.
        status.registered = registration.isRegistered
        await daemon.updateCoordinator(status)
    }

    /// One call, classified. Transport failures become `.failure`.
    func call(_ call: CoordinatorAnswer.Call, _ body: JSONValue, totalTimeoutMs: Int64? = nil) async throws -> CoordinatorAnswer {
        var headers = [("content-type", "application/json")]
        if let meshToken, call != .register { headers.append(("x-mesh-token", meshToken)) }
        let request = HTTPRequest(
            method: "POST", url: baseURL + "/" + call.rawValue, headers: headers, body: body.serializedBytes,
            connectTimeoutMs: config.coordinator.connectTimeoutMs,
            totalTimeoutMs: totalTimeoutMs ?? config.coordinator.requestTimeoutMs,
            maxResponseBytes: Int(config.coordinator.maxResponseBytes))
        do {
            let started = clock.monotonicMs()
            logger.debug("POST /\(call.rawValue)")
            let response: HTTPResponse
            do {
                response = try await transport.perform(request)
            } catch let error as HTTPError {
                // A registration that may have reached the coordinator counts towards its
                // storm rule; one that never left this host does not.
                if call == .register && ![.couldNotResolve, .couldNotConnect, .tls, .badURL].contains(error.kind) {
                    let now = clock.wallMs()
                    await daemon.updateConduct { $0.registering(atMs: now) }
                }
                throw error
            }
            if call == .register {
                let now = clock.wallMs()
                await daemon.updateConduct { $0.registering(atMs: now) }
            }
            logger.debug("/\(call.rawValue) answered \(response.status) in \(clock.monotonicMs() - started) ms")
            let answer = CoordinatorAnswer.classify(call, status: response.status, body: response.body)
            if call == .heartbeat, case .accepted = answer {
                status.lastHeartbeatAtMs = clock.wallMs()
                status.lastHeartbeatLatencyMs = clock.monotonicMs() - started
                switches.pending = ModelSwitchRequest.parse(heartbeatAnswer: try? JSON.parse(response.body))
            }
            return answer
        } catch let error as HTTPError {
            return .failure("\(error.kind.rawValue): \(error.message)")
        }
    }

    /// Registers unless registered; concurrent callers wait for the one registration.
    /// Throws `.rejected` on 403; loops with backoff on failures until it works or the task is cancelled.
    /// The registration is read again after every suspension (another caller may have
    /// registered, a 401 may have taken the token meanwhile).
    func ensureRegistered() async throws {
        while !registration.isRegistered {
            guard registration.beginAttempt() else {
                await withCheckedContinuation { registration.wait($0) }
                continue
            }
            defer { registration.attemptEnded() }
            if try await resumeRegistration() { return }
            // The coordinator's monitor counts registrations (a storm bans) and evaluates the
            // agent at each one (so during a gap hold, one may be the last it can afford).
            let now = clock.wallMs()
            let conduct = await daemon.coordinator.conduct
            let allowedAt = conduct.registrationAllowedAtMs(nowMs: now)
            if allowedAt > now || !conduct.mayBeEvaluated(nowMs: now) {
                let until = allowedAt > now ? allowedAt : (conduct.pullHold(nowMs: now)?.untilMs ?? now + 60_000)
                let why =
                    allowedAt > now
                    ? "\(CoordinatorConduct.maxRegistrationsPerHour) registrations in the last hour already (the coordinator's monitor flags a storm at 10)"
                    : "a heartbeat gap is in the coordinator's window and this worker was evaluated since"
                status.lastError = "registration held until \(formatUTC(milliseconds: until)): \(why)"
                logger.warning("registration held until \(formatUTC(milliseconds: until)): \(why)")
                await publish()
                try await clock.sleep(milliseconds: max(1_000, min(until - now, 60_000)))
                continue
            }
            let telemetry = await daemon.powerTelemetryJSON()
            let body = CoordinatorWire.register(
                agentID: agentID, version: workerVersion, registrationToken: await registrationToken(),
                provider: config.backend.kind, telemetry: telemetry,
                sandboxMode: await daemon.execution.decision.sandboxMode)
            switch try await call(.register, body) {
            case .registered(let token):
                let changed = token != registration.meshToken
                registration.registered(with: token)
                if changed { try? await WorkerStateFiles.saveMeshToken(token, with: daemon.writer) }
                succeeded()
                logger.notice("registered with the coordinator at \(baseURL) as \(agentID)")
                await publish()
                return
            case .rejected(let reason):
                throw Stop.rejected(reason)
            case let other:
                let delay = await failed("register: \(other.failureText)")
                try await clock.sleep(milliseconds: delay)
            }
        }
    }

    /// Whether this session tried to go on with an earlier registration.
    private var resumeTried = false

    /// A session that starts within the hour of a registration, holding the mesh token it
    /// got, first sends a heartbeat: the coordinator still knows the agent, and every
    /// registration counts towards its storm rule (a restart loop would otherwise register
    /// at each start). A 401 or a failure registers as usual. True when it went on.
    private func resumeRegistration() async throws -> Bool {
        guard !resumeTried else { return false }
        resumeTried = true
        let now = clock.wallMs()
        let conduct = await daemon.coordinator.conduct
        guard meshToken != nil, conduct.registrations.contains(where: { $0 > now - conduct.limits.windowMs }) else { return false }
        switch try await call(.heartbeat, await heartbeatBody()) {
        case .accepted:
            registration.registered(with: registration.meshToken)
            succeeded()
            logger.notice("went on with the registration at \(baseURL) as \(agentID): the coordinator still knows this agent (no new registration)")
            await heartbeatTaken()
            await publish()
            return true
        case .rejected(let reason):
            throw Stop.rejected(reason)
        default:
            return false
        }
    }

    /// The heartbeat body, as of now.
    func heartbeatBody() async -> JSONValue {
        let swapping = await daemon.model.switchStatus?.inProgress ?? false
        return CoordinatorWire.heartbeat(
            agentID: agentID, telemetry: await daemon.powerTelemetryJSON(), activeModel: await daemon.activeModel,
            activeModelParamSize: await daemon.activeModelParamSize, modelSwapInProgress: swapping,
            sandboxMode: await daemon.execution.decision.sandboxMode)
    }

    /// A heartbeat the coordinator took: the conduct record learns it, and a gap it reveals holds work.
    func heartbeatTaken() async {
        if let gap = await daemon.conductHeartbeat(atMs: clock.wallMs()) {
            logger.warning(
                "heartbeats stopped for \(gap.gapMs / 1_000) s: the coordinator's monitor now sees that gap and would count it against any claim in its hour; pulls wait until \(formatUTC(milliseconds: gap.clearsAtMs)) (coordinator.gapGuard)"
            )
        }
    }

    /// The registration token: the config's, else the systemd credential.
    private func registrationToken() async -> String? {
        if let token = config.coordinator.registrationToken { return token }
        guard let directory = environment("CREDENTIALS_DIRECTORY"),
            let bytes = try? readFile(directory + "/registration-token", limit: 4096)
        else { return nil }
        let token = String(decoding: bytes, as: UTF8.self).trimmingWhitespace
        return token.isEmpty ? nil : token
    }

    /// 401: the coordinator forgot us or rotated its token.
    func forgetRegistration(_ reason: String?) async {
        logger.notice("coordinator answered 401 mesh_unauthorized\(reason.map { " (\($0))" } ?? ""): forgetting the mesh token and registering again")
        registration.lapse(keepingMeshToken: false)
        try? await WorkerStateFiles.saveMeshToken(nil, with: daemon.writer)
        await publish()
    }

    func succeeded() {
        status.consecutiveFailures = 0
        status.backoffMs = nil
        status.lastError = nil
        status.rejection = nil
        status.retryAtMs = nil
    }

    /// Records a failure; returns the backoff to wait (full jitter).
    func failed(_ what: String) async -> Int64 {
        status.consecutiveFailures += 1
        let delay = Self.backoff.delay(failures: status.consecutiveFailures) { clock.random(in: $0) }
        status.backoffMs = delay
        status.lastError = what
        logger.warning("\(what); retrying in \(delay) ms (failure \(status.consecutiveFailures))")
        await publish()
        return delay
    }

    func rejected(_ reason: String) async {
        status.rejection = reason
        status.retryAtMs = clock.wallMs() + CoordinatorLink.rejectionRetryMs
        registration.lapse(keepingMeshToken: true)
        logger.error("the coordinator rejected this worker: \(reason); stopping, retrying in 5 minutes")
        await publish()
    }

    func clearRejection() async {
        status.rejection = nil
        status.retryAtMs = nil
        await publish()
    }

    /// The local reason pulls wait for now, recorded as an event when it changes.
    private var workHold: LocalHoldReason?

    func noteWorkHold(_ reason: LocalHoldReason?, detail: String, event: Bool = true) async {
        var changed = false
        if let reason {
            status.deferredReason = "held: \(reason.rawValue): \(detail)"
            changed = true
        } else if status.deferredReason?.hasPrefix("held: ") == true {
            // Whatever held the last pull (this or a power or host hold) is clear now.
            status.deferredReason = nil
            changed = true
        }
        // A quiet hold (the probe has not looked yet since mode on) makes no event.
        if reason != workHold && (event || reason == nil) {
            let previous = workHold
            workHold = reason
            if let reason {
                await daemon.recordWorkHold(reason, detail: detail)
            } else if let previous {
                await daemon.recordWorkHold(nil, detail: "\(previous.rawValue) cleared")
            }
        }
        if changed { await publish() }
    }

    func markDelivered(_ id: String, removed: Bool) {
        if removed { deliveredNotRemoved.remove(id) } else { deliveredNotRemoved.insert(id) }
    }

    func update(_ change: (inout CoordinatorStatus) -> Void) async {
        change(&status)
        await publish()
    }
}
