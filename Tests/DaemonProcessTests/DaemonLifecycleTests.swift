import Foundation
#if canImport(Glibc)
import Glibc
#endif
import TestSupport
import Testing
import WorkerCore

/// The real binary, real signals, real sockets (issue 2's integration tests).
@Suite(.serialized) struct DaemonLifecycle {
    @Test func readyIsSentOnlyOnceTheControlSocketAccepts() throws {
        let daemon = try DaemonHarness()
        let seen = try daemon.start()
        // At the moment READY=1 arrives the socket must already take connections.
        let connection = try RawControlConnection(path: daemon.controlSocket)
        try connection.send("{\"cmd\":\"ping\"}\n")
        #expect(try connection.receiveJSON()?["ok"] == true)
        #expect(seen.last?.contains("STATUS=mode off, idle") == true, "\(seen)")
        #expect(seen.last?.contains("MAINPID=\(daemon.process!.processIdentifier)") == true)
        let stop = try daemon.stop()
        #expect(stop.status == 0)
    }

    @Test func sigtermStopsCleanlyAndFlushesTheEventLog() throws {
        let daemon = try DaemonHarness()
        try daemon.start()
        let (status, seconds) = try daemon.stop(signal: SIGTERM, timeout: 5)
        #expect(status == 0)
        #expect(seconds < 5)
        #expect(daemon.notify?.waitFor("STOPPING=1", timeout: 1) != nil)
        let events = try #require(daemon.readState("events.json"))
        #expect(events.contains("\"kind\":\"daemon-stopped\""))
        #expect(events.contains("stopped by SIGTERM"))
        #expect(!FileManager.default.fileExists(atPath: daemon.controlSocket), "the socket file should be removed")
    }

    @Test func aDaemonInOffNeverLoadsLibcurl() throws {
        // libcurl and its TLS stack cost ~6 MiB resident; they load with the first request.
        let daemon = try DaemonHarness()
        try daemon.start()
        #expect(try daemon.cli(["status"]).status == 0)
        // procfs files report size 0: read to the end instead of by size.
        let handle = try #require(FileHandle(forReadingAtPath: "/proc/\(daemon.process!.processIdentifier)/maps"))
        let maps = String(decoding: try handle.readToEnd() ?? Data(), as: UTF8.self)
        #expect(!maps.contains("libcurl"), "libcurl is mapped in mode off")
        #expect(maps.contains("libsystemd"), "the check reads the right process")
        _ = try daemon.stop()
    }

    @Test func aDaemonInOnTalkingPlainHTTPNeverLoadsLibcurlButAProxyInItsEnvironmentDoes() throws {
        // Plain http:// goes through the worker's own client; libcurl (and TLS) only for
        // https:// or a proxy named in the environment, which libcurl alone speaks.
        let coordinator = try EnrollEndToEnd.DevCoordinator(["--no-mesh-token"])
        let config = """
            {"coordinator": {"url": "\(coordinator.url)", "heartbeatIntervalMs": 1000, "pullIntervalMs": 500},
             "backend": {"url": "http://127.0.0.1:9"}}
            """
        for proxy in [nil, "http://127.0.0.1:9"] {
            let daemon = try DaemonHarness(config: config)
            var environment = ["http_proxy": "", "all_proxy": "", "ALL_PROXY": ""]
            if let proxy { environment["http_proxy"] = proxy }
            try daemon.start(extraEnvironment: environment)
            #expect(try daemon.cli(["mode", "on"]).status == 0)
            let pid = daemon.process!.processIdentifier
            func maps() throws -> String {
                let handle = try #require(FileHandle(forReadingAtPath: "/proc/\(pid)/maps"))
                return String(decoding: try handle.readToEnd() ?? Data(), as: UTF8.self)
            }
            if proxy == nil {
                // Registered, so requests went both ways; then a few heartbeats and pulls.
                var registered = false
                for _ in 0..<100 where !registered {
                    usleep(100_000)
                    registered = (try? JSON.parse(Array(daemon.cli(["status", "--json"]).stdout.utf8)))?["coordinator"]?["registered"] == true
                }
                #expect(registered, "\(daemon.stderr)")
                usleep(1_500_000)
                #expect(!(try maps()).contains("libcurl"), "libcurl is mapped in mode on over plain http")
            } else {
                // Through the (absent) proxy: libcurl is loaded for the first request.
                var loaded = false
                for _ in 0..<100 where !loaded {
                    usleep(100_000)
                    loaded = try maps().contains("libcurl")
                }
                #expect(loaded, "http_proxy set, yet libcurl was never loaded")
            }
            _ = try daemon.stop()
        }
    }

