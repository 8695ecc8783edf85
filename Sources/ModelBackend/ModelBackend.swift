// The model backends of docs/reference/model-backends.md (ollama, openai) over the HTTP client: the thin shell
// around ModelWire, which holds the wire format as pure functions.

import HTTP
import Posix
import WorkerCore

/// The local model server the worker runs prompts and chats on: Ollama (`POST
/// /api/generate`, `/api/chat`) or an OpenAI-compatible server (`POST /v1/completions` or
/// `/v1/chat/completions`, as llama.cpp's server, vLLM and LM Studio serve), streamed or
/// whole.
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

    /// Runs `request` on the model and returns the whole answer, through the same path as
    /// `stream` (collected), but asking the server for one answer (`stream: false`):
    /// servers check a request before they answer it whole, so a refusal comes back as
    /// its status (llama-cpp-python's stream answers 200 and then breaks off). The call
    /// takes at most `request.timeoutMs` (bounded by `backend.timeoutMs`); the text is cut
    /// at `backend.maxOutputBytes`. A cancelled task stops the transfer at once and gets
    /// `.cancelled`.
    public func generate(_ request: ModelRequest) async throws(ModelError) -> ModelOutput {
        try await ModelStream(backend: self, request: request, streaming: false).collect()
    }

    /// Runs `request` on the model, streamed: pieces of text as the server produces them,
    /// then `.done` with the whole output and its counts. Nothing is sent before the first
    /// `next()`. Ending the iteration early or cancelling the iterating task aborts the
    /// HTTP request, so the server stops generating.
    public func stream(_ request: ModelRequest) -> ModelStream {
        ModelStream(backend: self, request: request, streaming: true)
    }

    /// Opens the streamed request: checks it, sends it, and waits for the status. A non-2xx
    /// answer is read whole and becomes its error.
    func open(_ request: ModelRequest, streaming: Bool) async throws(ModelError) -> (
        body: AsyncThrowingStream<[UInt8], any Error>, timeoutMs: Int64, connectTimeoutMs: Int64
    ) {
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
        let path = wire.path(for: request)
        let accept = !streaming ? "application/json" : config.kind == .ollama ? "application/x-ndjson" : "text/event-stream"
        let cap = wire.responseCap(for: request)
        // A stream's decoder bounds what it keeps; the HTTP cap then only bounds a server
        // that never stops. A whole answer is bounded as a whole.
        let http = HTTPRequest(
            method: "POST", url: wire.root + path, headers: wire.headers(accept: accept),
            body: wire.generateBody(request, stream: streaming),
            connectTimeoutMs: connectTimeoutMs, totalTimeoutMs: timeoutMs,
            maxResponseBytes: streaming ? ModelWire.maxResponseCap : cap)
        let started = monotonicNanoseconds()
        do {
            let response = try await client.stream(http)
            if !(200...299).contains(response.status) {
                let body = try await response.collect(limit: cap)
                throw wire.statusError(status: response.status, body: body, path: path)
            }
            return (response.body, timeoutMs, connectTimeoutMs)
        } catch {
            throw failure(
                error, started: started, timeoutMs: timeoutMs, connectTimeoutMs: connectTimeoutMs,
                cap: streaming ? ModelWire.maxResponseCap : cap)
        }
    }

    /// A thrown error as a ModelError.
    func failure(_ error: any Error, started: UInt64, timeoutMs: Int64, connectTimeoutMs: Int64, cap: Int) -> ModelError {
        switch error {
        case let error as ModelError: return error
        case let error as HTTPError:
            return wire.transportError(
                error, call: .generate, elapsedMs: ModelBackend.milliseconds(since: started),
                timeoutMs: timeoutMs, connectTimeoutMs: connectTimeoutMs, cap: cap)
        case is CancellationError:
            return ModelError(.cancelled, "the model call was cancelled after \(ModelBackend.milliseconds(since: started)) ms")
        default:
            return ModelError(.unavailable, "the request to \(wire.serverName) failed: \(ModelText.printable(String(describing: error)))")
        }
    }

    /// Loads `backend.model` into the Ollama server's memory and keeps it there for
    /// `backend.keepAlive` (a generate without a prompt), so that no request pays the load
    /// inside its own time. Takes up to `backend.timeoutMs`. OpenAI servers load their
    /// model themselves: nothing to do.
    public func load() async throws(ModelError) {
        guard config.kind == .ollama else { return }
        if let problem = wire.urlProblem { throw ModelError(.invalidRequest, "backend.url \(problem)") }
        let connectTimeoutMs = min(ModelBackend.connectTimeoutMs, config.timeoutMs)
        let http = HTTPRequest(
            method: "POST", url: wire.root + "/api/generate", headers: wire.headers(), body: wire.loadBody,
            connectTimeoutMs: connectTimeoutMs, totalTimeoutMs: config.timeoutMs,
            maxResponseBytes: ModelWire.probeResponseCap)
        let started = monotonicNanoseconds()
        let response: HTTPResponse
        do {
            response = try await client.perform(http)
        } catch {
            throw failure(error, started: started, timeoutMs: config.timeoutMs, connectTimeoutMs: connectTimeoutMs, cap: ModelWire.probeResponseCap)
        }
        guard (200...299).contains(response.status) else {
            throw wire.statusError(status: response.status, body: response.body, path: "/api/generate")
        }
    }

    /// Asks the server whether a generation would succeed now, each request within
    /// `probeTimeoutMs`. Ollama: the model is pulled (`/api/tags`) and loaded (`/api/ps`;
    /// `needsLoad` when not). OpenAI-compatible: `/health` (llama.cpp: 503 while
    /// loading), the model list, and `/props`, which llama.cpp guards with its key. Every
    /// request carries the key, so a refused one is `unauthorized` here, not at the first
    /// subtask. `detail` says why, for `status` and `doctor`. Never `idle`: that state is
    /// the daemon's, for a backend not in use.
    public func probe() async -> ModelReadiness {
        if let problem = wire.urlProblem { return ModelReadiness(.unavailable, "backend.url \(problem)") }
        switch config.kind {
        case .ollama:
            let tags: (status: Int, body: [UInt8])
            switch await get(wire.probePath) {
            case .success(let answer): tags = answer
            case .failure(let failure): return failure.readiness
            }
            let listed = wire.decodeProbe(status: tags.status, body: tags.body)
            guard listed.state == .ready else { return ModelReadiness(listed.state, listed.detail) }
            let size = wire.ollamaParameterSize(tagsBody: tags.body)
            switch await get("/api/ps") {
            case .success(let answer):
                var readiness = wire.decodeRunning(status: answer.status, body: answer.body)
                readiness.parameterSizeBillions = size
                return readiness
            case .failure(let failure):
                var readiness = failure.readiness
                readiness.parameterSizeBillions = size
                return readiness
            }
        case .openai:
            switch await get("/health") {
            case .success(let answer):
                if let readiness = wire.decodeHealth(status: answer.status, body: answer.body) { return readiness }
            case .failure(let failure): return failure.readiness
            }
            let models: (status: Int, body: [UInt8])
            switch await get(wire.probePath) {
            case .success(let answer): models = answer
            case .failure(let failure): return failure.readiness
            }
            let listed = wire.decodeProbe(status: models.status, body: models.body)
            guard listed.state == .ready else { return ModelReadiness(listed.state, listed.detail) }
            switch await get(ModelWire.authCheckPath) {
            case .success(let answer) where answer.status == 401 || answer.status == 403:
                return ModelReadiness(.unauthorized, wire.unauthorizedDetail(status: answer.status, body: answer.body, path: ModelWire.authCheckPath))
            case .success: return ModelReadiness(listed.state, listed.detail)
            case .failure(let failure): return failure.readiness
            }
        }
    }

    /// One GET of the probe, with the key; a transport failure as the readiness it means.
    private func get(_ path: String) async -> Result<(status: Int, body: [UInt8]), ProbeFailure> {
        let timeoutMs = min(ModelBackend.probeTimeoutMs, config.timeoutMs)
        let connectTimeoutMs = min(ModelBackend.connectTimeoutMs, timeoutMs)
        let http = HTTPRequest(
            method: "GET", url: wire.root + path, headers: wire.headers(),
            connectTimeoutMs: connectTimeoutMs, totalTimeoutMs: timeoutMs,
            maxResponseBytes: ModelWire.probeResponseCap)
        let started = monotonicNanoseconds()
        do {
            let response = try await client.perform(http)
            return .success((response.status, response.body))
        } catch let error as HTTPError {
            let failure = wire.transportError(
                error, call: .probe, elapsedMs: ModelBackend.milliseconds(since: started),
                timeoutMs: timeoutMs, connectTimeoutMs: connectTimeoutMs,
                cap: ModelWire.probeResponseCap)
            return .failure(ProbeFailure(.unavailable, failure.message))
        } catch {
            return .failure(ProbeFailure(.unavailable, "the probe of \(wire.serverName) was cancelled"))
        }
    }

    /// The systemd credential `backend-api-key` (`LoadCredential=` in the unit), when
    /// there is one: `$CREDENTIALS_DIRECTORY/backend-api-key`, whitespace trimmed.
    public static func credentialAPIKey(environment lookup: (String) -> String? = { environment($0) }) -> String? {
        guard let directory = lookup("CREDENTIALS_DIRECTORY"),
            let bytes = try? readFile(directory + "/backend-api-key", limit: 4096)
        else { return nil }
        let key = String(decoding: bytes, as: UTF8.self).split(whereSeparator: { $0.isWhitespace }).joined()
        // A key with inner spaces cannot go into a header: it is taken as written without them
        // only when there are none, else refused like an absent key.
        let words = String(decoding: bytes, as: UTF8.self).split(whereSeparator: { $0.isWhitespace })
        return words.count == 1 ? key : nil
    }

    static func milliseconds(since start: UInt64) -> Int64 {
        Int64((monotonicNanoseconds() &- start) / 1_000_000)
    }
}

