import Foundation
import Testing
import Logging
@testable import WorkerCLI
import WorkerCore

/// `edgecoder-worker proxy`'s options and the remembered worker.
@Suite struct ProxyCommandOptions {
    func parse(_ items: [String]) throws(UsageError) -> ProxyCommand {
        var arguments = Arguments(items)
        return try ProxyCommand(&arguments)
    }

    @Test func allowOriginRepeatsAndEachIsValidated() throws {
        let command = try parse(["--allow-origin", "https://a.example", "--allow-origin=http://localhost:*"])
        #expect(command.allowOrigins == ["https://a.example", "http://localhost:*"])
        #expect(throws: UsageError.self) { try parse(["--allow-origin", "a.example"]) }
        #expect(throws: UsageError.self) { try parse(["--allow-origin", "https://a.example/path"]) }
    }

    @Test func listTakesAScanTimeAndJSONWhichServingDoesNot() throws {
        #expect(try parse(["--list"]).listScanMs == 5_000)
        #expect(try parse(["--list", "--scan-ms", "800", "--json"]).listScanMs == 800)
        #expect(try parse([]).listScanMs == nil, "without --list the proxy serves")
        for bad in [["--scan-ms", "800"], ["--json"], ["--list", "--scan-ms", "10"], ["--list", "--scan-ms", "x"]] {
            #expect(throws: UsageError.self, "\(bad)") { try parse(bad) }
        }
    }

    @Test func theListMarksTheWorkerTheProxyWouldUse() {
        let strong = CentralMachine.Sighting(address: "00:AA:01:00:00:02", name: "EdgeCoder-a", rssi: -40, connected: false)
        let weak = CentralMachine.Sighting(address: "00:AA:01:00:00:01", name: "EdgeCoder-b", rssi: -70, connected: false)
        let workers = [strong, weak]
        #expect(ProxyCommand.wouldUse(workers, device: nil, any: false, remembered: nil) == strong.address, "the strongest, then remembered")
        #expect(ProxyCommand.wouldUse(workers, device: nil, any: false, remembered: "00:aa:01:00:00:01") == weak.address, "the remembered one")
        #expect(ProxyCommand.wouldUse(workers, device: nil, any: true, remembered: weak.address) == strong.address, "--any: the strongest")
        #expect(ProxyCommand.wouldUse(workers, device: weak.address, any: false, remembered: nil) == weak.address, "--device")
        #expect(ProxyCommand.wouldUse(workers, device: "00:AA:01:00:00:09", any: false, remembered: nil) == nil, "the named one is not in range")
        #expect(ProxyCommand.wouldUse([], device: nil, any: false, remembered: nil) == nil)
    }

    @Test func deviceAndAnyExcludeEachOther() {
        do {
            _ = try parse(["--device", "00:AA:01:00:00:00", "--any"])
            Issue.record("accepted --device with --any")
        } catch {
            #expect(error.message.contains("--device and --any"))
        }
    }

    @Test func theStateDirectoryFollowsSystemdThenXDGThenHome() {
        let env = ["STATE_DIRECTORY": "/var/lib/a:/var/lib/b", "XDG_STATE_HOME": "/x", "HOME": "/home/u"]
        #expect(ProxyCommand.stateDirectory(given: "/given", environment: { env[$0] }) == "/given")
        #expect(ProxyCommand.stateDirectory(given: nil, environment: { env[$0] }) == "/var/lib/a")
        #expect(ProxyCommand.stateDirectory(given: nil, environment: { ["XDG_STATE_HOME": "/x", "HOME": "/h"][$0] }) == "/x/edgecoder-worker")
        #expect(ProxyCommand.stateDirectory(given: nil, environment: { ["HOME": "/h"][$0] }) == "/h/.local/state/edgecoder-worker")
        #expect(ProxyCommand.stateDirectory(given: nil, environment: { _ in nil }) == nil)
    }

    @Test func theFirstWorkerIsRememberedForTheNextRunUntilForgotten() throws {
        let dir = NSTemporaryDirectory() + "proxy-state-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let logger = Logger(label: "t", level: .error)
        let first = try parse(["--state-dir", dir]).centralSettings(logger: logger)
        #expect(first.selection == "remembered" && first.pinFirstWorker && first.device == nil)
        first.onPinned?("00:AA:01:00:00:00")
        let second = try parse(["--state-dir", dir]).centralSettings(logger: logger)
        #expect(second.device == "00:AA:01:00:00:00" && !second.pinFirstWorker && second.selection == "remembered")
        let forgotten = try parse(["--state-dir", dir, "--forget"]).centralSettings(logger: logger)
        #expect(forgotten.device == nil && forgotten.pinFirstWorker)
        let any = try parse(["--state-dir", dir, "--any"]).centralSettings(logger: logger)
        #expect(any.selection == "any" && !any.pinFirstWorker && any.device == nil)
        let device = try parse(["--device", "00:aa:01:00:00:09"]).centralSettings(logger: logger)
        #expect(device.selection == "device" && device.device == "00:AA:01:00:00:09")
    }
}
