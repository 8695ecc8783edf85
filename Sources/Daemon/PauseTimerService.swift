import Logging
import Posix
import Tasks
import WorkerCore

/// Ends a pause (`mode off --for`) at its deadline: sleeps until the deadline or until the
/// pause changes, then asks the daemon to return to the paused mode. The deadline is wall
/// clock (it survives restarts in the mode file), so sleeps are capped: a clock that
/// jumps or a host that suspended is noticed within `maxSleepMs`.
public struct PauseTimerService: Service {
    public let name = "pause-timer"
    let daemon: WorkerState
    let maxSleepMs: Int64

    public init(daemon: WorkerState, maxSleepMs: Int64 = 30_000) {
        self.daemon = daemon
        self.maxSleepMs = maxSleepMs
    }

    public func run(shutdown: GracefulShutdown) async throws {
        _ = try await shutdown.cancelling { try await watch() }
    }

    func watch() async throws {
        let changed = daemon.signals.pauseChanged
        while !Task.isCancelled {
            changed.set(false)
            guard let left = await daemon.pauseLeftMs else {
                await changed.wait(for: true)
                continue
            }
            if left <= 0 {
                await daemon.endPauseIfDue()
                continue
            }
            let sleepMs = min(left, maxSleepMs)
            _ = await race({ try? await Task.sleep(nanoseconds: UInt64(sleepMs) * 1_000_000) }, { await changed.wait(for: true) })
        }
    }
}
