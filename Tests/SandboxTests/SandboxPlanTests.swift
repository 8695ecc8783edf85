import Posix
@testable import Sandbox
import Testing
import WorkerCore

/// The engine's command lines and what its exit means: every isolation flag a run depends
/// on, and every ending, without an engine. IntegrationTests/suites/sandbox.sh runs the real one.
@Suite struct SandboxPlanTests {
    typealias Settings = ContainerSandbox.Settings

    static func arguments(_ settings: Settings = Settings(), _ language: CodeLanguage = .python) -> [String] {
        ContainerSandbox.createArguments(settings, language: language, containerName: "edgecoder-sandbox-00000000000000ff")
    }

    @Test func aRunIsolatesTheProgramAsTheIssueAsks() {
        let arguments = Self.arguments()
        for flag in [
            "--rm", "--interactive", "--pull=never", "--log-driver=none", "--network=none", "--read-only", "--read-only-tmpfs=false",
            "--memory=256m", "--memory-swap=256m", "--shm-size=64m", "--cpus=0.5", "--pids-limit=50", "--cap-drop=all",
            "--security-opt=no-new-privileges",
        ] {
            #expect(arguments.contains(flag), "missing \(flag) in \(arguments)")
        }
        #expect(adjacent(arguments, "--user", "65534:65534"))
        #expect(adjacent(arguments, "--name", "edgecoder-sandbox-00000000000000ff"))
        #expect(adjacent(arguments, "--tmpfs", "/tmp:rw,size=64m,mode=1777,noexec,nosuid,nodev"))
        #expect(adjacent(arguments, "--ulimit", "nofile=1024:1024"))
        #expect(adjacent(arguments, "--ulimit", "nproc=1024:1024"))
    }

    @Test func nothingOfTheHostIsMountedOrShared() {
        let arguments = Self.arguments()
        for forbidden in [
            "-v", "--volume", "--mount", "--privileged", "--env-host", "--network=host", "--pid=host", "--ipc=host",
            "--userns=host", "--cap-add", "--device", "--security-opt=seccomp=unconfined", "--env-file",
        ] {
            #expect(!arguments.contains(where: { $0 == forbidden || $0.hasPrefix(forbidden + "=") }), "\(forbidden) in \(arguments)")
        }
        // The container's environment is only what we set.
        let environment = zip(arguments, arguments.dropFirst()).filter { $0.0 == "--env" }.map(\.1)
        #expect(environment == ["HOME=/tmp", "PATH=/usr/local/bin:/usr/bin:/bin"])
    }

    @Test(arguments: [(CodeLanguage.python, ["python3", "-I", "-"]), (.javascript, ["node", "-"])])
    func theImageAndInterpreterComeLastAndReadTheProgramFromStdin(language: CodeLanguage, interpreter: [String]) {
        let arguments = Self.arguments(Settings(image: "localhost/mine:2"), language)
        #expect(Array(arguments.suffix(interpreter.count + 1)) == ["localhost/mine:2"] + interpreter)
    }

