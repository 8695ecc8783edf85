// The Ollama side of the coordinator's model switch (protocol-coordinator §7): pull a model through
// `POST /api/pull` with its NDJSON progress, and ask whether a model is already there.
// The wire rules (progress lines, the sum over layers) are in ModelPullWire.swift.

import HTTP
import Posix
import WorkerCore

extension ModelBackend {
    /// The same backend running `model` instead of `backend.model`: a coordinator's
    /// switch changes the model of every later generation and probe.
    public func using(model: String) -> ModelBackend {
        if model == config.model { return self }
        var changed = config
        changed.model = model
        return ModelBackend(config: changed, client: client)
    }

    /// The puller for this backend's Ollama server, over the same transport.
    public var puller: ModelPuller { ModelPuller(root: wire.root, client: client, apiKey: config.apiKey) }
}

/// Pulls models onto an Ollama server.
public struct ModelPuller: Sendable {
    /// A response body as it arrives: the status, then the bytes in pieces.
    public typealias BodySource = @Sendable (HTTP.HTTPRequest) async throws -> (status: Int, chunks: AsyncThrowingStream<[UInt8], any Error>)

    public let root: String
    let client: any HTTPTransport
    let source: BodySource
    /// `Authorization: Bearer` for a server behind an authenticating proxy (`backend.apiKey`).
    let authorization: [(String, String)]

    /// Ollama streams a progress line for every few hundred kilobytes; a pull of a large
    /// model that is buffered whole (a transport without streaming) must still fit.
    public static let maxBufferedBytes = 64 << 20
    /// A pull of gigabytes over a slow line takes hours; cancellation ends it sooner.
    public static let defaultTimeoutMs: Int64 = 6 * 3_600_000

    /// `source` delivers the body in pieces as they arrive; without one, the transport's
    /// stream does (a transport without a streaming path of its own gives its whole answer
    /// as one piece, and progress then arrives at the end).
    public init(root: String, client: any HTTPTransport, apiKey: String? = nil, source: BodySource? = nil) {
        self.root = root
        self.client = client
        self.authorization = apiKey.map { [("authorization", "Bearer \($0)")] } ?? []
        self.source =
            source ?? { request in
                let response = try await client.stream(request)
                return (response.status, response.body)
            }
    }

    /// Pulls `model`; `progress` sees the download after every line. Returns when Ollama
    /// says `success`; throws with Ollama's own reason otherwise (an `error` line, an
    /// HTTP error, a stream that ends without `success`).
    public func pull(
        _ model: String, timeoutMs: Int64 = ModelPuller.defaultTimeoutMs,
        progress: @Sendable (PullProgress) async -> Void
    ) async throws(ModelError) {
        let body: JSONValue = ["model": .string(model), "stream": true]
        let request = HTTP.HTTPRequest(
            method: "POST", url: root + "/api/pull",
            headers: [("content-type", "application/json"), ("accept", "application/x-ndjson")] + authorization,
            body: body.serializedBytes, connectTimeoutMs: ModelBackend.connectTimeoutMs,
            totalTimeoutMs: timeoutMs, maxResponseBytes: ModelPuller.maxBufferedBytes)
        var state = PullProgress()
        var splitter = LineSplitter()
        var outcome: OllamaPullLine?
        do {
            let (status, chunks) = try await source(request)
            var errorBody: [UInt8] = []
            for try await chunk in chunks {
                if !(200..<300).contains(status) {
                    errorBody += chunk.prefix(4096 - errorBody.count)
                    continue
                }
                for line in splitter.feed(chunk) where !line.isEmpty {
                    let parsed = OllamaPullLine.parse(line)
                    switch parsed {
                    case .success, .failed: outcome = parsed
                    case .progress:
                        state.apply(parsed)
                        await progress(state)
                    case .unreadable: continue
                    }
                }
            }
            if !(200..<300).contains(status) {
                let reason = (try? JSON.parse(errorBody))?["error"]?.stringValue.map { ModelText.printable($0) } ?? "no reason given"
                throw ModelError(
                    status == 404 ? .modelNotFound : .rejected(status: status),
                    "the Ollama server at \(root) refused to pull \(model) (HTTP \(status)): \(reason)")
            }
            if let rest = splitter.finish() {
                let parsed = OllamaPullLine.parse(rest)
                if case .success = parsed { outcome = parsed } else if case .failed = parsed { outcome = parsed }
            }
        } catch let error as ModelError {
            throw error
        } catch let error as HTTPError {
            let kind: ModelError.Kind = error.kind == .timedOut ? .timedOut : .unavailable
            throw ModelError(kind, "pulling \(model) from the Ollama server at \(root) failed: \(error.message)")
        } catch is CancellationError {
            throw ModelError(.cancelled, "the pull of \(model) was cancelled")
        } catch {
            throw ModelError(
                .unavailable, "pulling \(model) from the Ollama server at \(root) failed: \(ModelText.printable(String(describing: error)))")
        }
        switch outcome {
        case .success?: return
        case .failed(let why)?: throw ModelError(.badAnswer, "the Ollama server at \(root) could not pull \(model): \(why)")
        default:
            throw ModelError(.badAnswer, "the Ollama server at \(root) ended the pull of \(model) without success (last status: \(state.status))")
        }
    }

    /// Whether the server has `model` (`GET /api/tags`, names compared as Ollama does).
    public func isInstalled(_ model: String) async throws(ModelError) -> Bool {
        let request = HTTP.HTTPRequest(
            method: "GET", url: root + "/api/tags", headers: [("accept", "application/json")] + authorization,
            connectTimeoutMs: ModelBackend.connectTimeoutMs, totalTimeoutMs: ModelBackend.probeTimeoutMs,
            maxResponseBytes: ModelWire.probeResponseCap)
        let response: HTTPResponse
        do {
            response = try await client.perform(request)
        } catch let error as HTTPError {
            throw ModelError(.unavailable, "listing the models of the Ollama server at \(root) failed: \(error.message)")
        } catch {
            throw ModelError(.cancelled, "listing the models of the Ollama server at \(root) was cancelled")
        }
        guard (200..<300).contains(response.status) else {
            throw ModelError(.rejected(status: response.status), "the Ollama server at \(root) answered /api/tags with HTTP \(response.status)")
        }
        guard let models = (try? JSON.parse(response.body))?["models"]?.arrayValue else {
            throw ModelError(.badAnswer, "the Ollama server at \(root) answered /api/tags without a models list")
        }
        let wanted = ModelWire.ollamaName(model)
        return models.contains { entry in
            [entry["name"]?.stringValue, entry["model"]?.stringValue].contains { $0.map(ModelWire.ollamaName) == wanted }
        }
    }
}
