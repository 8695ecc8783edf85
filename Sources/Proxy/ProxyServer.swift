import Logging
import Posix
import WorkerCore

/// The local HTTP API of `edgecoder-worker proxy` (127.0.0.1 only): `GET /status`,
/// `POST /api/generate` in EdgeCoder's and Ollama's shapes, `GET /api/tags` and
/// `GET /api/version`. One request per connection; every connection is bounded in size
/// and in time, and at most `maxConnections` are served at once.
public struct ProxyServer: Sendable {
    let listener: LoopbackTCPListener
    let upstream: any ProxyUpstream
    let version: String
    let logger: Logger
    let requestTimeoutMs: Int64
    let readTimeoutMs: Int64
    let maxConnections: Int
    let open = ConnectionCount()

    /// Connections being served now.
    public var openConnections: Int { get async { await open.count } }

    public init(listener: LoopbackTCPListener, upstream: any ProxyUpstream, version: String, logger: Logger, requestTimeoutMs: Int64,
                readTimeoutMs: Int64 = 10_000, maxConnections: Int = 64) {
        self.listener = listener
        self.upstream = upstream
        self.version = version
        self.logger = logger
        self.requestTimeoutMs = requestTimeoutMs
        self.readTimeoutMs = readTimeoutMs
        self.maxConnections = maxConnections
    }

    /// Serves until cancelled.
    public func run() async {
        try? await acceptConnections(limit: maxConnections, counter: open, accept: { try await listener.accept() }, retryAcceptFailures: true,
                                     refuse: { connection in try? await connection.write(HTTPServerResponse.json(503, ["error": "too many connections; try again"])) },
                                     serve: { connection in await serve(connection) })
    }

    private enum Read: Sendable { case request(HTTPRequest), refused(HTTPRefusal), closed }

    func serve(_ connection: UnixConnection) async {
        let readTimeout = UInt64(readTimeoutMs) * 1_000_000
        // The whole request must arrive within the read timeout (slow clients are cut off).
        let winner = await race({ () -> Read in
            var reader = HTTPRequestReader()
            while true {
                let bytes: [UInt8]
                do { bytes = try await connection.read(max: 16_384) } catch {
                    logger.debug("reading a request failed: \(error)")
                    return .closed
                }
                if bytes.isEmpty { return .closed }
                switch reader.feed(bytes) {
                case .needMore: continue
                case .complete(let request): return .request(request)
                case .refused(let refusal): return .refused(refusal)
                }
            }
        }, { () -> Read in
            do { try await Task.sleep(nanoseconds: readTimeout) } catch { return .closed }
            return .refused(HTTPRefusal(408, "the request did not arrive within \(readTimeoutMs) ms"))
        })
        let read: Read
        switch winner {
        case .first(let value), .second(let value): read = value
        }
        let answer: [UInt8]
        switch read {
        case .closed: return
        case .refused(let refusal):
            logger.info("refused a request: \(refusal.status) \(refusal.message)")
            answer = HTTPServerResponse.json(refusal.status, ["error": .string(refusal.message)])
        case .request(let request):
            answer = await respond(to: request)
        }
        try? await connection.write(answer)
    }

    func respond(to request: HTTPRequest) async -> [UInt8] {
        switch (request.method, request.path) {
        case ("GET", "/status"), ("HEAD", "/status"):
            return HTTPServerResponse.json(200, await upstream.currentStatus.json)
        case ("GET", "/api/tags"):
            let status = await upstream.currentStatus
            return HTTPServerResponse.json(200, ProxyAnswer.tags(connected: status.connected, deviceName: status.deviceName))
        case ("GET", "/api/version"):
            return HTTPServerResponse.json(200, ["version": .string(version)])
        case ("POST", "/api/generate"):
            let generate: GenerateRequest
            switch GenerateRequest.parse(request.body) {
            case .failure(let refusal): return HTTPServerResponse.json(refusal.status, ["ok": false, "error": .string(refusal.message)])
            case .success(let parsed): generate = parsed
            }
            let started = monotonicNanoseconds()
            let result = await upstream.generate(WorkerAsk(prompt: generate.prompt, maxTokens: generate.maxTokens), timeoutMs: requestTimeoutMs, onDelta: { _ in })
            let durationMs = Int64((monotonicNanoseconds() - started) / 1_000_000)
            let answer = ProxyAnswer.generate(generate, result, durationMs: durationMs, nowMs: wallClockMilliseconds())
            logger.info("POST /api/generate: \(answer.status) in \(durationMs) ms")
            return HTTPServerResponse.json(answer.status, answer.body, contentType: answer.ndjson ? "application/x-ndjson" : "application/json")
        case (_, "/status"), (_, "/api/tags"), (_, "/api/version"), (_, "/api/generate"):
            return HTTPServerResponse.json(405, ["error": .string("\(request.method) is not allowed on \(request.path)")])
        default:
            return HTTPServerResponse.json(404, ["error": .string("no such path: \(request.path) (try /status, /api/generate, /api/tags)")])
        }
    }
}
