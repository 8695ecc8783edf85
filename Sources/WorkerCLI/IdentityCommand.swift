import Daemon
import Posix
import StateStore
import WorkerCore

// MARK: - identity reset

/// `edgecoder-worker identity reset`: forgets the agent id and the mesh token, for copies
/// of a cloned image (each starts with the original's identity).
struct IdentityCommand: Command {
    static let name = "identity"
    static let summary = "forget this host's agent id and mesh token (cloned images): identity reset"
    static let usage = """
        Usage: edgecoder-worker identity reset [--force] [--json] [--state-dir D] [--runtime-dir D]

        Forgets this host's identity: the agent id and the mesh token in the state
        directory. Use it on each copy of a cloned SD-card image or disk: every copy
        starts with the original's identity, so a coordinator sees one worker where there
        are many. The next start takes a new agent id, derived from /etc/machine-id: give
        each copy its own first (rm -f /etc/machine-id && systemd-machine-id-setup), or
        the same id comes back. An agentId set in the config stays as it is.

        Refused (exit 3) while mode on runs, since the coordinator works with this id:
        stop the daemon first, or pass --force. With the daemon running, restart it
        afterwards (systemctl restart edgecoder-worker): it keeps the old id until then.

          --force         reset even while mode on runs
          --state-dir D   the state directory (default: the running daemon's, else $EDGECODER_WORKER_STATE_DIR or \(Defaults.stateDirectory))
        """
    let force: Bool
    let json: Bool
    let stateDirectory: String?
    let runtimeDirectory: String

    init(_ arguments: inout Arguments) throws(UsageError) {
        force = arguments.flag("--force")
        json = arguments.flag("--json")
        stateDirectory = try arguments.option("--state-dir")
        runtimeDirectory = try WorkerCLI.runtimeDirectory(&arguments)
        let positionals = arguments.positionals()
        guard positionals == ["reset"] else {
            throw UsageError(
                positionals.isEmpty ? "missing subcommand: identity reset" : "unknown subcommand '\(printable(positionals.joined(separator: " ")))'")
        }
    }

    func run() async -> Int32 {
        // The daemon, when one answers: its mode decides, and its state directory is the one.
        var status: JSONValue?
        do {
            var client = try ControlClient(runtimeDirectory: runtimeDirectory)
            status = try client.call(.status)
        } catch {
            if case .daemon(let failure) = error, failure.code == .forbidden {
                return Output.fail(ExitCode.permission, failure.message, text: "edgecoder-worker: \(failure.message)")
            }
        }
        if let refusal = IdentityReset.refusal(status: status, force: force) {
            return Output.fail(ExitCode.refused, refusal, text: "edgecoder-worker: \(refusal)")
        }
        let path =
            stateDirectory ?? status?["daemon"]?["stateDirectory"]?.stringValue
            ?? environment("EDGECODER_WORKER_STATE_DIR") ?? Defaults.stateDirectory
        var forgot: [String] = []
        var previous: String?
        if fileExists(path) {
            do {
                let directory = try StateDirectory(path: path)
                previous = (try? directory.read(WorkerStateFiles.agentIDFile, limit: 4096)).flatMap { $0 }
                    .map { String(decoding: $0, as: UTF8.self).split(separator: "\n").first.map(String.init) ?? "" }
                for name in IdentityReset.files where directory.exists(name) {
                    try directory.remove(name)
                    forgot.append(name)
                }
            } catch {
                return Output.fail(
                    ExitCode.failure, "cannot reset the identity in \(path): \(error)",
                    text: "edgecoder-worker: cannot reset the identity in \(path): \(error)")
            }
        }
        let running = status != nil
        if json {
            Output.printJSON([
                "stateDirectory": .string(path), "forgot": .array(forgot.map { .string($0) }),
                "previousAgentId": .optional(previous), "restartNeeded": .bool(running && !forgot.isEmpty),
            ])
        } else {
            print(
                forgot.isEmpty
                    ? "nothing to forget in \(path)"
                    : "forgot \(forgot.joined(separator: " and ")) in \(path)" + (previous.map { " (agent id was \(printable($0)))" } ?? ""))
            if running && !forgot.isEmpty { print("the daemon keeps the old identity until it restarts: systemctl restart edgecoder-worker") }
            print(
                "the new agent id is derived from /etc/machine-id: each copy of an image needs its own (rm -f /etc/machine-id && systemd-machine-id-setup)"
            )
        }
        return ExitCode.ok
    }
}
