import BlueZ
import Daemon
#if canImport(Glibc)
import Glibc
#endif
import ModelBackend
import Posix
import Telemetry
import WorkerCore

/// One telemetry reading with a CPU figure: /proc/stat needs two samples. The config's
/// `telemetry.deviceType` replaces what the host says, as in the daemon.
func readTelemetryOnce(root: String, own: OwnProcesses? = nil, deviceType: DeviceType? = nil) -> PowerReading {
    var reader = TelemetryReader(root: root, own: own)
    _ = reader.read()
    usleep(250_000)
    var reading = reader.read()
    reading.telemetry.overrideDeviceType(deviceType)
    return reading
}

/// The worker's own load as the daemon counts it, seen from a command: the daemon's pid
/// when it answers (0 without a daemon: then only the model server is the worker's own)
/// and the backend of the daemon, else of the config.
func commandOwnProcesses(root: String, daemonStatus: JSONValue, config: WorkerConfig?) -> OwnProcesses {
    let url = daemonStatus["backend"]?["url"]?.stringValue ?? config?.backend.url
    let kind = daemonStatus["backend"]?["kind"]?.stringValue ?? config?.backend.kind.rawValue ?? ""
    let daemonPID = daemonStatus["daemon"]?["pid"]?.intValue.map { Int32(truncatingIfNeeded: $0) } ?? 0
    return OwnProcesses(
        root: root, serverPort: url.flatMap(LoopbackServer.port(of:)), workerPID: daemonPID,
        derivedUnits: OwnProcesses.derivedUnits(backendKind: kind))
}

/// Renders JSON as an indented outline for people (doctor, policy show).
func outline(_ value: JSONValue, indent: String = "") -> [String] {
    switch value {
    case .object(let object):
        return object.members.flatMap { member -> [String] in
            switch member.value {
            case .object(let inner) where !inner.isEmpty:
                return ["\(indent)\(member.key):"] + outline(member.value, indent: indent + "  ")
            case .array(let items) where !items.isEmpty:
                return ["\(indent)\(member.key):"] + outline(member.value, indent: indent + "  ")
            default:
                return ["\(indent)\(member.key): \(scalarText(member.value))"]
            }
        }
    case .array(let items):
        return items.flatMap { item -> [String] in
            let lines = outline(item, indent: indent + "  ")
            guard let first = lines.first else { return ["\(indent)- \(scalarText(item))"] }
            if case .object = item {
                return ["\(indent)- " + first.dropFirst(indent.count + 2)] + lines.dropFirst()
            }
            return ["\(indent)- \(scalarText(item))"]
        }
    default:
        return ["\(indent)\(scalarText(value))"]
    }
}

private func scalarText(_ value: JSONValue) -> String {
    switch value {
    case .string(let s): return s
    case .null: return "unknown"
    case .array(let items) where items.isEmpty: return "none"
    case .object(let o) where o.isEmpty: return "none"
    default: return value.serialized
    }
}

// MARK: - telemetry

struct TelemetryCommand: Command {
    static let name = "telemetry"
    static let summary = "print one power telemetry reading (no daemon needed)"
    static let usage = """
        Usage: edgecoder-worker telemetry [--json] [--sysfs-root D] [--config F] [--runtime-dir D]

        Reads power supplies, battery, platform profile, thermal sensors, CPU (two
        /proc/stat samples 250 ms apart), memory, the chassis type and virtualization,
        as the daemon does. --json prints exactly the heartbeat's powerTelemetry keys
        with the values the heartbeat sends (cpuUsagePct without the worker's and its
        model server's load; thermalState as the coordinator should read it), unknown
        values omitted.
        """
    let json: Bool
    let root: String
    let configPath: String
    let runtimeDirectory: String
    init(_ arguments: inout Arguments) throws(UsageError) {
        json = arguments.flag("--json")
        root = try arguments.option("--sysfs-root") ?? "/"
        configPath = try arguments.option("--config") ?? environment("EDGECODER_WORKER_CONFIG") ?? Defaults.config
        runtimeDirectory = try WorkerCLI.runtimeDirectory(&arguments)
    }

