#if canImport(Glibc)
import Glibc
#endif
import Posix
@testable import Sandbox
import Testing
import WorkerCore

/// `ContainerSandbox` against a stand-in engine (a shell script that logs its command lines
/// and acts as podman would): the program on stdin, the engine's environment, the cleanup
/// at the time limit naming the run's own container, capped output, the endings, and
/// `check`. IntegrationTests/suites/sandbox.sh runs the real engine.
@Suite(.serialized) struct ContainerSandboxTests {
    /// A directory with the stand-in engine `fake-podman`; `behave` picks what its `run` does.
    final class FakeEngine {
        let directory: String
        var engine: String { directory + "/fake-podman" }

        init() throws {
            var template = Array("/tmp/sandbox-tests-XXXXXX".utf8CString)
            guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else { throw SystemError("mkdtemp", errno: errno) }
            directory = String(decoding: template.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let script = """
                #!/bin/sh
                d=\(directory)
                printf '%s\\n' "$*" >>"$d/log"
                case " $* " in
                  *" image inspect "*) [ "$(cat "$d/image")" = present ] && { echo sha256:1; exit 0; }; echo "Error: inspecting object: image not known" >&2; exit 125 ;;
                  *" kill "*|*" rm "*) exit 0 ;;
                  *" ps "*)
                    # "late N": listed by the next N checks (a daemon finishing a create).
                    set -- $(cat "$d/behaviour")
                    [ "$1" = late ] && [ "$2" -gt 0 ] && { echo "late $(($2 - 1))" >"$d/behaviour"; echo 0123abcd; }
                    exit 0 ;;
                  *" create "*)
                    case "$(cat "$d/behaviour")" in
                      create-error) echo "Error: localhost/x:1: image not known" >&2; exit 125 ;;
                      create-hang|late*) sleep 30 ;;
                    esac
                    echo 0123abcd; exit 0 ;;
                esac
                env >"$d/env"
                case "$(cat "$d/behaviour")" in
                  echo) cat ;;
                  answer) cat >/dev/null; printf 'memory 268435456\\npids 50\\ncpu 50000 100000\\n' ;;
                  unlimited) cat >/dev/null; printf 'memory max\\npids max\\ncpu max 100000\\n' ;;
                  sleep) cat >/dev/null; sleep 30 ;;
                  engine-error) echo "Error: localhost/x:1: image not known" >&2; exit 125 ;;
                  oom) exit 137 ;;
                  own-125) echo "my own failure" >&2; exit 125 ;;
                  flood) head -c 1000000 /dev/zero; head -c 300000 /dev/zero >&2; echo tail >&2 ;;
                esac
                """
            try write("fake-podman", script)
            chmod(engine, 0o755)
            try behave("echo")
            try write("image", "present")
        }

        deinit {
            for name in ["fake-podman", "log", "env", "behaviour", "image"] { unlink(directory + "/" + name) }
            rmdir(directory)
        }

        func write(_ name: String, _ text: String) throws {
            let fd = open(directory + "/" + name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            guard fd >= 0 else { throw SystemError("open", errno: errno) }
            defer { close(fd) }
            try writeAll(fd: fd, Array(text.utf8), name: name)
        }

        func behave(_ behaviour: String) throws { try write("behaviour", behaviour) }

        func read(_ name: String) -> String {
            (try? readFile(directory + "/" + name, limit: 1 << 20)).map { String(decoding: $0, as: UTF8.self) } ?? ""
        }

        func sandbox(timeoutMs: Int64 = 10_000, outputLimit: Int = 65_536, engineArguments: [String] = [], createTimeoutMs: Int64 = 10_000)
            -> ContainerSandbox
        {
            var settings = ContainerSandbox.Settings(
                engine: engine, engineArguments: engineArguments, timeoutMs: timeoutMs, outputLimitBytes: outputLimit)
            settings.createTimeoutMs = createTimeoutMs
            return ContainerSandbox(settings)
        }

        /// The logged command lines, and the run's container name from the first (`create`).
        func commands() -> (lines: [String], name: String?) {
            let lines = read("log").split(separator: "\n").map(String.init)
            let words = lines.first?.split(separator: " ").map(String.init) ?? []
            return (lines, words.firstIndex(of: "--name").map { words[$0 + 1] })
        }
    }

    @Test func theProgramGoesInOnStdinAndItsOutputComesBack() async throws {
        let fake = try FakeEngine()
        let program = "print('hello')\n# \u{e9}\u{1F600} and a NUL-free but hostile line: $(id) `id` ;\n"
        let run = await fake.sandbox().run(.python, code: program)
        #expect(run.ending == .exited(0))
        #expect(run.stdout == program)
        #expect(run.durationMs >= 0 && run.droppedBytes == 0)
        let (lines, name) = fake.commands()
        #expect(lines.count == 2, "create, then start: \(lines)")
        #expect(lines.first?.hasPrefix("--log-level=fatal create --rm --interactive --name edgecoder-sandbox-") == true)
        #expect(lines.first?.hasSuffix(" localhost/edgecoder-sandbox:1 python3 -I -") == true)
        #expect(lines.last == "--log-level=fatal start --attach --interactive \(name ?? "?")")
    }

    @Test func theEngineGetsNoneOfOurSecrets() async throws {
        let fake = try FakeEngine()
        setenv("CREDENTIALS_DIRECTORY", "/run/credentials/edgecoder-worker.service", 1)
        setenv("EDGECODER_REGISTRATION_TOKEN", "secret", 1)
        defer {
            unsetenv("CREDENTIALS_DIRECTORY")
            unsetenv("EDGECODER_REGISTRATION_TOKEN")
        }
        _ = await fake.sandbox().run(.javascript, code: "1")
        let environment = fake.read("env")
        #expect(environment.contains("PATH="))
        #expect(!environment.contains("CREDENTIALS_DIRECTORY") && !environment.contains("secret"))
    }

    @Test func atTheTimeLimitTheRunsOwnContainerIsKilledThenRemoved() async throws {
        let fake = try FakeEngine()
        try fake.behave("sleep")
        let started = monotonicNanoseconds()
        let run = await fake.sandbox(timeoutMs: 300, engineArguments: ["--runtime", "runc"]).run(.python, code: "while True: pass")
        #expect(run.ending == .timedOut(limitMs: 300))
        #expect(monotonicNanoseconds() - started < 5_000_000_000)
        let (lines, name) = fake.commands()
        let container = try #require(name)
        #expect(
            Array(lines.dropFirst()) == [
                "--log-level=fatal --runtime runc start --attach --interactive \(container)",
                "--runtime runc kill \(container)", "--runtime runc rm --force \(container)",
                "--runtime runc ps --all --quiet --filter name=\(container)",
            ], "created, so one absence ends the cleanup")
    }

