#if canImport(Glibc)
import Glibc
#endif
import Logging
import ModelBackend
import Posix
import StateStore
import Systemd
import Telemetry
import WorkerCore

/// The one place that wires the parts into a running daemon.
public enum DaemonMain {
    /// After a second SIGTERM/SIGINT the process is gone within this many seconds.
    public static let secondSignalBoundSeconds: UInt32 = 3

    /// The daemon's logger: structured records to journald when stderr is its stream,
    /// plain lines on a terminal, `<N>`-prefixed lines anywhere else (service §2).
    public static func makeLogger(label: String = "edgecoder-worker") -> Logger {
        Logger(label: label, handler: LogSink.current().handler())
    }

    /// Reads the config file again for a reload: the config, or every problem in words.
    public typealias ConfigLoader = @Sendable () -> Result<WorkerConfig, ConfigReloadFailure>

    /// Runs the daemon until SIGTERM/SIGINT; SIGHUP reloads the config through
    /// `reloadConfig` (absent: the reload is refused). Returns the process exit code.
    public static func run(
        config: WorkerConfig, paths: DaemonPaths, logger baseLogger: Logger,
        reloadConfig: ConfigLoader? = nil
    ) async -> Int32 {
        var config = config
        // The model server's key: the config's, else the systemd credential (never logged).
        if config.backend.apiKey == nil { config.backend.apiKey = ModelBackend.credentialAPIKey() }
        var logger = baseLogger
        logger.level = LogLevel(name: config.log.level.rawValue) ?? .info
        logger.sharedLevel = LogLevelSetting(logger.level)

        // Signals first: a SIGTERM during start-up must still end in a clean stop.
        let signals: SignalPipe
        do { signals = try SignalPipe() } catch {
            logger.error("cannot install signal handlers: \(error)")
            return 1
        }

        // The graceful stop has its deadline, then cancels; if what is cancelled never
        // ends, the process still does (issue 12 §6). A second signal means "now".
        let gracefulDeadlineMs = config.coordinator.stopGraceMs + 2_000
        do {
            try signals.exitIfStopHangs(afterFirst: UInt32(gracefulDeadlineMs / 1_000) + 5, afterSecond: DaemonMain.secondSignalBoundSeconds)
        } catch {
            logger.warning("cannot bound the stop with an alarm: \(error)")
        }

        let directory: StateDirectory
        do { directory = try StateDirectory(path: paths.stateDirectory) } catch {
            logger.error("cannot open the state directory: \(error). Create it writable for this user, or pass --state-dir.")
            return 1
        }
        let daemon = WorkerState(config: config, paths: paths, directory: directory, logger: logger)
        // The first reading before READY, so the charge gate and status are decided from the start.
        var reader = TelemetryReader(
            root: paths.sysfsRoot,
            own: OwnProcesses(
                root: paths.sysfsRoot, serverPort: LoopbackServer.port(of: config.backend.url),
                workerPID: getpid(),
                derivedUnits: OwnProcesses.derivedUnits(backendKind: config.backend.kind.rawValue)))
        await daemon.updateReading(reader.read(), monotonicMs: Int64(monotonicNanoseconds() / 1_000_000), fresh: true)

        let readGroupGID = groupID(named: config.control.readGroup)
        if readGroupGID == nil {
            logger.notice(
                "group \(config.control.readGroup) does not exist: only root and the daemon's user (\(userName(uid: getuid()))) can read its state (control.readGroup)"
            )
        }
        let listener: UnixListener
        do {
            try makeDirectories(paths.runtimeDirectory, mode: 0o755)
            // Anyone may connect; the daemon decides per request from peer credentials,
            // and answers a refused peer with a reason instead of a bare EACCES.
            listener = try UnixListener(path: paths.controlSocket, mode: 0o666, group: readGroupGID)
        } catch {
            logger.error("cannot listen on the control socket: \(error)")
            await daemon.stop(reason: "start-up failed: \(error)")
            return 1
        }

        var services: [any Service] = [
            ControlServer(
                listener: listener, daemon: daemon, logger: logger.labeled("control"),
                daemonUID: getuid(), readGroupName: config.control.readGroup, readGroupGID: readGroupGID,
                reload: { [logger] in
                    await reload(daemon: daemon, paths: paths, load: reloadConfig, logger: logger, asked: "asked on the control socket")
                })
        ]
        let backend = ModelBackend(config: config.backend)
        services.append(ModelProbeService(daemon: daemon, backend: backend, logger: logger.labeled("backend")))
        let runtimes = ModeRuntimeContext(daemon: daemon, config: config, directory: directory, backend: backend, logger: logger)
        for runtime in ModeRuntimes.all { services.append(runtime.make(runtimes)) }
        services.append(PowerMonitorService(daemon: daemon, logger: logger.labeled("power"), reader: reader))
        services.append(
            PathMonitorService(
                daemon: daemon, logger: logger.labeled("path"), graceMs: config.network.pathLossGraceMs,
                hook: config.hooks.networkRestored.map { ($0, config.hooks.timeoutMs) }))
        services.append(HostBusService(daemon: daemon, logger: logger.labeled("host")))
        services.append(PauseTimerService(daemon: daemon))
        if let usec = ServiceManager.watchdogMicroseconds() {
            services.append(WatchdogService(intervalMicroseconds: usec, daemon: daemon, notify: { ServiceManager.notify($0) }))
        }

        let summary = await daemon.statusLine()
        ServiceManager.notify("READY=1\nSTATUS=\(summary)\nMAINPID=\(getpid())")
        logger.notice(
            "ready: \(summary); agent \(daemon.agentID); control socket \(paths.controlSocket)",
            [("event", EventKind.daemonStarted.rawValue), ("mode", await daemon.currentMode.rawValue)])

        let group = ServiceGroup(
            services: services, logger: logger,
            gracefulDeadlineNanoseconds: UInt64(gracefulDeadlineMs) * 1_000_000,
            onShutdownStart: { ServiceManager.notify("STOPPING=1\nSTATUS=stopping") },
            onReload: { [logger] in await reload(daemon: daemon, paths: paths, load: reloadConfig, logger: logger) })
        let exit = await group.run(signals: signals)
        listener.close()
        switch exit {
        case .signal(let signo):
            await daemon.stop(reason: "stopped by \(SignalPipe.name(signo))")
            logger.notice("stopped", [("event", EventKind.daemonStopped.rawValue)])
            return 0
        case .serviceFailed(let why):
            await daemon.stop(reason: "stopped after a failure: \(why)")
            return 1
        }
    }

