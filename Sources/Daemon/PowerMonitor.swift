import Logging
import Posix
import Telemetry
import WorkerCore

/// Keeps the power reading fresh: at once on a power-supply uevent (plug, unplug), and
/// every `interval` as well while a working mode is selected (batteries drain and CPUs
/// heat without announcing it); in mode off only on uevents and when asked.
public struct PowerMonitorService: Service {
    public let name = "power-monitor"
    let daemon: WorkerState
    let logger: Logger
    let reader: TelemetryReader
    let intervalNanoseconds: UInt64

    public init(daemon: WorkerState, logger: Logger, reader: TelemetryReader, intervalNanoseconds: UInt64 = 5_000_000_000) {
        self.daemon = daemon
        self.logger = logger
        self.reader = reader
        self.intervalNanoseconds = intervalNanoseconds
    }

    private enum Trigger: Sendable { case uevent(String), timer }

    public func run(shutdown: GracefulShutdown) async throws {
        _ = try await shutdown.cancelling { try await monitor() }
    }

    func monitor() async throws {
        let (triggers, continuation) = AsyncStream<Trigger>.makeStream(bufferingPolicy: .bufferingNewest(8))
        try await withThrowingDiscardingTaskGroup { group in
            do {
                let uevents = try PowerSupplyUevents()
                group.addTask {
                    while true {
                        switch try await uevents.next() {
                        case .event(let event): continuation.yield(.uevent("\(event.action) \(event.devpath)"))
                        case .eventsLost: continuation.yield(.uevent("events lost"))
                        }
                    }
                }
            } catch {
                logger.warning("cannot listen for power-supply uevents (\(error)); re-reading every \(intervalNanoseconds / 1_000_000_000) s only")
            }
            // A read asked for (after a resume: power may have changed while asleep).
            let requests = daemon.signals.powerRereadRequested
            group.addTask {
                while !Task.isCancelled {
                    await requests.wait(for: true)
                    if Task.isCancelled { return }
                    requests.set(false)
                    continuation.yield(.uevent("read asked for"))
                }
            }
            let interval = intervalNanoseconds
            let working = daemon.signals.workingModeSelected
            group.addTask {
                while true {
                    // Mode off decides nothing: no periodic read (no /proc scan, no sysfs
                    // walk) until a working mode is selected, which gets a fresh one at once.
                    // Uevents and asked-for reads still come through in mode off.
                    if !working.value {
                        await working.wait(for: true)
                        try Task.checkCancellation()
                        continuation.yield(.timer)
                    }
                    try await Task.sleep(nanoseconds: interval)
                    if working.value { continuation.yield(.timer) }
                }
            }
            var reader = self.reader
            for await trigger in triggers {
                if case .uevent(let what) = trigger { logger.debug("power-supply uevent: \(what)") }
                let reading = reader.read()
                await daemon.updateReading(reading, monotonicMs: Int64(monotonicNanoseconds() / 1_000_000), fresh: true)
            }
        }
    }
}