    func run() async -> Int32 {
        let config = try? loadConfig(path: configPath, explicit: false).get()
        var daemonStatus: JSONValue = .null
        if var client = try? ControlClient(runtimeDirectory: runtimeDirectory), let status = try? client.call(.status) { daemonStatus = status }
        let own = commandOwnProcesses(root: root, daemonStatus: daemonStatus, config: config)
        let reading = readTelemetryOnce(root: root, own: own, deviceType: config?.telemetry.deviceType?.deviceType)
        let telemetry = reading.telemetry
        if json {
            Output.printJSON(telemetry.heartbeatJSON)
            return ExitCode.ok
        }
        print(
            (TelemetryCommand.describe(telemetry) + [
                "CPU, own load:  \(reading.ownProcesses ?? "not measured")",
                "thermal, sent:  \(telemetry.heartbeatThermalState?.rawValue ?? "unknown") (CPU throttling: \(reading.throttle ?? "not read"))",
            ]).joined(separator: "\n"))
        return ExitCode.ok
    }

    static func describe(_ t: PowerTelemetry) -> [String] {
        func yesNo(_ value: Bool?) -> String { value.map { $0 ? "yes" : "no" } ?? "unknown" }
        let battery: String
        if let pct = t.batteryPct {
            battery = "\(pct) %" + (t.draining ? " (discharging on external power)" : "")
        } else {
            battery = t.hasSystemBattery ? "unknown" : "no system battery"
        }
        return [
            "external power: \(yesNo(t.onExternalPower))",
            "battery:        \(battery)",
            "low-power mode: \(yesNo(t.lowPowerMode))",
            "thermal state:  \(t.thermalState?.rawValue ?? "unknown (no sensor)")",
            "CPU usage:      \(t.cpuUsagePct.map { "\(($0 * 10).rounded() / 10) %" } ?? "unknown")"
                + (t.otherCpuUsagePct.map { ", other load \(($0 * 10).rounded() / 10) % (sent)" } ?? ""),
            "memory usage:   \(t.memoryUsagePct.map { "\(($0 * 10).rounded() / 10) %" } ?? "unknown")",
            "device type:    \(t.deviceType?.rawValue ?? "unknown")" + (t.deviceTypeSource.map { " (\($0.description))" } ?? ""),
        ]
    }
}

// MARK: - policy

struct PolicyCommand: Command {
    static let name = "policy"
    static let summary = "show or change this host's power policy: policy show|set|unset"
    static let usage = """
        Usage: edgecoder-worker policy show [--json] [--runtime-dir D]
               edgecoder-worker policy set KEY VALUE [--runtime-dir D]
               edgecoder-worker policy unset KEY [--runtime-dir D]

        The host power policy (modes-and-power §3.2). `show` prints each key's value and where it
        came from (default, config, host). `set` changes one key on this host, persists
        it and takes effect at once (root or the daemon's user); `unset` returns it to
        the config's value. A bad key or value is refused with exit 2.

        Keys: \(PowerPolicy.keys.joined(separator: ", ")).
        """
    enum Action { case show, set(String, String), unset(String) }
    let action: Action
    let json: Bool
    let runtimeDirectory: String

    init(_ arguments: inout Arguments) throws(UsageError) {
        json = arguments.flag("--json")
        runtimeDirectory = try WorkerCLI.runtimeDirectory(&arguments)
        let words = arguments.positionals()
        switch words.first {
        case "show"?:
            guard words.count == 1 else { throw UsageError("policy show takes no arguments") }
            action = .show
        case "set"?:
            guard words.count == 3 else { throw UsageError("usage: policy set KEY VALUE") }
            action = .set(words[1], words[2])
        case "unset"?:
            guard words.count == 2 else { throw UsageError("usage: policy unset KEY") }
            action = .unset(words[1])
        case nil: throw UsageError("missing subcommand: show, set or unset")
        case let other?: throw UsageError("unknown subcommand '\(printable(other))'")
        }
    }

    func run() async -> Int32 {
        let status = withDaemon(runtimeDirectory) { (client) throws(ControlClient.Failure) -> Int32 in
            let request: ControlRequest
            switch action {
            case .show: request = .policyShow
            case .set(let key, let value): request = .policyChange(.set(key: key, value: PolicyOverrides.value(fromArgument: value)))
            case .unset(let key): request = .policyChange(.unset(key: key))
            }
            let result = try client.call(request)
            if json {
                Output.printJSON(result)
            } else {
                for member in result.objectValue?.members ?? [] {
                    let padded = member.key + String(repeating: " ", count: max(1, 22 - member.key.count))
                    print("\(padded)\((member.value["value"] ?? .null).serialized)  (\(member.value["source"]?.stringValue ?? "?"))")
                }
            }
            return ExitCode.ok
        }
        // A refused value is a usage-level problem of the value: exit 2 like the config's.
        return status == ExitCode.failure ? ExitCode.invalidConfig : status
    }
}

