// The daemon's state writes under load (issue 11, part 3): how many events per second
// the daemon's actor records, and how long the control socket takes to answer `status`
// while events are being recorded, beside the same round trip with nothing recorded.
// Figures, not assertions.
#if canImport(Glibc)
import Glibc
#endif
import Daemon
import Logging
import Posix
import StateStore
import WorkerCore

/// Drops every line: the bench measures the daemon, not its logging.
struct SilentLogHandler: LogHandler {
    func log(level: LogLevel, label: String, message: String, metadata: [(String, String)]) {}
}

/// A state directory on the root file system (fsync is real there; tmpfs would hide it).
func benchStateRoot(_ name: String) -> String {
    let base = environment("BENCH_STATE_DIR") ?? "/var/tmp"
    return "\(base)/ecw-bench-\(name)-\(getpid())"
}

func removeTree(_ path: String) {
    for name in listDirectory(path, maxEntries: .max) ?? [] {
        let full = path + "/" + name
        if unlink(full) != 0 { removeTree(full) }
    }
    rmdir(path)
}

/// A daemon whose event log is already full (1,000 events), as after a while in service:
/// every write of the log is then as large as it gets.
func makeBenchDaemon(root: String) throws -> WorkerState {
    let paths = DaemonPaths(configPath: "/dev/null", stateDirectory: root + "/state", runtimeDirectory: root + "/run", sysfsRoot: "/")
    let directory = try StateDirectory(path: paths.stateDirectory)
    var log = EventLog()
    for i in 0..<EventLog.defaultCapacity {
        log.append(EventDraft(kind: .hookRan, reason: "fill \(i) exited 0"), timeMs: wallClockMilliseconds())
    }
    try WorkerStateFiles(directory: directory).saveEvents(log)
    return WorkerState(
        config: WorkerConfig(), paths: paths, directory: directory,
        logger: Logger(label: "bench", handler: SilentLogHandler()))
}

/// Records events one after another for `seconds`; returns how many were recorded.
func recordEvents(_ daemon: WorkerState, seconds: Double, stop: GracefulShutdown? = nil) async -> Int {
    let deadline = monotonicNanoseconds() + UInt64(seconds * 1e9)
    var count = 0
    while monotonicNanoseconds() < deadline && !(stop?.isTriggered ?? false) {
        await daemon.recordHook(name: "bench", outcome: .exited(0))
        count += 1
    }
    return count
}

/// `status` round trips over the control socket for `seconds`, from a thread of its own
/// with a blocking client (a real client is another process: it must not share our pool).
func statusRoundTrips(socket: String, seconds: Double) async -> [Double] {
    // Unchecked: the client thread alone touches `latencies` until it resumes the continuation.
    final class Job: @unchecked Sendable {
        let socket: String
        let seconds: Double
        var latencies: [Double] = []
        var continuation: CheckedContinuation<[Double], Never>?
        init(socket: String, seconds: Double) { self.socket = socket; self.seconds = seconds }
        func run() {
            do {
                let client = try UnixClient.connect(path: socket)
                var buffer: [UInt8] = []
                let request = Array(#"{"cmd":"status"}"#.utf8) + [0x0A]
                let deadline = monotonicNanoseconds() + UInt64(seconds * 1e9)
                while monotonicNanoseconds() < deadline {
                    let start = monotonicNanoseconds()
                    try client.send(request)
                    guard try client.readLine(buffer: &buffer, limit: 1 << 22) != nil else { break }
                    latencies.append(Double(monotonicNanoseconds() - start) / 1e6)
                }
            } catch {
                print("   status client failed: \(error)")
            }
            continuation!.resume(returning: latencies)
        }
    }
    return await withCheckedContinuation { continuation in
        let job = Job(socket: socket, seconds: seconds)
        job.continuation = continuation
        do { try startDetachedThread(named: "bench-status") { job.run() } } catch { continuation.resume(returning: []) }
    }
}

func percentile(_ values: [Double], _ p: Double) -> Double {
    guard !values.isEmpty else { return .nan }
    let sorted = values.sorted()
    return sorted[min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.down)))]
}

