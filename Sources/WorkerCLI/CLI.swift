#if canImport(Glibc)
import Glibc
#endif
import Daemon
import Logging
import Posix
import WorkerCore

/// Default locations (service §1) and the environment variables that override them.
enum Defaults {
    static let config = "/etc/edgecoder-worker/config.json"
    static let stateDirectory = "/var/lib/edgecoder-worker"
    static let runtimeDirectory = "/run/edgecoder-worker"
}

/// A subcommand of `edgecoder-worker`.
protocol Command {
    static var name: String { get }
    static var summary: String { get }
    static var usage: String { get }
    init(_ arguments: inout Arguments) throws(UsageError)
    func run() async -> Int32
}

var commands: [any Command.Type] {
    [
        RunCommand.self, ModeCommand.self, StatusCommand.self, TasksCommand.self, EventsCommand.self, PolicyCommand.self,
        TelemetryCommand.self, MetricsCommand.self, DoctorCommand.self, ConfigCommand.self, ReloadCommand.self, EnrollCommand.self,
        IdentityCommand.self,
        ProxyCommand.self, BluetoothCommand.self, SandboxCommand.self, VersionCommand.self,
    ]
}

/// Commands that work but are not listed in `--help`, the man page or the completion.
var hiddenCommands: [any Command.Type] { [InternalCommand.self] }

/// The entry point: five lines in `main.swift` call this.
public enum CLI {
    public static func main(_ argv: [String]) async -> Int32 {
        let args = Array(argv.dropFirst())
        // `--json` anywhere before `--` asks for JSON, errors included.
        let json = args.prefix(while: { $0 != "--" }).contains("--json")
        return await Output.$json.withValue(json) { await dispatch(args) }
    }

    static func dispatch(_ argv: [String]) async -> Int32 {
        var args = argv
        guard let first = args.first else {
            return Output.fail(ExitCode.usage, "missing command", text: topUsage)
        }
        if first == "--help" || first == "-h" || first == "help" {
            guard args.count > 1 else {
                print(topUsage)
                return ExitCode.ok
            }
            guard let command = (commands + hiddenCommands).first(where: { $0.name == args[1] }) else {
                return unknown("help topic", args[1])
            }
            print(command.usage)
            return ExitCode.ok
        }
        if first == "--version" { args[0] = "version" }
        guard let command = (commands + hiddenCommands).first(where: { $0.name == args[0] }) else {
            return unknown("command", args[0])
        }
        var arguments = Arguments(Array(args.dropFirst()))
        if arguments.flag("--help") || arguments.flag("-h") {
            print(command.usage)
            return ExitCode.ok
        }
        do {
            let instance = try command.init(&arguments)
            try arguments.finish()
            return await instance.run()
        } catch {
            return Output.fail(ExitCode.usage, error.message, text: "edgecoder-worker \(command.name): \(error.message)\n\n" + command.usage)
        }
    }

    /// An unknown command or help topic: exit 64, with the nearest command name when it looks like a typo.
    static func unknown(_ what: String, _ name: String) -> Int32 {
        var message = "unknown \(what) '\(printable(name))'"
        if let near = Suggestion.closest(to: name, among: commands.map { $0.name }) { message += "; did you mean '\(near)'?" }
        return Output.fail(ExitCode.usage, message, text: "edgecoder-worker: \(message)\n\n" + topUsage)
    }

    static var topUsage: String {
        var text = """
            edgecoder-worker \(workerVersion): contribute this host's compute to an EdgeCoder swarm.

            Usage: edgecoder-worker <command> [options]

            Commands:

            """
        for command in commands {
            let padded = command.name + String(repeating: " ", count: max(1, 10 - command.name.count))
            text += "  \(padded)\(command.summary)\n"
        }
        text += "\nRun 'edgecoder-worker <command> --help' for a command's options."
        return text
    }
}

