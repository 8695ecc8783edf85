import Foundation
import TestSupport
import Testing
import Logging
@testable import Daemon
import HTTP
import ModelBackend
import StateStore
import Synchronization
@testable import WorkerCore

/// The readiness probe in the daemon (docs/reference/model-backends.md): an Ollama model that is pulled but not
/// loaded is loaded by the worker, `loading` until /api/ps lists it, then `ready`; the key
/// goes with every probe and never into status.
@Suite struct ModelProbeServiceRules {
    let dir = NSTemporaryDirectory() + "ecw-model-probe-" + UUID().uuidString

    func daemon(_ config: WorkerConfig) throws -> WorkerState {
        let paths = DaemonPaths(configPath: "/dev/null", stateDirectory: dir, runtimeDirectory: dir + "/run", sysfsRoot: "/")
        return WorkerState(
            config: config, paths: paths, directory: try StateDirectory(path: dir),
            logger: Logger(label: "test", handler: MemoryLogHandler()), clock: TestClock.realTime { 1_000 })
    }

    @Test func aPulledModelIsLoadedWhenAWorkingModeStartsAndReadyOnlyOnceLoaded() async throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var config = WorkerConfig()
        config.backend.url = "http://ollama.test:11434"
        config.backend.model = "tiny"
        config.backend.apiKey = "probe-key-42"
        let daemon = try daemon(config)
        // Ollama as it behaves: /api/ps lists the model once a load has returned.
        let transport = LoadingOllama(loadMs: 300)
        let service = ModelProbeService(
            daemon: daemon, backend: ModelBackend(config: config.backend, client: transport),
            logger: Logger(label: "test", handler: MemoryLogHandler()),
            intervalNanoseconds: 30_000_000, loadPollNanoseconds: 50_000_000)
        let shutdown = GracefulShutdown()
        let running = Task { try await service.run(shutdown: shutdown) }
        defer { shutdown.trigger(); running.cancel() }

        try await Task.sleep(for: .milliseconds(100))
        #expect(await daemon.statusJSON()["backend"]?["modelState"] == "idle", "mode off: the server is left alone")
        #expect(transport.calls.isEmpty)

        daemon.signals.workingModeSelected.set(true)
        var states: [String] = []
        for _ in 0..<200 {
            let state = await daemon.statusJSON()["backend"]?["modelState"]?.stringValue ?? ""
            if states.last != state { states.append(state) }
            if state == "ready" { break }
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(states.contains("loading") && states.last == "ready", "\(states)")
        let loads = transport.calls.filter { $0.path == "/api/generate" }
        #expect(loads.count == 1, "one load: \(transport.calls.map(\.path))")
        #expect(loads.first?.body?["prompt"] == nil && loads.first?.body?["keep_alive"] == "30m")
        #expect(transport.calls.allSatisfy { $0.authorization == "Bearer probe-key-42" }, "the key goes with every call")
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
        let service = ModelProbeService(
            daemon: daemon, backend: ModelBackend(config: config.backend, client: transport),
            logger: Logger(label: "test", handler: MemoryLogHandler()),
            intervalNanoseconds: 20_000_000, loadPollNanoseconds: 10_000_000)
        let shutdown = GracefulShutdown()
        daemon.signals.workingModeSelected.set(true)
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

/// Ollama's readiness as it behaves: the model is listed, and in /api/ps only once a load
/// (a generate) has returned, which takes `loadMs`.
final class LoadingOllama: HTTPTransport {
    struct Call: Sendable {
        var path: String
        var body: JSONValue?
        var authorization: String?
    }
    private let state = Mutex<(calls: [Call], loaded: Bool)>(([], false))
    let loadMs: Int

    init(loadMs: Int) { self.loadMs = loadMs }

    var calls: [Call] { state.withLock { $0.calls } }

    func perform(_ request: HTTP.HTTPRequest) async throws -> HTTPResponse {
        let path = ScriptedTransport.path(of: request.url)
        let call = Call(
            path: path, body: request.body.flatMap { try? JSON.parse($0) },
            authorization: request.headers.first { $0.0 == "authorization" }?.1)
        let loaded = state.withLock { state -> Bool in
            state.calls.append(call)
            return state.loaded
        }
        switch path {
        case "/api/tags":
            return HTTPResponse(status: 200, body: Array(#"{"models":[{"name":"tiny:latest","model":"tiny:latest"}]}"#.utf8))
        case "/api/ps":
            let models = loaded ? #"[{"name":"tiny:latest","model":"tiny:latest","expires_at":"2030-01-01T00:00:00Z"}]"# : "[]"
            return HTTPResponse(status: 200, body: Array(#"{"models":\#(models)}"#.utf8))
        case "/api/generate":
            try await Task.sleep(for: .milliseconds(loadMs))
            state.withLock { $0.loaded = true }
            return HTTPResponse(status: 200, body: Array(#"{"model":"tiny","response":"","done":true,"done_reason":"load"}"#.utf8))
        default:
            return HTTPResponse(status: 404, body: Array("404 page not found".utf8))
        }
    }
}
