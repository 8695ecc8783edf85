import Foundation
#if canImport(Glibc)
import Glibc
#endif
import TestSupport
import Testing
import WorkerCore

/// The exit codes and JSON a script reads (docs/reference/command-line.md, Exit codes; json-output.md, Stability), run
/// against the built binary.
@Suite struct ScriptableExitCodes {
    @Test func anUnknownHelpTopicOrCommandExits64WithASuggestion() throws {
        let help = try runCommand(workerBinary, ["help", "nonexistent"])
        #expect(help.status == 64)
        #expect(help.stderr.contains("unknown help topic 'nonexistent'"), "\(help.stderr)")
        let typo = try runCommand(workerBinary, ["stauts"])
        #expect(typo.status == 64)
        #expect(typo.stderr.contains("did you mean 'status'?"), "\(typo.stderr)")
        let helpTypo = try runCommand(workerBinary, ["help", "doctr"])
        #expect(helpTypo.status == 64 && helpTypo.stderr.contains("did you mean 'doctor'?"), "\(helpTypo.stderr)")
        #expect(try runCommand(workerBinary, ["help", "status"]).status == 0)
    }

    @Test func underJSONAUsageErrorIsOneObjectOnStdout() throws {
        let result = try runCommand(workerBinary, ["status", "--json", "--bogus"])
        #expect(result.status == 64)
        let answer = try JSON.parse(Array(result.stdout.utf8))
        #expect(answer["schemaVersion"] == 1)
        #expect(answer["error"]?["code"] == "usage")
        #expect(answer["error"]?["message"] == "unknown option --bogus")
        #expect(result.stderr.isEmpty, "\(result.stderr)")
    }

    @Test func statusWithoutADaemonExits69AndSaysSoInJSON() throws {
        let result = try runCommand(workerBinary, ["status", "--json", "--runtime-dir", "/tmp/ecw-no-daemon-\(getpid())"])
        #expect(result.status == 69)
        let answer = try JSON.parse(Array(result.stdout.utf8))
        #expect(answer["error"]?["code"] == "daemon-unavailable")
        #expect(answer["error"]?["message"]?.stringValue?.contains("the daemon is not running") == true)
        #expect(try runCommand(workerBinary, ["status", "--runtime-dir", "/tmp/ecw-no-daemon-\(getpid())"]).status == 69)
    }

    @Test func everyJSONOutputCarriesTheSchemaVersion() throws {
        let version = try runCommand(workerBinary, ["version", "--json"])
        #expect(try JSON.parse(Array(version.stdout.utf8))["schemaVersion"] == 1)
        let check = try runCommand(workerBinary, ["config", "check", "--json", "--config", "/nonexistent/config.json"])
        #expect(check.status == 2)
        #expect(try JSON.parse(Array(check.stdout.utf8))["schemaVersion"] == 1)
    }

    @Test func configCheckWarnsAboutThePlaceholderButCallsTheFileValid() throws {
        let example = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../Config/edgecoder-worker.json")
            .standardized.path
        let text = try runCommand(workerBinary, ["config", "check", "--config", example])
        #expect(text.status == 0)
        #expect(text.stderr.contains("warning: coordinator.url is the example placeholder"), "\(text.stderr)")
        #expect(text.stderr.contains("edgecoder-worker enroll --coordinator URL"))
        let json = try JSON.parse(Array(try runCommand(workerBinary, ["config", "check", "--json", "--config", example]).stdout.utf8))
        #expect(json["valid"] == true)
        #expect(json["warnings"]?.arrayValue?.first?["path"] == "coordinator.url")
    }