/// A probe request that got no answer, as the readiness it means.
struct ProbeFailure: Error {
    let readiness: ModelReadiness
    init(_ state: ModelState, _ detail: String) { readiness = ModelReadiness(state, detail) }
}

/// A generation as it streams: `.text` pieces, then `.done`. Errors are `ModelError`.
/// Nothing is sent until the first `next()`; dropping the iterator or cancelling the
/// iterating task aborts the HTTP request.
public struct ModelStream: AsyncSequence, Sendable {
    public typealias Element = ModelStreamEvent
    let backend: ModelBackend
    let request: ModelRequest
    /// False: the server is asked for the whole answer, delivered as one piece.
    let streaming: Bool

    public func makeAsyncIterator() -> Iterator { Iterator(backend: backend, request: request, streaming: streaming) }

    /// Reads the whole stream: the `.done` output, with the time to the first piece.
    public func collect() async throws(ModelError) -> ModelOutput {
        var iterator = makeAsyncIterator()
        while let event = try await iterator.nextPiece() {
            if case .done(let output) = event { return output }
        }
        throw ModelError(.badAnswer, "the stream ended without its end")
    }

    public struct Iterator: AsyncIteratorProtocol {
        let backend: ModelBackend
        let request: ModelRequest
        let streaming: Bool
        var body: AsyncThrowingStream<[UInt8], any Error>.AsyncIterator?
        var decoder: ModelStreamDecoder?
        var pending: [ModelStreamEvent] = []
        /// An error that comes after the pieces already pending.
        var failure: ModelError?
        var ended = false
        var started: UInt64 = 0
        var firstPieceMs: Int64 = 0
        var timeoutMs: Int64 = 0
        var connectTimeoutMs: Int64 = 0

