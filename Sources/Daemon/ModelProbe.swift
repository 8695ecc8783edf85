import Logging
import ModelBackend
import Posix
import Synchronization
import Tasks
import WorkerCore

/// Asks the model backend whether it is ready (model-backends §4: `modelState`), at start and every
/// `interval` while a working mode is selected; in `off` it does not bother the server.
/// When the model is pulled but not loaded (Ollama), it loads it, so that no subtask pays
/// the load inside its own time; `loading` until the load is done.
public struct ModelProbeService: Service {
    public let name = "model-probe"
    let daemon: WorkerState
    let backend: ModelBackend
    let logger: Logger
    let intervalNanoseconds: UInt64
    /// How often the probe looks again while a load runs, to say `ready` soon after.
    let loadPollNanoseconds: UInt64

    public init(
        daemon: WorkerState, backend: ModelBackend, logger: Logger, intervalNanoseconds: UInt64 = 30_000_000_000,
        loadPollNanoseconds: UInt64 = 1_000_000_000
    ) {
        self.daemon = daemon
        self.backend = backend
        self.logger = logger
        self.intervalNanoseconds = intervalNanoseconds
        self.loadPollNanoseconds = loadPollNanoseconds
    }

    /// The load in flight and how the last one ended, shared with the task that loads.
    final class Loads: Sendable {
        enum Phase: Sendable {
            case none
            case running(startedMs: Int64)
            case failed(ModelError)
        }
        let phase = Mutex(Phase.none)
        let task = Mutex<Task<Void, Never>?>(nil)
        /// False while a load runs.
        let idle = StateSignal(true)

        var isRunning: Bool {
            phase.withLock { phase in
                if case .running = phase { return true }
                return false
            }
        }
    }

    public func run(shutdown: GracefulShutdown) async throws {
        let loads = Loads()
        defer { loads.task.withLock { $0?.cancel() } }
        _ = try await shutdown.cancelling {
            var last: ModelState?
            // Probes in a row that found the backend not ready: while mode on waits for it
            // (no pulls until it is ready), it is asked again after 2, 4, 8, 16 s, then every interval.
            var notReady = 0
            let working = daemon.signals.workingModeSelected
            while true {
                let selected = working.value
                let generating = await daemon.isGenerating
                var interval = intervalNanoseconds
                if selected && generating {
                    // A generation in progress answers the question better than a probe;
                    // one that is not yet ready is looked at again soon after it ends.
                    if last != .ready { interval = min(interval, loadPollNanoseconds) }
                } else if selected {
                    // The coordinator's switch may have changed the model (protocol-coordinator §7).
                    let current = backend.using(model: await daemon.activeModel)
                    var readiness = await current.probe()
                    if readiness.needsLoad {
                        readiness = load(readiness, backend: current, loads: loads)
                        if readiness.state == .loading { interval = min(interval, loadPollNanoseconds) }
                    }
                    if readiness.state == .ready {
                        notReady = 0
                    } else {
                        notReady += 1
                        interval = min(interval, UInt64(1_000_000_000) << UInt64(min(notReady, 5)))
                    }
                    if readiness.state != last {
                        if readiness.state == .ready {
                            logger.info("model backend ready: \(readiness.detail)")
                        } else {
                            logger.warning("model backend \(readiness.state.rawValue): \(readiness.detail)")
                        }
                        last = readiness.state
                    }
                    await daemon.updateModel(state: readiness.state.rawValue, detail: readiness.detail)
                    if let size = readiness.parameterSizeBillions { await daemon.updateModelParameterSize(size, model: current.config.model) }
                } else {
                    await daemon.updateModel(state: "idle", detail: "mode off: the backend is not in use")
                    last = nil
                    notReady = 0
                }
                // Sleep the interval, or less when a working mode is selected or left, or
                // when a load ends (then the model is in /api/ps: ready at once).
                let wait = interval
                let loading = loads.isRunning
                _ = await race(
                    {
                        // Mode off: nothing to probe until a working mode is selected (the other side).
                        if !selected && !loading { await suspendUntilCancelled(); return }
                        if loading {
                            // Task.value cannot be cancelled, so the signal is what is awaited.
                            _ = await race({ try? await Task.sleep(nanoseconds: wait) }, { await loads.idle.wait(for: true) })
                        } else {
                            try? await Task.sleep(nanoseconds: wait)
                        }
                    }, { await working.wait(for: !selected) })
                try Task.checkCancellation()
            }
        }
    }

    /// A model that is pulled but not loaded: starts loading it, or says how the load goes.
    /// A failed load is reported once as `unavailable`, then tried again.
    func load(_ readiness: ModelReadiness, backend: ModelBackend, loads: Loads) -> ModelReadiness {
        let nowMs = Int64(monotonicNanoseconds() / 1_000_000)
        let keepAlive = backend.config.keepAlive.stringValue ?? backend.config.keepAlive.serialized
        return loads.phase.withLock { phase -> ModelReadiness in
            switch phase {
            case .running(let startedMs):
                return ModelReadiness(.loading, "\(readiness.detail); loading it for \((nowMs - startedMs) / 1_000) s (keep_alive \(keepAlive))")
            case .failed(let error):
                phase = .none
                return ModelReadiness(.unavailable, "\(readiness.detail); loading it failed: \(error.message)")
            case .none:
                phase = .running(startedMs: nowMs)
                loads.idle.set(false)
                let logger = logger
                logger.notice("loading the model into the backend's memory (keep_alive \(keepAlive)) so that no request pays the load")
                loads.task.withLock {
                    $0 = Task {
                        do throws(ModelError) {
                            try await backend.load()
                            loads.phase.withLock { $0 = .none }
                        } catch {
                            loads.phase.withLock { $0 = .failed(error) }
                        }
                        loads.idle.set(true)
                    }
                }
                return ModelReadiness(.loading, "\(readiness.detail); loading it now (keep_alive \(keepAlive))")
            }
        }
    }
}