    @Test func statusExits0InModeOffAnd3WhenModeOnCannotProceed() throws {
        let daemon = try DaemonHarness(config: #"{"coordinator": {"url": "http://127.0.0.1:9"}, "backend": {"url": "http://127.0.0.1:9"}}"#)
        try daemon.start()
        let off = try daemon.cli(["status", "--json"])
        #expect(off.status == 0, "\(off.stderr)")
        #expect(try JSON.parse(Array(off.stdout.utf8))["schemaVersion"] == 1)
        #expect(try daemon.cli(["mode", "on"]).status == 0)
        let held = try daemon.cli(["status"])
        #expect(held.status == 3)
        #expect(held.stderr.hasPrefix("edgecoder-worker: "), "the reason on stderr: \(held.stderr)")
        #expect(held.stdout.contains("mode:     on"))
        _ = try daemon.stop()
    }
}

/// `mode on` and the example placeholder (docs/operating/coordinator.md, Quick start).
@Suite struct PlaceholderCoordinator {
    @Test func modeOnIsRefusedWithTheHintToEnroll() throws {
        let daemon = try DaemonHarness(config: #"{"coordinator": {"url": "https://coordinator.example"}}"#)
        try daemon.start()
        let refused = try daemon.cli(["mode", "on"])
        #expect(refused.status == 3)
        #expect(refused.stderr.contains("coordinator.url is the example placeholder https://coordinator.example"), "\(refused.stderr)")
        #expect(refused.stderr.contains("edgecoder-worker enroll --coordinator URL"))
        let json = try daemon.cli(["mode", "on", "--json"])
        #expect(json.status == 3)
        #expect(try JSON.parse(Array(json.stdout.utf8))["error"]?["code"] == "refused")
        #expect(try daemon.cli(["mode"]).stdout.hasPrefix("off"))
        #expect(try daemon.cli(["mode", "bluetooth"]).status == 0, "only mode on needs a coordinator")
        _ = try daemon.stop()
    }
}

/// `enroll` end to end: the real binary, the dev coordinator, a real daemon.
@Suite(.serialized) struct EnrollEndToEnd {
    /// The dev coordinator on a free loopback port, and its URL.
    final class DevCoordinator {
        let process = Process()
        let url: String
        init(_ arguments: [String]) throws {
            let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
                .appendingPathComponent("../../IntegrationTests/coordinator/dev_coordinator.py").standardized.path
            process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            process.arguments = [script, "--port", "0"] + arguments
            let out = Pipe()
            process.standardOutput = out
            process.standardError = FileHandle.nullDevice
            try process.run()
            var line: [UInt8] = []
            var byte: UInt8 = 0
            while read(out.fileHandleForReading.fileDescriptor, &byte, 1) == 1, byte != 0x0A { line.append(byte) }
            let text = String(decoding: line, as: UTF8.self)
            guard let start = text.range(of: "http://") else { throw HarnessError("dev coordinator said: \(text)") }
            url = String(text[start.lowerBound...])
        }
        deinit {
            // SIGKILL: a child of Foundation's Process inherits the test runner's blocked
            // signal mask, so SIGTERM left these coordinators running after `make test`.
            kill(process.processIdentifier, SIGKILL)
            waitForExit(process, seconds: 5)
        }
    }

    static let exampleLike = """
        {
          "coordinator": {
            "url": "https://coordinator.example",
            "heartbeatIntervalMs": 1000,
            "pullIntervalMs": 500
          },
          "log": { "level": "info" }
        }

        """

    @Test func enrollsWithATokenFromStdinAndRegisters() throws {
        let token = "tok-\(UUID().uuidString)"
        let coordinator = try DevCoordinator(["--registration-token", token])
        let daemon = try DaemonHarness(config: Self.exampleLike)
        let credentials = daemon.root + "/credentials"
        try FileManager.default.createDirectory(atPath: credentials, withIntermediateDirectories: true)
        // A quiet fake host on mains: this machine's own load (cpu-busy) must not be the hold
        // that `status` names below.
        let laptop = try FakeLaptop(in: daemon.root, onMains: true, batteryPct: 100)
        try daemon.start(extraEnvironment: ["CREDENTIALS_DIRECTORY": credentials], extraArguments: ["--sysfs-root", laptop.root])
        let credential = credentials + "/registration-token"
        let script =
            "printf '%s\\n' \"$TOKEN\" | \"$BIN\" enroll --coordinator \"$URL\" --token-stdin --on --timeout 30 --config \"$CONFIG\" --credential \"$CRED\" --runtime-dir \"$RUN\""
        let result = try runCommand(
            "/bin/sh", ["-c", script],
            environment: [
                "TOKEN": token, "BIN": workerBinary, "URL": coordinator.url, "CONFIG": daemon.configPath, "CRED": credential,
                "RUN": daemon.runtimeDirectory,
            ], timeout: 60)
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)\n\(daemon.stderr)")
        #expect(result.stdout.contains("registered with \(coordinator.url)"), "\(result.stdout)")

