import Sandbox
import Testing
import WorkerCore
@testable import WorkerCLI

/// `edgecoder-worker sandbox build|run|check`: what the arguments come to, every mistake a
/// usage error (exit 64) before any engine runs, and how an ending becomes an exit code
/// and a JSON object.
@Suite struct SandboxCommandArguments {
    static func parse(_ words: [String]) throws(UsageError) -> SandboxCommand {
        var arguments = Arguments(words)
        let command = try SandboxCommand(&arguments)
        try arguments.finish()
        return command
    }

    @Test func runTakesTheDefaultsAndStdin() throws {
        let c = try Self.parse(["run", "--language", "python"])
        guard case .run(let language, let source) = c.action else { Issue.record("\(c.action)"); return }
        #expect(language == .python && source == "-")
        #expect(c.settings == ContainerSandbox.Settings())
    }

    @Test func runWithEngineArgumentsImageTimeoutAndAFile() throws {
        let c = try Self.parse([
            "run", "--language=javascript", "--engine", "/usr/bin/docker", "--engine-arg=--runtime", "--engine-arg", "runc",
            "--image", "localhost/mine:2", "--timeout-ms", "1500", "--json", "prog.js",
        ])
        guard case .run(let language, let source) = c.action else { Issue.record("\(c.action)"); return }
        #expect(language == .javascript && source == "prog.js")
        #expect(c.settings.engine == "/usr/bin/docker" && c.settings.engineArguments == ["--runtime", "runc"])
        #expect(c.settings.image == "localhost/mine:2" && c.settings.timeoutMs == 1_500 && c.json)
    }

    @Test func checkTakesTheTrivialProgramsTimeLimit() throws {
        let c = try Self.parse(["check", "--timeout-ms", "60000", "--engine-arg=--url=unix:///run/edgecoder-sandbox/podman.sock"])
        guard case .check = c.action else { Issue.record("\(c.action)"); return }
        #expect(c.settings.timeoutMs == 60_000 && c.settings.engineArguments == ["--url=unix:///run/edgecoder-sandbox/podman.sock"])
    }

    @Test func buildReadsTheRecipe() throws {
        let c = try Self.parse([
            "build", "--tag", "localhost/x:2", "--suite", "trixie", "--mirror", "http://m.example/debian", "--engine-arg=--root=/s",
        ])
        guard case .build(let recipe) = c.action else { Issue.record("\(c.action)"); return }
        #expect(recipe.tag == "localhost/x:2" && recipe.suite == "trixie" && recipe.mirror == "http://m.example/debian")
        #expect(recipe.engine == "podman" && recipe.engineArguments == ["--root=/s"])
    }

    @Test(arguments: [
        [], ["launch"], ["run"], ["run", "--language", "ruby"], ["run", "--language", "Python"], ["run", "--language", ""],
        ["run", "--language", "python", "a.py", "b.py"], ["run", "--language", "python", "--timeout-ms", "99"],
        ["run", "--language", "python", "--timeout-ms", "600001"], ["run", "--language", "python", "--timeout-ms", "1e3"],
        ["run", "--language", "python", "--image=--privileged"], ["run", "--language", "python", "--image", "a b"],
        ["run", "--language", "python", "--engine=-x"], ["run", "--language", "python", "--engine-arg", "--runtime"],
        ["run", "--language", "python", "--tag", "x:1"], ["run", "--language", "python", "--suite", "bookworm"],
        ["check", "--language", "python"], ["check", "extra"], ["check", "--timeout-ms", "99"],
        ["build", "--image", "x:1"], ["build", "--json"], ["build", "--suite", "bookworm;id"], ["build", "--tag=--all"],
        ["build", "--mirror", "ftp://x"], ["build", "extra"], ["run", "--language", "python", "--verbose"],
        [String(repeating: "r", count: 10_000)], ["run\u{0}"],
    ])
    func mistakesAreUsageErrors(words: [String]) {
        #expect(throws: UsageError.self) { _ = try Self.parse(words) }
    }

    @Test func endingsBecomeExitCodes() {
        #expect(SandboxCommand.exitCode(.exited(0)) == 0)
        #expect(SandboxCommand.exitCode(.exited(3)) == 3)
        #expect(SandboxCommand.exitCode(.timedOut(limitMs: 4_000)) == 124)
        #expect(SandboxCommand.exitCode(.engineFailed("no image")) == 125)
        #expect(SandboxCommand.exitCode(.killed(signal: 9)) == 137)
    }

    @Test func theJSONCarriesTheRunWhole() {
        let run = ProgramRun(ending: .killed(signal: 9), stdout: "a\"b\n", stderr: "\u{1}", droppedBytes: 7, durationMs: 812)
        let json = SandboxCommand.json(run, language: .python, image: "i:1")
        #expect(json["ok"] == .bool(false))
        #expect(json["ending"]?["kind"] == .string("killed") && json["ending"]?["signal"] == .int(9))
        #expect(json["ending"]?["text"] == .string("killed by signal 9"))
        #expect(json["stdout"] == .string("a\"b\n") && json["stderr"] == .string("\u{1}"))
        #expect(json["droppedBytes"] == .int(7) && json["durationMs"] == .int(812) && json["language"] == .string("python"))
        let timedOut = SandboxCommand.json(ProgramRun(ending: .timedOut(limitMs: 4_000)), language: .javascript, image: "i:1")
        #expect(timedOut["ending"]?["limitMs"] == .int(4_000))
        let failed = SandboxCommand.json(ProgramRun(ending: .engineFailed("Error: x")), language: .javascript, image: "i:1")
        #expect(failed["ending"]?["message"] == .string("Error: x") && failed["ok"] == .bool(false))
    }
}
