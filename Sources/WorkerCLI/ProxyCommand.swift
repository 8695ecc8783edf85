#if canImport(Glibc)
import Glibc
#endif
import BlueZ
import Daemon
import Logging
import Posix
import Proxy
import StateStore
import Tasks
import WorkerCore

// MARK: - proxy

struct ProxyCommand: Command {
    static let name = "proxy"
    static let summary = "put a nearby worker (mode bluetooth) behind a local Ollama/OpenAI-compatible HTTP API"
    static let usage = """
        Usage: edgecoder-worker proxy [--port 11435] [--adapter hciN] [--device ADDRESS | --any] [--forget]
                                      [--state-dir DIR] [--allow-origin ORIGIN]... [--timeout-ms N] [--log-level L]
               edgecoder-worker proxy --list [--adapter hciN] [--scan-ms N] [--device ADDRESS | --any] [--state-dir DIR] [--json]

        A BlueZ central: scans for a worker in mode bluetooth (protocol-bluetooth §1's service), connects
        to it, subscribes to its answers and status, and reconnects with backoff when the
        link drops. The first worker it connects to is remembered (DIR/proxy.json) and is
        the only one used afterwards, unless --device or --any. Serves on 127.0.0.1 and
        [::1] as a local Ollama and OpenAI-compatible server (docs/reference/proxy-api.md):

          GET|HEAD /                      "Ollama is running"
          GET  /status                    connected, deviceName, deviceId, rssi, modelState,
                                          batteryPct, requestsInFlight, selection, pinnedDevice, …
          GET  /api/version, /api/tags, /api/ps; POST /api/show
          POST /api/generate              EdgeCoder's {"prompt", "maxTokens"} -> {"ok", "output",
                                          "response", "durationMs"}; Ollama's body -> Ollama's
                                          answer, streamed as NDJSON unless "stream": false
          POST /api/chat                  Ollama's chat (EdgeCoder's IDE router's call too)
          GET  /v1/models; POST /v1/chat/completions, /v1/completions
                                          OpenAI's shapes ("stream": true as server-sent events)

          --port N            TCP port (default 11435; 0 picks a free one, printed)
          --adapter hciN      the local adapter (default: the first powered one)
          --device ADDR       use only the worker at this Bluetooth address
          --any               use the strongest worker found each time (remember none)
          --forget            forget the remembered worker first (the next one found is kept)
          --state-dir DIR     where the remembered worker is kept (default $STATE_DIRECTORY,
                              else $XDG_STATE_HOME/edgecoder-worker, else ~/.local/state/edgecoder-worker)
          --allow-origin O    a web origin allowed besides the loopback ones (repeatable;
                              * matches any characters, e.g. https://*.example.com)
          --timeout-ms N      how long a request may wait for its answer (default 120000)
          --log-level L       debug, info, notice, warning, error (default info)
          --list              scan, print the workers in range (address, RSSI, name), strongest
                              first, the one the proxy would use with the same options marked,
                              and exit: 0 when one was found, 1 when none (serves nothing)
          --scan-ms N         how long --list scans (default 5000)

        Requests whose Host is not a loopback name get 403 (DNS rebinding), so do requests
        from a web page whose Origin is not allowed. Requests are written in chunks of at
        most min(MTU - 3, 508) bytes: 508 is the largest value bluetoothd before 5.69
        (Debian 12) accepts. Stops on SIGTERM/SIGINT. Exit codes: 0 stopped, 1 failure
        (port in use, …), 64 usage.
        """
    let port: Int
    let adapter: String?
    let device: String?
    let any: Bool
    let forget: Bool
    let stateDir: String?
    let allowOrigins: [String]
    let timeoutMs: Int
    let level: LogLevel
    /// `--list`: how long to scan; nil: serve.
    let listScanMs: Int64?
    let json: Bool
    /// Test only: a stand-in for the Bluetooth link (`StandInUpstream`), so real HTTP
    /// clients can be tested against the proxy on a machine without Bluetooth.
    let testUpstreamScript: String?