        // The token only in the credential file, 0600; never in the output or the daemon's log.
        #expect(try String(contentsOfFile: credential, encoding: .utf8) == token + "\n")
        var info = stat()
        #expect(stat(credential, &info) == 0 && info.st_mode & 0o777 == 0o600)
        #expect(!result.stdout.contains(token) && !result.stderr.contains(token) && !daemon.stderr.contains(token))
        // Every other key as it was, in its place.
        let config = try String(contentsOfFile: daemon.configPath, encoding: .utf8)
        #expect(config == Self.exampleLike.replacing("https://coordinator.example", with: coordinator.url))

        let status = try daemon.cli(["status", "--json"])
        let json = try JSON.parse(Array(status.stdout.utf8))
        #expect(json["coordinator"]?["registered"] == true)
        #expect(json["mode"]?["mode"] == "on")
        // No model server answers here: the mode's work cannot proceed.
        #expect(status.status == 3, "\(status.stderr)")
        #expect(status.stderr.contains("model"), "\(status.stderr)")
        _ = try daemon.stop()
        #expect(try daemon.cli(["status"]).status == 69)
    }

    @Test func aWrongTokenEndsWithTheCoordinatorsReason() throws {
        let coordinator = try DevCoordinator(["--registration-token", "right"])
        let daemon = try DaemonHarness(config: Self.exampleLike)
        let credentials = daemon.root + "/credentials"
        try FileManager.default.createDirectory(atPath: credentials, withIntermediateDirectories: true)
        try daemon.start(extraEnvironment: ["CREDENTIALS_DIRECTORY": credentials])
        try "wrong\n".write(toFile: daemon.root + "/token", atomically: true, encoding: .utf8)
        let result = try daemon.cli(
            [
                "enroll", "--coordinator", coordinator.url, "--token-file", daemon.root + "/token", "--on", "--timeout", "20",
                "--config", daemon.configPath, "--credential", credentials + "/registration-token",
            ], timeout: 40)
        #expect(result.status != 0)
        #expect(result.stderr.contains("registration_token_invalid"), "\(result.stdout)\n\(result.stderr)")
        _ = try daemon.stop()
    }