func printErr(_ text: String) {
    var bytes = Array((text + "\n").utf8)
    _ = bytes.withUnsafeMutableBytes { write(2, $0.baseAddress, $0.count) }
}

/// `--runtime-dir D`, else $EDGECODER_WORKER_RUNTIME_DIR, else /run/edgecoder-worker.
func runtimeDirectory(_ arguments: inout Arguments) throws(UsageError) -> String {
    try arguments.option("--runtime-dir") ?? environment("EDGECODER_WORKER_RUNTIME_DIR") ?? Defaults.runtimeDirectory
}

/// Why a config file cannot be used.
enum ConfigLoadFailure: Error {
    case unreadable(path: String, String)
    case invalid(path: String, [ConfigProblem])

    var lines: [String] {
        switch self {
        case .unreadable(let path, let why): return ["\(path): \(why)"]
        case .invalid(let path, let problems): return problems.map { "\(path): \($0)" }
        }
    }

    var json: JSONValue {
        switch self {
        case .unreadable(_, let why): return [["path": "", "message": .string(why)]]
        case .invalid(_, let problems): return .array(problems.map { ["path": .string($0.path), "message": .string($0.message)] })
        }
    }
}

/// Loads and validates a config file. A missing file at the default path means "all
/// defaults"; a missing file that was named explicitly is an error.
func loadConfig(path: String, explicit: Bool) -> Result<WorkerConfig, ConfigLoadFailure> {
    let bytes: [UInt8]
    do {
        bytes = try readFile(path, limit: WorkerConfig.maxFileBytes + 1)
    } catch {
        if error.errno == ENOENT && !explicit { return .success(WorkerConfig()) }
        if error.errno == EFBIG {
            return .failure(.unreadable(path: path, "the file is larger than \(WorkerConfig.maxFileBytes) bytes; a config is at most that"))
        }
        return .failure(.unreadable(path: path, "cannot read: \(error.errnoDescription)"))
    }
    do {
        return .success(try WorkerConfig.parse(bytes))
    } catch {
        return .failure(.invalid(path: path, error.problems))
    }
}

// MARK: - run

struct RunCommand: Command {
    static let name = "run"
    static let summary = "run the daemon in the foreground (what systemd starts)"
    static let usage = """
        Usage: edgecoder-worker run [--config F] [--state-dir D] [--runtime-dir D] [--sysfs-root D]

        Runs the daemon in the foreground until SIGTERM or SIGINT; SIGHUP reloads the
        config file (an invalid file is refused and the running config kept). Logs go
        to the journal as structured fields under journald, as plain lines on a
        terminal, else to stderr with syslog priority prefixes. Under systemd it sends
        READY=1 once the control socket listens.

          --config F        config file (default $EDGECODER_WORKER_CONFIG or \(Defaults.config))
          --state-dir D     state directory (default $EDGECODER_WORKER_STATE_DIR or \(Defaults.stateDirectory))
          --runtime-dir D   runtime directory with control.sock (default $EDGECODER_WORKER_RUNTIME_DIR or \(Defaults.runtimeDirectory))
          --sysfs-root D    root below which sys/ and proc/ are read (default /)

        Exit codes: 0 stopped cleanly, 1 failure, 2 invalid config, 64 usage.
        """
    let configPath: String
    let configExplicit: Bool
    let paths: DaemonPaths

    init(_ arguments: inout Arguments) throws(UsageError) {
        let explicitConfig = try arguments.option("--config") ?? environment("EDGECODER_WORKER_CONFIG")
        configPath = explicitConfig ?? Defaults.config
        configExplicit = explicitConfig != nil
        paths = DaemonPaths(
            configPath: configPath,
            stateDirectory: try arguments.option("--state-dir") ?? environment("EDGECODER_WORKER_STATE_DIR") ?? Defaults.stateDirectory,
            runtimeDirectory: try runtimeDirectory(&arguments),
            sysfsRoot: try arguments.option("--sysfs-root") ?? "/")
    }

