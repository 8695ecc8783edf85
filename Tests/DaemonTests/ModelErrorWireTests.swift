import Foundation
import TestSupport
import Testing
import Logging
@testable import Daemon
import ModelBackend
import BlueZ
import StateStore
@testable import WorkerCore

/// A model failure reaches a Bluetooth client and the task history as `code: detail`, the
/// same vocabulary the coordinator's results carry (`ModelError.wireText`).
@Suite struct ModelErrorsOnTheBluetoothWire {
    let dir = NSTemporaryDirectory() + "ecw-model-error-" + UUID().uuidString

    @Test func aModelThatIsNotThereIsAnsweredWithTheModelUnavailableCode() async throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let paths = DaemonPaths(configPath: "/dev/null", stateDirectory: dir, runtimeDirectory: dir + "/run", sysfsRoot: "/")
        let daemon = WorkerState(
            config: WorkerConfig(), paths: paths, directory: try StateDirectory(path: dir),
            logger: Logger(label: "test", handler: MemoryLogHandler()), clock: TestClock.realTime { 1_000 })
        // Port 9 (discard) on loopback: nothing listens, so the connection is refused.
        var backendConfig = WorkerConfig.Backend()
        backendConfig.url = "http://127.0.0.1:9"
        let bridge = PeripheralBridge(daemon: daemon, backend: ModelBackend(config: backendConfig), timeoutMs: 5_000)

        let outcome = await bridge.serve(
            BluetoothRequest(id: "r1", prompt: "hi", maxTokens: 4), client: "AA:BB",
            cancellation: ServeCancellation(), onPartial: { _ in })

        #expect(outcome.ok == false)
        let error = try #require(outcome.error)
        #expect(error.hasPrefix("model_unavailable: "), "\(error)")
        #expect(error.count > "model_unavailable: ".count, "the detail follows the code")
        let record = await daemon.tasksJSON(limit: 1)["tasks"]?.arrayValue?.first
        #expect(record?["state"] == "failed")
        #expect(record?["error"]?.stringValue == error, "the task history keeps what the client was told")
    }
}