func mean(_ values: [Double]) -> Double { values.isEmpty ? .nan : values.reduce(0, +) / Double(values.count) }

func ms(_ value: Double) -> String { String((value * 100).rounded() / 100) }

func stateWritesBench() async {
    let seconds = Double(environment("BENCH_EVENT_SECONDS") ?? "") ?? 5
    let statusSeconds = Double(environment("BENCH_STATUS_SECONDS") ?? "") ?? 5

    // (a) Events per second through the actor, from one caller, the log full (1,000 events).
    let rootA = benchStateRoot("events")
    defer { removeTree(rootA) }
    do {
        let daemon = try makeBenchDaemon(root: rootA)
        let start = monotonicNanoseconds()
        let recorded = await recordEvents(daemon, seconds: seconds)
        let recordedAt = monotonicNanoseconds()
        // The stop makes everything recorded durable (it writes the log once more).
        await daemon.stop(reason: "bench done")
        let stoppedAt = monotonicNanoseconds()
        let taken = Double(recordedAt - start) / 1e9
        let durable = Double(stoppedAt - start) / 1e9
        print("== state writes: events recorded through the daemon's actor (release build; state on \(rootA))")
        print(
            "   \(recorded) events in \(ms(taken)) s: \(Int(Double(recorded) / taken)) events/s recorded; \(Int(Double(recorded) / durable)) events/s counting the stop that makes them durable"
        )
    } catch {
        print("   cannot open a state directory under \(rootA): \(error)")
    }

    // (b) `status` over the control socket, idle and while one caller records events
    // as fast as the daemon takes them.
    let rootB = benchStateRoot("control")
    defer { removeTree(rootB) }
    do {
        let daemon = try makeBenchDaemon(root: rootB)
        try makeDirectories(rootB + "/run", mode: 0o755)
        let socket = rootB + "/run/control.sock"
        let listener = try UnixListener(path: socket, mode: 0o600, group: nil)
        let server = ControlServer(
            listener: listener, daemon: daemon, logger: Logger(label: "bench", handler: SilentLogHandler()),
            daemonUID: getuid(), readGroupName: "bench", readGroupGID: nil)
        let shutdown = GracefulShutdown()
        let stopRecording = GracefulShutdown()
        let (idle, loaded, recorded) = await withTaskGroup(of: Void.self) { group -> ([Double], [Double], Int) in
            group.addTask { try? await server.run(shutdown: shutdown) }
            let idle = await statusRoundTrips(socket: socket, seconds: statusSeconds)
            async let recording = recordEvents(daemon, seconds: 3_600, stop: stopRecording)
            let loaded = await statusRoundTrips(socket: socket, seconds: statusSeconds)
            stopRecording.trigger()
            let recorded = await recording
            shutdown.trigger()
            await group.waitForAll()
            return (idle, loaded, recorded)
        }
        listener.close()
        await daemon.stop(reason: "bench done")
        print("== state writes: control socket `status` round trips, one client, back to back for \(ms(statusSeconds)) s each")
        print(
            "   idle:                       median \(ms(percentile(idle, 0.5))) ms, mean \(ms(mean(idle))) ms, p99 \(ms(percentile(idle, 0.99))) ms, max \(ms(idle.max() ?? .nan)) ms (\(idle.count) round trips)"
        )
        print(
            "   while events are recorded:  median \(ms(percentile(loaded, 0.5))) ms, mean \(ms(mean(loaded))) ms, p99 \(ms(percentile(loaded, 0.99))) ms, max \(ms(loaded.max() ?? .nan)) ms (\(loaded.count) round trips, \(recorded) events recorded meanwhile)"
        )
    } catch {
        print("   cannot run the control socket bench under \(rootB): \(error)")
    }
}
