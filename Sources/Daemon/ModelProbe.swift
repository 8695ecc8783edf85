import Logging
import ModelBackend
import Posix
import WorkerCore

/// Asks the model backend whether it is ready (SPEC 7: `modelState`), at start and every
/// `interval` while a working mode is selected; in `off` it does not bother the server.
public struct ModelProbeService: Service {
    public let name = "model-probe"
    let daemon: WorkerDaemon
    let backend: ModelBackend
    let logger: Logger
    let intervalNanoseconds: UInt64

    public init(daemon: WorkerDaemon, backend: ModelBackend, logger: Logger, intervalNanoseconds: UInt64 = 30_000_000_000) {
        self.daemon = daemon
        self.backend = backend
        self.logger = logger
        self.intervalNanoseconds = intervalNanoseconds
    }

    public func run(shutdown: GracefulShutdown) async throws {
        _ = try await shutdown.cancelling {
            var last: ModelState?
            let working = daemon.workingModeSelected
            while true {
                let selected = working.value
                let generating = await daemon.isGenerating
                if selected && generating {
                    // A generation in progress answers the question better than a probe.
                } else if selected {
                    let (state, detail) = await backend.using(model: await daemon.activeModel).probe()
                    if state != last {
                        if state == .ready { logger.info("model backend ready: \(detail)") } else { logger.warning("model backend \(state.rawValue): \(detail)") }
                        last = state
                    }
                    await daemon.updateModel(state: state.rawValue, detail: detail)
                } else {
                    await daemon.updateModel(state: "idle", detail: "mode off: the backend is not in use")
                    last = nil
                }
                // Sleep the interval, or less when a working mode is selected or left.
                let interval = intervalNanoseconds
                _ = await race({ try? await Task.sleep(nanoseconds: interval) }, { await working.wait(for: !selected) })
                try Task.checkCancellation()
            }
        }
    }
}
