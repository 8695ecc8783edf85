import Logging
import Posix
import StateStore
import Systemd
import WorkerCore

/// Where the daemon keeps its files, as chosen on the command line or by environment.
public struct DaemonPaths: Sendable {
    public var configPath: String
    public var stateDirectory: String
    public var runtimeDirectory: String
    public var sysfsRoot: String

    public init(configPath: String, stateDirectory: String, runtimeDirectory: String, sysfsRoot: String) {
        self.configPath = configPath
        self.stateDirectory = stateDirectory
        self.runtimeDirectory = runtimeDirectory
        self.sysfsRoot = sysfsRoot
    }

    public var controlSocket: String { runtimeDirectory + "/control.sock" }
}

/// The daemon's shared state: the selected mode, the event log, the agent id. Every
/// change goes through here and is recorded; a mode or policy change is durable before
/// it is answered, events and task history are written behind (service §1.3 promises no more).
public actor WorkerDaemon {
    /// The config in force: the one read at start, with the live keys of later reloads.
    public private(set) var config: WorkerConfig
    public let paths: DaemonPaths
    let files: WorkerStateFiles
    /// Every write of the state directory (the coordinator's journal included) goes
    /// through this one thread, never an fsync on the actor.
    public nonisolated let writer: DurableWriter
    let logger: Logger
    let clock: @Sendable () -> Int64
    let startedAtMs: Int64

    private(set) var modeState: ModeState
    private(set) var eventLog: EventLog
    public let agentID: String
    /// Why the agent id looks copied from another machine, or nil.
    let identityProblem: String?
    private(set) var recovered: [RecoveredStateFile]
    private var subscribers: [Int: AsyncStream<WorkerEvent>.Continuation] = [:]
    private var nextSubscriber = 0
    private var lastStatusLine = ""
    private(set) var policyOverrides: PolicyOverrides
    /// The latest reading with the host's power profile applied (what the policy decides on).
    private var reading: PowerReading?
    /// The latest reading as sysfs gave it.
    private var rawReading: PowerReading?
    /// What logind, NetworkManager and power-profiles-daemon said (service §2).
    private(set) var host = HostServices()
    /// Set by the host service, cleared by the part that did it: a heartbeat now, a new
    /// power reading, a new dump of the network path (after a resume).
    public nonisolated let heartbeatRequested = StateSignal(false)
    public nonisolated let powerRereadRequested = StateSignal(false)
    /// Set when a pause begins, moves or ends: the pause timer sleeps until the new deadline.
    public nonisolated let pauseChanged = StateSignal(false)
    public nonisolated let pathRereadRequested = StateSignal(false)
    private var readingAtMonotonicMs: Int64 = 0
    /// When the host was last read (monotonic), and how many times: a policy change decides
    /// again on the last reading without reading the host.
    private var freshReadAtMs: Int64 = 0
    private var powerReads: Int64 = 0
    private(set) var powerDecision: PowerDecision?
    private(set) var holdCounters = HoldCounters()
    /// modes-and-power §2.2 at start: the persisted mode stays selected but idle until power returns.
    private var gateBlocked = false
    private var gateEvaluated = false
    private var coordinator: CoordinatorStatus?
    /// What the coordinator's behaviour monitor has seen of this worker in the last hour:
    /// kept across sessions and restarts, so a restart never forgets a gap or a storm.
    private(set) var conduct = CoordinatorConduct()
    /// Subtasks, releases and heartbeats since the daemon started (`metrics`).
    private(set) var counters = WorkCounters()
    /// When a heartbeat last made the conduct record durable (heartbeats come every 15 s;
    /// the record is written at most once a minute for them).
    private var conductHeartbeatPersistedAtMs: Int64 = 0
    private var model: (state: String, detail: String, atMs: Int64)?
    /// A coordinator's model switch that still applies (protocol-coordinator §7); nil: the config's model.
    private(set) var switchedModel: ActiveModel?
    /// The switch in progress, or the last one's outcome.
    private(set) var modelSwitch: ModelSwitchStatus?
    private var tasks: TaskHistory
    /// Per mode, whether its runtime should run now; each `ModeRuntime` waits on its own.
    /// Set by a reload that changed a key of `ConfigReloadPlan.restartingBluetooth`: the
    /// Bluetooth runtime stops its session and starts one with the new config.
    public nonisolated let bluetoothRestart = StateSignal(false)
    /// Whether the probe last saw the model ready: a pull loop held by model-unavailable
    /// wakes on it instead of sleeping out its interval with a stale hold in `status`.
    public nonisolated let modelReady = StateSignal(false)
    private nonisolated let runtimeSignals: [Mode: StateSignal] = Dictionary(uniqueKeysWithValues: Mode.allCases.map { ($0, StateSignal(false)) })
    /// Whether a working mode (on, bluetooth) is selected; the model probe wakes on changes.
    public nonisolated let workingModeSelected = StateSignal(false)
    private var bluetooth = BluetoothStatus()
    private var path: PathStatus?
    private var pathSinceMs: Int64 = 0
    private var lastHook: (name: String, outcome: HookOutcome, timeMs: Int64)?
    /// The last reload's outcome (SIGHUP, `systemctl reload`), for status.
    private(set) var configReload: ConfigReloadStatus?
    /// Persisting failed (disk full, read-only): shown in status until a write succeeds.
    private var persistenceProblem: String? { writer.problem }

    /// Opens the state directory's files and restores the persisted mode; anything that
    /// cannot be read is moved aside and reported, never fatal. `writer` replaces the one
    /// made for `directory` (tests pass one that mocks a failing disk).
    public init(
        config: WorkerConfig, paths: DaemonPaths, directory: StateDirectory, logger: Logger,
        clock: @escaping @Sendable () -> Int64 = wallClockMilliseconds, writer: DurableWriter? = nil
    ) {
        self.config = config
        self.paths = paths
        self.files = WorkerStateFiles(directory: directory)
        self.writer =
            writer
            ?? DurableWriter(
                directory: directory,
                onProblem: { [logger] problem in
                    if let problem { logger.error(problem) } else { logger.notice("state directory writable again") }
                })
        self.logger = logger
        self.clock = clock
        let now = clock()
        self.startedAtMs = now
        var recovered: [RecoveredStateFile] = []

        var log: EventLog
        switch files.loadJSON(WorkerStateFiles.eventsFile, nowMs: now, decode: { EventLog.from(json: $0) }) {
        case .absent: log = EventLog()
        case .loaded(let loaded): log = loaded
        case .recovered(let file): log = EventLog(); recovered.append(file)
        }

        var mode: ModeState
        switch files.loadJSON(WorkerStateFiles.modeFile, nowMs: now, decode: { ModeState.from(json: $0) }) {
        case .absent: mode = .fresh(nowMs: now)
        case .loaded(let loaded): mode = loaded
        case .recovered(let file):
            mode = ModeState(mode: .off, sinceMs: now, reason: "mode file was unreadable and moved aside; starting in off")
            recovered.append(file)
        }

        var overrides = PolicyOverrides()
        switch files.loadJSON(WorkerStateFiles.policyFile, nowMs: now, decode: { PolicyOverrides.from(json: $0) }) {
        case .absent: break
        case .loaded(let loaded): overrides = loaded
        case .recovered(let file): recovered.append(file)
        }

        var tasks = TaskHistory()
        switch files.loadJSON(WorkerStateFiles.tasksFile, nowMs: now, decode: { TaskHistory.from(json: $0) }) {
        case .absent: break
        case .loaded(let loaded): tasks = loaded
        case .recovered(let file): recovered.append(file)
        }
        tasks.markRunningInterrupted(atMs: now)
        // Whole-text files of tasks the history no longer keeps (a stop between the two writes).
        let keptTexts = tasks.textFileNames
        for name in files.directory.names() where TaskText.isFileName(name) && !keptTexts.contains(name) {
            try? files.directory.remove(name)
        }

        var persistedModel: ActiveModel?
        switch files.loadJSON(WorkerStateFiles.activeModelFile, nowMs: now, decode: { ActiveModel.from(json: $0) }) {
        case .absent: break
        case .loaded(let loaded): persistedModel = loaded
        case .recovered(let file): recovered.append(file)
        }
        var conduct = CoordinatorConduct()
        switch files.loadJSON(WorkerStateFiles.conductFile, nowMs: now, decode: { CoordinatorConduct.from(json: $0) }) {
        case .absent: break
        case .loaded(let loaded): conduct = loaded
        case .recovered(let file): recovered.append(file)
        }
        // For the suites only: the coordinator's one-hour windows shrunk by this factor, as
        // the dev coordinator's are, so an hour of monitored behaviour fits in a minute.
        if let scale = environment("EDGECODER_WORKER_TEST_MONITOR_SCALE").flatMap({ Int64($0) }), scale > 1 {
            conduct.limits = CoordinatorConduct.Limits().scaled(by: scale)
        }

        let switchedModel = ActiveModel.resolve(config: config.backend, persisted: persistedModel).switched
        if let persistedModel, switchedModel == nil {
            logger.notice(
                "the coordinator's switch to model \(persistedModel.model) no longer applies (backend.model is now \(config.backend.model), was \(persistedModel.switchedFrom)); running \(config.backend.model)"
            )
        }

        var agentID: String
        if let configured = config.agentId {
            agentID = configured
        } else {
            switch files.loadAgentID(nowMs: now) {
            case .loaded(let id): agentID = id
            case .absent: agentID = WorkerDaemon.deriveAgentID()
            case .recovered(let file): agentID = WorkerDaemon.deriveAgentID(); recovered.append(file)
            }
        }

        for file in recovered {
            let text =
                file.movedTo.isEmpty
                ? "state file \(file.file) \(file.problem)"
                : "state file \(file.file) \(file.problem); moved aside to \(file.movedTo), starting from defaults"
            logger.error(text)
            log.append(EventDraft(kind: .stateRecovered, reason: text), timeMs: now)
        }
        log.append(
            EventDraft(
                kind: .daemonStarted, to: mode.mode,
                reason: "daemon started (version \(workerVersion), pid \(getpidValue())); restored mode \(mode.mode.rawValue)"), timeMs: now)

        self.modeState = mode
        self.policyOverrides = overrides
        self.switchedModel = switchedModel
        self.conduct = conduct
        self.tasks = tasks
        self.eventLog = log
        self.agentID = agentID
        self.recovered = recovered
        if config.agentId == nil {
            self.writer.submit(WorkerStateFiles.agentIDFile, mode: WorkerStateFiles.agentIDMode, WorkerStateFiles.agentIDBytes(agentID))
        }
        identityProblem = CopiedIdentityCheck.problem(
            agentID: agentID, configured: config.agentId != nil,
            machineSuffix: ServiceManager.machineAppSpecificID().map { String($0.prefix(12)) })
        if let identityProblem { logger.warning(identityProblem) }
        self.writer.submit(WorkerStateFiles.modeFile, WorkerStateFiles.modeBytes(mode))
        self.writer.submit(WorkerStateFiles.eventsFile) { [log] in WorkerStateFiles.eventsBytes(log) }
    }

    /// `<host>-<12 hex digits>`: readable in a coordinator's list, unique per machine,
    /// and stable across reinstalls (derived from /etc/machine-id through an HMAC).
    static func deriveAgentID() -> String {
        var host = String(hostName().split(separator: ".").first ?? "linux")
        host = String(
            host.unicodeScalars.filter { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "-") }.map(Character.init)
        ).lowercased()
        if host.isEmpty { host = "linux" }
        let suffix = ServiceManager.machineAppSpecificID().map { String($0.prefix(12)) } ?? randomHex(12)
        return String(host.prefix(48)) + "-" + suffix
    }

    // MARK: Context for decisions

    var effectivePolicy: (policy: PowerPolicy, sources: [String: PolicySource]) { policyOverrides.apply(to: config) }

    func modeContext() -> ModeContext {
        ModeContext(
            runOnlyWhileCharging: effectivePolicy.policy.runOnlyWhileCharging,
            onExternalPower: reading?.telemetry.onExternalPower, nowMs: clock(),
            coordinatorProblem: CoordinatorPlaceholder.problem(config.coordinator.url))
    }

    /// What a mode's runtime lacks (`ModeRuntimes`); until it has it, the mode stays
    /// selected and status says what is missing instead of pretending to run.
    func missingRuntime(_ mode: Mode) -> String? {
        ModeRuntimes.unavailable(mode, config: config)
    }

    var runtime: RuntimeState { RuntimeState.of(modeState, gateBlocked: gateBlocked, runtimeAvailable: missingRuntime) }

    // MARK: Requests

    public struct ModeRequestResult: Sendable {
        public var outcome: ModeDecision.Outcome
        public var previous: Mode
        public var events: [WorkerEvent]
    }

    /// Applies a mode request through the one decision function, records, and returns
    /// once the new mode is durable (or its write failed: status then says so).
    @discardableResult
    public func request(_ request: ModeRequest) async -> ModeRequestResult {
        let previous = modeState
        let context = modeContext()
        let decision = ModeRules.decide(request, current: modeState, context: context)
        let now = clock()
        let modeChanged = decision.state != modeState
        if modeChanged { modeState = decision.state }
        // A mode chosen now passed the gate (or is off): nothing waits for power. A pause's
        // end returns to a mode nobody chose now: it waits for power as after a restart.
        if decision.outcome == .changed { gateBlocked = request == .pauseEnded && modeState.mode != .off && context.chargeGateClosed }
        if previous.pause != modeState.pause { pauseChanged.set(true) }
        let events = decision.events.map { record($0, now: now) }
        updateServiceStatus()
        switch decision.outcome {
        case .changed:
            logger.notice(
                "mode \(previous.mode.rawValue) -> \(modeState.mode.rawValue): \(modeState.reason)",
                WorkerDaemon.fields(events.last { $0.kind == .downgrade } ?? events.last, mode: modeState.mode))
        case .unchanged:
            for event in events where event.kind == .networkRestored { logger.notice(event.reason, WorkerDaemon.fields(event, mode: modeState.mode)) }
        case .refused(let message):
            logger.warning(
                "refused mode \(requestedMode(request)?.rawValue ?? "?"): \(message)",
                WorkerDaemon.fields(events.last, mode: modeState.mode))
        }
        // Every change to the actor's state is made above, before this suspension point;
        // another request may run meanwhile, and its newer mode supersedes this one.
        if modeChanged { await persistDurably(WorkerStateFiles.modeFile, WorkerStateFiles.modeBytes(modeState)) }
        return ModeRequestResult(outcome: decision.outcome, previous: previous.mode, events: events)
    }

    /// An event's keys as log metadata (journal fields EDGECODER_EVENT, _MODE, _FROM).
    static func fields(_ event: WorkerEvent?, mode: Mode) -> [(String, String)] {
        var fields: [(String, String)] = []
        if let event { fields.append(("event", event.kind.rawValue)) }
        fields.append(("mode", mode.rawValue))
        if let from = event?.from { fields.append(("from", from.rawValue)) }
        return fields
    }

    private func requestedMode(_ request: ModeRequest) -> Mode? {
        switch request {
        case .operatorSet(let mode, _): return mode
        case .operatorPause: return .off
        // The only refusal at a pause's end is mode on's (the placeholder coordinator).
        case .pauseEnded: return .on
        default: return nil
        }
    }

    /// How long until the current pause ends (ms, by the daemon's clock), or nil when there is none.
    public var pauseLeftMs: Int64? { modeState.pause.map { $0.untilMs - clock() } }

    /// The pause timer's tick: returns to the paused mode once the deadline has passed.
    public func endPauseIfDue() async {
        guard let until = modeState.pause?.untilMs, clock() >= until else { return }
        await request(.pauseEnded)
    }

    /// Appends an event, hands the log to the writer and wakes `events --follow` readers.
    @discardableResult
    func record(_ draft: EventDraft, now: Int64? = nil) -> WorkerEvent {
        let event = eventLog.append(draft, timeMs: now ?? clock())
        // Serialized on the writer's thread, once for however many events queued meanwhile.
        writer.submit(WorkerStateFiles.eventsFile) { [eventLog] in WorkerStateFiles.eventsBytes(eventLog) }
        for continuation in subscribers.values { continuation.yield(event) }
        return event
    }

    /// Writes and waits until durable. A failure is not the caller's to handle: the
    /// writer reports it (logged, and shown in status until a write succeeds).
    private func persistDurably(_ name: String, _ bytes: [UInt8]) async {
        try? await writer.write(name, bytes)
    }

    /// A stream of events recorded from now on; ends when the daemon stops.
    public func subscribe() -> (backlog: [WorkerEvent], stream: AsyncStream<WorkerEvent>, id: Int) {
        let (stream, continuation) = AsyncStream<WorkerEvent>.makeStream(bufferingPolicy: .bufferingNewest(1_000))
        nextSubscriber += 1
        subscribers[nextSubscriber] = continuation
        return (eventLog.events, stream, nextSubscriber)
    }

    public func unsubscribe(_ id: Int) {
        subscribers.removeValue(forKey: id)?.finish()
    }

    public func recentEvents(limit: Int?) -> [WorkerEvent] {
        guard let limit else { return eventLog.events }
        return Array(eventLog.events.suffix(limit))
    }

    // MARK: Power

    /// In mode off nothing reads the host periodically; `status` asks for a read when the
    /// last one is older than `maxAgeMs` and waits up to `waitMs` for it, so what it shows
    /// is current without a timer waking the daemon all day.
    public func freshenIdleReading(maxAgeMs: Int64 = 1_000, waitMs: Int64 = 500) async {
        guard !workingModeSelected.value else { return }
        let asked = Int64(monotonicNanoseconds() / 1_000_000)
        guard asked - freshReadAtMs > maxAgeMs else { return }
        freshRead.set(false)
        powerRereadRequested.set(true)
        // The power monitor's read sets the signal (updateReading, fresh); the actor is
        // free meanwhile, so that read can land.
        let read = freshRead
        _ = await race({ await read.wait(for: true) }, { try? await Task.sleep(nanoseconds: UInt64(waitMs) * 1_000_000) })
    }

    /// Set by each fresh read of the host, for `freshenIdleReading` to wait on.
    private nonisolated let freshRead = StateSignal(false)

    /// A new telemetry reading: decides the policy (hysteresis needs the previous
    /// decision and a monotonic clock) and opens the start-up charge gate when power returns.
    public func updateReading(_ raw: PowerReading, monotonicMs: Int64, fresh: Bool = false) {
        if fresh {
            powerReads += 1
            freshReadAtMs = monotonicMs
            freshRead.set(true)
        }
        rawReading = raw
        var new = raw
        new.telemetry.lowPowerMode = HostServices.lowPowerMode(platformProfile: raw.telemetry.lowPowerMode, activeProfile: host.activeProfile)
        new.telemetry.overrideDeviceType(config.telemetry.deviceType?.deviceType)
        reading = new
        readingAtMonotonicMs = monotonicMs
        let policy = effectivePolicy.policy
        let previous = powerDecision
        let decision = PowerDecision.decide(new.telemetry, policy: policy, previous: previous, nowMs: monotonicMs)
        powerDecision = decision
        if let previous, previous.allowed != decision.allowed {
            if decision.allowed {
                record(EventDraft(kind: .powerResume, reason: "new work allowed again (was held: \(previous.reasonText))"))
                logger.notice("power policy: new work allowed again", [("event", EventKind.powerResume.rawValue), ("mode", modeState.mode.rawValue)])
            } else {
                record(EventDraft(kind: .powerHold, reason: "new work held: \(decision.reasonText) (\(decision.reason?.explanation ?? ""))"))
                logger.notice(
                    "power policy: holding new work: \(decision.reasonText)",
                    [("event", EventKind.powerHold.rawValue), ("mode", modeState.mode.rawValue), ("hold_reason", decision.reasonText)])
            }
        }
        let gateClosed = modeContext().chargeGateClosed
        if !gateEvaluated {
            gateEvaluated = true
            if modeState.mode != .off && gateClosed {
                gateBlocked = true
                logger.warning(
                    "mode \(modeState.mode.rawValue) restored but the host is on battery and runOnlyWhileCharging is set: the runtime stays idle until power returns"
                )
            }
        } else if gateBlocked && !gateClosed {
            gateBlocked = false
            logger.notice("external power connected: starting the \(modeState.mode.rawValue) runtime")
            record(
                EventDraft(kind: .powerResume, to: modeState.mode, reason: "external power connected: the \(modeState.mode.rawValue) runtime starts"))
        }
        updateServiceStatus()
    }

    /// Whether new work may be taken now (modes-and-power §3.2 "hold new work"): the one question the
    /// coordinator loop and the Bluetooth service ask before taking work. A held answer
    /// is counted under its reason (the assignment drop reasons).
    public func admitNewWork() -> HoldReason? {
        guard let decision = powerDecision, let reason = decision.reason else { return nil }
        holdCounters.record(reason)
        return reason
    }

    /// Whether the host holds new work (suspending, or a metered connection under
    /// `network.onMetered` hold): asked by the coordinator loop before each pull and by
    /// the Bluetooth service (`overNetwork` false: only a suspend holds it) before each
    /// request, each held one counted under its reason.
    public func hostHold(overNetwork: Bool = true) -> LocalHoldReason? {
        guard let reason = host.hold(onMetered: config.network.onMetered, overNetwork: overNetwork) else { return nil }
        holdCounters.record(reason)
        return reason
    }

    /// What the host's services say now; a changed power profile is decided on at once.
    public func updateHost(_ new: HostServices) {
        let previous = host
        host = new
        if previous.activeProfile != new.activeProfile, let rawReading {
            updateReading(rawReading, monotonicMs: max(readingAtMonotonicMs, Int64(monotonicNanoseconds() / 1_000_000)))
        }
        if previous.hold(onMetered: config.network.onMetered) != new.hold(onMetered: config.network.onMetered) { updateServiceStatus() }
    }

    /// Makes everything written so far durable (before a suspend).
    public func checkpoint() async {
        submitTasks()
        writer.submit(WorkerStateFiles.modeFile, WorkerStateFiles.modeBytes(modeState))
        await writer.flush()
    }

    /// Asks mode on's session for a heartbeat now and waits until it was sent (or
    /// `timeoutMs`); false at once when the session does not run.
    public func heartbeatNow(timeoutMs: Int64) async -> Bool {
        guard runtimeActive(.on), coordinator != nil else { return false }
        let signal = heartbeatRequested
        signal.set(true)
        switch await race(
            {
                await signal.wait(for: false); return true
            },
            {
                try? await Task.sleep(nanoseconds: UInt64(max(0, timeoutMs)) * 1_000_000)
                return false
            })
        {
        case .first(let done): return done
        case .second(let done): return done
        }
    }

    /// Why new work is held now, without counting it as a held assignment (a model pull
    /// waiting for the policy asks this repeatedly).
    public var currentHold: HoldReason? { powerDecision?.reason }

    /// What holds a coordinator's model switch now (the power policy, a metered
    /// connection under hold or a suspend, the charge gate), uncounted: the switch asks
    /// this repeatedly while it waits.
    public var modelSwitchHold: ModelSwitchHold? {
        .first(
            power: powerDecision?.reason, host: host.hold(onMetered: config.network.onMetered),
            chargeGateClosed: modeContext().chargeGateClosed)
    }

    /// Whether pulling must wait because the state directory cannot be written: a pulled
    /// subtask could not be journaled, and running it unjournaled could lose it. The
    /// problem while it lasts (until a write succeeds), each held pull counted.
    public func stateHold() -> String? {
        guard let problem = writer.problem else { return nil }
        holdCounters.record(.stateUnwritable)
        return problem
    }

    /// Changes a per-host policy key, decides again at once, and returns once the
    /// overrides are durable.
    public func changePolicy(_ change: PolicyOverrides.Change, by who: String) async -> Result<JSONValue, ControlError> {
        switch policyOverrides.applying(change, over: config) {
        case .failure(let problem):
            return .failure(ControlError(.badRequest, "policy \(problem.path): \(problem.message)"))
        case .success(let next):
            policyOverrides = next
            let text: String
            switch change {
            case .set(let key, let value): text = "\(key) set to \(value.serialized) by \(who)"
            case .unset(let key): text = "\(key) reset to the config's value by \(who)"
            }
            record(EventDraft(kind: .policyChanged, reason: text))
            logger.notice("policy: \(text)", [("event", EventKind.policyChanged.rawValue)])
            if let reading { updateReading(reading, monotonicMs: max(readingAtMonotonicMs, Int64(monotonicNanoseconds() / 1_000_000))) }
            let answer = policyJSON()
            await persistDurably(WorkerStateFiles.policyFile, WorkerStateFiles.policyBytes(next))
            return .success(answer)
        }
    }

    public func policyJSON() -> JSONValue {
        let (policy, sources) = effectivePolicy
        return PowerPolicy.showJSON(policy, sources: sources)
    }

    // MARK: Model backend

    public var currentMode: Mode { modeState.mode }

    /// The model every generation and probe uses: the config's, or the one a coordinator
    /// switched to (persisted; the heartbeat's `activeModel`).
    public var activeModel: String { switchedModel?.model ?? config.backend.model }

    /// Whether the remote model switch is allowed on this host (policy over config).
    public var allowsRemoteModelSwitch: Bool { effectivePolicy.policy.allowRemoteModelSwitch }

    /// A switch's progress, for status and heartbeats.
    public func updateModelSwitch(_ status: ModelSwitchStatus?) {
        modelSwitch = status
        updateServiceStatus()
    }

    /// Switches the model every later generation uses; returns once the choice is durable
    /// (it survives restarts). Switching back to the config's model forgets the switch.
    public func switchModel(to name: String, rolloutID: String?) async {
        let previous = activeModel
        let next: ActiveModel? =
            name == config.backend.model
            ? nil : ActiveModel(model: name, switchedFrom: config.backend.model, switchedAtMs: clock(), rolloutID: rolloutID)
        switchedModel = next
        record(
            EventDraft(
                kind: .modelSwitched, reason: "model \(previous) -> \(name) at the coordinator's request\(rolloutID.map { " (rollout \($0))" } ?? "")"
            ))
        logger.notice(
            "model switched from \(previous) to \(name) at the coordinator's request", [("event", EventKind.modelSwitched.rawValue), ("model", name)])
        updateServiceStatus()
        if let next {
            await persistDurably(WorkerStateFiles.activeModelFile, WorkerStateFiles.activeModelBytes(next))
        } else {
            try? await writer.remove(WorkerStateFiles.activeModelFile)
        }
    }

    // MARK: Code subtasks

    /// What the last look at the container engine found, and when (mode on looks).
    private var sandbox: (availability: SandboxAvailability, atMs: Int64?) = (.unknown, nil)
    /// Set to ask mode on to look at the container engine again (a run the engine failed).
    public nonisolated let sandboxCheckRequested = StateSignal(false)

    public func updateSandbox(_ availability: SandboxAvailability) {
        let before = execution.decision
        sandbox = (availability, clock())
        let after = execution.decision
        // What is answered how is the news; a new wording of the same reason is not.
        if after.answering != before.answering {
            logger.notice("code subtasks: \(after.why) (sandboxMode \(after.sandboxMode))")
            record(EventDraft(kind: .executionChanged, reason: "\(after.answering.rawValue): \(after.why)"))
        }
        updateServiceStatus()
    }

    /// A new mode-on session looks at the engine afresh.
    public func forgetSandbox() {
        sandbox = (.unknown, nil)
    }

    /// How code subtasks are answered now.
    public var execution: ExecutionStatus {
        ExecutionStatus(
            mode: config.execution.mode, engine: config.execution.engine, image: config.execution.image,
            sandbox: sandbox.availability, checkedAtMs: sandbox.atMs)
    }

    public func updateModel(state: String, detail: String) {
        model = (state, detail, clock())
        modelReady.set(state == "ready")
    }

    /// The model's size as the backend's probe last gave it, for the model it was given for.
    private var modelParameterSize: (model: String, billions: Double)?

    public func updateModelParameterSize(_ billions: Double, model name: String) {
        modelParameterSize = (name, billions)
    }

    /// The heartbeat's `activeModelParamSize`: the active model's size in billions of
    /// parameters, when the backend said (cached from its readiness probe, so heartbeats
    /// cost the server nothing); nil after a switch until the new model is probed.
    public var activeModelParamSize: Double? {
        guard let size = modelParameterSize, size.model == activeModel else { return nil }
        return size.billions
    }

    /// Whether a task is running on the model now. llama.cpp's server does not answer
    /// its readiness probe while it generates, so the probe waits instead of reporting
    /// `unavailable` to the very clients being served.
    public var isGenerating: Bool { tasks.records.contains { $0.state == .running } }

    // MARK: Reload

    /// A reload with a valid file: applies what can change live (the power policy is
    /// decided again at once, the log level, the coordinator's intervals), keeps the
    /// rest as it runs, and records which keys wait for a restart.
    @discardableResult
    public func reload(file: WorkerConfig) -> ConfigReloadStatus {
        let plan = ConfigReloadPlan.plan(running: config, file: file, coordinatorRunning: runtimeActive(.on))
        config = plan.applied
        if plan.appliedKeys.contains("log.level"), let level = LogLevel(name: config.log.level.rawValue) {
            logger.sharedLevel?.set(level)
        }
        let status = ConfigReloadStatus(
            atMs: clock(), outcome: plan.appliedKeys.isEmpty ? .unchanged : .applied,
            appliedKeys: plan.appliedKeys, restartKeys: plan.restartKeys)
        configReload = status
        record(EventDraft(kind: .configReloaded, reason: status.line))
        logger.notice(
            status.line,
            [("event", EventKind.configReloaded.rawValue)]
                + (plan.restartKeys.isEmpty ? [] : [("needs_restart", plan.restartKeys.joined(separator: ","))]))
        // From the raw reading, so a telemetry.deviceType taken out of the file is undone.
        if let base = rawReading ?? reading { updateReading(base, monotonicMs: max(readingAtMonotonicMs, Int64(monotonicNanoseconds() / 1_000_000))) }
        if plan.restartsBluetooth { bluetoothRestart.set(true) }
        // A reload is also how an operator says "I built the sandbox image": look again.
        sandboxCheckRequested.set(true)
        updateServiceStatus()
        return status
    }

    /// A reload whose file is unreadable or invalid: the running config is kept, and
    /// the reason stays in status until a later reload succeeds.
    @discardableResult
    public func refuseReload(problems: [String]) -> ConfigReloadStatus {
        let status = ConfigReloadStatus(
            atMs: clock(), outcome: .refused, problems: problems,
            restartKeys: configReload?.restartKeys ?? [])
        configReload = status
        record(EventDraft(kind: .configRefused, reason: status.line))
        logger.error(status.line, [("event", EventKind.configRefused.rawValue)])
        updateServiceStatus()
        return status
    }

    // MARK: Mode runtimes

    /// True while `mode`'s runtime should run: the runtime waits for true to start and for
    /// false to stop (gracefully). Every mode has one; `off`'s never becomes true.
    public nonisolated func runtimeSignal(for mode: Mode) -> StateSignal {
        // The table holds every Mode case (built from Mode.allCases).
        runtimeSignals[mode]!
    }

    /// Whether `mode`'s runtime should run now: selected, past the charge gate, configured.
    func runtimeActive(_ mode: Mode) -> Bool { mode != .off && modeState.mode == mode && runtime.phase == .running }

    private func wakeRuntimeWaiters() {
        for mode in Mode.allCases {
            let signal = runtimeSignal(for: mode), active = runtimeActive(mode)
            if signal.value != active { signal.set(active) }
        }
        let working = modeState.mode != .off
        if workingModeSelected.value != working { workingModeSelected.set(working) }
    }

    // MARK: Coordinator

    public func updateCoordinator(_ status: CoordinatorStatus?) {
        coordinator = status
        updateServiceStatus()
    }

    /// The heartbeat's powerTelemetry: the latest reading, unknown values omitted.
    public func powerTelemetryJSON() -> JSONValue {
        reading?.telemetry.heartbeatJSON ?? .object(JSONObject())
    }

    // MARK: Conduct towards the coordinator's monitor

    /// Changes the conduct record and writes it behind (a coalesced, atomic write).
    /// Counts an event for `metrics` (kept in memory from start to exit).
    public func count(_ change: (inout WorkCounters) -> Void) {
        change(&counters)
    }

    public func updateConduct<T: Sendable>(_ change: (inout CoordinatorConduct) -> T) -> T {
        let value = change(&conduct)
        submitConduct()
        return value
    }

    /// A heartbeat the coordinator took. Written at most once a minute for heartbeats, and
    /// only while the hour holds claims (only then can a gap matter after a restart).
    /// Returns the gap hold when this heartbeat began one.
    public func conductHeartbeat(atMs now: Int64) -> CoordinatorConduct.GapHold? {
        let before = conduct.gap
        conduct.heartbeatAccepted(atMs: now, guardGaps: config.coordinator.gapGuard)
        let began = conduct.gap != nil && conduct.gap != before ? conduct.gap : nil
        if began != nil || (!conduct.claims.isEmpty && now - conductHeartbeatPersistedAtMs >= 60_000) {
            conductHeartbeatPersistedAtMs = now
            submitConduct()
        }
        return began
    }

    private func submitConduct() {
        writer.submit(WorkerStateFiles.conductFile) { [conduct] in WorkerStateFiles.conductBytes(conduct) }
    }

    /// Counts a pull held for a local reason (the assignment drop reasons).
    public func countHold(_ reason: LocalHoldReason) { holdCounters.record(reason) }

    /// The model backend's readiness as the probe last saw it: nil when ready, else why not
    /// and whether the probe has looked since a working mode began (`idle` until then).
    public var modelNotReady: (why: String, probed: Bool)? {
        guard let model else { return ("not probed yet", false) }
        if model.state == "ready" { return nil }
        return ("\(model.state): \(model.detail)", model.state != "idle")
    }

    /// Records that pulls are held, or resumed (nil), with the reason.
    public func recordWorkHold(_ reason: LocalHoldReason?, detail: String) {
        if let reason {
            record(EventDraft(kind: .workHeld, to: .on, reason: "new work held: \(reason.rawValue): \(detail)"))
            logger.notice("new work held: \(reason.rawValue): \(detail)", [("event", EventKind.workHeld.rawValue), ("hold_reason", reason.rawValue)])
        } else {
            record(EventDraft(kind: .workResumed, to: .on, reason: "new work resumed: \(detail)"))
            logger.notice("new work resumed: \(detail)", [("event", EventKind.workResumed.rawValue)])
        }
    }

    public func upsertTask(_ record: TaskRecord) {
        if let text = record.text {
            writer.submit(TaskText.fileName(source: record.source, id: record.id)) { Array((text.json.serialized + "\n").utf8) }
        }
        for gone in tasks.upsert(record) {
            writer.submitRemoval(TaskText.fileName(source: gone.source, id: gone.id))
        }
        submitTasks()
    }

    /// One task whole for `tasks show`: the history's record with the whole prompt and
    /// answer from its file (`promptCut`/`outputCut` when they were over the limit;
    /// `wholeText` false when the file is gone and the previews are all there is); nil
    /// when the history has no task with that id.
    public func taskJSON(id: String) async -> JSONValue? {
        guard let record = tasks.record(id: id) else { return nil }
        // The file may still be queued behind the writer.
        await writer.flush()
        let name = TaskText.fileName(source: record.source, id: record.id)
        let text = (try? writer.directory.read(name, limit: TaskText.maxFileBytes))
            .flatMap { $0 }.flatMap { try? JSON.parse($0) }.flatMap(TaskText.from(json:))
        var object = record.json.objectValue ?? JSONObject()
        object["wholeText"] = .bool(text != nil)
        if let text {
            object["prompt"] = .string(text.prompt)
            object["promptBytes"] = .int(Int64(text.promptBytes))
            object["promptCut"] = .bool(text.promptCut)
            if let output = text.output, let bytes = text.outputBytes {
                object["output"] = .string(output)
                object["outputBytes"] = .int(Int64(bytes))
                object["outputCut"] = .bool(text.outputCut)
            }
        }
        return ["task": .object(object)]
    }

    private func submitTasks() {
        writer.submit(WorkerStateFiles.tasksFile) { [tasks] in WorkerStateFiles.tasksBytes(tasks) }
    }

    public func markTaskPosted(_ id: String, ok: Bool) {
        guard var record = tasks.records.last(where: { $0.id == id && $0.source == .coordinator }) else { return }
        record.state = ok ? .done : .failed
        upsertTask(record)
    }

    public func tasksJSON(limit: Int?) -> JSONValue {
        let records = limit.map { Array(tasks.records.suffix($0)) } ?? tasks.records
        return ["tasks": .array(records.map(\.json))]
    }

    // MARK: Bluetooth

    /// The peripheral's latest state, for status.
    public func updateBluetooth(_ status: BluetoothStatus) {
        if status.state != bluetooth.state || status.problem != bluetooth.problem {
            if let problem = status.problem, status.state == .failed || status.state == .waiting {
                logger.info("bluetooth \(status.state.rawValue): \(problem)")
            }
        }
        bluetooth = status
        updateServiceStatus()
    }

    /// The status characteristic's values (protocol-bluetooth §1): `modelState` and `batteryPct`.
    public func bluetoothStatusValues() -> (modelState: String, batteryPct: Int?) {
        (model?.state ?? "idle", reading?.telemetry.batteryPct)
    }

    /// The path monitor's latest evaluation, for status.
    public func updatePath(_ status: PathStatus) {
        if path?.satisfied != status.satisfied { pathSinceMs = clock() }
        if path != status {
            logger.info("network path \(status.satisfied ? "satisfied" : "unsatisfied"): \(status.reason)")
            path = status
            updateServiceStatus()
        }
    }

    /// Records how an operator hook ended (the event `hook-ran`).
    public func recordHook(name: String, outcome: HookOutcome) {
        lastHook = (name, outcome, clock())
        record(EventDraft(kind: .hookRan, reason: "\(name) \(outcome)"))
    }

    /// Answers the watchdog: a reply proves the actor is not wedged.
    public func ping() -> Bool { true }

    /// Records the stop and returns once everything written so far is durable; called
    /// once, after the services have stopped.
    public func stop(reason: String) async {
        tasks.markRunningInterrupted(atMs: clock())
        submitTasks()
        record(EventDraft(kind: .daemonStopped, from: modeState.mode, reason: reason))
        writer.submit(WorkerStateFiles.modeFile, WorkerStateFiles.modeBytes(modeState))
        for continuation in subscribers.values { continuation.finish() }
        subscribers.removeAll()
        await writer.flush()
    }

    // MARK: Status

    /// Everything `status` shows, as of now.
    func statusSnapshot() -> StatusSnapshot {
        let monotonicNow = Int64(monotonicNanoseconds() / 1_000_000)
        let (policy, sources) = effectivePolicy
        return StatusSnapshot(
            nowMs: clock(), agentID: agentID,
            daemon: StatusSnapshot.Daemon(
                version: workerVersion, pid: Int64(getpidValue()), startedAtMs: startedAtMs,
                configPath: paths.configPath, stateDirectory: paths.stateDirectory,
                controlSocket: paths.controlSocket, persistenceProblem: persistenceProblem,
                configReload: configReload, identityProblem: identityProblem),
            mode: modeState, runtime: runtime,
            network: path.map { StatusSnapshot.Network(path: $0, sinceMs: pathSinceMs) },
            lastHook: lastHook.map {
                StatusSnapshot.Hook(name: $0.name, outcome: $0.outcome.description, succeeded: $0.outcome.succeeded, timeMs: $0.timeMs)
            },
            host: host, hostHold: host.hold(onMetered: config.network.onMetered),
            power: StatusSnapshot.Power(
                telemetry: reading?.telemetry, ageMs: monotonicNow - freshReadAtMs, decision: powerDecision,
                monotonicNowMs: monotonicNow, chargeGateBlocked: gateBlocked, held: holdCounters, reads: powerReads),
            policy: policy, policySources: sources,
            coordinatorURL: config.coordinator.url, coordinator: coordinator, conduct: conduct,
            bluetooth: bluetooth, bluetoothConfiguredAdapter: config.bluetooth.adapter, bluetoothMaxClients: config.bluetooth.maxClients,
            backend: StatusSnapshot.Backend(
                kind: config.backend.kind.rawValue, url: config.backend.url, model: activeModel,
                modelState: model?.state, detail: model?.detail, checkedAtMs: model?.atMs,
                configuredModel: config.backend.model, switchedModel: switchedModel, modelSwitch: modelSwitch),
            activeRuntimes: Set(Mode.allCases.filter { runtimeActive($0) }),
            recovered: recovered.map { StatusSnapshot.RecoveredFile(file: $0.file, movedTo: $0.movedTo, problem: $0.problem, timeMs: $0.timeMs) },
            eventCount: eventLog.events.count, lastEventSeq: eventLog.nextSeq - 1, counters: counters, execution: execution)
    }

    /// One line for systemd's STATUS= and the first line of `status`.
    public func statusLine() -> String { StatusReport(statusSnapshot()).summary }

    func updateServiceStatus() {
        wakeRuntimeWaiters()
        let line = statusLine()
        if line != lastStatusLine {
            lastStatusLine = line
            ServiceManager.notify("STATUS=" + line)
        }
    }

    public func modeJSON() -> JSONValue { StatusReport.modeJSON(modeState, runtime: runtime) }

    public func statusJSON() -> JSONValue { StatusReport(statusSnapshot()).json }
}

func getpidValue() -> Int32 { getpid() }

func randomHex(_ count: Int) -> String {
    var generator = SystemRandomNumberGenerator()
    let digits = Array("0123456789abcdef")
    return String((0..<count).map { _ in digits[Int(generator.next() % 16)] })
}

#if canImport(Glibc)
import Glibc
#endif
