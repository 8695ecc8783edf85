// The model backends of SPEC 7 (ollama, openai) over the HTTP client: the thin shell
// around ModelWire, which holds the wire format as pure functions.

import HTTP
import Posix
import WorkerCore

/// The local model server the worker runs prompts on: Ollama (`POST /api/generate`)
/// or an OpenAI-compatible server (`POST /v1/completions` or `/v1/chat/completions`,
/// as llama.cpp's server, vLLM and LM Studio serve), non-streaming.
///
/// A value, cheap to copy and to rebuild when the configuration changes; the transfers
/// run on the HTTP client's own thread, so no call blocks a Swift-concurrency thread.
/// Every failure is a `ModelError` with a reason for the operator, never a crash.
public struct ModelBackend: Sendable {
    public let config: WorkerConfig.Backend
    /// The wire format: URLs, bodies and decoding.
    public let wire: ModelWire
    let client: any HTTPTransport

    /// Longest wait for a connection to the model server (bounded by the call's time).
    public static let connectTimeoutMs: Int64 = 3_000
    /// Longest wait for the readiness probe (bounded by `backend.timeoutMs`).
    public static let probeTimeoutMs: Int64 = 5_000

    public init(config: WorkerConfig.Backend, client: any HTTPTransport = HTTPClient.shared) {
        self.config = config
        self.wire = ModelWire(config: config)
        self.client = client
    }

    /// One line for `status` and `doctor`: kind, model and where.
    public var summary: String {
        let endpoint = config.kind == .openai ? " (\(wire.generatePath))" : ""
        return "\(config.kind.rawValue) model \"\(ModelText.printable(config.model, limit: 120))\" at \(wire.root)\(endpoint)"
    }

    /// Runs `request.prompt` on the model. The call takes at most `request.timeoutMs`
    /// (bounded by `backend.timeoutMs`); the text is cut at `backend.maxOutputBytes`. A
    /// cancelled task stops the transfer at once and gets `.cancelled`.
    public func generate(_ request: ModelRequest) async throws(ModelError) -> ModelOutput {
        if let problem = wire.urlProblem {
            throw ModelError(.invalidRequest, "backend.url \(problem)")
        }
        guard request.maxTokens >= 1 else {
            throw ModelError(.invalidRequest, "maxTokens must be at least 1, got \(request.maxTokens)")
        }
        let timeoutMs = min(request.timeoutMs, config.timeoutMs)
        guard timeoutMs > 0 else {
            throw ModelError(.timedOut, "no time was left to ask the model (the request's timeoutMs is \(request.timeoutMs))")
        }
        if Task.isCancelled { throw ModelError(.cancelled, "the model call was cancelled before it started") }
        let connectTimeoutMs = min(ModelBackend.connectTimeoutMs, timeoutMs)
        let cap = wire.responseCap(for: request)
        let http = HTTPRequest(method: "POST", url: wire.generateURL,
                               headers: [("content-type", "application/json"), ("accept", "application/json")],
                               body: wire.generateBody(request),
                               connectTimeoutMs: connectTimeoutMs, totalTimeoutMs: timeoutMs, maxResponseBytes: cap)
        let started = monotonicNanoseconds()
        let response: HTTPResponse
        do {
            response = try await client.perform(http)
        } catch let error as HTTPError {
            throw wire.transportError(error, call: .generate, elapsedMs: ModelBackend.milliseconds(since: started),
                                      timeoutMs: timeoutMs, connectTimeoutMs: connectTimeoutMs, cap: cap)
        } catch is CancellationError {
            throw ModelError(.cancelled, "the model call was cancelled after \(ModelBackend.milliseconds(since: started)) ms")
        } catch {
            throw ModelError(.unavailable, "the request to \(wire.serverName) failed: \(ModelText.printable(String(describing: error)))")
        }
        switch wire.decodeGenerate(status: response.status, body: response.body) {
        case .success(var output):
            output.durationMs = ModelBackend.milliseconds(since: started)
            return output
        case .failure(let error):
            throw error
        }
    }

    /// Asks the server whether it can serve `backend.model` (`GET /api/tags` or
    /// `GET /v1/models`), within `probeTimeoutMs`. `detail` says why, for `status` and
    /// `doctor`. Never `idle`: that state is the daemon's, for a backend not in use.
    public func probe() async -> (state: ModelState, detail: String) {
        if let problem = wire.urlProblem { return (.unavailable, "backend.url \(problem)") }
        let timeoutMs = min(ModelBackend.probeTimeoutMs, config.timeoutMs)
        let connectTimeoutMs = min(ModelBackend.connectTimeoutMs, timeoutMs)
        let http = HTTPRequest(method: "GET", url: wire.probeURL, headers: [("accept", "application/json")],
                               connectTimeoutMs: connectTimeoutMs, totalTimeoutMs: timeoutMs,
                               maxResponseBytes: ModelWire.probeResponseCap)
        let started = monotonicNanoseconds()
        do {
            let response = try await client.perform(http)
            return wire.decodeProbe(status: response.status, body: response.body)
        } catch let error as HTTPError {
            let failure = wire.transportError(error, call: .probe, elapsedMs: ModelBackend.milliseconds(since: started),
                                              timeoutMs: timeoutMs, connectTimeoutMs: connectTimeoutMs,
                                              cap: ModelWire.probeResponseCap)
            return (.unavailable, failure.message)
        } catch {
            return (.unavailable, "the probe of \(wire.serverName) was cancelled")
        }
    }

    static func milliseconds(since start: UInt64) -> Int64 {
        Int64((monotonicNanoseconds() &- start) / 1_000_000)
    }
}
