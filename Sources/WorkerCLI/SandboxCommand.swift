#if canImport(Glibc)
import Glibc
#endif
import Posix
import Sandbox
import WorkerCore

// MARK: - sandbox

/// `edgecoder-worker sandbox build|run|check`: the container sandbox that code subtasks
/// run in, driven by hand (docs/operating/sandbox.md).
struct SandboxCommand: Command {
    static let name = "sandbox"
    static let summary = "the container that code subtasks run in: sandbox build|run|check"
    static let usage = """
        Usage: edgecoder-worker sandbox run --language L [--engine E] [--engine-arg A]... [--image T] [--timeout-ms N] [--json] [FILE|-]
               edgecoder-worker sandbox check [--engine E] [--engine-arg A]... [--image T] [--timeout-ms N] [--json]
               edgecoder-worker sandbox build [--engine E] [--engine-arg A]... [--tag T] [--suite S] [--mirror URL]

        run: runs one program (FILE, or stdin when FILE is - or absent) in the sandbox as a
        code subtask's program runs: no network, a read-only root with a small /tmp, 256 MiB,
        half a CPU, 50 processes, user nobody, no capabilities, killed with its whole
        container at the time limit, stdout and stderr each cut at 64 KiB. Prints what the
        program printed and exits with its status; --json prints the run as one object.
        check: says whether programs can run (the engine, the image, a trivial program that
        finds the memory, pids and CPU limits in force).
        build: makes the image from Debian's packages (mmdebstrap, then the engine's import;
        minutes; no registry) and says where the time went. Run build and check as the user
        the worker runs as: each user has their own image store under rootless podman.

          --language L      python or javascript
          --engine E        the container engine, a name on PATH or a path (default podman; docker works)
          --engine-arg A    an argument before the engine's subcommand, repeatable; one that starts
                            with a dash goes after = (runtime runc where crun cannot run: the sandbox docs)
          --image T         the image programs run in (default localhost/edgecoder-sandbox:1)
          --tag T           the name build gives the image (default localhost/edgecoder-sandbox:1)
          --timeout-ms N    the time limit, from the engine's start (default 4000; 100 to 600000);
                            for check, the trivial program's (execution.timeoutMs is the daemon's)
          --suite S         the Debian release to build from (default: this host's)
          --mirror URL      the Debian mirror to build from (default: mmdebstrap's)
          --json            print the run (or the check) as JSON

        Exit codes of run: the program's own status; 124 killed at the time limit;
        125 the engine failed (not installed, no image, its own error; also a program that
        exits 125-127 with an engine-like error line); 128+N killed by signal N (137: the
        memory limit); 1 the file could not be read; 64 usage. check: 0 usable, 1 not.
        build: 0 built, 1 failed.
        """
    /// A program larger than this is refused: a subtask's program is a page or two.
    static let maxProgramBytes = 1 << 20
    static let exitTimedOut: Int32 = 124
    static let exitEngineFailed: Int32 = 125

    enum Action {
        case run(CodeLanguage, source: String)
        case check
        case build(SandboxImage.Recipe)
    }

    let action: Action
    let settings: ContainerSandbox.Settings
    let json: Bool

    init(_ arguments: inout Arguments) throws(UsageError) {
        json = arguments.flag("--json")
        var settings = ContainerSandbox.Settings()
        if let engine = try arguments.option("--engine") { settings.engine = engine }
        settings.engineArguments = try arguments.options("--engine-arg")
        let language = try arguments.option("--language")
        let image = try arguments.option("--image")
        let tag = try arguments.option("--tag")
        let timeout = try arguments.number("--timeout-ms", in: 100...600_000)
        let suite = try arguments.option("--suite")
        let mirror = try arguments.option("--mirror")
        var words = arguments.positionals()
        guard let verb = words.first else { throw UsageError("missing subcommand: build, run or check") }
        words.removeFirst()
        func refuse(_ option: String, _ value: Any?) throws(UsageError) {
            if value != nil { throw UsageError("\(option) does not apply to sandbox \(verb)") }
        }
        switch verb {
        case "run":
            try refuse("--tag", tag); try refuse("--suite", suite); try refuse("--mirror", mirror)
            guard let language else { throw UsageError("sandbox run needs --language python or --language javascript") }
            guard let parsed = CodeLanguage(rawValue: language) else {
                throw UsageError("--language must be python or javascript, got '\(printable(language))'")
            }
            guard words.count <= 1 else { throw UsageError("sandbox run takes one program: a file, or - for stdin") }
            action = .run(parsed, source: words.first ?? "-")
        case "check":
            try refuse("--language", language); try refuse("--tag", tag)
            try refuse("--suite", suite); try refuse("--mirror", mirror)
            guard words.isEmpty else { throw UsageError("sandbox check takes no arguments besides its options") }
            action = .check
        case "build":
            try refuse("--language", language); try refuse("--image", image); try refuse("--timeout-ms", timeout);
            try refuse("--json", json ? true : nil)
            guard words.isEmpty else { throw UsageError("sandbox build takes no arguments besides its options") }
            var recipe = SandboxImage.Recipe(
                suite: suite ?? SandboxImage.releaseName(
                    osRelease: (try? readFile("/etc/os-release", limit: 65_536)).map { String(decoding: $0, as: UTF8.self) } ?? "") ?? "bookworm")
            recipe.engine = settings.engine
            recipe.engineArguments = settings.engineArguments
            if let tag { recipe.tag = tag }
            recipe.mirror = mirror
            if let problem = recipe.problems.first { throw UsageError(problem) }
            action = .build(recipe)
        default:
            throw UsageError("unknown subcommand '\(printable(verb))'; sandbox takes build, run or check")
        }
        if let image { settings.image = image }
        if let timeout { settings.timeoutMs = Int64(timeout) }
        if let problem = settings.problems.first { throw UsageError(problem) }
        self.settings = settings
    }