    /// A create that outlasts its limit is the engine's failure; a daemon engine may still
    /// finish it after its client was killed (here: listed by the next two checks), so the
    /// cleanup removes it again until it is absent twice in a row.
    @Test func aCreateKilledAtItsLimitIsRemovedEvenWhenItAppearsLate() async throws {
        let fake = try FakeEngine()
        try fake.behave("late 2")
        let run = await fake.sandbox(createTimeoutMs: 300).run(.python, code: "print(1)")
        #expect(run.ending == .engineFailed("\(fake.engine) did not create the container within 300 ms"))
        let (lines, name) = fake.commands()
        let container = try #require(name)
        let ps = "ps --all --quiet --filter name=\(container)", rm = "rm --force \(container)"
        #expect(Array(lines.dropFirst()) == ["kill \(container)", rm, ps, rm, ps, rm, ps, ps], "no start; removed until gone twice")
    }

    @Test func aFinishedRunLeavesNothingToCleanUp() async throws {
        let fake = try FakeEngine()
        _ = await fake.sandbox().run(.python, code: "print(1)")
        #expect(fake.commands().lines.count == 2, "create and start; --rm removes it; no kill, no rm")
    }

    @Test func eachStreamIsCappedAndTheRestCounted() async throws {
        let fake = try FakeEngine()
        try fake.behave("flood")
        let run = await fake.sandbox(outputLimit: 1_000).run(.python, code: "")
        #expect(run.ending == .exited(0))
        #expect(run.stdout.utf8.count == 1_000 && run.stderr.utf8.count == 1_000)
        #expect(run.droppedBytes == 1_000_000 + 300_005 - 2_000)
    }

    @Test func endingsFromTheEngine() async throws {
        let fake = try FakeEngine()
        try fake.behave("engine-error")
        #expect(await fake.sandbox().run(.python, code: "").ending == .engineFailed("Error: localhost/x:1: image not known"))
        try fake.behave("create-error")
        try fake.write("log", "")
        let notCreated = await fake.sandbox().run(.python, code: "")
        #expect(
            notCreated.ending
                == .engineFailed("\(fake.engine) could not create the container (exited with status 125): Error: localhost/x:1: image not known"))
        #expect(fake.commands().lines.filter { $0.contains(" start ") }.isEmpty, "nothing is started")
        try fake.behave("oom")
        #expect(await fake.sandbox().run(.python, code: "").ending == .killed(signal: 9))
        try fake.behave("own-125")
        #expect(await fake.sandbox().run(.python, code: "").ending == .exited(125))
    }

