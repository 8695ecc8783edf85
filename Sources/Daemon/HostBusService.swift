import DBus
import HostBus
import Logging
import Posix
import WorkerCore

/// Follows logind, NetworkManager and power-profiles-daemon on the system bus and hands
/// the daemon what they say: suspend (stop taking work, checkpoint, heartbeat, then let
/// the host sleep; after resume read power and the path again and heartbeat at once), a
/// metered connection, the power profile. None of them is required.
public struct HostBusService: Service {
    public let name = "host-bus"
    let daemon: WorkerState
    let logger: Logger
    /// nil: the system bus ($DBUS_SYSTEM_BUS_ADDRESS, else /run/dbus/system_bus_socket).
    let address: String?
    /// How long the heartbeat before a suspend may take (logind waits 5 s by default).
    let heartbeatTimeoutMs: Int64

    public init(daemon: WorkerState, logger: Logger, address: String? = nil, heartbeatTimeoutMs: Int64 = 3_000) {
        self.daemon = daemon
        self.logger = logger
        self.address = address
        self.heartbeatTimeoutMs = heartbeatTimeoutMs
    }

    public func run(shutdown: GracefulShutdown) async throws {
        _ = try await shutdown.cancelling { await monitor() }
    }

    func monitor() async {
        let (events, continuation) = AsyncStream<HostBusEvent>.makeStream()
        let link = HostBusLink(address: address, logger: logger, events: continuation)
        await withDiscardingTaskGroup { group in
            group.addTask { await link.loop() }
            var host = HostServices()
            var reportedBusProblem: String?
            for await event in events {
                switch event {
                case .connected:
                    host.busConnected = true
                    host.busProblem = nil
                    reportedBusProblem = nil
                case .busUnavailable(let why):
                    host = HostServices()
                    host.busProblem = why
                    let absent = HostServices.Presence.absent("no system bus: \(why)")
                    (host.logind, host.networkManager, host.powerProfiles) = (absent, absent, absent)
                    host.inhibitor = "not taken: no system bus"
                    if reportedBusProblem == nil {
                        logger.info("no system bus (\(why)): suspend, metered networks and power profiles are not followed")
                    }
                    reportedBusProblem = why
                case .presence(let peer, let presence):
                    switch peer {
                    case .logind:
                        host.logind = presence
                        if case .absent = presence { host.inhibitor = "not taken: logind is absent" }
                    case .networkManager: host.networkManager = presence
                    case .powerProfiles, .upowerProfiles:
                        // Either name will do: the newer one is an alias of the older.
                        if presence == .present || host.powerProfiles != .present { host.powerProfiles = presence }
                    }
                case .inhibitor(.success):
                    host.inhibitor = "held"
                    logger.info("logind delay inhibitor taken: a suspend waits for the checkpoint")
                case .inhibitor(.failure(let error)):
                    host.inhibitor = "failed: \(error.name): \(error.message)"
                    logger.warning("logind refused a delay inhibitor (\(error.name): \(error.message)): a suspend will not wait for the checkpoint")
                case .metered(let raw):
                    if raw != host.meteredRaw {
                        let text = raw.map(HostServices.meteredName) ?? "unknown"
                        logger.notice("NetworkManager: the primary connection's metered state is \(text)", [("event", "metered"), ("metered", text)])
                    }
                    host.meteredRaw = raw
                case .activeProfile(let profile):
                    if profile != host.activeProfile { logger.info("power-profiles-daemon: active profile \(profile ?? "unknown")") }
                    host.activeProfile = profile
                case .prepareForSleep(let starting):
                    let (phase, steps) = HostServices.prepareForSleep(starting, phase: host.sleep)
                    host.sleep = phase
                    if !steps.isEmpty {
                        logger.notice(
                            starting
                                ? "the host is suspending: no new work, checkpoint, heartbeat"
                                : "the host resumed: reading power and the network path again, heartbeat",
                            [("event", starting ? "host-suspend" : "host-resume")])
                    }
                    if !starting { host.lastResumeMs = wallClockMilliseconds() }
                    await daemon.updateHost(host)
                    for step in steps { await perform(step, link: link, host: &host) }
                }
                await daemon.updateHost(host)
            }
        }
    }

    private func perform(_ step: HostServices.SleepStep, link: HostBusLink, host: inout HostServices) async {
        switch step {
        case .holdNewWork, .resumeWork:
            break  // the phase in `host` is the hold; updateHost applied it
        case .checkpoint:
            await daemon.checkpoint()
        case .heartbeat:
            let sent = await daemon.heartbeatNow(timeoutMs: heartbeatTimeoutMs)
            logger.info(sent ? "heartbeat sent" : "no heartbeat: mode on's coordinator session is not running")
        case .releaseInhibitor:
            await link.releaseInhibitor()
            host.sleep = .suspending
            host.inhibitor = "released for this suspend"
        case .takeInhibitor:
            host.inhibitor = "asked again"
            await link.takeInhibitor()
        case .rereadPower:
            daemon.signals.powerRereadRequested.set(true)
        case .rereadPath:
            daemon.signals.pathRereadRequested.set(true)
        }
    }
}
