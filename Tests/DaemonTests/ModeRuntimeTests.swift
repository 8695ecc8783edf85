import Foundation
import Testing
import Logging
@testable import Daemon
import StateStore
import WorkerCore

/// Each working mode has one runtime in `ModeRuntimes`, and the daemon flips that runtime's
/// signal, and only that one, as the mode changes.
@Suite struct ModeRuntimeWiring {
    let dir = NSTemporaryDirectory() + "ecw-runtimes-" + UUID().uuidString

    func daemon(coordinatorURL: String?) throws -> WorkerDaemon {
        var config = WorkerConfig()
        config.coordinator.url = coordinatorURL
        let paths = DaemonPaths(configPath: "/dev/null", stateDirectory: dir, runtimeDirectory: dir + "/run", sysfsRoot: "/")
        return WorkerDaemon(config: config, paths: paths, directory: try StateDirectory(path: dir),
                            logger: Logger(label: "test", handler: MemoryLogHandler()), clock: { 1_000 })
    }

    func active(_ daemon: WorkerDaemon) -> [Mode] { Mode.allCases.filter { daemon.runtimeSignal(for: $0).value } }

    @Test func everyWorkingModeHasExactlyOneRuntime() {
        for mode in Mode.allCases where mode != .off {
            #expect(ModeRuntimes.all.filter { $0.mode == mode }.count == 1, "\(mode)")
        }
        #expect(ModeRuntimes.runtime(for: .off) == nil)
    }

    @Test func onlyTheSelectedModesRuntimeIsSignalledToRun() async throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let daemon = try daemon(coordinatorURL: "http://127.0.0.1:9")
        #expect(active(daemon) == [])
        await daemon.request(.operatorSet(.on, by: "test"))
        #expect(active(daemon) == [.on])
        #expect(await daemon.statusJSON()["coordinator"]?["active"] == true)
        await daemon.request(.operatorSet(.bluetooth, by: "test"))
        #expect(active(daemon) == [.bluetooth])
        #expect(await daemon.statusJSON()["coordinator"]?["active"] == false)
        #expect(await daemon.statusJSON()["bluetooth"]?["active"] == true)
        await daemon.request(.operatorSet(.off, by: "test"))
        #expect(active(daemon) == [])
    }

    @Test func aRuntimeThatLacksItsConfigurationStaysStoppedAndSaysWhy() async throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let daemon = try daemon(coordinatorURL: nil)
        await daemon.request(.operatorSet(.on, by: "test"))
        #expect(active(daemon) == [])
        let runtime = await daemon.modeJSON()["runtime"]
        #expect(runtime?["state"] == "blocked")
        #expect(runtime?["reason"] == "coordinator.url is not configured: set it in the config file and restart")
        #expect(await daemon.statusLine().hasPrefix("mode on, blocked: coordinator.url is not configured"))
    }
}