// MARK: - doctor

extension DoctorCommand {
    /// The model backend: the running daemon's last probe, else a probe now with the config
    /// (the key from the config or, under systemd, the credential). Which model is loaded,
    /// or why not, and what to do; never the key.
    static func modelReport(daemonStatus: JSONValue, configured: WorkerConfig.Backend?) async -> (json: JSONValue, advice: String?) {
        var json = JSONObject()
        let state: String
        let detail: String
        if case .object(let backend)? = daemonStatus["backend"] {
            for key in ["kind", "url", "model"] { json[key] = backend[key] }
            state = backend["modelState"]?.stringValue ?? "unknown"
            detail = backend["detail"]?.stringValue ?? ""
            json["from"] = "the running daemon's last probe"
        } else if var config = configured {
            if config.apiKey == nil { config.apiKey = ModelBackend.credentialAPIKey() }
            let backend = ModelBackend(config: config)
            let readiness = await backend.probe()
            json["kind"] = .string(config.kind.rawValue)
            json["url"] = .string(config.url)
            json["model"] = .string(config.model)
            state = readiness.state.rawValue
            // Nobody loads it while the daemon is down: it does when a working mode starts.
            detail = readiness.needsLoad ? readiness.detail + "; the daemon loads it when a working mode starts" : readiness.detail
            json["from"] = "a probe now (the daemon is not running)"
        } else {
            return (.null, nil)
        }
        json["modelState"] = .string(state)
        json["detail"] = .string(detail)
        switch state {
        case "ready", "idle": return (.object(json), nil)
        case "loading": return (.object(json), "model backend loading: \(detail); wait, it becomes ready once the model is in memory")
        default: return (.object(json), "model backend \(state): \(detail)")
        }
    }
}

struct DoctorCommand: Command {
    static let name = "doctor"
    static let summary = "every raw reading behind the current state, and what to do"
    static let usage = """
        Usage: edgecoder-worker doctor [--json] [--sysfs-root D] [--runtime-dir D] [--config F]

        Reads every power supply and thermal sensor itself (raw values and what they
        mean), asks the daemon for its policy and state (or reads the config when the
        daemon is not running), and explains what the policy decides and why.

        It also checks /etc/machine-id, from which the agent id is derived: missing,
        empty or not an id is a problem (cloned images share one identity).

        Exit 0 when it found no problem, 1 when it found one (listed under "problems";
        a host without a battery or a temperature sensor, or without Bluetooth outside
        mode bluetooth, is advice, not a problem; so is the warning that
        bluetooth.allowedClients proves nothing under bluetooth.security "open").
        """
    let json: Bool
    let root: String
    let runtimeDirectory: String
    let configPath: String

    init(_ arguments: inout Arguments) throws(UsageError) {
        json = arguments.flag("--json")
        root = try arguments.option("--sysfs-root") ?? "/"
        configPath = try arguments.option("--config") ?? environment("EDGECODER_WORKER_CONFIG") ?? Defaults.config
        runtimeDirectory = try WorkerCLI.runtimeDirectory(&arguments)
    }

    /// Who answers pairings with the config file's bluetooth keys on this host (what the
    /// daemon decides when its Bluetooth session starts), and advice when nobody would.
    func pairingAgentReport() -> (json: JSONValue, advice: String?, warning: String?) {
        let boot = SystemdBootTarget.read()
        var object = JSONObject([("defaultTarget", .optional(boot.defaultTarget)), ("displayManager", .bool(boot.displayManager))])
        guard case .success(let config) = loadConfig(path: configPath, explicit: false) else { return (.object(object), nil, nil) }
        let bluetooth = config.bluetooth
        let choice = PairingAgentChoice.decide(
            security: bluetooth.security, allowedClients: bluetooth.allowedClients,
            setting: bluetooth.pairingAgent, boot: boot)
        object["answerer"] = .string(choice.answerer.rawValue)
        object["reason"] = .string(choice.reason)
        let warning = AllowedClientsWarning.of(config).map { "bluetooth: " + $0.message }
        guard bluetooth.security == .encrypted, bluetooth.pairingAgent == .host, !boot.isGraphicalDesktop else {
            return (.object(object), nil, warning)
        }
        return (
            .object(object),
            "bluetooth: security is encrypted and bluetooth.pairingAgent is host, but this host has no desktop (\(boot.description)) whose agent could answer: a client that never paired is refused until it pairs in edgecoder-worker bluetooth pair; set bluetooth.pairingAgent to auto to let the worker accept Just Works pairings",
            warning
        )
    }

