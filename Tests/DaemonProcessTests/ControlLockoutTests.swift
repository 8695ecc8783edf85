import Foundation
#if canImport(Glibc)
import Glibc
#endif
import TestSupport
import Testing
import WorkerCore

/// Any local user may connect to the control socket (it is 0666 so a refused reader learns
/// why); none may lock the operator out (issue 12 §3). Real binary, real users (setpriv).
@Suite(.serialized) struct ControlLockout {
    /// Opens `count` connections as `uid` (in no group) and holds them; prints one JSON line
    /// once it knows how each fared: still open, told "busy", or closed.
    final class Holder {
        let process = Process()
        let out = Pipe()

        init(socket: String, uid: Int, count: Int, holdSeconds: Int = 30) throws {
            let script = """
                import json, socket, sys, time
                path, count, hold = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
                conns = []
                for _ in range(count):
                    s = socket.socket(socket.AF_UNIX)
                    try:
                        s.connect(path)
                    except OSError:
                        continue
                    conns.append(s)
                time.sleep(0.5)
                stats = {"connected": len(conns), "open": 0, "busy": 0, "closed": 0}
                for s in conns:
                    s.setblocking(False)
                    try:
                        data = s.recv(4096)
                        stats["busy" if b'"busy"' in data else "closed"] += 1
                    except BlockingIOError:
                        stats["open"] += 1
                print(json.dumps(stats), flush=True)
                time.sleep(hold)
                """
            process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            process.arguments = [
                "--reuid", String(uid), "--regid", String(uid), "--clear-groups",
                "/usr/bin/env", "python3", "-c", script, socket, String(count), String(holdSeconds),
            ]
            process.standardOutput = out
            try process.run()
        }

        /// Waits for the holder's line.
        func stats() throws -> JSONValue {
            var line = Data()
            while !line.contains(0x0A) {
                let data = out.fileHandleForReading.availableData
                if data.isEmpty { break }
                line.append(data)
            }
            return try JSON.parse(String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
        }

        deinit {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            waitForExit(process, seconds: 5)
        }
    }

    /// Runs a client command as root and says how long it took.
    func timed(_ daemon: DaemonHarness, _ arguments: [String]) throws -> (CommandResult, Double) {
        let started = Date()
        let result = try daemon.cli(arguments)
        return (result, Date().timeIntervalSince(started))
    }

    @Test(.enabled(if: getuid() == 0, "needs root to switch users with setpriv"))
    func aUserHoldingHundredsOfConnectionsDoesNotLockRootOut() throws {
        let daemon = try DaemonHarness()
        try daemon.start()
        let holder = try Holder(socket: daemon.controlSocket, uid: 65534, count: 300)
        let stats = try holder.stats()
        #expect(stats["connected"] == 300)
        #expect(stats["open"] == 8, "one user holds at most its share: \(stats)")
        #expect(stats["busy"] == 292, "the rest are told why and closed: \(stats)")
        for arguments in [["mode", "bluetooth"], ["status"], ["mode", "off"], ["mode"]] {
            let (result, seconds) = try timed(daemon, arguments)
            // status exits 3 while mode bluetooth cannot advertise (no adapter here): it answered.
            #expect(result.status == 0 || (arguments == ["status"] && result.status == 3), "\(arguments): \(result.stderr)")
            #expect(seconds < 3, "\(arguments) took \(seconds) s")
        }
        #expect(try daemon.cli(["mode"]).stdout.hasPrefix("off"))
        #expect(daemon.stderr.contains("refusing a control connection from"), "refusals are logged")
        #expect(
            daemon.stderr.components(separatedBy: "refusing a control connection").count - 1 < 50,
            "292 refusals in a row are folded by the log's repeat limit")
        _ = try daemon.stop()
    }

    @Test(.enabled(if: getuid() == 0, "needs root to switch users with setpriv"))
    func usersFillingEverySharedPlaceStillLeaveRootIn() throws {
        let daemon = try DaemonHarness()
        try daemon.start()
        // Nine users of eight places each: more than the 64 places all of them share.
        // Started together, so all of them connect well within one idle time.
        let holders = try (0..<9).map { try Holder(socket: daemon.controlSocket, uid: 40_000 + $0, count: 20) }
        let stats = try holders.map { try $0.stats() }
        let open = stats.compactMap { $0["open"]?.intValue }.reduce(0, +)
        #expect(open == 64, "\(stats)")
        let (status, seconds) = try timed(daemon, ["status"])
        #expect(status.status == 0, "\(status.stderr)")
        #expect(seconds < 3)
        let (change, _) = try timed(daemon, ["mode", "bluetooth"])
        #expect(change.status == 0, "\(change.stderr)")
        _ = try daemon.stop()
    }

    @Test(.enabled(if: getuid() == 0, "needs root to switch users with setpriv"))
    func aRefusedRequestEndsItsConnection() throws {
        let daemon = try DaemonHarness()
        try daemon.start()
        let script = """
            import socket, sys
            s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.settimeout(5)
            s.sendall(b'{"cmd":"status"}\\n')
            data = b''
            while True:
                chunk = s.recv(4096)
                if not chunk: break
                data += chunk
            print(data.decode().strip())
            print("closed")
            """
        let result = try runCommand(
            "/usr/bin/setpriv",
            [
                "--reuid", "65534", "--regid", "65534", "--clear-groups",
                "/usr/bin/env", "python3", "-c", script, daemon.controlSocket,
            ], timeout: 10)
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 2, "\(result.stdout) \(result.stderr)")
        #expect(lines.first?.contains("\"forbidden\"") == true)
        #expect(lines.last == "closed", "the daemon hung up after the refusal")
        _ = try daemon.stop()
    }

    @Test func aSilentConnectionIsClosedAfterTheIdleTimeButEventsFollowIsNot() throws {
        let daemon = try DaemonHarness()
        try daemon.start()
        let silent = try RawControlConnection(path: daemon.controlSocket)
        let trickle = try RawControlConnection(path: daemon.controlSocket)
        let follower = try RawControlConnection(path: daemon.controlSocket)
        try follower.send("{\"cmd\":\"events\",\"follow\":true}\n")
        #expect(try follower.receiveJSON()?["result"]?["following"] == true)
        let started = Date()
        // A request that never ends keeps no place either.
        try trickle.send("{\"cmd\":")
        #expect(try silent.receiveJSON(timeout: 8) == nil)
        let closedAfter = Date().timeIntervalSince(started)
        #expect(closedAfter >= 4 && closedAfter < 8, "closed after \(closedAfter) s; the idle time is 5 s")
        #expect(try trickle.receiveJSON(timeout: 2) == nil)
        var probe: UInt8 = 0
        #expect(recv(silent.fd, &probe, 1, Int32(MSG_DONTWAIT)) == 0, "end of stream, not just silence")
        // The follower, authorised and quiet, still gets new events.
        #expect(try daemon.cli(["mode", "bluetooth"]).status == 0)
        var sawChange = false
        while let line = try follower.receiveJSON(timeout: 3) {
            if line["event"]?["kind"] == "mode-change" { sawChange = true; break }
        }
        #expect(sawChange)
        _ = try daemon.stop()
    }
}
