#if canImport(Glibc)
import Glibc
#endif
import BlueZ
import Daemon
import Logging
import Posix
import Proxy
import WorkerCore

// MARK: - proxy

struct ProxyCommand: Command {
    static let name = "proxy"
    static let summary = "put a nearby worker (mode bluetooth) behind a local HTTP API"
    static let usage = """
        Usage: edgecoder-worker proxy [--port 11435] [--adapter hciN] [--device ADDRESS] [--timeout-ms N] [--log-level L]

        A BlueZ central: scans for a worker in mode bluetooth (SPEC 6's service), connects
        to ADDRESS or else to the strongest signal, subscribes to its answers and status,
        and reconnects with backoff when the link drops. Serves on 127.0.0.1 only:

          GET  /status         connected, deviceName, deviceId, rssi, modelState, batteryPct,
                               requestsInFlight, … (the keys of EdgeCoder's Mac proxy)
          POST /api/generate   {"prompt", "maxTokens"} -> {"ok", "output", "response", "durationMs"};
                               Ollama's {"model", "prompt", "stream", "options": {"num_predict"}}
                               -> Ollama's answer; 503 when no worker is connected, 504 after
                               the timeout
          GET  /api/tags       the worker as the model "edgecoder-bluetooth" (Ollama clients)

          --port N        TCP port on 127.0.0.1 (default 11435; 0 picks a free one, printed)
          --adapter hciN  the local adapter (default: the first powered one)
          --device ADDR   the worker's Bluetooth address (default: the strongest found)
          --timeout-ms N  how long a request may wait for its answer (default 120000)
          --log-level L   debug, info, notice, warning, error (default info)

        Requests are written in chunks of at most min(MTU - 3, 508) bytes: 508 is the
        largest value bluetoothd before 5.69 (Debian 12) accepts. Stops on SIGTERM/SIGINT.
        Exit codes: 0 stopped, 1 failure (port in use, …), 64 usage.
        """
    let port: Int
    let adapter: String?
    let device: String?
    let timeoutMs: Int
    let level: LogLevel

    init(_ arguments: inout Arguments) throws(UsageError) {
        port = try arguments.number("--port", in: 0...65_535) ?? 11_435
        adapter = try arguments.option("--adapter")
        if let adapter, !WorkerConfig.isAdapterName(adapter) { throw UsageError("--adapter must be an adapter name like hci0, got '\(printable(adapter))'") }
        device = try arguments.option("--device")
        if let device, !ProxyCommand.isAddress(device) { throw UsageError("--device must be a Bluetooth address like 00:AA:01:00:00:00, got '\(printable(device))'") }
        timeoutMs = try arguments.number("--timeout-ms", in: 1_000...3_600_000) ?? 120_000
        let levelName = try arguments.option("--log-level") ?? "info"
        guard let level = LogLevel(name: levelName) else { throw UsageError("--log-level must be debug, info, notice, warning or error") }
        self.level = level
    }

    static func isAddress(_ text: String) -> Bool {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        return parts.count == 6 && parts.allSatisfy { $0.count == 2 && $0.allSatisfy(\.isHexDigit) }
    }

    func run() async -> Int32 {
        let logger = Logger(label: "proxy", level: level)
        let signals: SignalPipe
        let listener: LoopbackTCPListener
        do {
            signals = try SignalPipe()
            listener = try LoopbackTCPListener(port: UInt16(port))
        } catch {
            logger.error("cannot start: \(error)\(error.errno == EADDRINUSE ? ": another program listens on 127.0.0.1:\(port); pick one with --port" : "")")
            return ExitCode.failure
        }
        let central = GattCentral(settings: CentralSettings(adapter: adapter, device: device), logger: logger.labeled("central"))
        let server = ProxyServer(listener: listener, upstream: central, version: workerVersion, logger: logger, requestTimeoutMs: Int64(timeoutMs))
        logger.notice("listening on http://127.0.0.1:\(listener.port) (GET /status, POST /api/generate, GET /api/tags)")
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await central.run() }
            group.addTask { await server.run() }
            group.addTask {
                if let signal = try? await signals.next() { logger.notice("received \(SignalPipe.name(signal)); stopping") }
            }
            await group.next()
            group.cancelAll()
        }
        listener.close()
        return ExitCode.ok
    }
}
