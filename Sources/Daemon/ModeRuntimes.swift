import Logging
import ModelBackend
import Posix
import Sandbox
import StateStore
import Tasks
import WorkerCore

/// What a mode's runtime is built from: the daemon's parts, as DaemonMain has them.
public struct ModeRuntimeContext: Sendable {
    public let daemon: WorkerState
    public let config: WorkerConfig
    public let directory: StateDirectory
    /// The backend the readiness probe uses too.
    public let backend: ModelBackend
    public let logger: Logger

    public init(daemon: WorkerState, config: WorkerConfig, directory: StateDirectory, backend: ModelBackend, logger: Logger) {
        self.daemon = daemon
        self.config = config
        self.directory = directory
        self.backend = backend
        self.logger = logger
    }
}

/// The runtime of a working mode: a service that runs while its mode is selected, past the
/// charge gate and configured. It waits on `daemon.signals.runtime(for: Self.mode)`, which the
/// daemon flips on every mode and power change: true starts it, false stops it gracefully.
public protocol ModeRuntime: Service {
    /// The mode this runtime serves.
    static var mode: Mode { get }
    /// What this runtime lacks in `config`, in words for status; nil when it can run.
    static func unavailable(with config: WorkerConfig) -> String?
    /// The runtime, built once at start; it idles until its signal is true.
    static func make(_ context: ModeRuntimeContext) -> Self
}

extension ModeRuntime {
    public static func unavailable(with config: WorkerConfig) -> String? { nil }
}

/// Every mode runtime of this build, in start order (stopped in reverse). A new mode's
/// runtime is one type conforming to `ModeRuntime` and one line here.
public enum ModeRuntimes {
    public static let all: [any ModeRuntime.Type] = [
        BluetoothService.self,
        CoordinatorService.self,
    ]

    /// The runtime serving `mode`, when this build has one.
    public static func runtime(for mode: Mode) -> (any ModeRuntime.Type)? { all.first { $0.mode == mode } }

    /// Why `mode` cannot run here; nil when it can (`off` needs nothing).
    public static func unavailable(_ mode: Mode, config: WorkerConfig) -> String? {
        if mode == .off { return nil }
        guard let runtime = runtime(for: mode) else { return "mode \(mode.rawValue) has no runtime in this build" }
        return runtime.unavailable(with: config)
    }
}

extension CoordinatorService: ModeRuntime {
    public static var mode: Mode { .on }

    public static func unavailable(with config: WorkerConfig) -> String? {
        config.coordinator.url == nil ? "coordinator.url is not configured: set it in the config file and restart" : nil
    }

    public static func make(_ context: ModeRuntimeContext) -> CoordinatorService {
        CoordinatorService(
            daemon: context.daemon, config: context.config, directory: context.directory,
            logger: context.logger.labeled("coordinator"),
            sandbox: ContainerSandbox(.init(context.config.execution), logger: context.logger.labeled("sandbox")))
    }
}

extension BluetoothService: ModeRuntime {
    public static var mode: Mode { .bluetooth }

    public static func make(_ context: ModeRuntimeContext) -> BluetoothService {
        BluetoothService(
            daemon: context.daemon, backend: context.backend, config: context.config,
            logger: context.logger.labeled("bluetooth"))
    }
}

/// The loop of every mode runtime: wait until its mode should run (or the daemon stops),
/// run one session, tell it to stop gracefully once the mode should no longer run, `restart`
/// is asked or the daemon stops, wait for it to end, and start over. A session is never
/// cancelled from here: it finishes what it holds (a subtask, bluetoothd's registrations)
/// when `stop` is triggered.
///
/// Once the task is cancelled every wait returns at once, so each round checks it: without
/// that check a cancelled runtime started and stopped its session in a tight loop, for ever
/// (issue 12 §6: 129 million times after two quick SIGTERMs; fixed twice, once per runtime,
/// before this loop was shared).
func runWhileActive(
    _ active: StateSignal, restart: StateSignal? = nil, shutdown: GracefulShutdown,
    session: @escaping @Sendable (_ stop: GracefulShutdown) async -> Void
) async {
    while !shutdown.isTriggered && !Task.isCancelled {
        _ = await race({ await active.wait(for: true) }, { await shutdown.wait() })
        if shutdown.isTriggered || Task.isCancelled { return }
        restart?.set(false)  // a restart asked before this start is this start
        let stop = GracefulShutdown()
        _ = await race(
            { await session(stop) },
            {
                _ = await race(
                    {
                        _ = await race(
                            { await active.wait(for: false) },
                            { if let restart { await restart.wait(for: true) } else { await suspendUntilCancelled() } })
                    },
                    { await shutdown.wait() })
                stop.trigger()
                await suspendUntilCancelled()
            })
    }
}