    @Test func refusesCleartextToARemoteHostAndAnUnreachableCoordinatorWithoutChangingAnything() throws {
        let daemon = try DaemonHarness(config: Self.exampleLike)
        let cleartext = try runCommand(
            workerBinary, ["enroll", "--coordinator", "http://192.0.2.1", "--config", daemon.configPath, "--credential", daemon.root + "/c"])
        #expect(cleartext.status == 64)
        #expect(cleartext.stderr.contains("unencrypted"), "\(cleartext.stderr)")
        let unreachable = try runCommand(
            workerBinary, ["enroll", "--coordinator", "http://127.0.0.1:9", "--config", daemon.configPath, "--credential", daemon.root + "/c"])
        #expect(unreachable.status == 1)
        #expect(unreachable.stderr.contains("not reachable"), "\(unreachable.stderr)")
        #expect(try String(contentsOfFile: daemon.configPath, encoding: .utf8) == Self.exampleLike)
        #expect(!FileManager.default.fileExists(atPath: daemon.root + "/c"))
        let argv = try runCommand(workerBinary, ["enroll", "--coordinator", "http://127.0.0.1:9", "--token", "x"])
        #expect(argv.status == 64, "no token on the command line")
    }
}

/// `tasks show ID` against the real daemon: the history and the whole-text files a previous
/// run left in the state directory are what it prints after a restart; an unknown id exits 4.
@Suite struct TaskShownWhole {
    @Test func aTaskFromThePreviousRunIsPrintedWholeAndAnUnknownIdExits4() throws {
        let daemon = try DaemonHarness()
        try FileManager.default.createDirectory(atPath: daemon.stateDirectory, withIntermediateDirectories: true)
        let prompt = "Write a function.\n" + String(repeating: "word ", count: 400) + "\u{1b}[2J end"
        let answer = "func f() {}\n" + String(repeating: "é", count: TaskText.limitBytes)
        var record = TaskRecord(id: "sub-7", source: .coordinator, origin: "task-3", prompt: prompt, startedAtMs: 1_700_000_000_000)
        record.finish(ok: true, output: answer, error: nil, atMs: 1_700_000_002_500)
        let text = try #require(record.text)
        var history = TaskHistory()
        history.upsert(record)
        try history.json.serialized.write(toFile: daemon.stateDirectory + "/tasks.json", atomically: true, encoding: .utf8)
        try text.json.serialized.write(
            toFile: daemon.stateDirectory + "/" + TaskText.fileName(source: .coordinator, id: "sub-7"),
            atomically: true, encoding: .utf8)
        // A text file whose task the history no longer has is removed at start.
        let orphan = daemon.stateDirectory + "/" + TaskText.fileName(source: .bluetooth, id: "gone")
        try text.json.serialized.write(toFile: orphan, atomically: true, encoding: .utf8)
        try daemon.start()

        let shown = try daemon.cli(["tasks", "show", "sub-7"])
        #expect(shown.status == 0, "\(shown.stderr)")
        #expect(
            shown.stdout.hasPrefix("task sub-7\nsource:   coordinator (coordinator task task-3)\nstate:    done\n"), "\(shown.stdout.prefix(300))")
        #expect(shown.stdout.contains("--- prompt (\(prompt.utf8.count) bytes) ---\nWrite a function.\nword word"))
        #expect(
            shown.stdout.contains("\\u{1b}[2J end\n") && !shown.stdout.contains("\u{1b}"), "control characters are shown, not sent to the terminal")
        #expect(
            shown.stdout.contains(
                "--- answer (\(answer.utf8.count) bytes; cut: the first \(TaskText.cut(answer).utf8.count) kept) ---\nfunc f() {}\n"))

        let json = try daemon.cli(["tasks", "show", "sub-7", "--json"])
        let task = try #require(try JSON.parse(Array(json.stdout.utf8))["task"])
        #expect(task["prompt"]?.stringValue == prompt && task["promptCut"] == false)
        #expect(task["output"]?.stringValue == TaskText.cut(answer) && task["outputCut"] == true)
        #expect(task["outputBytes"]?.intValue == Int64(answer.utf8.count) && task["wholeText"] == true)

        let unknown = try daemon.cli(["tasks", "show", "sub-8"])
        #expect(unknown.status == 4)
        #expect(unknown.stderr.contains("no task with id 'sub-8'"), "\(unknown.stderr)")
        let unknownJSON = try daemon.cli(["tasks", "show", "sub-8", "--json"])
        #expect(unknownJSON.status == 4)
        #expect(try JSON.parse(Array(unknownJSON.stdout.utf8))["error"]?["code"] == "not-found")
        #expect(try daemon.cli(["tasks", "show"]).status == 64)
        #expect(try daemon.cli(["tasks", "show", "a", "b"]).status == 64)
        #expect(!FileManager.default.fileExists(atPath: orphan))
        _ = try daemon.stop()
    }
}