    func run() async -> Int32 {
        switch action {
        case .run(let language, let source): return await runProgram(language, source: source)
        case .check: return await check()
        case .build(let recipe): return await build(recipe)
        }
    }

    private func runProgram(_ language: CodeLanguage, source: String) async -> Int32 {
        let bytes: [UInt8]
        do {
            bytes =
                source == "-"
                ? try readAll(fd: 0, limit: Self.maxProgramBytes, name: "stdin")
                : try readFile(source, limit: Self.maxProgramBytes)
        } catch {
            let why = error.errno == EFBIG ? "larger than \(Self.maxProgramBytes) bytes" : error.errnoDescription
            let message = "cannot read the program \(source == "-" ? "from stdin" : printable(source)): \(why)"
            return Output.fail(ExitCode.failure, message, text: "edgecoder-worker: \(message)")
        }
        let run = await ContainerSandbox(settings).run(language, code: String(decoding: bytes, as: UTF8.self))
        let exit = Self.exitCode(run.ending)
        if json {
            Output.printJSON(Self.json(run, language: language, image: settings.image))
            return exit
        }
        writeAll(1, run.stdout)
        writeAll(2, run.stderr)
        switch run.ending {
        case .exited: break
        case .engineFailed(let why): printErr("edgecoder-worker: \(why)")
        case .killed(9): printErr("edgecoder-worker: the program was killed by signal 9 (the memory limit's kill, or its own)")
        default: printErr("edgecoder-worker: the program was \(run.ending)")
        }
        if run.droppedBytes > 0 { printErr("edgecoder-worker: output cut: \(run.droppedBytes) more bytes were dropped") }
        return exit
    }

    private func check() async -> Int32 {
        let availability = await ContainerSandbox(settings).check()
        let (usable, text): (Bool, String)
        switch availability {
        case .usable(let what): (usable, text) = (true, what)
        case .unusable(let why): (usable, text) = (false, why)
        case .unknown: (usable, text) = (false, "not checked")
        }
        if json {
            Output.printJSON(["usable": .bool(usable), "engine": .string(settings.engine), "image": .string(settings.image), "detail": .string(text)])
        } else if usable {
            print("usable: \(text)")
        } else {
            printErr("edgecoder-worker: the sandbox is not usable: \(text)")
        }
        return usable ? ExitCode.ok : ExitCode.failure
    }

    private func build(_ recipe: SandboxImage.Recipe) async -> Int32 {
        let workDirectory = environment("TMPDIR") ?? "/var/tmp"
        let steps = await SandboxImage.build(recipe, workDirectory: workDirectory) { line in
            // At once, as it happens: a step takes minutes.
            print(line)
            fflush(nil)
        }
        var total: Int64 = 0
        for step in steps {
            total += step.durationMs
            print("  \(step.name): \(Self.seconds(step.durationMs))\(step.failure == nil ? "" : " (failed)")")
        }
        if let failure = steps.compactMap(\.failure).first {
            printErr("edgecoder-worker: the image was not built: \(failure)")
            return ExitCode.failure
        }
        print("built \(recipe.tag) in \(Self.seconds(total))")
        return ExitCode.ok
    }

    static func seconds(_ ms: Int64) -> String {
        "\(ms / 1_000).\(ms % 1_000 / 100) s"
    }

    /// The exit code of `sandbox run` for how the program ended (the usage lists them).
    static func exitCode(_ ending: ProgramRun.Ending) -> Int32 {
        switch ending {
        case .exited(let status): return status
        case .timedOut: return exitTimedOut
        case .killed(let signal): return 128 + signal
        case .engineFailed: return exitEngineFailed
        }
    }

    /// The run as `--json` prints it (docs/reference/json-output.md).
    static func json(_ run: ProgramRun, language: CodeLanguage, image: String) -> JSONValue {
        var ending: JSONObject
        switch run.ending {
        case .exited(let status): ending = JSONObject([("kind", "exited"), ("status", .int(Int64(status)))])
        case .timedOut(let limit): ending = JSONObject([("kind", "timedOut"), ("limitMs", .int(limit))])
        case .killed(let signal): ending = JSONObject([("kind", "killed"), ("signal", .int(Int64(signal)))])
        case .engineFailed(let why): ending = JSONObject([("kind", "engineFailed"), ("message", .string(why))])
        }
        ending["text"] = .string(run.ending.description)
        return [
            "language": .string(language.rawValue), "image": .string(image), "ok": .bool(run.succeeded), "ending": .object(ending),
            "stdout": .string(run.stdout), "stderr": .string(run.stderr),
            "droppedBytes": .int(Int64(run.droppedBytes)), "durationMs": .int(run.durationMs),
        ]
    }

    private func writeAll(_ fd: Int32, _ text: String) {
        guard !text.isEmpty else { return }
        try? Posix.writeAll(fd: fd, Array(text.utf8), name: fd == 1 ? "stdout" : "stderr")
    }
}
