#if canImport(Glibc)
import Glibc
#endif
import Logging
import Posix
import WorkerCore

/// Runs one program of a code subtask in a throw-away container (podman, rootless or
/// rootful, or docker): no network, a read-only root with a small tmpfs /tmp, memory, CPU
/// and pids limits, user 65534, no capabilities, no new privileges, the engine's default
/// seccomp profile, nothing of the host mounted. The container is created, then started
/// with the program on stdin; the time limit is the start's. At it the whole container is
/// killed and removed; stdout and stderr are each read to
/// their end and capped. The engine runs through `ChildProcess`, like every child.
public struct ContainerSandbox: Sendable {
    public let settings: Settings
    let logger: Logger?
    /// Where the engine is looked up when it is a bare name.
    let searchPath: String

    public init(
        _ settings: Settings, logger: Logger? = nil,
        searchPath: String = Posix.environment("PATH") ?? "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    ) {
        self.settings = settings
        self.logger = logger
        self.searchPath = searchPath
    }

    /// The engine's path, or why there is none.
    func engineExecutable() -> Result<String, EngineMissing> {
        if let path = findExecutable(settings.engine, searchPath: searchPath) { return .success(path) }
        let hint = EngineKind(engine: settings.engine) == .docker ? "apt-get install docker.io" : "apt-get install podman"
        return .failure(
            EngineMissing(
                message: settings.engine.contains("/")
                    ? "\(settings.engine) is not an executable file (\(hint))"
                    : "\(settings.engine) is not installed: no executable of that name on PATH (\(hint))"))
    }

    struct EngineMissing: Error { let message: String }

    /// Runs `code` as a `language` program and says how it ended, with what it printed.
    /// Never throws: whatever goes wrong is in the ending (`.engineFailed` is the host's).
    public func run(_ language: CodeLanguage, code: String) async -> ProgramRun {
        if let problem = settings.problems.first { return ProgramRun(ending: .engineFailed(problem)) }
        let engine: String
        switch engineExecutable() {
        case .success(let path): engine = path
        case .failure(let missing): return ProgramRun(ending: .engineFailed(missing.message))
        }
        let name = ContainerSandbox.containerName(random: UInt64.random(in: 0...UInt64.max))
        let environment = ContainerSandbox.engineEnvironment(inherited: Posix.environment)
        let created = await ChildProcess.run(
            engine, arguments: ContainerSandbox.createArguments(settings, language: language, containerName: name),
            environment: environment, timeoutMs: settings.createTimeoutMs, outputLimit: 64 * 1_024)
        guard created.outcome.succeeded else {
            if ContainerSandbox.mayHaveCreated(created.outcome) {
                await removeContainer(name, engine: engine, environment: environment, created: false)
            }
            if case .timedOut = created.outcome {
                return ProgramRun(
                    ending: .engineFailed("\(settings.engine) did not create the container within \(settings.createTimeoutMs) ms"),
                    durationMs: created.durationMs)
            }
            // Whatever `create` says is the engine's: the program has not run.
            let said = ContainerSandbox.engineMessage(created.stderr.text) ?? ContainerSandbox.firstLine(created.stderr.text)
            return ProgramRun(
                ending: .engineFailed("\(settings.engine) could not create the container (\(created.outcome))" + (said.map { ": \($0)" } ?? "")),
                stderr: created.stderr.text, durationMs: created.durationMs)
        }
        let result = await ChildProcess.run(
            engine, arguments: ContainerSandbox.startArguments(settings, containerName: name),
            environment: environment, stdin: Array(code.utf8), timeoutMs: settings.timeoutMs,
            outputLimit: settings.outputLimitBytes)
        let ending = ContainerSandbox.ending(result.outcome, stderr: result.stderr, settings: settings)
        if ContainerSandbox.mayBeLeft(after: ending) {
            await removeContainer(name, engine: engine, environment: environment, created: true)
        }
        return ProgramRun(
            ending: ending,
            stdout: result.stdout.text, stderr: result.stderr.text,
            droppedBytes: result.stdout.droppedBytes + result.stderr.droppedBytes,
            durationMs: created.durationMs + result.durationMs)
    }