    func run() async -> Int32 {
        var advice: [String] = []
        // The policy in force: the daemon's (with this host's overrides) when it answers.
        var policy = PowerPolicy()
        var policySource = "built-in defaults"
        var daemonStatus: JSONValue = .null
        var configuredAdapter: String?
        var configuredBackend: WorkerConfig.Backend?
        do {
            var client = try ControlClient(runtimeDirectory: runtimeDirectory)
            let shown = try client.call(.policyShow)
            for member in shown.objectValue?.members ?? [] {
                _ = policy.set(key: member.key, json: member.value["value"] ?? .null)
            }
            policySource = "the running daemon (config and this host's overrides)"
            daemonStatus = try client.call(.status)
        } catch {
            switch loadConfig(path: configPath, explicit: false) {
            case .success(let config):
                policy = config.policy
                configuredAdapter = config.bluetooth.adapter
                configuredBackend = config.backend
                policySource = "\(configPath) (the daemon is not running: this host's overrides are not shown)"
            case .failure(let failure):
                advice.append("the config cannot be used: \(failure.lines.joined(separator: "; "))")
            }
            if case .unavailable(let message) = error { advice.append(message) }
        }
        // The daemon's own load and its model server's are not "other load".
        let fileConfig = try? loadConfig(path: configPath, explicit: false).get()
        let own = commandOwnProcesses(root: root, daemonStatus: daemonStatus, config: fileConfig)
        let reading = readTelemetryOnce(root: root, own: own, deviceType: fileConfig?.telemetry.deviceType?.deviceType)
        let decision = PowerDecision.decide(reading.telemetry, policy: policy, previous: nil, nowMs: 0)
        let checks = PowerDecision.checks(reading.telemetry, policy: policy, batteryLatched: decision.batteryLatched)
        for check in checks where check.holds { advice.append("\(check.reason.rawValue): \(check.reason.explanation) (\(check.detail))") }
        // What this host lacks but the worker copes with: advice, not a problem for the exit code.
        var notes: [String] = []
        if reading.supplies.isEmpty { notes.append("no power supply in \(root)sys/class/power_supply: treated as a desktop on mains") }
        if reading.telemetry.thermalState == nil { notes.append("no temperature sensor was readable: the thermal rule cannot hold work") }
        advice.append(contentsOf: notes)

        let stateDirectory =
            daemonStatus["daemon"]?["stateDirectory"]?.stringValue
            ?? environment("EDGECODER_WORKER_STATE_DIR") ?? Defaults.stateDirectory
        let state = examineStateDirectory(stateDirectory, daemonProblem: daemonStatus["daemon"]?["persistenceProblem"]?.stringValue)
        advice.append(contentsOf: state.advice)
        // Below --sysfs-root too, so that tests point it at a fake tree.
        let machineIDPath = (root.hasSuffix("/") ? root : root + "/") + "etc/machine-id"
        let machineID = MachineIDCheck.problem(try? readFile(machineIDPath, limit: MachineIDCheck.readLimit), path: machineIDPath)
        if let machineID { advice.append(machineID) }
        if let copied = daemonStatus["daemon"]?["identityProblem"]?.stringValue { advice.append(copied) }

        if let adapter = daemonStatus["bluetooth"]?["configuredAdapter"]?.stringValue { configuredAdapter = adapter }
        let bluetooth = await BluetoothDoctor.report(configuredAdapter: configuredAdapter)
        advice.append(contentsOf: bluetooth.advice)
        // Bluetooth is a problem only for a daemon in mode bluetooth (or one not running).
        if let mode = daemonStatus["mode"]?["mode"]?.stringValue, mode != Mode.bluetooth.rawValue { notes.append(contentsOf: bluetooth.advice) }

        let model = await DoctorCommand.modelReport(daemonStatus: daemonStatus, configured: configuredBackend)
        if let problem = model.advice { advice.append(problem) }

        var report = JSONObject()
        report["power"] = reading.doctorJSON
        report["policyFrom"] = .string(policySource)
        report["policy"] = policy.json
        report["checks"] = .array(checks.map(\.json))
        report["decision"] = ["allowed": .bool(decision.allowed), "reason": .string(decision.reasonText)]
        if let summary = daemonStatus["summary"] { report["daemon"] = summary }
        if let network = daemonStatus["network"] { report["network"] = network }
        // The host's services as the daemon follows them (logind, NetworkManager,
        // power-profiles-daemon): absent ones are normal on a server.
        report["host"] =
            daemonStatus["host"] ?? ["state": "the daemon is not running: it follows logind, NetworkManager and power-profiles-daemon while it runs"]
        if let hold = daemonStatus["host"]?["hold"], let reason = hold["reason"]?.stringValue {
            advice.append("\(reason): \(hold["explanation"]?.stringValue ?? "")")
        }
        report["stateDirectory"] = state.json
        report["machineId"] = ["path": .string(machineIDPath), "problem": .optional(machineID)]
        var bluetoothReport = bluetooth.json.objectValue ?? JSONObject()
        if let service = daemonStatus["bluetooth"] { bluetoothReport["service"] = service }
        let pairing = pairingAgentReport()
        bluetoothReport["pairingAgent"] = pairing.json
        if let problem = pairing.advice { advice.append(problem) }
        // A warning, as in config check: listed, not counted as a problem for the exit code.
        if let warning = pairing.warning {
            advice.append(warning)
            notes.append(warning)
        }
        report["bluetooth"] = .object(bluetoothReport)
        report["model"] = model.json
        // Code subtasks: whether their programs run, as mode on last found the engine.
        if let execution = daemonStatus["execution"] {
            report["execution"] = execution
            let why = execution["why"]?.stringValue ?? ""
            switch execution["answering"]?.stringValue {
            case "held"?:
                advice.append(
                    "\(LocalHoldReason.sandboxUnavailable.rawValue): \(why); 'edgecoder-worker sandbox check' says what the engine answers, 'edgecoder-worker sandbox build' makes the image"
                )
            case "text"? where execution["mode"]?.stringValue == ExecutionMode.auto.rawValue && execution["sandbox"]?.stringValue == "unusable":
                // Work goes on as text: listed, not counted as a problem.
                let note =
                    "code subtasks are answered as text: \(why); the coordinator keeps its tenants' work for agents with a sandbox ('edgecoder-worker sandbox build' makes the image)"
                advice.append(note)
                notes.append(note)
            default: break
            }
        }
        // Mode on's own holds, and what the coordinator's behaviour monitor would find.
        if let coordinator = daemonStatus["coordinator"], let conduct = coordinator["conduct"] {
            report["coordinatorConduct"] = conduct
            if let hold = conduct["hold"]?.stringValue, let reason = LocalHoldReason(rawValue: hold) {
                advice.append("\(hold) until \(conduct["holdUntil"]?.stringValue ?? "?"): \(reason.explanation)")
            } else if coordinator["active"] == true, let held = coordinator["deferredReason"]?.stringValue,
                held.hasPrefix("held: \(LocalHoldReason.modelUnavailable.rawValue)")
                    || held.hasPrefix("held: \(LocalHoldReason.sandboxRequired.rawValue)")
            {
                advice.append(held.dropFirst("held: ".count) + "")
            }
            if let findings = conduct["monitorFindings"]?.arrayValue, !findings.isEmpty {
                let rules = findings.compactMap(\.stringValue).joined(separator: ", ")
                advice.append(
                    "the coordinator's behaviour monitor would find \(rules) in this worker's last hour (see docs/reference/protocol-coordinator.md §8): a ban there is permanent"
                )
            }
        }
        report["advice"] = .array(advice.map { .string($0) })
        let problems = advice.filter { !notes.contains($0) }
        report["problems"] = .array(problems.map { .string($0) })
        if json {
            Output.printJSON(.object(report))
        } else {
            print(outline(.object(report)).joined(separator: "\n"))
            print(problems.isEmpty ? "no problem found" : "\(problems.count) problem(s) found")
        }
        return problems.isEmpty ? ExitCode.ok : ExitCode.failure
    }
}

/// statvfs of the state directory: free space and the read-only flag (a full or read-only
/// disk holds new work in mode `on`).
func examineStateDirectory(_ path: String, daemonProblem: String?) -> StateDirectoryCheck {
    var info = statvfs()
    guard statvfs(path, &info) == 0 else {
        return StateDirectoryCheck(
            path: path, freeBytes: nil, readOnly: nil, problem: "statvfs: \(String(cString: strerror(errno)))",
            daemonProblem: daemonProblem)
    }
    let free = Int64(clamping: UInt64(info.f_bavail).multipliedReportingOverflow(by: UInt64(info.f_frsize)).partialValue)
    return StateDirectoryCheck(path: path, freeBytes: free, readOnly: info.f_flag & UInt(ST_RDONLY) != 0, daemonProblem: daemonProblem)
}
