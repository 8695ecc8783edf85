#if canImport(Glibc)
import Glibc
#endif
import Posix
import WorkerCore

// MARK: - metrics

struct MetricsCommand: Command {
    static let name = "metrics"
    static let summary = "print the daemon's metrics for Prometheus (or write them for node_exporter)"
    static let defaultTextfile = "/var/lib/prometheus/node-exporter/edgecoder-worker.prom"
    static let usage = """
        Usage: edgecoder-worker metrics [--write PATH] [--runtime-dir D]

        Prints the running daemon's metrics in Prometheus' text exposition format
        (version 0.0.4): subtasks done, failed and released by reason, pulls held by
        reason, heartbeats sent and failed, the coordinator's backoff, Bluetooth
        requests and clients, the mode, power decision, battery and model state as
        gauges, and the daemon's resident memory and CPU seconds. Counters start at
        zero when the daemon starts (Bluetooth's when mode bluetooth starts).

          --write PATH   replace PATH atomically instead of printing (a temporary file
                         in the same directory, fsync, rename): for node_exporter's
                         textfile collector, e.g. \(defaultTextfile)
                         (what edgecoder-worker-metrics.timer does)

        Exit codes: 0 printed or written, 1 the file could not be written, 69 no daemon
        answers (nothing is written: the previous file stays).
        """
    let writePath: String?
    let runtimeDirectory: String

    init(_ arguments: inout Arguments) throws(UsageError) {
        writePath = try arguments.option("--write")
        runtimeDirectory = try WorkerCLI.runtimeDirectory(&arguments)
        if let writePath, writePath.isEmpty || writePath.hasSuffix("/") {
            throw UsageError("--write needs a file path, got '\(printable(writePath))'")
        }
        guard arguments.positionals().isEmpty else { throw UsageError("metrics takes no arguments") }
    }

    func run() async -> Int32 {
        withDaemon(runtimeDirectory) { (client) throws(ControlClient.Failure) -> Int32 in
            let status = try client.call(.status)
            let process = status["daemon"]?["pid"]?.intValue.flatMap(MetricsCommand.usage(pid:))
            let text = PrometheusText.render(WorkerMetrics.families(status: status, process: process))
            guard let writePath else {
                print(text, terminator: "")
                return ExitCode.ok
            }
            do throws(SystemError) {
                // 0644: node_exporter reads it as its own user.
                try AtomicFile.write(writePath, Array(text.utf8), mode: 0o644, directoryMode: 0o755, keepMode: false, keepOwner: false)
            } catch {
                // The previous file stays as it was: the rename is the only step that replaces it.
                return Output.fail(
                    ExitCode.failure, "cannot write \(writePath): \(error)",
                    text: "edgecoder-worker: cannot write \(writePath): \(error)")
            }
            return ExitCode.ok
        }
    }

    /// The daemon's memory and CPU from /proc; nil when that pid is not the daemon as this
    /// client sees it (another pid namespace, or it just exited).
    static func usage(pid: Int64) -> ProcessUsage? {
        guard pid > 0, pid <= Int64(Int32.max),
            let comm = try? readFile("/proc/\(pid)/comm", limit: 64),
            String(decoding: comm, as: UTF8.self).hasPrefix("edgecoder-work"),
            let stat = try? readFile("/proc/\(pid)/stat", limit: 4_096),
            let statm = try? readFile("/proc/\(pid)/statm", limit: 4_096)
        else { return nil }
        return ProcessUsage.parse(
            stat: stat, statm: statm, ticksPerSecond: Int64(sysconf(Int32(_SC_CLK_TCK))),
            pageBytes: Int64(sysconf(Int32(_SC_PAGESIZE))))
    }
}
