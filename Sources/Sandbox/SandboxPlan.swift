import Posix
import WorkerCore

/// The pure half of the sandbox: the engine's command lines and what its exit means.
/// Values in, decisions out, no I/O, so every flag the isolation depends on is covered by
/// unit tests without an engine.

/// The container engine's dialect: podman and docker take the same `run` flags but for
/// a few (podman mounts writable tmpfs over /run and /var/tmp under `--read-only` unless
/// told not to; docker does not know that flag).
public enum EngineKind: Sendable, Equatable {
    case podman
    case docker

    /// From the engine's command: a name or a path whose last part names docker is
    /// docker; anything else is taken for podman (the default, and podman-compatible
    /// wrappers).
    public init(engine: String) {
        let base = engine.split(separator: "/").last.map(String.init) ?? engine
        self = base.hasPrefix("docker") ? .docker : .podman
    }
}

extension ContainerSandbox {
    /// What the sandbox enforces and where it runs. Defaults as EdgeCoder's own desktop
    /// workers run code: 256 MiB, half a CPU, 50 pids, 4 s.
    public struct Settings: Sendable, Equatable {
        /// The engine's command: a name looked up on PATH or an absolute path (podman or docker).
        public var engine = "podman"
        /// Global arguments, before `run` (`--runtime runc` where crun cannot run).
        public var engineArguments: [String] = []
        public var image = "localhost/edgecoder-sandbox:1"
        /// From the engine's start to the container's kill.
        public var timeoutMs: Int64 = 4_000
        /// Memory and memory plus swap: no swap.
        public var memoryMiB = 256
        public var cpus = 0.5
        public var pids = 50
        /// Of stdout and of stderr, each.
        public var outputLimitBytes = 65_536
        /// The writable tmpfs at /tmp, and the size of /dev/shm; they count against the memory limit.
        public var tmpfsMiB = 64
        /// Longest a container's create may take (not the program's time): a store that
        /// copies the whole image (vfs) takes seconds, ten under emulation. Past it the
        /// engine is taken for broken.
        public var createTimeoutMs: Int64 = 120_000

        public init(
            engine: String = "podman", engineArguments: [String] = [], image: String = "localhost/edgecoder-sandbox:1",
            timeoutMs: Int64 = 4_000, memoryMiB: Int = 256, cpus: Double = 0.5, pids: Int = 50, outputLimitBytes: Int = 65_536
        ) {
            self.engine = engine
            self.engineArguments = engineArguments
            self.image = image
            self.timeoutMs = timeoutMs
            self.memoryMiB = memoryMiB
            self.cpus = cpus
            self.pids = pids
            self.outputLimitBytes = outputLimitBytes
        }

        /// The config's `execution.*` keys; the limits not configurable there keep their defaults.
        public init(_ execution: WorkerConfig.Execution) {
            self.init(engine: execution.engine, engineArguments: execution.engineArguments, image: execution.image, timeoutMs: execution.timeoutMs)
        }