    func run() async -> Int32 {
        let logger = DaemonMain.makeLogger()
        switch loadConfig(path: configPath, explicit: configExplicit) {
        case .failure(let failure):
            for line in failure.lines { logger.error("invalid config: \(line)") }
            logger.error("fix the file (edgecoder-worker config check --config \(configPath)) and start again")
            return ExitCode.invalidConfig
        case .success(let config):
            if !configExplicit && !fileExists(configPath) {
                logger.notice("no config file at \(configPath); using the defaults")
            }
            let path = configPath, explicit = configExplicit
            return await DaemonMain.run(
                config: config, paths: paths, logger: logger,
                reloadConfig: {
                    loadConfig(path: path, explicit: explicit).mapError { ConfigReloadFailure($0.lines) }
                })
        }
    }
}

// MARK: - config check

struct ConfigCommand: Command {
    static let name = "config"
    static let summary = "check a config file: config check [--config F]"
    static let usage = """
        Usage: edgecoder-worker config check [--config F] [--json]

        Validates a config file without starting anything. Prints every problem with
        the key's path; exit 0 when valid, 2 when not. A valid file that cannot join a
        coordinator (coordinator.url is the example placeholder) is still valid: a
        warning says so on stderr, and 'mode on' refuses it. So is bluetooth.allowedClients
        "bonded" or an address list with bluetooth.security "open": a warning says that
        an unencrypted link proves no address.

          --config F   the file (default $EDGECODER_WORKER_CONFIG or \(Defaults.config))
          --json       one JSON object: {"valid": bool, "file": "...", "problems": [{"path", "message"}], "warnings": [...]}
        """
    let path: String
    let json: Bool

    init(_ arguments: inout Arguments) throws(UsageError) {
        path = try arguments.option("--config") ?? environment("EDGECODER_WORKER_CONFIG") ?? Defaults.config
        json = arguments.flag("--json")
        let positionals = arguments.positionals()
        guard positionals == ["check"] else {
            throw UsageError(
                positionals.isEmpty ? "missing subcommand: config check" : "unknown subcommand '\(printable(positionals.joined(separator: " ")))'")
        }
    }

    func run() async -> Int32 {
        // `config check` always names a file to check, so a missing one is an error.
        switch loadConfig(path: path, explicit: true) {
        case .success(let config):
            // A placeholder address is valid JSON and a daemon runs with it (modes off and
            // bluetooth), so the file stays valid (exit 0); `mode on` refuses it.
            // So is an admission by address over an unencrypted link: valid, proving nothing.
            let warnings = [
                CoordinatorPlaceholder.problem(config.coordinator.url).map { (path: "coordinator.url", message: $0) },
                AllowedClientsWarning.of(config).map { (path: $0.path, message: $0.message) },
            ].compactMap { $0 }
            if json {
                Output.printJSON([
                    "valid": true, "file": .string(path), "problems": [],
                    "warnings": .array(warnings.map { ["path": .string($0.path), "message": .string($0.message)] }),
                ])
            } else {
                print("\(path): valid")
                for warning in warnings { printErr("\(path): warning: \(warning.message)") }
            }
            return ExitCode.ok
        case .failure(let failure):
            if json {
                Output.printJSON(["valid": false, "file": .string(path), "problems": failure.json, "warnings": []])
            } else {
                printErr(failure.lines.joined(separator: "\n"))
            }
            return ExitCode.invalidConfig
        }
    }
}

// MARK: - version

struct VersionCommand: Command {
    static let name = "version"
    static let summary = "print the version"
    static let usage = "Usage: edgecoder-worker version [--json]\n\nPrints the version of this binary."
    let json: Bool
    init(_ arguments: inout Arguments) throws(UsageError) { json = arguments.flag("--json") }
    func run() async -> Int32 {
        if json { Output.printJSON(["version": .string(workerVersion)]) } else { print("edgecoder-worker \(workerVersion)") }
        return ExitCode.ok
    }
}