/// `mode off --for DURATION` against the real daemon: the pause shows in status, outlives a
/// restart, ends by itself at its deadline, and a later mode cancels it.
@Suite struct ModePause {
    @Test func aPauseReturnsToTheModeBeforeAtItsDeadlineAcrossARestart() throws {
        let daemon = try DaemonHarness()
        try daemon.start()
        #expect(try daemon.cli(["mode", "bluetooth"]).status == 0)
        let pause = try daemon.cli(["mode", "off", "--for", "1h"])
        #expect(pause.status == 0, "\(pause.stderr)")
        #expect(pause.stdout.hasPrefix("off\nchanged from bluetooth\n") && pause.stdout.contains("paused: back to bluetooth at "), "\(pause.stdout)")
        let status = try JSON.parse(Array(try daemon.cli(["status", "--json"]).stdout.utf8))
        let resumesAtMs = try #require(status["mode"]?["resumesAtMs"]?.intValue)
        #expect(status["mode"]?["resumesMode"] == "bluetooth" && status["mode"]?["resumesAt"]?.stringValue?.hasSuffix("Z") == true)
        #expect(abs(resumesAtMs - (Int64(Date().timeIntervalSince1970 * 1000) + 3_600_000)) < 10_000)

        _ = try daemon.stop()
        try daemon.start()
        let restarted = try JSON.parse(Array(try daemon.cli(["mode", "--json"]).stdout.utf8))
        #expect(restarted["mode"] == "off" && restarted["resumesAtMs"]?.intValue == resumesAtMs, "the pause outlives a restart")

        // A shorter pause moves the deadline; the daemon returns by itself.
        #expect(try daemon.cli(["mode", "off", "--for", "2s"]).status == 0)
        var mode = ""
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            mode = try daemon.cli(["mode"]).stdout.split(separator: "\n").first.map(String.init) ?? ""
            if mode == "bluetooth" { break }
            usleep(200_000)
        }
        #expect(mode == "bluetooth", "the pause did not end: \(daemon.stderr.suffix(500))")
        let events = try daemon.cli(["events", "--limit", "3"]).stdout
        #expect(events.contains("the pause ended: back to bluetooth"), "\(events)")

        // A later mode cancels a pause.
        #expect(try daemon.cli(["mode", "off", "--for", "1h"]).status == 0)
        #expect(try daemon.cli(["mode", "off"]).status == 0)
        #expect(try JSON.parse(Array(try daemon.cli(["mode", "--json"]).stdout.utf8))["resumesAt"] == nil)
        // Off already: nothing to return to.
        let refused = try daemon.cli(["mode", "off", "--for", "1h"])
        #expect(refused.status == 3 && refused.stderr.contains("already off"), "\(refused.stderr)")
        #expect(try daemon.cli(["mode", "on", "--for", "1h"]).status == 64)
        #expect(try daemon.cli(["mode", "off", "--for", "1x"]).status == 64)
        _ = try daemon.stop()
    }
}

/// `identity reset` against the real daemon and its state directory.
@Suite struct IdentityResetting {
    @Test func resetForgetsTheAgentIdAndTheMeshTokenButWaitsWhileModeOnRuns() throws {
        let daemon = try DaemonHarness(config: #"{"coordinator": {"url": "http://127.0.0.1:9"}, "backend": {"url": "http://127.0.0.1:9"}}"#)
        try daemon.start()
        let agentID = try #require(try JSON.parse(Array(try daemon.cli(["status", "--json"]).stdout.utf8))["agentId"]?.stringValue)
        let deadline = Date().addingTimeInterval(5)
        while daemon.readState("agent-id") == nil && Date() < deadline { usleep(50_000) }
        try "a-mesh-token".write(toFile: daemon.stateDirectory + "/mesh-token", atomically: true, encoding: .utf8)
        #expect(try daemon.cli(["mode", "on"]).status == 0)

        let refused = try daemon.cli(["identity", "reset"])
        #expect(refused.status == 3 && refused.stderr.contains("mode on is running"), "\(refused.stderr)")
        #expect(daemon.readState("agent-id") != nil && daemon.readState("mesh-token") != nil)

        let forced = try daemon.cli(["identity", "reset", "--force", "--json"])
        #expect(forced.status == 0, "\(forced.stderr)")
        let answer = try JSON.parse(Array(forced.stdout.utf8))
        #expect(answer["forgot"] == ["agent-id", "mesh-token"] && answer["restartNeeded"] == true)
        #expect(answer["previousAgentId"]?.stringValue == agentID && answer["stateDirectory"]?.stringValue == daemon.stateDirectory)
        #expect(daemon.readState("agent-id") == nil && daemon.readState("mesh-token") == nil)
        #expect(try daemon.cli(["mode", "off"]).status == 0)
        _ = try daemon.stop()

        // Without a daemon, the state directory named: nothing left to forget.
        let alone = try daemon.cli(["identity", "reset", "--state-dir", daemon.stateDirectory])
        #expect(alone.status == 0 && alone.stdout.hasPrefix("nothing to forget"), "\(alone.stdout)")
        #expect(try daemon.cli(["identity"]).status == 64)
        #expect(try daemon.cli(["identity", "reset", "extra"]).status == 64)
    }
}
