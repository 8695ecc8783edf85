import Foundation
import Testing
import Logging
@testable import Daemon
import HTTP
import ModelBackend
import StateStore
@testable import WorkerCore

/// The readiness probe in the daemon (SPEC 7): an Ollama model that is pulled but not
/// loaded is loaded by the worker, `loading` until /api/ps lists it, then `ready`; the key
/// goes with every probe and never into status.
@Suite struct ModelProbeServiceRules {
    let dir = NSTemporaryDirectory() + "ecw-model-probe-" + UUID().uuidString

    func daemon(_ config: WorkerConfig) throws -> WorkerDaemon {
        let paths = DaemonPaths(configPath: "/dev/null", stateDirectory: dir, runtimeDirectory: dir + "/run", sysfsRoot: "/")
        return WorkerDaemon(config: config, paths: paths, directory: try StateDirectory(path: dir),
                            logger: Logger(label: "test", handler: MemoryLogHandler()), clock: { 1_000 })
    }

    @Test func aPulledModelIsLoadedWhenAWorkingModeStartsAndReadyOnlyOnceLoaded() async throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var config = WorkerConfig()
        config.backend.url = "http://ollama.test:11434"
        config.backend.model = "tiny"
        config.backend.apiKey = "probe-key-42"
        let daemon = try daemon(config)
        let transport = ScriptedTransport(defaults: [
            "/api/tags": .json(200, #"{"models":[{"name":"tiny:latest","model":"tiny:latest"}]}"#),
            "/api/ps": .json(200, #"{"models":[{"name":"tiny:latest","model":"tiny:latest","expires_at":"2030-01-01T00:00:00Z"}]}"#),
            // Loading takes a while, as it does with a real model.
            "/api/generate": .delayed(400, 200, #"{"model":"tiny","response":"","done":true,"done_reason":"load"}"#),
        ])
        // Not in /api/ps for the first two looks (50 ms apart while loading), well within the
        // load's 400 ms: Ollama lists a model as soon as its load returns.
        transport.script("/api/ps", .json(200, #"{"models":[]}"#), .json(200, #"{"models":[]}"#))
        let service = ModelProbeService(daemon: daemon, backend: ModelBackend(config: config.backend, client: transport),
                                        logger: Logger(label: "test", handler: MemoryLogHandler()),
                                        intervalNanoseconds: 30_000_000, loadPollNanoseconds: 50_000_000)
        let shutdown = GracefulShutdown()
        let running = Task { try await service.run(shutdown: shutdown) }
        defer { shutdown.trigger(); running.cancel() }

        try await Task.sleep(for: .milliseconds(100))
        #expect(await daemon.statusJSON()["backend"]?["modelState"] == "idle", "mode off: the server is left alone")
        #expect(transport.calls.isEmpty)

        daemon.workingModeSelected.set(true)
        var states: [String] = []
        for _ in 0..<200 {
            let state = await daemon.statusJSON()["backend"]?["modelState"]?.stringValue ?? ""
            if states.last != state { states.append(state) }
            if state == "ready" { break }
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(states.contains("loading") && states.last == "ready", "\(states)")
        let loads = transport.calls(to: "/api/generate")
        #expect(loads.count == 1, "one load: \(transport.calls.map(\.path))")
        #expect(loads.first?.body?["prompt"] == nil && loads.first?.body?["keep_alive"] == "30m")
        #expect(transport.calls.allSatisfy { $0.header("authorization") == "Bearer probe-key-42" }, "the key goes with every call")
        let status = await daemon.statusJSON()
        #expect(status["backend"]?["detail"]?.stringValue?.contains("is loaded on the Ollama server") == true)
        #expect(!status.serialized.contains("probe-key-42"), "never in status")
    }

    @Test func aFailedLoadIsUnavailableWithItsReasonThenTriedAgain() async throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var config = WorkerConfig()
        config.backend.url = "http://ollama.test:11434"
        config.backend.model = "tiny"
        let daemon = try daemon(config)
        let transport = ScriptedTransport(defaults: [
            "/api/tags": .json(200, #"{"models":[{"name":"tiny:latest"}]}"#),
            "/api/ps": .json(200, #"{"models":[]}"#),
            "/api/generate": .json(500, #"{"error":"llama runner process has terminated: signal: killed"}"#),
        ])
        let service = ModelProbeService(daemon: daemon, backend: ModelBackend(config: config.backend, client: transport),
                                        logger: Logger(label: "test", handler: MemoryLogHandler()),
                                        intervalNanoseconds: 20_000_000, loadPollNanoseconds: 10_000_000)
        let shutdown = GracefulShutdown()
        daemon.workingModeSelected.set(true)
        let running = Task { try await service.run(shutdown: shutdown) }
        defer { shutdown.trigger(); running.cancel() }
        var detail = ""
        for _ in 0..<200 {
            let backend = await daemon.statusJSON()["backend"]
            if backend?["modelState"] == "unavailable" { detail = backend?["detail"]?.stringValue ?? ""; break }
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(detail.contains("loading it failed") && detail.contains("llama runner process has terminated"), "\(detail)")
        for _ in 0..<200 where transport.calls(to: "/api/generate").count < 2 { try await Task.sleep(for: .milliseconds(5)) }
        #expect(transport.calls(to: "/api/generate").count >= 2, "the load is tried again")
    }
}