    /// Kills and removes a container whose client was killed at the time limit, then
    /// checks it stays gone (`cleanupSettled`: a daemon engine may still be creating it).
    /// In a task of its own: when the run was cancelled (the daemon stops) the cleanup must
    /// still happen, and a cancelled child would be killed at once.
    private func removeContainer(_ name: String, engine: String, environment: [String: String], created: Bool) async {
        let settings = settings
        let logger = logger
        await Task.detached {
            let engineRun = { (arguments: [String]) in
                await ChildProcess.run(engine, arguments: arguments, environment: environment, timeoutMs: 30_000, outputLimit: 4_096)
            }
            let commands = ContainerSandbox.cleanupArguments(settings, containerName: name)
            for arguments in commands { _ = await engineRun(arguments) }
            var presence: [Bool] = []
            while !ContainerSandbox.cleanupSettled(presence: presence, created: created) {
                if !presence.isEmpty { try? await Task.sleep(nanoseconds: 1_000_000_000) }
                let listed = await engineRun(ContainerSandbox.presenceArguments(settings, containerName: name))
                // A failed listing says nothing: count it as present, and remove again.
                let present = !listed.outcome.succeeded || listed.stdout.text.contains { !$0.isWhitespace }
                presence.append(present)
                if present, let remove = commands.last { _ = await engineRun(remove) }
            }
            if presence.last != false {
                logger?.warning("the sandbox container \(name) may be left behind: \(engine) rm --force \(name) did not remove it")
            }
        }.value
    }

    /// Whether programs can run: the engine is there, the image is in its store, and a
    /// trivial program runs and finds the memory, pids and CPU limits in force. The text
    /// says which engine and image, or why not.
    public func check() async -> SandboxAvailability {
        if let problem = settings.problems.first { return .unusable(problem) }
        let engine: String
        switch engineExecutable() {
        case .success(let path): engine = path
        case .failure(let missing): return .unusable(missing.message)
        }
        let environment = ContainerSandbox.engineEnvironment(inherited: Posix.environment)
        let inspect = await ChildProcess.run(
            engine, arguments: ContainerSandbox.imageInspectArguments(settings), environment: environment,
            timeoutMs: 30_000, outputLimit: 4_096)
        guard inspect.outcome.succeeded else {
            let line = ContainerSandbox.firstLine(inspect.stderr.text)
            guard let line, !ContainerSandbox.saysImageMissing(line) else {
                let said = line.map { " (\(settings.engine) said: \($0))" } ?? ""
                return .unusable(
                    "the image \(settings.image) is not in \(settings.engine)'s store\(said): build it with `edgecoder-worker sandbox build` as the user the worker runs as"
                )
            }
            // The engine itself failed (a unit that forbids it what it needs, a broken store):
            // building the image would not help, so say what it said.
            return .unusable("\(settings.engine) could not look up the image \(settings.image) (\(inspect.outcome)): \(line)")
        }
        let probe = await run(.python, code: ContainerSandbox.limitsProbe)
        guard probe.ending == .exited(0), probe.stdout.hasPrefix("memory ") else {
            let said = ContainerSandbox.firstLine(probe.stderr).map { ": \($0)" } ?? ""
            return .unusable("a trivial program in \(settings.image) \(probe.ending)\(said)")
        }
        if let problem = ContainerSandbox.limitsProblem(probeOutput: probe.stdout, settings: settings) { return .unusable(problem) }
        return .usable("\(settings.engine) with \(settings.image), its limits in force, a trivial program in \(probe.durationMs) ms")
    }

    /// Whether the engine's error says the image is not in its store (podman: "image not
    /// known", docker: "No such image"), rather than that the engine could not work.
    static func saysImageMissing(_ line: String) -> Bool {
        let lower = line.lowercased()
        return lower.contains("image not known") || lower.contains("no such image") || lower.contains("not found")
    }

    static func firstLine(_ text: String) -> String? {
        lines(text).first.map { printable(String($0), limit: 300) }
    }
}
