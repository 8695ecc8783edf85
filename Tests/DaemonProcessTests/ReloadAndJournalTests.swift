import Foundation
#if canImport(Glibc)
import Glibc
#endif
import TestSupport
import Testing
import WorkerCore

/// SIGHUP (what `systemctl reload` sends through ExecReload=) re-reads the config with the
/// real binary, a real signal and a stand-in notification socket (service §2).
@Suite(.serialized) struct ConfigReloadBySignal {
    func status(_ daemon: DaemonHarness) throws -> JSONValue {
        let result = try daemon.cli(["status", "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        return try JSON.parse(Array(result.stdout.utf8))
    }

    @Test func aValidFileIsAppliedLiveFramedByReloadingAndReady() throws {
        let daemon = try DaemonHarness(config: #"{"policy": {"minBatteryPct": 20}}"#)
        try daemon.start()
        let pid = daemon.process!.processIdentifier
        #expect(!daemon.stderr.contains("<7>"), "info level at start")
        try #"{"policy": {"minBatteryPct": 25}, "bluetooth": {"maxClients": 3}, "log": {"level": "debug"}}"#.write(
            toFile: daemon.configPath, atomically: true, encoding: .utf8)
        kill(pid, SIGHUP)
        let seen = try #require(daemon.notify?.waitFor("READY=1", timeout: 10), "READY=1 after the reload")
        let reloading = try #require(seen.first { $0.contains("RELOADING=1") }, "\(seen)")
        let usec = reloading.split(separator: "\n").first { $0.hasPrefix("MONOTONIC_USEC=") }.flatMap { UInt64($0.dropFirst(15)) }
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let nowUsec = UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1_000
        #expect(usec.map { $0 <= nowUsec && nowUsec - $0 < 10_000_000 } == true, "MONOTONIC_USEC is CLOCK_MONOTONIC: \(reloading)")

        let json = try status(daemon)
        #expect(json["daemon"]?["pid"]?.intValue == Int64(pid), "the same process: not restarted")
        #expect(json["policy"]?["minBatteryPct"]?["value"]?.intValue == 25, "\(json["policy"] ?? .null)")
        let reload = try #require(json["daemon"]?["configReload"])
        #expect(reload["outcome"] == "applied")
        #expect(reload["applied"] == ["policy.minBatteryPct", "log.level"])
        #expect(reload["needsRestart"] == ["bluetooth.maxClients"])
        #expect(json["bluetooth"]?["maxClients"]?.intValue == 1, "a restart key keeps its running value")
        #expect(json["summary"]?.stringValue?.contains("restart to apply bluetooth.maxClients") == true)
        let text = try daemon.cli(["status"])
        #expect(text.stdout.contains("needs a restart to apply: bluetooth.maxClients"), "\(text.stdout)")
        let events = try daemon.cli(["events", "--json"])
        #expect(events.stdout.contains("\"kind\":\"config-reloaded\""))
        #expect(daemon.stderr.contains("received SIGHUP: reloading"))
        #expect(try daemon.stop().status == 0)
        #expect(daemon.stderr.contains("<7>"), "log.level debug applied live: the stop's debug lines are logged")
    }

    @Test func anInvalidFileIsRefusedTheDaemonRunsOnWithTheOldConfigAndStatusSaysWhy() throws {
        let daemon = try DaemonHarness(config: #"{"policy": {"minBatteryPct": 20}}"#)
        try daemon.start()
        let pid = daemon.process!.processIdentifier
        try #"{"policy": {"minBatteryPct": 400}, "typo": 1}"#.write(toFile: daemon.configPath, atomically: true, encoding: .utf8)
        kill(pid, SIGHUP)
        #expect(daemon.notify?.waitFor("READY=1", timeout: 10) != nil, "READY=1 follows a refused reload too")
        #expect(daemon.process!.isRunning)
        let json = try status(daemon)
        let reload = try #require(json["daemon"]?["configReload"])
        #expect(reload["outcome"] == "refused")
        let problems = (reload["problems"]?.arrayValue ?? []).compactMap(\.stringValue).joined(separator: "\n")
        #expect(problems.contains("policy.minBatteryPct"), "\(problems)")
        #expect(problems.contains("typo: unknown key"), "\(problems)")
        #expect(json["summary"]?.stringValue?.contains("config reload refused") == true)
        #expect(json["policy"]?["minBatteryPct"]?["value"]?.intValue == 20)
        #expect(daemon.stderr.contains("config reload refused, the running config is kept"), "the reason is in the log")
        let text = try daemon.cli(["status"])
        #expect(text.stdout.contains("REFUSED, the running config is kept"), "\(text.stdout)")

        // Fixed, the next reload takes it and the refusal is gone.
        try #"{"policy": {"minBatteryPct": 22}}"#.write(toFile: daemon.configPath, atomically: true, encoding: .utf8)
        kill(pid, SIGHUP)
        #expect(daemon.notify?.waitFor("READY=1", timeout: 10) != nil)
        let after = try status(daemon)
        #expect(after["daemon"]?["configReload"]?["outcome"] == "applied")
        #expect(after["summary"]?.stringValue?.contains("refused") == false)
        #expect(try daemon.stop().status == 0)
    }

    /// `edgecoder-worker reload` (the unit's ExecReload=) returns only once the file is applied
    /// or refused, with the outcome in its exit code: no race with the status read after it.
    @Test func theReloadCommandReturnsTheOutcomeOnceItIsDone() throws {
        let daemon = try DaemonHarness(config: #"{"policy": {"minBatteryPct": 20}}"#)
        try daemon.start()
        try #"{"policy": {"minBatteryPct": 26}, "bluetooth": {"maxClients": 3}}"#.write(toFile: daemon.configPath, atomically: true, encoding: .utf8)
        let applied = try daemon.cli(["reload"])
        #expect(applied.status == 0, "\(applied.stderr)")
        #expect(applied.stdout.contains("reloaded: applied policy.minBatteryPct"), "\(applied.stdout)")
        #expect(applied.stdout.contains("needs a restart to apply: bluetooth.maxClients"), "\(applied.stdout)")
        #expect(daemon.notify?.waitFor("READY=1", timeout: 10) != nil, "framed by RELOADING=1 … READY=1 as a SIGHUP's")
        #expect(try status(daemon)["policy"]?["minBatteryPct"]?["value"]?.intValue == 26, "applied before the command returned")
        #expect(daemon.stderr.contains("asked on the control socket: reloading"))

        try #"{"policy": {"minBatteryPct": 400}}"#.write(toFile: daemon.configPath, atomically: true, encoding: .utf8)
        let refused = try daemon.cli(["reload"])
        #expect(refused.status == 2, "a refused file: exit 2 (\(refused.stdout))")
        #expect(refused.stderr.contains("policy.minBatteryPct"), "the reason on stderr: \(refused.stderr)")
        let asJSON = try daemon.cli(["reload", "--json"])
        #expect(asJSON.status == 2 && asJSON.stdout.contains("\"invalid-config\""), "\(asJSON.stdout)")
        #expect(try status(daemon)["policy"]?["minBatteryPct"]?["value"]?.intValue == 26, "the running config is kept")
        #expect(try daemon.stop().status == 0)
        #expect(try daemon.cli(["reload"]).status == 69, "no daemon")
    }

    @Test func manySighupsInARowNeverStopTheDaemonNorArmTheForcedExit() throws {
        let daemon = try DaemonHarness()
        try daemon.start()
        let pid = daemon.process!.processIdentifier
        for _ in 0..<5 { kill(pid, SIGHUP); usleep(50_000) }
        // Drained as systemd would: a full notification socket blocks the sender.
        var readies = 0
        let deadline = Date().addingTimeInterval(10)
        while readies < 5, Date() < deadline, let message = daemon.notify?.receive(timeout: 1) {
            if message.contains("READY=1") { readies += 1 }
        }
        // Signals of one kind that arrive while one is pending merge (POSIX), so at most five.
        #expect((1...5).contains(readies), "\(readies) reloads")
        // The forced exit would fire secondSignalBoundSeconds (3 s) after a second signal.
        sleep(4)
        #expect(daemon.process!.isRunning)
        #expect(try daemon.cli(["status"]).status == 0)
        let stop = try daemon.stop()
        #expect(stop.status == 0)
        #expect(!daemon.stderr.contains("did not finish in time"))
    }
}

/// The journal sink is chosen when JOURNAL_STREAM names stderr (service §2). No journald
/// runs on this host, so this checks the choice and the fallback; the VM suite under a
/// real systemd checks `journalctl EDGECODER_EVENT=…`, and IntegrationTests/suites/journal.sh
/// reads the records with a stand-in journald socket.
@Suite(.serialized) struct JournalSinkChoice {
    @Test func withJournalStreamNamingStderrRecordsGoThroughSdJournalSendv() throws {
        let daemon = try DaemonHarness()
        FileManager.default.createFile(atPath: daemon.logPath, contents: nil)
        var info = stat()
        #expect(stat(daemon.logPath, &info) == 0)
        try daemon.start(extraEnvironment: ["JOURNAL_STREAM": "\(info.st_dev):\(info.st_ino)"])
        _ = try daemon.stop()
        // sd_journal_sendv drops records silently when no journald listens (ENOENT), as
        // here; either way none of them is a line on stderr.
        #expect(!daemon.stderr.contains("ready:"), "the records went to sd_journal_sendv, not to stderr: \(daemon.stderr)")
    }

    @Test func aJournalStreamThatIsNotStderrKeepsThePrefixedLines() throws {
        let daemon = try DaemonHarness()
        try daemon.start(extraEnvironment: ["JOURNAL_STREAM": "1:1"])
        _ = try daemon.stop()
        #expect(daemon.stderr.contains("<5>edgecoder-worker: ready:"))
        #expect(!daemon.stderr.contains("sd_journal_sendv"))
    }
}
