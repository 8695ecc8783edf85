import Logging
import Posix
import WorkerCore

/// Pings systemd's watchdog at half its interval, but only while the daemon's actor
/// answers: a wedged daemon stops pinging and systemd restarts it.
public struct WatchdogService: Service {
    public let name = "watchdog"
    let intervalMicroseconds: UInt64
    let daemon: WorkerState
    let notify: @Sendable (String) -> Void

    public init(intervalMicroseconds: UInt64, daemon: WorkerState, notify: @escaping @Sendable (String) -> Void) {
        self.intervalMicroseconds = intervalMicroseconds
        self.daemon = daemon
        self.notify = notify
    }

    public func run(shutdown: GracefulShutdown) async throws {
        _ = try await shutdown.cancelling {
            while true {
                if await daemon.ping() { notify("WATCHDOG=1") }
                try await Task.sleep(nanoseconds: intervalMicroseconds / 2 * 1_000)
            }
        }
    }
}