    init(_ arguments: inout Arguments) throws(UsageError) {
        port = try arguments.number("--port", in: 0...65_535) ?? 11_435
        let list = arguments.flag("--list")
        let scanMs = try arguments.number("--scan-ms", in: 500...120_000)
        if scanMs != nil && !list { throw UsageError("--scan-ms goes with --list") }
        listScanMs = list ? Int64(scanMs ?? 5_000) : nil
        json = arguments.flag("--json")
        if json && !list { throw UsageError("--json goes with --list (the proxy's own status is GET /status)") }
        adapter = try arguments.option("--adapter")
        if let adapter, !WorkerConfig.isAdapterName(adapter) {
            throw UsageError("--adapter must be an adapter name like hci0, got '\(printable(adapter))'")
        }
        device = try arguments.option("--device")
        if let device, !ProxyCommand.isAddress(device) {
            throw UsageError("--device must be a Bluetooth address like 00:AA:01:00:00:00, got '\(printable(device))'")
        }
        any = arguments.flag("--any")
        if any && device != nil { throw UsageError("--device and --any exclude each other: --device uses one worker, --any the strongest each time") }
        forget = arguments.flag("--forget")
        stateDir = try arguments.option("--state-dir")
        allowOrigins = try arguments.options("--allow-origin")
        for origin in allowOrigins where !BrowserGuard.isOriginPattern(origin) {
            throw UsageError(
                "--allow-origin must be an origin like https://app.example.com (scheme://host[:port], no path; * for any characters), got '\(printable(origin))'"
            )
        }
        timeoutMs = try arguments.number("--timeout-ms", in: 1_000...3_600_000) ?? 120_000
        let levelName = try arguments.option("--log-level") ?? "info"
        guard let level = LogLevel(name: levelName) else { throw UsageError("--log-level must be debug, info, notice, warning or error") }
        self.level = level
        testUpstreamScript = try arguments.option("--test-upstream-script")
    }

    static func isAddress(_ text: String) -> Bool {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        return parts.count == 6 && parts.allSatisfy { $0.count == 2 && $0.allSatisfy(\.isHexDigit) }
    }

    /// The folder of the remembered worker: --state-dir, systemd's $STATE_DIRECTORY (the
    /// first when several), $XDG_STATE_HOME/edgecoder-worker, ~/.local/state/edgecoder-worker.
    static func stateDirectory(given: String?, environment: (String) -> String?) -> String? {
        if let given { return given }
        if let systemd = environment("STATE_DIRECTORY")?.split(separator: ":").first, !systemd.isEmpty { return String(systemd) }
        if let xdg = environment("XDG_STATE_HOME"), xdg.hasPrefix("/") { return xdg + "/edgecoder-worker" }
        if let home = environment("HOME"), home.hasPrefix("/") { return home + "/.local/state/edgecoder-worker" }
        return nil
    }

    static let pinFile = "proxy.json"