    @Test func globalEngineArgumentsGoBeforeRun() {
        let arguments = Self.arguments(Settings(engineArguments: ["--runtime", "runc", "--log-level=warn"]))
        #expect(
            Array(arguments.prefix(5)) == ["--log-level=fatal", "--runtime", "runc", "--log-level=warn", "create"], "the operator's own level wins")
        #expect(
            ContainerSandbox.startArguments(Settings(engineArguments: ["--runtime", "runc"]), containerName: "edgecoder-sandbox-1")
                == ["--log-level=fatal", "--runtime", "runc", "start", "--attach", "--interactive", "edgecoder-sandbox-1"])
        let cleanup = ContainerSandbox.cleanupArguments(Settings(engineArguments: ["--runtime", "runc"]), containerName: "edgecoder-sandbox-1")
        #expect(cleanup == [["--runtime", "runc", "kill", "edgecoder-sandbox-1"], ["--runtime", "runc", "rm", "--force", "edgecoder-sandbox-1"]])
        #expect(
            ContainerSandbox.presenceArguments(Settings(engineArguments: ["--url", "unix:///x"]), containerName: "edgecoder-sandbox-1")
                == ["--url", "unix:///x", "ps", "--all", "--quiet", "--filter", "name=edgecoder-sandbox-1"])
        #expect(
            ContainerSandbox.imageInspectArguments(Settings(engineArguments: ["--root=/x"], image: "a/b:1"))
                == ["--root=/x", "image", "inspect", "--format", "{{.Id}}", "a/b:1"])
    }

    /// A daemon engine may create the container after its killed client gave up: after a
    /// create killed at its limit the cleanup stops only when the container was absent twice
    /// in a row, or after its last check; after a start killed at the limit, once absent.
    @Test func cleanupAfterATimeoutSettlesOnAbsence() {
        for created in [false, true] {
            #expect(!ContainerSandbox.cleanupSettled(presence: [], created: created))
            #expect(!ContainerSandbox.cleanupSettled(presence: [true], created: created))
            #expect(ContainerSandbox.cleanupSettled(presence: [false, false], created: created))
            #expect(!ContainerSandbox.cleanupSettled(presence: [false, true], created: created), "created late: removed, then checked again")
            #expect(
                ContainerSandbox.cleanupSettled(presence: Array(repeating: true, count: ContainerSandbox.settleChecks), created: created), "gives up")
            #expect(!ContainerSandbox.cleanupSettled(presence: Array(repeating: true, count: ContainerSandbox.settleChecks - 1), created: created))
        }
        #expect(!ContainerSandbox.cleanupSettled(presence: [false], created: false), "one absence may be a create still under way")
        #expect(ContainerSandbox.cleanupSettled(presence: [false], created: true))
        #expect(!ContainerSandbox.cleanupSettled(presence: [false, true, false], created: false))
        #expect(ContainerSandbox.cleanupSettled(presence: [false, true, false], created: true))
        #expect(ContainerSandbox.cleanupSettled(presence: [false, true, false, false], created: false))
    }

    @Test func dockerGetsNoPodmanOnlyFlag() {
        for engine in ["docker", "/usr/bin/docker", "/opt/bin/docker.io"] {
            #expect(EngineKind(engine: engine) == .docker)
            #expect(!Self.arguments(Settings(engine: engine)).contains("--read-only-tmpfs=false"))
        }
        for engine in ["podman", "/usr/bin/podman", "my-wrapper"] { #expect(EngineKind(engine: engine) == .podman) }
    }

    @Test func limitsFollowTheSettings() {
        let arguments = Self.arguments(Settings(memoryMiB: 512, cpus: 1.25, pids: 7))
        #expect(arguments.contains("--memory=512m") && arguments.contains("--memory-swap=512m"))
        #expect(arguments.contains("--cpus=1.25") && arguments.contains("--pids-limit=7"))
        #expect(ContainerSandbox.cpusText(2) == "2")
        #expect(ContainerSandbox.cpusText(0.05) == "0.05")
        #expect(ContainerSandbox.cpusText(0.5) == "0.5")
    }

    @Test func containerNamesAreUniqueAndFixedWidth() {
        #expect(ContainerSandbox.containerName(random: 0) == "edgecoder-sandbox-0000000000000000")
        #expect(ContainerSandbox.containerName(random: .max) == "edgecoder-sandbox-ffffffffffffffff")
        let names = Set((0..<1_000).map { _ in ContainerSandbox.containerName(random: .random(in: 0 ... .max)) })
        #expect(names.count == 1_000)
    }

    @Test func hostileSettingsAreRefusedBeforeTheEngineSeesThem() {
        #expect(Settings().problems.isEmpty)
        #expect(Settings(engine: "/usr/bin/docker", engineArguments: ["--runtime", "runc"]).problems.isEmpty)
        let bad: [Settings] = [
            Settings(image: "--privileged"), Settings(image: ""), Settings(image: "a b"), Settings(image: "img\n--rm"),
            Settings(image: String(repeating: "a", count: 5_000)), Settings(engine: ""), Settings(engine: "-podman"),
            Settings(engine: "pod man"), Settings(engineArguments: [""]), Settings(engineArguments: ["--a\u{7}"]),
            Settings(timeoutMs: 0), Settings(timeoutMs: -1), Settings(timeoutMs: 600_001), Settings(memoryMiB: 5),
            Settings(cpus: 0), Settings(cpus: .nan), Settings(cpus: .infinity), Settings(pids: 0), Settings(outputLimitBytes: -1),
        ]
        for settings in bad { #expect(settings.problems.count == 1, "\(settings): \(settings.problems)") }
    }

    @Test func theEngineGetsWhatItNeedsAndNoSecretOfOurs() {
        let ours = [
            "PATH": "/usr/bin", "HOME": "/var/lib/edgecoder-worker", "XDG_RUNTIME_DIR": "/run/user/998",
            "CREDENTIALS_DIRECTORY": "/run/credentials/edgecoder-worker.service", "NOTIFY_SOCKET": "/run/systemd/notify",
            "EDGECODER_WORKER_CONFIG": "/etc/x.json", "LANG": "", "DOCKER_HOST": "unix:///run/docker.sock",
        ]
        #expect(
            ContainerSandbox.engineEnvironment(inherited: { ours[$0] })
                == [
                    "PATH": "/usr/bin", "HOME": "/var/lib/edgecoder-worker", "XDG_RUNTIME_DIR": "/run/user/998",
                    "DOCKER_HOST": "unix:///run/docker.sock",
                ])
        #expect(
            ContainerSandbox.engineEnvironment(inherited: { _ in nil }) == ["PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"])
    }

    static let settings = Settings(timeoutMs: 4_000)
    static func ending(_ outcome: ChildOutcome, _ stderr: String = "") -> ProgramRun.Ending {
        ContainerSandbox.ending(outcome, stderr: CapturedOutput(bytes: Array(stderr.utf8)), settings: settings)
    }

    @Test func exitStatusesMapToEndings() {
        #expect(Self.ending(.exited(0)) == .exited(0))
        #expect(Self.ending(.exited(1), "Traceback…\nNameError: x\n") == .exited(1))
        #expect(Self.ending(.exited(137)) == .killed(signal: 9))
        #expect(Self.ending(.exited(139)) == .killed(signal: 11))
        #expect(Self.ending(.exited(128)) == .exited(128))
        #expect(Self.ending(.exited(160)) == .exited(160))
        #expect(Self.ending(.exited(255)) == .exited(255))
        #expect(Self.ending(.timedOut(milliseconds: 4_012)) == .timedOut(limitMs: 4_000))
    }

    @Test func theEnginesOwnErrorsAreTheHostsFault() {
        #expect(
            Self.ending(.exited(125), "Error: localhost/edgecoder-sandbox:1: image not known\n")
                == .engineFailed("Error: localhost/edgecoder-sandbox:1: image not known"))
        #expect(
            Self.ending(.exited(127), "Error: runc: runc create failed: exec: \"python3\": executable file not found in $PATH\n")
                == .engineFailed("Error: runc: runc create failed: exec: \"python3\": executable file not found in $PATH"))
        #expect(
            Self.ending(.exited(125), "docker: Error response from daemon: No such image.\nSee 'docker run --help'.\n")
                == .engineFailed("docker: Error response from daemon: No such image."))
        #expect(Self.ending(.couldNotStart("Permission denied")) == .engineFailed("cannot start podman: Permission denied"))
        #expect(Self.ending(.killedBySignal(9)) == .engineFailed("podman was killed by signal 9"))
    }

    /// `docker start` exits 1 when the daemon cannot start the container; for podman, and
    /// without the daemon's line, a 1 is the program's.
    @Test func dockerStartsOwnFailureIsTheHostsFault() {
        let docker = Settings(engine: "/usr/bin/docker", timeoutMs: 4_000)
        let said = "Error response from daemon: failed to create shim task: OCI runtime create failed\nError: failed to start containers: x\n"
        #expect(
            ContainerSandbox.ending(.exited(1), stderr: CapturedOutput(bytes: Array(said.utf8)), settings: docker)
                == .engineFailed("Error response from daemon: failed to create shim task: OCI runtime create failed"))
        #expect(
            ContainerSandbox.ending(.exited(1), stderr: CapturedOutput(bytes: Array("Traceback…\nError: x\n".utf8)), settings: docker) == .exited(1))
        #expect(Self.ending(.exited(1), said) == .exited(1), "podman's start has 125 for its own failures")
    }

    @Test func aProgramExitingLikeTheEngineWithoutItsMessageKeepsItsStatus() {
        #expect(Self.ending(.exited(125)) == .exited(125))
        #expect(Self.ending(.exited(127), "sh: 1: foo: not found\n") == .exited(127))
        #expect(Self.ending(.exited(126), "Errors: none\n") == .exited(126))
        // A message elsewhere than at a line's start is the program's.
        #expect(Self.ending(.exited(125), "x Error: y\n") == .exited(125))
        #expect(Self.ending(.exited(1), "Error: my own\n") == .exited(1))
    }

    @Test func anEngineMessageIsShortenedAndStrippedOfControlCharacters() {
        let long = "Error: " + String(repeating: "x", count: 2_000) + "\u{1b}[31m"
        guard case .engineFailed(let message) = Self.ending(.exited(125), long) else { Issue.record("not an engine failure"); return }
        #expect(message.unicodeScalars.count <= 401)
        #expect(!message.contains("\u{1b}"))
    }

    @Test func limitsInForceAreUsable() {
        let settings = Settings()
        #expect(ContainerSandbox.limitsProblem(probeOutput: "memory 268435456\npids 50\ncpu 50000 100000\n", settings: settings) == nil)
        // Tighter than asked is fine; cgroup v2's cpu.max and v1's quota and period print alike.
        #expect(ContainerSandbox.limitsProblem(probeOutput: "memory 134217728\npids 10\ncpu 25000 100000\n", settings: settings) == nil)
    }

    @Test(arguments: [
        ("memory max\npids max\ncpu max 100000\n", ["no memory limit (max)", "no pids limit (max)", "no CPU limit (max 100000)"]),
        ("memory 9223372036854771712\npids 50\ncpu -1 100000\n", ["memory 8796093022207 MiB, not 256", "no CPU limit (-1 100000)"]),
        ("memory 536870912\npids 100\ncpu 200000 100000\n", ["memory 512 MiB, not 256", "100 pids, not 50", "2 CPUs, not 0.5"]),
        ("memory none\npids none\ncpu none\n", ["no memory limit (none)", "no pids limit (none)", "no CPU limit (none)"]),
        ("", ["no memory limit (nothing)", "no pids limit (nothing)", "no CPU limit (nothing)"]),
        ("garbage\u{0}\u{1b}[2J\n\n", ["no memory limit (nothing)"]),
        ("memory 268435456 extra\npids 50\ncpu 50000\n", ["no CPU limit (50000)"]),
        ("memory 0\npids 0\ncpu 0 0\n", ["no memory limit (0)", "no pids limit (0)", "no CPU limit (0 0)"]),
        // The first line of each name counts: a later, tighter one cannot hide a missing limit.
        ("memory max\nmemory 1\npids 50\ncpu 50000 100000\n", ["no memory limit (max)"]),
    ])
    func missingOrLooseLimitsAreNamed(output: String, expected: [String]) {
        let problem = ContainerSandbox.limitsProblem(probeOutput: output, settings: Settings())
        #expect(problem?.hasPrefix("the engine does not enforce the sandbox's limits") == true)
        for part in expected { #expect(problem?.contains(part) == true, "\(part) not in \(problem ?? "nil")") }
    }

    @Test func aHugeOrHostileProbeOutputIsReadBoundedAndEchoedShort() {
        let flood = String(repeating: "memory " + String(repeating: "9", count: 10_000) + "\n", count: 1_000)
        let problem = ContainerSandbox.limitsProblem(probeOutput: flood, settings: Settings()) ?? ""
        #expect(problem.contains("no memory limit"))
        #expect(problem.count < 600)
    }

    func adjacent(_ arguments: [String], _ a: String, _ b: String) -> Bool {
        zip(arguments, arguments.dropFirst()).contains { $0 == a && $1 == b }
    }
}