        /// Why these settings cannot be used, one sentence each; empty when they can. An
        /// image or engine that starts with `-` would be read by the engine as an option.
        public var problems: [String] {
            var problems: [String] = []
            if !WorkerConfig.Execution.isWord(engine) || engine.hasPrefix("-") {
                problems.append("the engine must be a command name or an absolute path, got '\(printable(engine))'")
            }
            if !WorkerConfig.Execution.isWord(image) || image.hasPrefix("-") {
                problems.append("the image must be a name like localhost/edgecoder-sandbox:1, got '\(printable(image))'")
            }
            if let bad = engineArguments.first(where: { $0.isEmpty || $0.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F } }) {
                problems.append("an engine argument is empty or holds a control character: '\(printable(bad))'")
            }
            if !(100...600_000).contains(timeoutMs) { problems.append("the time limit must be 100 to 600000 ms, got \(timeoutMs)") }
            // docker refuses less than 6 MiB.
            if !(6...65_536).contains(memoryMiB) { problems.append("the memory limit must be 6 to 65536 MiB, got \(memoryMiB)") }
            if !(cpus >= 0.01 && cpus <= 256) { problems.append("the CPU limit must be 0.01 to 256, got \(cpus)") }
            if !(1...32_768).contains(pids) { problems.append("the pids limit must be 1 to 32768, got \(pids)") }
            if !(0...(64 << 20)).contains(outputLimitBytes) { problems.append("the output limit must be 0 to 64 MiB, got \(outputLimitBytes)") }
            if !(1...4_096).contains(tmpfsMiB) { problems.append("the /tmp size must be 1 to 4096 MiB, got \(tmpfsMiB)") }
            return problems
        }
    }

    /// The interpreter's command inside the container; the program comes on stdin.
    public static func interpreter(_ language: CodeLanguage) -> [String] {
        switch language {
        // `-I`: no user site directory, no PYTHON* variables, the script's directory not on the path.
        case .python: return ["python3", "-I", "-"]
        case .javascript: return ["node", "-"]
        }
    }

    /// The unique name of one run's container: what the kill at the time limit names.
    public static func containerName(random: UInt64) -> String {
        let hex = String(random, radix: 16)
        return "edgecoder-sandbox-" + String(repeating: "0", count: max(0, 16 - hex.count)) + hex
    }

    /// The engine's global arguments: its log lines go to the stderr the program's goes
    /// to, so none may (rootless podman on cgroup v1 warns on every run; podman 4.3's
    /// remote `start --attach` logs `level=error msg="Should restart: false"` on every
    /// run). Its own failure is still said (`Error: …` is printed, not logged). Both podman
    /// and docker take it; the operator's own arguments come after and win.
    static func globalArguments(_ settings: Settings) -> [String] {
        ["--log-level=fatal"] + settings.engineArguments
    }

    /// Every argument after the engine's command to create one run's container: the global
    /// arguments, then `create` with the isolation, the image and the interpreter. A run is
    /// `create`, then `start` (`startArguments`): the time limit is the program's alone, and
    /// a container whose create outlasts it is never left behind by a killed client (a
    /// daemon engine finishes a create its client gave up on).
    public static func createArguments(_ settings: Settings, language: CodeLanguage, containerName: String) -> [String] {
        var arguments = globalArguments(settings)
        arguments += [
            "create", "--rm", "--interactive",
            "--name", containerName,
            // Only the local store: a missing image is an error, never a registry pull.
            "--pull=never",
            // The output goes to us alone, never into the engine's log files as well.
            "--log-driver=none",
            "--network=none",
            "--read-only",
        ]
        if EngineKind(engine: settings.engine) == .podman {
            // Else podman mounts writable tmpfs on /run and /var/tmp too.
            arguments.append("--read-only-tmpfs=false")
        }
        arguments += [
            "--tmpfs", "/tmp:rw,size=\(settings.tmpfsMiB)m,mode=1777,noexec,nosuid,nodev",
            // /dev/shm is the other writable place (python's multiprocessing needs it): a
            // private tmpfs like /tmp, as small.
            "--shm-size=\(settings.tmpfsMiB)m",
            "--memory=\(settings.memoryMiB)m",
            "--memory-swap=\(settings.memoryMiB)m",
            "--cpus=\(cpusText(settings.cpus))",
            "--pids-limit=\(settings.pids)",
            // The engine's default limits can exceed the host's hard limits (runc then fails
            // its setrlimit); these fit everywhere, and a program needs no more.
            "--ulimit", "nofile=1024:1024",
            "--ulimit", "nproc=1024:1024",
            "--cap-drop=all",
            "--security-opt=no-new-privileges",
            "--user", "65534:65534",
            "--workdir", "/tmp",
            "--hostname", "sandbox",
            "--env", "HOME=/tmp",
            "--env", "PATH=/usr/local/bin:/usr/bin:/bin",
            settings.image,
        ]
        return arguments + interpreter(language)
    }

    /// `start` of a created container, its stdin, stdout and stderr attached: the program
    /// reads itself from stdin, and the engine passes its exit status through.
    public static func startArguments(_ settings: Settings, containerName: String) -> [String] {
        globalArguments(settings) + ["start", "--attach", "--interactive", containerName]
    }

    /// The commands that end a run's container at the time limit: kill it (every process
    /// in it, whatever it forked), then remove it (a kill before the container was
    /// created leaves nothing to kill, and the remove then catches it).
    public static func cleanupArguments(_ settings: Settings, containerName: String) -> [[String]] {
        [settings.engineArguments + ["kill", containerName], settings.engineArguments + ["rm", "--force", containerName]]
    }

    /// `engine ps --all` for one run's container: prints its id while it exists. The name
    /// holds 64 random bits, so no other container's name contains it.
    public static func presenceArguments(_ settings: Settings, containerName: String) -> [String] {
        settings.engineArguments + ["ps", "--all", "--quiet", "--filter", "name=\(containerName)"]
    }

    /// After a run killed at a limit: whether the cleanup may stop, from what the presence
    /// checks said so far (true: the container was listed). A daemon engine (docker, podman
    /// behind its API socket) goes on creating a container whose client was killed while
    /// it waited for the create, and leaves it behind in state `created`. So after a create
    /// killed at its limit the container must be absent at two checks in a row, a second
    /// apart; the cleanup gives up after `settleChecks` checks.
    /// Once the create had finished (the run was killed in `start`) one absence is enough.
    public static func cleanupSettled(presence: [Bool], created: Bool) -> Bool {
        let absencesNeeded = created ? 1 : 2
        return presence.count >= settleChecks
            || (presence.count >= absencesNeeded && presence.suffix(absencesNeeded).allSatisfy { !$0 })
    }

    public static let settleChecks = 15

    /// `engine image inspect`: whether the image is in the engine's local store.
    public static func imageInspectArguments(_ settings: Settings) -> [String] {
        settings.engineArguments + ["image", "inspect", "--format", "{{.Id}}", settings.image]
    }

    /// `0.5`, `2`: the engine parses a decimal number.
    static func cpusText(_ cpus: Double) -> String {
        let hundredths = Int((cpus * 100).rounded())
        let whole = hundredths / 100, fraction = hundredths % 100
        if fraction == 0 { return "\(whole)" }
        return fraction % 10 == 0 ? "\(whole).\(fraction / 10)" : "\(whole).\(fraction < 10 ? "0" : "")\(fraction)"
    }

    /// The engine's whole environment: what it needs to find its store and runtime (the
    /// user's runtime directory for rootless podman, the docker socket), nothing else of
    /// ours: under systemd ours holds CREDENTIALS_DIRECTORY and NOTIFY_SOCKET. Nothing of
    /// it reaches the program: the container gets only what `createArguments` sets.
    public static func engineEnvironment(inherited: (String) -> String?) -> [String: String] {
        var environment: [String: String] = [:]
        for name in passedVariables {
            if let value = inherited(name), !value.isEmpty { environment[name] = value }
        }
        if environment["PATH"] == nil { environment["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" }
        return environment
    }

    static let passedVariables = [
        "PATH", "HOME", "USER", "LOGNAME", "LANG", "TMPDIR",
        "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "DBUS_SESSION_BUS_ADDRESS",
        "CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF", "CONTAINERS_REGISTRIES_CONF", "CONTAINER_HOST", "CONTAINER_CONNECTION",
        "DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CONTEXT", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY",
    ]

    /// The program `check` runs: it prints the memory, pids and CPU limits its own cgroup
    /// has (cgroup v2 files first, then v1's), so that a sandbox whose engine ignores them
    /// (rootless podman on cgroup v1 does, with a warning) is never taken for usable.
    public static let limitsProbe = """
        def first(*paths):
            for path in paths:
                try:
                    return open(path).read().split()
                except OSError:
                    pass
            return ["none"]
        print("memory", first("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")[0])
        print("pids", first("/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max")[0])
        v2 = first("/sys/fs/cgroup/cpu.max")
        if v2 == ["none"]:
            v2 = first("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") + first("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
        print("cpu", *v2[:2])

        """

    /// What is wrong with the limits `limitsProbe` printed, one sentence; nil when each is
    /// in force and no looser than the settings. Anything unreadable, missing or `max`
    /// (no limit) is a problem.
    public static func limitsProblem(probeOutput: String, settings: Settings) -> String? {
        var seen: [String: [Substring]] = [:]
        for line in probeOutput.split(separator: "\n").prefix(16) {
            let words = line.split(separator: " ")
            if let key = words.first, seen[String(key)] == nil { seen[String(key)] = Array(words.dropFirst()) }
        }
        var problems: [String] = []
        let memoryLimit = Int64(settings.memoryMiB) << 20
        if let text = seen["memory"]?.first, let bytes = Int64(text), bytes > 0 {
            if bytes > memoryLimit { problems.append("memory \(bytes >> 20) MiB, not \(settings.memoryMiB)") }
        } else {
            problems.append("no memory limit (\(printable(seen["memory"]?.first.map(String.init) ?? "nothing", limit: 40)))")
        }
        if let text = seen["pids"]?.first, let pids = Int(text), pids > 0 {
            if pids > settings.pids { problems.append("\(pids) pids, not \(settings.pids)") }
        } else {
            problems.append("no pids limit (\(printable(seen["pids"]?.first.map(String.init) ?? "nothing", limit: 40)))")
        }
        if let words = seen["cpu"], words.count == 2, let quota = Double(words[0]), let period = Double(words[1]), quota > 0, period > 0 {
            if quota / period > settings.cpus * 1.01 { problems.append("\(cpusText(quota / period)) CPUs, not \(cpusText(settings.cpus))") }
        } else {
            problems.append("no CPU limit (\(printable(seen["cpu"]?.joined(separator: " ") ?? "nothing", limit: 40)))")
        }
        guard !problems.isEmpty else { return nil }
        return "the engine does not enforce the sandbox's limits (inside the container: \(problems.joined(separator: ", "))); "
            + "rootless podman ignores them on cgroup v1: use cgroup v2 or run the engine as root"
    }

    /// Whether a `create` that did not succeed may still leave a container: one killed at its
    /// time limit or by a signal (the daemon stopping) may have reached the engine, which
    /// finishes it anyway. One that exited with an error created nothing.
    public static func mayHaveCreated(_ outcome: ChildOutcome) -> Bool {
        switch outcome {
        case .timedOut, .killedBySignal: return true
        case .exited, .couldNotStart: return false
        }
    }

    /// Whether the container may be left after `start --attach` ended so: `--rm` removes a
    /// container once it has run, so one the engine could not start (crun refusing a host's
    /// cgroups, a client killed as the daemon stops) stays "created" for good, and one
    /// killed at the time limit may still be running.
    public static func mayBeLeft(after ending: ProgramRun.Ending) -> Bool {
        switch ending {
        case .timedOut, .engineFailed: return true
        case .exited, .killed: return false
        }
    }

    /// How a run ended, from the engine client's end. The engine passes the program's exit
    /// status through; 128+N means the program was killed by signal N (137: SIGKILL, which
    /// is what the memory limit's OOM kill sends); 125 (the engine's own error), 126 (the
    /// interpreter cannot be run) and 127 (no interpreter in the image) are the engine's
    /// when it said so on stderr in its own format, and so is docker's 1 with the daemon's
    /// error (`docker start` has no status of its own). A program that exits so and
    /// prints such a line itself is taken for an engine failure: the worker then releases
    /// the subtask, which costs it nothing but a retry elsewhere.
    public static func ending(_ outcome: ChildOutcome, stderr: CapturedOutput, settings: Settings) -> ProgramRun.Ending {
        switch outcome {
        case .exited(let status):
            if (125...127).contains(status), let message = engineMessage(stderr.text) { return .engineFailed(message) }
            // `docker start` exits 1 when the daemon could not start the container.
            if status == 1, EngineKind(engine: settings.engine) == .docker, let message = daemonMessage(stderr.text) { return .engineFailed(message) }
            if (129...159).contains(status) { return .killed(signal: status - 128) }
            return .exited(status)
        case .timedOut: return .timedOut(limitMs: settings.timeoutMs)
        case .killedBySignal(let signal): return .engineFailed("\(settings.engine) was killed by signal \(signal)")
        case .couldNotStart(let why): return .engineFailed("cannot start \(settings.engine): \(why)")
        }
    }

    /// The engine's own error line: podman's and docker's start `Error: ` (older docker
    /// clients `docker: Error`); the last one, shortened.
    /// docker's daemon's error: the first line it starts (the client adds its own after).
    static func daemonMessage(_ stderr: String) -> String? {
        lines(stderr).first(where: { $0.hasPrefix("Error response from daemon: ") }).map { printable(String($0), limit: 400) }
    }

    /// The engine's output in lines, `\r` ending one too.
    static func lines(_ text: String) -> [Substring] {
        text.split(whereSeparator: { $0 == "\n" || $0 == "\r" })
    }

    static func engineMessage(_ stderr: String) -> String? {
        guard
            let line = lines(stderr).last(where: {
                $0.hasPrefix("Error: ") || $0.hasPrefix("Error response from daemon: ") || $0.hasPrefix("docker: ")
            })
        else { return nil }
        return printable(String(line), limit: 400)
    }
}