    func run() async -> Int32 {
        if let listScanMs { return await list(scanMs: listScanMs) }
        // The daemon's choice of sink: journal fields under systemd (the user unit), plain
        // lines on a terminal, priority prefixes elsewhere.
        let logger = {
            var logger = DaemonMain.makeLogger(label: "proxy")
            logger.level = level
            return logger
        }()
        let signals: SignalPipe
        var listeners: [LoopbackTCPListener] = []
        do {
            signals = try SignalPipe()
            listeners.append(try LoopbackTCPListener(port: UInt16(port)))
        } catch {
            logger.error(
                "cannot start: \(error)\(error.errno == EADDRINUSE ? ": another program listens on 127.0.0.1:\(port); pick one with --port" : "")")
            return ExitCode.failure
        }
        do {
            listeners.append(try LoopbackTCPListener(port: listeners[0].port, family: .ipv6))
        } catch {
            // A host without IPv6 (disabled by sysctl) still serves 127.0.0.1.
            logger.notice("not listening on [::1]:\(listeners[0].port): \(error)")
        }
        defer { listeners.forEach { $0.close() } }
        let upstream: any ProxyUpstream
        let central: GattCentral?
        if let testUpstreamScript {
            guard let bytes = try? readFile(testUpstreamScript, limit: 1 << 20), let standIn = try? StandInUpstream(script: bytes) else {
                logger.error("cannot read the test upstream script \(testUpstreamScript)")
                return ExitCode.failure
            }
            logger.warning("TEST ONLY: no Bluetooth, a stand-in upstream answers from \(testUpstreamScript)")
            upstream = standIn
            central = nil
        } else {
            let made = GattCentral(settings: centralSettings(logger: logger), logger: logger.labeled("central"))
            upstream = made
            central = made
        }
        let server = ProxyServer(
            listeners: listeners, upstream: upstream, version: workerVersion, logger: logger, requestTimeoutMs: Int64(timeoutMs),
            guardian: BrowserGuard(allowedOrigins: allowOrigins))
        logger.notice(
            "listening on \(listeners.map { "http://\($0.authority)" }.joined(separator: " and ")) (Ollama's /api/* and OpenAI's /v1/*; GET /status)")
        await withTaskGroup(of: Void.self) { group in
            if let central { group.addTask { await central.run() } }
            group.addTask { await server.run() }
            group.addTask {
                if let signal = try? await signals.next() { logger.notice("received \(SignalPipe.name(signal)); stopping") }
            }
            await group.next()
            group.cancelAll()
        }
        return ExitCode.ok
    }

    /// `--list`: one scan of `scanMs`, then the workers it heard, strongest first.
    func list(scanMs: Int64) async -> Int32 {
        var logger = DaemonMain.makeLogger(label: "proxy")
        logger.level = level
        var settings = CentralSettings(adapter: adapter, device: nil)  // a list is of every worker, whatever --device says
        settings.listOnly = true
        settings.scanWindowMs = scanMs
        let central = GattCentral(settings: settings, logger: logger.labeled("central"))
        let running = Task { await central.run() }
        defer { running.cancel() }
        // The scan's window plus the bus and adapter setup; an adapter that never comes
        // up leaves the list empty, with the central's reason.
        let found = await race({ await central.workersInRange() }, { try? await Task.sleep(nanoseconds: UInt64(scanMs + 15_000) * 1_000_000) })
        let workers: [CentralMachine.Sighting]
        switch found {
        case .first(let list): workers = list
        case .second:
            let why = await central.currentStatus.problem ?? "the scan did not end"
            return Output.fail(ExitCode.failure, "no scan: \(why)", text: "edgecoder-worker: no scan: \(why)")
        }
        let chosen = ProxyCommand.wouldUse(workers, device: device, any: any, remembered: forget ? nil : rememberedWorker())
        if json {
            Output.printJSON([
                "workers": .array(
                    workers.map { worker in
                        .object(
                            JSONObject([
                                ("address", .string(worker.address)), ("name", .optional(worker.name)),
                                ("rssi", worker.rssi.map { .int(Int64($0)) } ?? .null), ("connected", .bool(worker.connected)),
                                ("wouldUse", .bool(worker.address == chosen)),
                            ]))
                    })
            ])
        } else if workers.isEmpty {
            print("no worker in range (scanned \(scanMs) ms)")
        } else {
            for worker in workers {
                let signal = worker.rssi.map { "\($0) dBm" } ?? (worker.connected ? "connected" : "?")
                print("\(worker.address == chosen ? "*" : " ") \(worker.address)  \(signal)  \(worker.name ?? "")")
            }
            if chosen != nil { print("(* the worker the proxy would use with these options)") }
        }
        return workers.isEmpty ? ExitCode.failure : ExitCode.ok
    }

    /// The address among `workers` that `proxy` with the same options would use: the
    /// named one, else the remembered one, else the strongest (which it would then remember,
    /// or with --any use this time). Nil when that one is not in range.
    static func wouldUse(_ workers: [CentralMachine.Sighting], device: String?, any: Bool, remembered: String?) -> String? {
        let target = device?.uppercased() ?? (any ? nil : remembered?.uppercased())
        if let target { return workers.contains { $0.address == target } ? target : nil }
        return workers.first?.address
    }

    /// The worker a previous `proxy` remembered in the state directory, if any.
    func rememberedWorker() -> String? {
        guard let path = Self.stateDirectory(given: stateDir, environment: { getenv($0).map { String(cString: $0) } }),
            let directory = try? StateDirectory(path: path)
        else { return nil }
        return Self.pinnedAddress(in: directory)
    }

    /// The address in `directory`'s pin file, when it holds a valid one.
    static func pinnedAddress(in directory: StateDirectory) -> String? {
        guard let bytes = try? directory.read(pinFile, limit: 4_096),
            let address = (try? JSON.parse(bytes))?["device"]?.stringValue, isAddress(address)
        else { return nil }
        return address
    }

    /// The worker selection: --device, --any, or the remembered worker (the first one the
    /// proxy connects to, kept in the state directory for the next runs).
    func centralSettings(logger: Logger) -> CentralSettings {
        var settings = CentralSettings(adapter: adapter, device: device)
        if device != nil { settings.selection = "device"; return settings }
        if any { settings.selection = "any"; return settings }
        settings.selection = "remembered"
        guard let path = Self.stateDirectory(given: stateDir, environment: { getenv($0).map { String(cString: $0) } }) else {
            logger.warning(
                "no state directory (no --state-dir, $STATE_DIRECTORY, $XDG_STATE_HOME or $HOME): the worker is remembered for this run only")
            settings.pinFirstWorker = true
            return settings
        }
        let directory: StateDirectory
        do { directory = try StateDirectory(path: path) } catch {
            logger.warning("cannot use \(path) for the remembered worker: \(error); it is remembered for this run only")
            settings.pinFirstWorker = true
            return settings
        }
        if forget {
            try? directory.remove(Self.pinFile)
            logger.notice("forgot the remembered worker (\(path)/\(Self.pinFile))")
        }
        if let address = Self.pinnedAddress(in: directory) {
            logger.notice("using only the remembered worker \(address) (\(path)/\(Self.pinFile); --forget or --any to change)")
            settings.device = address.uppercased()
            return settings
        }
        settings.pinFirstWorker = true
        settings.onPinned = { address in
            do {
                try directory.write(
                    Self.pinFile, Array((JSONValue.object(JSONObject([("device", .string(address))])).serialized + "\n").utf8), mode: 0o644)
            } catch {
                logger.warning("cannot remember the worker \(address) in \(path)/\(Self.pinFile): \(error)")
            }
        }
        return settings
    }
}