@Suite struct SandboxImageTests {
    @Test func theBootstrapIsMinimalWithBothInterpretersAndNoDocumentation() {
        var recipe = SandboxImage.Recipe(suite: "bookworm")
        let arguments = SandboxImage.bootstrapArguments(recipe, output: "/var/tmp/x/rootfs.tar")
        #expect(arguments.contains("--variant=minbase"))
        #expect(arguments.contains("--include=python3,nodejs"))
        #expect(arguments.contains("--format=tar"))
        #expect(arguments.contains("--dpkgopt=path-exclude=/usr/share/doc/*"))
        #expect(Array(arguments.suffix(2)) == ["bookworm", "/var/tmp/x/rootfs.tar"])
        recipe.mirror = "http://mirror.example/debian"
        #expect(SandboxImage.bootstrapArguments(recipe, output: "/t").last == "http://mirror.example/debian")
    }

    @Test func theImportNamesTheTagAndARunnableDefault() {
        var recipe = SandboxImage.Recipe(suite: "bookworm")
        recipe.engineArguments = ["--runtime", "runc"]
        recipe.tag = "localhost/x:3"
        let arguments = SandboxImage.importArguments(recipe, tar: "/t/rootfs.tar")
        #expect(Array(arguments.prefix(3)) == ["--runtime", "runc", "import"])
        #expect(Array(arguments.suffix(2)) == ["/t/rootfs.tar", "localhost/x:3"])
        #expect(arguments.contains("USER 65534:65534"))
    }