    @Test func aContainerTheEngineCouldNotStartIsRemoved() async throws {
        // `--rm` removes a container once it ran; one whose start failed (crun refusing the
        // host's cgroups) stayed "created" for good, one per run (seen on this host).
        let fake = try FakeEngine()
        try fake.behave("engine-error")
        let failed = await fake.sandbox().run(.python, code: "")
        #expect(failed.ending == .engineFailed("Error: localhost/x:1: image not known"))
        let (lines, name) = fake.commands()
        #expect(lines.contains { $0.contains("rm --force \(name ?? "?")") }, "\(lines)")
        // A program that ran and failed is the engine's to remove (--rm): no extra command.
        try fake.write("log", "")
        try fake.behave("own-125")
        _ = await fake.sandbox().run(.python, code: "")
        #expect(fake.commands().lines.count == 2, "create and start only: \(fake.commands().lines)")
    }

    @Test func whichEndingsMayLeaveAContainer() {
        #expect(ContainerSandbox.mayBeLeft(after: .engineFailed("x")) && ContainerSandbox.mayBeLeft(after: .timedOut(limitMs: 1)))
        #expect(!ContainerSandbox.mayBeLeft(after: .exited(125)) && !ContainerSandbox.mayBeLeft(after: .killed(signal: 9)))
        #expect(ContainerSandbox.mayHaveCreated(.timedOut(milliseconds: 1)) && ContainerSandbox.mayHaveCreated(.killedBySignal(9)))
        #expect(!ContainerSandbox.mayHaveCreated(.exited(125)) && !ContainerSandbox.mayHaveCreated(.couldNotStart("x")))
    }

    @Test func anEngineThatIsNotThereIsTheHostsFault() async {
        let missing = ContainerSandbox(ContainerSandbox.Settings(engine: "no-such-engine-here"), searchPath: "/nonexistent")
        guard case .engineFailed(let why) = await missing.run(.python, code: "print(1)").ending else { Issue.record("not an engine failure"); return }
        #expect(why.contains("no-such-engine-here is not installed"))
        #expect(
            await missing.check() == .unusable("no-such-engine-here is not installed: no executable of that name on PATH (apt-get install podman)"))
        let badImage = ContainerSandbox(ContainerSandbox.Settings(image: "--privileged"))
        guard case .engineFailed = await badImage.run(.python, code: "").ending else { Issue.record("a hostile image ran"); return }
    }

    @Test(arguments: [
        ("Error: inspecting object: localhost/x:1: image not known", true),
        ("Error: No such image: localhost/x:1", true),
        ("Error response from daemon: No such image: x:1", true),
        ("Failed to set rlimits: setting new rlimits: operation not permitted", false),
        ("Error: creating runtime static files directory: mkdir /nonexistent: permission denied", false),
    ])
    func anEngineThatFailsIsNotAnImageToBuild(line: String, missing: Bool) {
        #expect(ContainerSandbox.saysImageMissing(line) == missing)
    }

    @Test func checkSaysWhatIsMissing() async throws {
        let fake = try FakeEngine()
        try fake.behave("answer")
        guard case .usable(let what) = await fake.sandbox().check() else { Issue.record("not usable"); return }
        #expect(what.hasPrefix("\(fake.engine) with localhost/edgecoder-sandbox:1, its limits in force, a trivial program in "))
        try fake.write("image", "absent")
        guard case .unusable(let why) = await fake.sandbox().check() else { Issue.record("usable without the image"); return }
        #expect(why.contains("is not in") && why.contains("image not known") && why.contains("sandbox build"))
        try fake.write("image", "present")
        try fake.behave("echo")
        guard case .unusable(let wrong) = await fake.sandbox().check() else { Issue.record("usable with the wrong answer"); return }
        #expect(wrong.contains("a trivial program"))
        try fake.behave("unlimited")
        guard case .unusable(let unlimited) = await fake.sandbox().check() else { Issue.record("usable without limits"); return }
        #expect(unlimited.hasPrefix("the engine does not enforce the sandbox's limits"))
    }
}
