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
/// Its state is held in one value per concern, and its methods are split by concern
/// across the `WorkerState+….swift` files.
public actor WorkerState {
    /// The config in force: the one read at start, with the live keys of later reloads.
    public internal(set) var config: WorkerConfig
    /// Every write of the state directory (the coordinator's journal included) goes
    /// through this one thread, never an fsync on the actor.
    public nonisolated let writer: DurableWriter
    let logger: Logger
    /// The one clock: wall time for what is recorded, monotonic time for the power
    /// policy's hysteresis and the reading's age.
    let clock: any WorkerClock
    nonisolated let start: DaemonStart
    /// What the services wait on without holding the actor.
    public nonisolated let signals = DaemonSignals()

    var modeState: ModeState
    var events: EventFeed
    /// The per-host policy keys an operator set (`policy set`), over the config's.
    var policyOverrides: PolicyOverrides
    /// The latest reading, the policy's decision on it, the charge gate, the held counts.
    var power = PowerState()
    var model: ModelStatus
    var tasks: TaskHistory
    var coordinator: CoordinatorRecord
    var reports = ServiceReports()
    /// The last line handed to systemd as STATUS=, sent again only when it changes.
    var lastStatusLine = ""

    /// Opens the state directory's files and restores the persisted mode; anything that
    /// cannot be read is moved aside and reported, never fatal. `writer` replaces the one
    /// made for `directory` (tests pass one that mocks a failing disk).
    public init(
        config: WorkerConfig, paths: DaemonPaths, directory: StateDirectory, logger: Logger,
        clock: any WorkerClock = SystemClock(), writer: DurableWriter? = nil
    ) {
        self.config = config
        self.writer =
            writer
            ?? DurableWriter(
                directory: directory,
                onProblem: { [logger] problem in
                    if let problem { logger.error(problem) } else { logger.notice("state directory writable again") }
                })
        self.logger = logger
        self.clock = clock
        let now = clock.wallMs()
        var restored = WorkerStateFiles(directory: directory).restore(
            nowMs: now, configuredAgentID: config.agentId, deriveAgentID: WorkerState.deriveAgentID)
        // For the suites only: the coordinator's one-hour windows shrunk by this factor, as
        // the dev coordinator's are, so an hour of monitored behaviour fits in a minute.
        if let scale = environment("EDGECODER_WORKER_TEST_MONITOR_SCALE").flatMap({ Int64($0) }), scale > 1 {
            restored.conduct.limits = CoordinatorConduct.Limits().scaled(by: scale)
        }

        let switchedModel = ActiveModel.resolve(config: config.backend, persisted: restored.activeModel).switched
        if let persistedModel = restored.activeModel, switchedModel == nil {
            logger.notice(
                "the coordinator's switch to model \(persistedModel.model) no longer applies (backend.model is now \(config.backend.model), was \(persistedModel.switchedFrom)); running \(config.backend.model)"
            )
        }

        var log = restored.events
        for file in restored.recovered {
            let text =
                file.movedTo.isEmpty
                ? "state file \(file.file) \(file.problem)"
                : "state file \(file.file) \(file.problem); moved aside to \(file.movedTo), starting from defaults"
            logger.error(text)
            log.append(EventDraft(kind: .stateRecovered, reason: text), timeMs: now)
        }
        let mode = restored.mode
        log.append(
            EventDraft(
                kind: .daemonStarted, to: mode.mode,
                reason: "daemon started (version \(workerVersion), pid \(getpidValue())); restored mode \(mode.mode.rawValue)"), timeMs: now)

        self.modeState = mode
        self.policyOverrides = restored.policy
        self.model = ModelStatus(switched: switchedModel)
        self.coordinator = CoordinatorRecord(conduct: restored.conduct)
        self.tasks = restored.tasks
        self.events = EventFeed(log: log)
        let agentID = restored.agentID
        if config.agentId == nil {
            self.writer.submit(WorkerStateFiles.agentIDFile, mode: WorkerStateFiles.agentIDMode, WorkerStateFiles.agentIDBytes(agentID))
        }
        let identityProblem = CopiedIdentityCheck.problem(
            agentID: agentID, configured: config.agentId != nil,
            machineSuffix: ServiceManager.machineAppSpecificID().map { String($0.prefix(12)) })
        if let identityProblem { logger.warning(identityProblem) }
        self.start = DaemonStart(paths: paths, agentID: agentID, identityProblem: identityProblem, startedAtMs: now, recovered: restored.recovered)
        self.writer.submit(WorkerStateFiles.modeFile, WorkerStateFiles.modeBytes(mode))
        self.writer.submit(WorkerStateFiles.eventsFile) { [log] in WorkerStateFiles.eventsBytes(log) }
    }

    public nonisolated var agentID: String { start.agentID }

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

    /// Writes and waits until durable. A failure is not the caller's to handle: the
    /// writer reports it (logged, and shown in status until a write succeeds).
    func persistDurably(_ name: String, _ bytes: [UInt8]) async {
        try? await writer.write(name, bytes)
    }

    /// Makes everything written so far durable (before a suspend).
    public func checkpoint() async {
        submitTasks()
        writer.submit(WorkerStateFiles.modeFile, WorkerStateFiles.modeBytes(modeState))
        await writer.flush()
    }

    /// Answers the watchdog: a reply proves the actor is not wedged.
    public func ping() -> Bool { true }

    /// Records the stop and returns once everything written so far is durable; called
    /// once, after the services have stopped.
    public func stop(reason: String) async {
        tasks.markRunningInterrupted(atMs: clock.wallMs())
        submitTasks()
        record(EventDraft(kind: .daemonStopped, from: modeState.mode, reason: reason))
        writer.submit(WorkerStateFiles.modeFile, WorkerStateFiles.modeBytes(modeState))
        events.finishAll()
        await writer.flush()
    }
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