    @Test func theReleaseComesFromOsRelease() {
        #expect(
            SandboxImage.releaseName(osRelease: "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nVERSION_CODENAME=bookworm\nID=debian\n")
                == "bookworm")
        #expect(SandboxImage.releaseName(osRelease: "VERSION_CODENAME=\"trixie\"") == "trixie")
        #expect(SandboxImage.releaseName(osRelease: "ID=debian\n") == nil)
        #expect(SandboxImage.releaseName(osRelease: "VERSION_CODENAME=\n") == nil)
        #expect(SandboxImage.releaseName(osRelease: "") == nil)
    }

    @Test func hostileRecipesAreRefused() {
        #expect(SandboxImage.Recipe(suite: "bookworm").problems.isEmpty)
        var recipe = SandboxImage.Recipe(suite: "bookworm; rm -rf /")
        #expect(recipe.problems.count == 1)
        recipe = SandboxImage.Recipe(suite: "")
        #expect(recipe.problems.count == 1)
        recipe = SandboxImage.Recipe(suite: "bookworm")
        recipe.tag = "--all"
        #expect(recipe.problems.count == 1)
        recipe = SandboxImage.Recipe(suite: "bookworm")
        recipe.mirror = "--keyring=/etc/x"
        #expect(recipe.problems.count == 1)
        recipe.mirror = "http://a b"
        #expect(recipe.problems.count == 1)
    }
}