        init(backend: ModelBackend, request: ModelRequest, streaming: Bool) {
            self.backend = backend
            self.request = request
            self.streaming = streaming
        }

        public mutating func next() async throws -> ModelStreamEvent? {
            try await nextPiece()
        }

        /// The next event, with the error typed.
        public mutating func nextPiece() async throws(ModelError) -> ModelStreamEvent? {
            if !pending.isEmpty { return pending.removeFirst() }
            if let error = failure {
                failure = nil
                throw error
            }
            if ended { return nil }
            if decoder == nil {
                started = monotonicNanoseconds()
                do {
                    let opened = try await backend.open(request, streaming: streaming)
                    body = opened.body.makeAsyncIterator()
                    timeoutMs = opened.timeoutMs
                    connectTimeoutMs = opened.connectTimeoutMs
                } catch {
                    ended = true
                    throw error
                }
                decoder = ModelStreamDecoder(wire: backend.wire, request: request, streaming: streaming)
            }
            while pending.isEmpty && !ended {
                let chunk: [UInt8]?
                do {
                    chunk = try await body?.next()
                } catch {
                    ended = true
                    throw backend.failure(
                        error, started: started, timeoutMs: timeoutMs, connectTimeoutMs: connectTimeoutMs,
                        cap: streaming ? ModelWire.maxResponseCap : backend.wire.responseCap(for: request))
                }
                // The body stream ends early, without an error, when this task is cancelled.
                if Task.isCancelled {
                    ended = true
                    body = nil
                    throw ModelError(.cancelled, "the model call was cancelled after \(ModelBackend.milliseconds(since: started)) ms")
                }
                if let chunk {
                    let (pieces, error) = decoder!.feed(chunk)
                    if firstPieceMs == 0 && !pieces.isEmpty { firstPieceMs = Swift.max(1, ModelBackend.milliseconds(since: started)) }
                    pending += pieces.map { .text($0) }
                    if let error {
                        ended = true
                        body = nil  // aborts the transfer
                        // The pieces before the error go out first.
                        if pending.isEmpty { throw error }
                        failure = error
                    }
                } else {
                    ended = true
                    body = nil
                    switch decoder!.finish() {
                    case .success(var output):
                        output.durationMs = ModelBackend.milliseconds(since: started)
                        if !streaming && !output.text.isEmpty {
                            // A whole answer is its one piece.
                            firstPieceMs = output.durationMs
                            pending.append(.text(output.text))
                        }
                        output.firstPieceMs = firstPieceMs
                        pending.append(.done(output))
                    case .failure(let error):
                        throw error
                    }
                }
            }
            return pending.isEmpty ? nil : pending.removeFirst()
        }

        /// `nextPiece`, with the pieces already decoded behind a text joined to it: a body
        /// read that brought several of the model's events (the reader fell behind) costs
        /// its consumer one hand-over, not one per token. Never waits for more text.
        public mutating func nextJoinedPiece() async throws(ModelError) -> ModelStreamEvent? {
            guard let event = try await nextPiece() else { return nil }
            guard case .text(var text) = event else { return event }
            let behind = pending.prefix { if case .text = $0 { true } else { false } }
            for case .text(let more) in behind { text += more }
            pending.removeFirst(behind.count)
            return .text(text)
        }
    }
}