    /// One reload, framed for systemd as `RELOADING=1` (with the monotonic time it
    /// began, which systemd 253+ requires and older versions ignore) … `READY=1`: a
    /// `systemctl reload` returns once the daemon has taken or refused the file.
    static func reload(daemon: WorkerState, paths: DaemonPaths, load: ConfigLoader?, logger: Logger, asked: String = "received SIGHUP") async {
        ServiceManager.notify("RELOADING=1\nMONOTONIC_USEC=\(monotonicNanoseconds() / 1_000)\nSTATUS=reloading \(paths.configPath)")
        logger.notice("\(asked): reloading \(paths.configPath)")
        switch load?() ?? .failure(ConfigReloadFailure(["this daemon was started without a config loader"])) {
        case .success(var file):
            if file.backend.apiKey == nil { file.backend.apiKey = ModelBackend.credentialAPIKey() }
            await daemon.reload(file: file)
        case .failure(let failure):
            await daemon.refuseReload(problems: failure.problems)
        }
        ServiceManager.notify("READY=1\nSTATUS=\(await daemon.statusLine())")
    }
}

/// Why a reload could not use the config file, every problem in words (with its key).
public struct ConfigReloadFailure: Error, Sendable {
    public var problems: [String]
    public init(_ problems: [String]) { self.problems = problems }
}