    @Test func sigintStopsCleanlyToo() throws {
        let daemon = try DaemonHarness()
        try daemon.start()
        #expect(try daemon.stop(signal: SIGINT).status == 0)
    }

    @Test func modeIsRestoredAfterARestartAndTheChangeIsAnEvent() throws {
        let daemon = try DaemonHarness()
        try daemon.start()
        let fresh = try daemon.cli(["mode"])
        #expect(fresh.status == 0)
        #expect(fresh.stdout.split(separator: "\n").first == "off", "a fresh install is off: \(fresh.stdout)")

        let set = try daemon.cli(["mode", "on"])
        #expect(set.status == 0, "\(set.stderr)")
        #expect(set.stdout.split(separator: "\n").first == "on")
        #expect(daemon.notify?.waitFor("STATUS=mode on", timeout: 2) != nil, "STATUS= should follow the mode")
        #expect(try daemon.stop().status == 0)

        try daemon.start()
        let restored = try daemon.cli(["mode"])
        #expect(restored.stdout.split(separator: "\n").first == "on", "\(restored.stdout)")

        let events = try daemon.cli(["events", "--json"])
        #expect(events.status == 0)
        let parsed = try JSON.parse(events.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        let changes = (parsed["events"]?.arrayValue ?? []).filter { $0["kind"] == "mode-change" }
        #expect(changes.count == 1)
        #expect(changes.first?["from"] == "off")
        #expect(changes.first?["to"] == "on")
        #expect(changes.first?["reason"]?.stringValue?.contains("root") == true)

        let human = try daemon.cli(["events"])
        #expect(human.stdout.contains("mode-change  off -> on  set by root"))
        _ = try daemon.stop()
    }

    @Test func eventsFollowStreamsNewEvents() throws {
        let daemon = try DaemonHarness()
        try daemon.start()
        let follower = Process()
        follower.executableURL = URL(fileURLWithPath: workerBinary)
        follower.arguments = ["events", "--follow", "--json", "--runtime-dir", daemon.runtimeDirectory]
        let out = Pipe()
        follower.standardOutput = out
        try follower.run()
        // SIGKILL: a child may inherit the runner's blocked SIGTERM (hardening #26 row 15).
        defer { if follower.isRunning { kill(follower.processIdentifier, SIGKILL) } }
        usleep(300_000)
        #expect(try daemon.cli(["mode", "bluetooth"]).status == 0)
        // Lines: the backlog (daemon-started), then the change.
        var text = ""
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline && !text.contains("mode-change") {
            let data = out.fileHandleForReading.availableData
            if data.isEmpty { break }
            text += String(decoding: data, as: UTF8.self)
        }
        let lines = text.split(separator: "\n").map { try? JSON.parse(String($0)) }
        #expect(lines.contains { $0?["kind"] == "daemon-started" })
        #expect(lines.contains { $0?["kind"] == "mode-change" && $0?["to"] == "bluetooth" })
        // The follower ends when the daemon stops.
        _ = try daemon.stop()
        let deadline2 = Date().addingTimeInterval(5)
        while follower.isRunning && Date() < deadline2 { usleep(10_000) }
        #expect(!follower.isRunning)
    }

    @Test func garbageOnTheControlSocketGetsAnErrorAndTheDaemonStaysUp() throws {
        let daemon = try DaemonHarness()
        try daemon.start()
        let connection = try RawControlConnection(path: daemon.controlSocket)
        try connection.send("garbage\n")
        let answer = try #require(try connection.receiveJSON())
        #expect(answer["ok"] == false)
        #expect(answer["error"]?["code"] == "bad-request")
        try connection.send([0xFF, 0xFE, 0x00, 0x7B, 0x0A])
        #expect(try connection.receiveJSON()?["error"]?["code"] == "bad-request")
        try connection.send("{\"cmd\":\"shutdown\"}\n")
        #expect(try connection.receiveJSON()?["error"]?["code"] == "unknown-command")
        // The same connection still works, and so do new ones.
        try connection.send("{\"cmd\":\"status\"}\n")
        #expect(try connection.receiveJSON()?["ok"] == true)

        let flood = try RawControlConnection(path: daemon.controlSocket)
        try? flood.send([UInt8](repeating: 0x41, count: 200_000))
        #expect(try flood.receiveJSON()?["error"]?["code"] == "too-long")

        #expect(try daemon.cli(["status"]).status == 0)
        #expect(daemon.process?.isRunning == true)
        #expect(try daemon.stop().status == 0)
    }

    @Test func manyClientsThatHangUpAtOnceDoNotHurtTheDaemon() throws {
        let daemon = try DaemonHarness()
        try daemon.start()
        // Root's places (ControlQuota: its reserve and the shared ones) can fill for a moment
        // while the daemon has not yet read the hang-ups of the connections before: a
        // connection refused then (EPIPE on send) is the quota at work, not harm.
        for _ in 0..<100 {
            let c = try RawControlConnection(path: daemon.controlSocket)
            try? c.send("{\"cmd\":\"stat")
        }
        var status = try daemon.cli(["status"])
        for _ in 0..<20 where status.status != 0 {
            usleep(100_000)
            status = try daemon.cli(["status"])
        }
        #expect(status.status == 0, "\(status.stderr)")
        #expect(daemon.process?.isRunning == true)
        _ = try daemon.stop()
    }

    @Test func aCorruptModeFileIsMovedAsideReportedAndTheDaemonStartsOff() throws {
        let daemon = try DaemonHarness()
        try FileManager.default.createDirectory(atPath: daemon.stateDirectory, withIntermediateDirectories: true)
        try "{\"mode\": \"on\", \"sinceMs\": ".write(toFile: daemon.stateDirectory + "/mode.json", atomically: true, encoding: .utf8)
        try daemon.start()
        let status = try daemon.cli(["status", "--json"])
        let json = try JSON.parse(status.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(json["mode"]?["mode"] == "off")
        let recovered = try #require(json["recoveredStateFiles"]?.arrayValue?.first)
        #expect(recovered["file"] == "mode.json")
        let movedTo = try #require(recovered["movedTo"]?.stringValue)
        #expect(daemon.readState(movedTo) == "{\"mode\": \"on\", \"sinceMs\": ", "the corrupt content is kept")
        let events = try daemon.cli(["events"])
        #expect(events.stdout.contains("state-recovered"))
        #expect(try daemon.cli(["status"]).stdout.contains("recovered: mode.json"))
        _ = try daemon.stop()
    }

    @Test func aSecondDaemonOnTheSameRuntimeDirectoryRefusesToStart() throws {
        let daemon = try DaemonHarness()
        try daemon.start()
        let second = try runCommand(
            workerBinary,
            ["run", "--config", daemon.configPath, "--state-dir", daemon.stateDirectory + "2", "--runtime-dir", daemon.runtimeDirectory])
        #expect(second.status == 1)
        #expect(second.stderr.contains("another edgecoder-worker daemon is listening"))
        #expect(try daemon.cli(["status"]).status == 0, "the first daemon keeps its socket")
        _ = try daemon.stop()
    }

    @Test func watchdogIsPingedAtHalfTheInterval() throws {
        let daemon = try DaemonHarness()
        try daemon.start(extraEnvironment: ["WATCHDOG_USEC": "200000"])
        let started = Date()
        var pings = 0
        while Date().timeIntervalSince(started) < 1.05 {
            if let message = daemon.notify?.receive(timeout: 0.2), message.contains("WATCHDOG=1") { pings += 1 }
        }
        // 100 ms period over about a second: loosely bounded, it is not a benchmark.
        #expect(pings >= 5)
        #expect(pings <= 15)
        _ = try daemon.stop()
    }
}

@Suite(.serialized) struct ControlPermissions {
    /// Runs as root in CI; an unprivileged user is made with setpriv.
    static let isRoot = getuid() == 0

    @Test(.enabled(if: ControlPermissions.isRoot, "needs root to switch users with setpriv"))
    func aReadGroupMemberCanReadButNeverChange() throws {
        let daemon = try DaemonHarness(config: #"{"control": {"readGroup": "users"}}"#)
        try daemon.start()
        let member = (uid: 65534, gid: 65534, groups: [100])
        let status = try daemon.cli(["status"], asUser: member)
        #expect(status.status == 0, "\(status.stderr)")
        #expect(status.stdout.contains("mode:     off"))
        let change = try daemon.cli(["mode", "on"], asUser: member)
        #expect(change.status == 77)
        #expect(change.stderr.contains("may read but not change"))
        #expect(try daemon.cli(["mode"]).stdout.hasPrefix("off"), "the mode must be unchanged")
        _ = try daemon.stop()
    }

    @Test(.enabled(if: ControlPermissions.isRoot, "needs root to switch users with setpriv"))
    func aUserOutsideTheGroupCannotReadAnything() throws {
        let daemon = try DaemonHarness(config: #"{"control": {"readGroup": "users"}}"#)
        try daemon.start()
        let stranger = (uid: 65534, gid: 65534, groups: [Int]())
        for args in [["status"], ["mode"], ["events"], ["mode", "on"]] {
            let result = try daemon.cli(args, asUser: stranger)
            #expect(result.status == 77, "\(args): \(result.stderr)")
            #expect(result.stderr.contains("permission denied"))
        }
        #expect(try daemon.cli(["mode"]).stdout.hasPrefix("off"))
        _ = try daemon.stop()
    }
}

@Suite struct CommandLine_ {
    @Test func invalidConfigIsRefusedByRunAndConfigCheckWithExit2() throws {
        let dir = "/tmp/ecw-cfg-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/bad.json"
        try #"{"coordinator": {"url": "ftp://x", "pullIntervalMs": "5"}, "bogus": 1}"#.write(toFile: path, atomically: true, encoding: .utf8)
        let check = try runCommand(workerBinary, ["config", "check", "--config", path])
        #expect(check.status == 2)
        #expect(check.stderr.contains("coordinator.url: must be an http:// or https:// URL"))
        #expect(check.stderr.contains("coordinator.pullIntervalMs: must be an integer"))
        #expect(check.stderr.contains("bogus: unknown key"))
        let json = try runCommand(workerBinary, ["config", "check", "--config", path, "--json"])
        #expect(json.status == 2)
        #expect(try JSON.parse(json.stdout.trimmingCharacters(in: .whitespacesAndNewlines))["problems"]?.arrayValue?.count == 3)
        let run = try runCommand(workerBinary, ["run", "--config", path, "--state-dir", dir + "/s", "--runtime-dir", dir + "/r"])
        #expect(run.status == 2)
        #expect(run.stderr.contains("<3>edgecoder-worker: invalid config: \(path): coordinator.url"))
        #expect(!FileManager.default.fileExists(atPath: dir + "/s"), "nothing is started on a bad config")

        try "{}".write(toFile: path, atomically: true, encoding: .utf8)
        #expect(try runCommand(workerBinary, ["config", "check", "--config", path]).status == 0)
        #expect(try runCommand(workerBinary, ["config", "check", "--config", dir + "/absent.json"]).status == 2)
    }

    @Test func usageErrorsExit64AndHelpExits0() throws {
        #expect(try runCommand(workerBinary, ["frobnicate"]).status == 64)
        #expect(try runCommand(workerBinary, ["mode", "turbo"]).status == 64)
        #expect(try runCommand(workerBinary, ["status", "--bogus"]).status == 64)
        #expect(try runCommand(workerBinary, []).status == 64)
        for command in ["run", "mode", "status", "events", "config", "version"] {
            let help = try runCommand(workerBinary, [command, "--help"])
            #expect(help.status == 0)
            #expect(help.stdout.contains("Usage: edgecoder-worker \(command)"))
        }
        #expect(try runCommand(workerBinary, ["version"]).stdout.hasPrefix("edgecoder-worker "))
    }

    @Test func clientsSayWhatToDoWhenNoDaemonRuns() throws {
        let result = try runCommand(workerBinary, ["status", "--runtime-dir", "/tmp/ecw-nothing-here"])
        #expect(result.status == 69)
        #expect(result.stderr.contains("the daemon is not running"))
        let env = try runCommand(workerBinary, ["mode"], environment: ["EDGECODER_WORKER_RUNTIME_DIR": "/tmp/ecw-nothing-either"])
        #expect(env.stderr.contains("/tmp/ecw-nothing-either/control.sock"))
    }
}
