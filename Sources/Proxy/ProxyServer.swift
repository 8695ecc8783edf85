#if canImport(Glibc)
import Glibc
#endif
import Logging
import Posix
import Synchronization
import Tasks
import WorkerCore

/// The local HTTP API of `edgecoder-worker proxy` (docs/reference/proxy-api.md) on 127.0.0.1 and [::1]: a
/// nearby worker as a local Ollama and OpenAI-compatible server. HTTP/1.1 with keep-alive
/// (a bounded number of requests per connection, an idle limit between them); answers
/// streamed as the worker's text arrives; the client going away cancels its request on
/// the worker. Browsers are refused (Host and Origin checks). Every connection is bounded
/// in size and time, and at most `maxConnections` are served at once.
public struct ProxyServer: Sendable {
    let listeners: [LoopbackTCPListener]
    let upstream: any ProxyUpstream
    let version: String
    let logger: Logger
    let requestTimeoutMs: Int64
    let readTimeoutMs: Int64
    let maxConnections: Int
    let guardian: BrowserGuard
    /// How long a keep-alive connection may stay silent between two requests.
    let idleTimeoutMs: Int64
    let maxRequestsPerConnection: Int
    /// How long a streamed answer's head waits for the first text: a failure within it
    /// (no worker, busy, refused) still gets its own status; after it the head goes out.
    let streamHoldMs: Int64
    /// The same for a whole (not streamed) answer: EdgeCoder's IDE router gives up after
    /// 30 s without a head, so the head goes out before that and a space every
    /// `pulseMs` keeps the body alive (JSON allows leading white space).
    let wholeHoldMs: Int64
    let pulseMs: Int64
    /// How long a write may go without the client taking a byte before the connection is
    /// closed: a client that stops reading must not hold a connection (and a place under
    /// `maxConnections`) forever. Only tests shorten it.
    let writeProgressMs: Int64
    /// `writeProgressMs` unless a test says otherwise.
    public static let defaultWriteProgressMs: Int64 = 30_000
    /// At most this many connections from one client address (beside `maxConnections`).
    public static let defaultMaxConnectionsPerAddress = 32
    /// At a cap, a connection still (no byte read or written) for this long may be closed
    /// to make room for a new one; one that moved more recently never is.
    static let evictableAfterMs: Int64 = 1_000
    let open: ConnectionRegistry

    /// Connections being served now.
    public var openConnections: Int { get async { await open.count } }

    public init(
        listener: LoopbackTCPListener, upstream: any ProxyUpstream, version: String, logger: Logger, requestTimeoutMs: Int64,
        readTimeoutMs: Int64 = 10_000, maxConnections: Int = 64, guardian: BrowserGuard = BrowserGuard(),
        idleTimeoutMs: Int64 = 30_000, maxRequestsPerConnection: Int = 100, streamHoldMs: Int64 = 1_000,
        wholeHoldMs: Int64 = 10_000, pulseMs: Int64 = 10_000, writeProgressMs: Int64 = ProxyServer.defaultWriteProgressMs,
        maxConnectionsPerAddress: Int = ProxyServer.defaultMaxConnectionsPerAddress
    ) {
        self.init(
            listeners: [listener], upstream: upstream, version: version, logger: logger, requestTimeoutMs: requestTimeoutMs,
            readTimeoutMs: readTimeoutMs, maxConnections: maxConnections, guardian: guardian, idleTimeoutMs: idleTimeoutMs,
            maxRequestsPerConnection: maxRequestsPerConnection, streamHoldMs: streamHoldMs, wholeHoldMs: wholeHoldMs, pulseMs: pulseMs,
            writeProgressMs: writeProgressMs, maxConnectionsPerAddress: maxConnectionsPerAddress)
    }

    public init(
        listeners: [LoopbackTCPListener], upstream: any ProxyUpstream, version: String, logger: Logger, requestTimeoutMs: Int64,
        readTimeoutMs: Int64 = 10_000, maxConnections: Int = 64, guardian: BrowserGuard = BrowserGuard(),
        idleTimeoutMs: Int64 = 30_000, maxRequestsPerConnection: Int = 100, streamHoldMs: Int64 = 1_000,
        wholeHoldMs: Int64 = 10_000, pulseMs: Int64 = 10_000, writeProgressMs: Int64 = ProxyServer.defaultWriteProgressMs,
        maxConnectionsPerAddress: Int = ProxyServer.defaultMaxConnectionsPerAddress
    ) {
        self.listeners = listeners
        self.upstream = upstream
        self.version = version
        self.logger = logger
        self.requestTimeoutMs = requestTimeoutMs
        self.readTimeoutMs = readTimeoutMs
        self.maxConnections = maxConnections
        self.guardian = guardian
        self.idleTimeoutMs = idleTimeoutMs
        self.maxRequestsPerConnection = maxRequestsPerConnection
        self.streamHoldMs = streamHoldMs
        self.wholeHoldMs = wholeHoldMs
        self.pulseMs = pulseMs
        self.writeProgressMs = writeProgressMs
        self.open = ConnectionRegistry(
            limits: ConnectionAdmission.Limits(
                total: maxConnections, perAddress: maxConnectionsPerAddress,
                minimumStillNs: UInt64(Self.evictableAfterMs) * 1_000_000))
    }

    /// Serves until cancelled.
    public func run() async {
        await withDiscardingTaskGroup { group in
            for listener in listeners {
                group.addTask {
                    try? await acceptConnections(
                        accept: { try await listener.accept() }, retryAcceptFailures: true,
                        admit: { connection -> ConnectionProgress? in
                            let (admitted, refusal) = await open.admit(connection, address: connection.peerAddress())
                            // Sent without waiting: a client that does not read it must not hold up the accept loop.
                            if let refusal { connection.sendNow(HTTPServerResponse.json(503, ["error": .string(refusal)])) }
                            return admitted
                        },
                        serve: { connection, progress in
                            await ConnectionProgress.$current.withValue(progress) { await serve(connection) }
                        }, release: { progress in await open.leave(progress.id) })
                }
            }
        }
    }

    // MARK: Connections

    enum Read: Sendable { case request(HTTPServerRequest), refused(HTTPRefusal), closed }

    func serve(_ connection: UnixConnection) async {
        var reader = HTTPRequestReader()
        var served = 0
        while !Task.isCancelled {
            let (read, updated) = await nextRequest(on: connection, reader, first: served == 0)
            reader = updated
            switch read {
            case .closed:
                return
            case .refused(let refusal):
                logger.info("refused a request: \(refusal.status) \(refusal.message)")
                try? await connection.write(
                    HTTPServerResponse.json(refusal.status, ["error": .string(refusal.message)]), progressTimeoutMs: writeProgressMs,
                    onProgress: ConnectionProgress.current?.marker)
                await drain(connection)
                return
            case .request(let request):
                ConnectionProgress.current?.mark()
                served += 1
                let keepAlive = request.keepAlive && served < maxRequestsPerConnection
                let (usable, early) = await respond(to: request, on: connection, keepAlive: keepAlive)
                guard usable, keepAlive else { return }
                // Bytes of the next request that came while this one was answered.
                reader.keep(early)
            }
        }
    }

    /// Reads and drops what the client still sends (a body over the bound) for a moment
    /// after a refusal, so that closing does not reset the connection before the client
    /// has read why (it is still writing its body and would see only a broken pipe).
    func drain(_ connection: UnixConnection) async {
        _ = shutdown(connection.fd, Int32(SHUT_WR))
        _ = await race(
            { () -> Void in
                var total = 0
                while total < 64 << 20, let bytes = try? await connection.read(max: 65_536), !bytes.isEmpty { total += bytes.count }
            }, { () -> Void in try? await Task.sleep(nanoseconds: 2_000_000_000) })
    }

    /// The next request: after the first, the client may stay silent up to the idle limit
    /// (then the connection closes quietly); once it starts one, the whole request must
    /// arrive within the read timeout (else 408).
    func nextRequest(on connection: UnixConnection, _ reader: HTTPRequestReader, first: Bool) async -> (Read, HTTPRequestReader) {
        var reader = reader
        if reader.buffered > 0 {
            switch reader.feed([UInt8]()) {
            case .complete(let request): return (.request(request), reader)
            case .refused(let refusal): return (.refused(refusal), reader)
            case .needMore: break
            }
        } else if !first {
            let idle = UInt64(idleTimeoutMs) * 1_000_000
            let winner = await race(
                { () -> [UInt8] in (try? await connection.read(max: 16_384)) ?? [] },
                { () -> [UInt8] in
                    try? await Task.sleep(nanoseconds: idle)
                    return []
                })
            let bytes: [UInt8]
            switch winner {
            case .first(let read): bytes = read
            case .second: return (.closed, reader)
            }
            if bytes.isEmpty { return (.closed, reader) }
            switch reader.feed(bytes) {
            case .complete(let request): return (.request(request), reader)
            case .refused(let refusal): return (.refused(refusal), reader)
            case .needMore: break
            }
        }
        let readTimeout = UInt64(readTimeoutMs) * 1_000_000
        let start = reader
        let winner = await race(
            { () -> (Read, HTTPRequestReader) in
                var reader = start
                while true {
                    if reader.takeContinue() {
                        try? await connection.write(
                            HTTPServerResponse.continueAnswer, progressTimeoutMs: writeProgressMs, onProgress: ConnectionProgress.current?.marker)
                    }
                    let bytes: [UInt8]
                    do { bytes = try await connection.read(max: 16_384) } catch {
                        logger.debug("reading a request failed: \(error)")
                        return (.closed, reader)
                    }
                    if bytes.isEmpty { return (.closed, reader) }
                    switch reader.feed(bytes) {
                    case .needMore: continue
                    case .complete(let request): return (.request(request), reader)
                    case .refused(let refusal): return (.refused(refusal), reader)
                    }
                }
            },
            { () -> (Read, HTTPRequestReader) in
                do { try await Task.sleep(nanoseconds: readTimeout) } catch { return (.closed, start) }
                return (.refused(HTTPRefusal(408, "the request did not arrive within \(readTimeoutMs) ms")), start)
            })
        switch winner {
        case .first(let value), .second(let value): return value
        }
    }

    // MARK: Routes

    /// Answers one request. Returns whether the connection can carry another, and any
    /// bytes of the next request read meanwhile.
    func respond(to request: HTTPServerRequest, on connection: UnixConnection, keepAlive: Bool) async -> (usable: Bool, early: [UInt8]) {
        let cors: [(String, String)]
        switch guardian.check(host: request.header("Host"), origin: request.header("Origin")) {
        case .forbidden(let why):
            logger.warning("403 for \(request.method) \(request.path): \(why)")
            try? await connection.write(
                HTTPServerResponse.json(403, ["error": .string(why)]), progressTimeoutMs: writeProgressMs,
                onProgress: ConnectionProgress.current?.marker)
            return (false, [])
        case .allowed(let origin):
            cors = origin.map(BrowserGuard.corsHeaders) ?? []
        }
        let head = request.method == "HEAD"
        func json(_ status: Int, _ body: JSONValue, dialect: ProxyDialect? = nil) async -> (Bool, [UInt8]) {
            let bytes = HTTPServerResponse.whole(
                status, contentType: "application/json", body: body.serializedBytes + [10], keepAlive: keepAlive,
                headers: cors, omitBody: head)
            do { try await connection.write(bytes, progressTimeoutMs: writeProgressMs, onProgress: ConnectionProgress.current?.marker) } catch {
                return (false, [])
            }
            return (true, [])
        }
        func refused(_ refusal: HTTPRefusal, _ dialect: ProxyDialect) async -> (Bool, [UInt8]) {
            logger.info("\(request.method) \(request.path): \(refusal.status) \(refusal.message)")
            return await json(refusal.status, ProxyAnswer.error(dialect, status: refusal.status, message: refusal.message, field: refusal.field))
        }
        let get = request.method == "GET" || head
        switch (request.method, request.path) {
        case ("OPTIONS", _):
            guard let origin = request.header("Origin") else {
                let bytes = HTTPServerResponse.whole(
                    204, contentType: nil, body: [], keepAlive: keepAlive, headers: [("Allow", "GET, HEAD, POST, OPTIONS")])
                do { try await connection.write(bytes, progressTimeoutMs: writeProgressMs, onProgress: ConnectionProgress.current?.marker) } catch {
                    return (false, [])
                }
                return (true, [])
            }
            let bytes = HTTPServerResponse.whole(
                204, contentType: nil, body: [], keepAlive: keepAlive,
                headers: BrowserGuard.preflightHeaders(origin: origin, requestedHeaders: request.header("Access-Control-Request-Headers")))
            do { try await connection.write(bytes, progressTimeoutMs: writeProgressMs, onProgress: ConnectionProgress.current?.marker) } catch {
                return (false, [])
            }
            return (true, [])
        case (_, "/") where get:
            let bytes = HTTPServerResponse.whole(
                200, contentType: "text/plain; charset=utf-8", body: Array("Ollama is running".utf8), keepAlive: keepAlive,
                headers: cors, omitBody: head)
            do { try await connection.write(bytes, progressTimeoutMs: writeProgressMs, onProgress: ConnectionProgress.current?.marker) } catch {
                return (false, [])
            }
            return (true, [])
        case (_, "/status") where get:
            return await json(200, await upstream.currentStatus.json)
        case (_, "/api/tags") where get:
            let status = await upstream.currentStatus
            return await json(200, ProxyAnswer.tags(connected: status.connected, deviceName: status.deviceName))
        case (_, "/api/ps") where get:
            return await json(200, ProxyAnswer.ps(await upstream.currentStatus, nowMs: wallClockMilliseconds()))
        case (_, "/api/version") where get:
            return await json(200, ["version": .string(version)])
        case ("POST", "/api/show"):
            let body = try? JSON.parse(request.body, maxDepth: 16)
            guard let model = body?["model"]?.stringValue ?? body?["name"]?.stringValue, !model.isEmpty else {
                return await refused(HTTPRefusal(400, "\"model\" must be a non-empty string", field: "model"), .ollamaGenerate)
            }
            return await json(200, ProxyAnswer.show(model: model, status: await upstream.currentStatus))
        case (_, "/v1/models") where get:
            return await json(200, ProxyAnswer.openAIModels(connected: await upstream.currentStatus.connected))
        case (_, _) where get && request.path.hasPrefix("/v1/models/"):
            let name = String(request.path.dropFirst("/v1/models/".count))
            guard await upstream.currentStatus.connected else {
                return await json(
                    404, ProxyAnswer.error(.openAIChat, status: 404, message: "no worker connected, so no model \(BrowserGuard.printable(name))"))
            }
            return await json(200, ProxyAnswer.openAIModel(name.isEmpty ? ProxyAnswer.modelName : name))
        case ("POST", "/api/generate"):
            return await generation(ProxyCall.generate(request.body), .ollamaGenerate, request, connection, keepAlive: keepAlive, cors: cors)
        case ("POST", "/api/chat"):
            return await generation(ProxyCall.chat(request.body), .ollamaChat, request, connection, keepAlive: keepAlive, cors: cors)
        case ("POST", "/v1/chat/completions"):
            return await generation(ProxyCall.openAIChat(request.body), .openAIChat, request, connection, keepAlive: keepAlive, cors: cors)
        case ("POST", "/v1/completions"):
            return await generation(
                ProxyCall.openAICompletion(request.body), .openAICompletion, request, connection, keepAlive: keepAlive, cors: cors)
        case (_, "/api/embed"), (_, "/api/embeddings"), (_, "/v1/embeddings"):
            let dialect: ProxyDialect = request.path.hasPrefix("/v1") ? .openAIChat : .ollamaGenerate
            return await refused(HTTPRefusal(400, "embeddings are not available: the worker over Bluetooth only generates text"), dialect)
        case (_, "/"), (_, "/status"), (_, "/api/tags"), (_, "/api/ps"), (_, "/api/version"), (_, "/api/show"), (_, "/api/generate"),
            (_, "/api/chat"),
            (_, "/v1/models"), (_, "/v1/chat/completions"), (_, "/v1/completions"):
            return await json(405, ["error": .string("\(request.method) is not allowed on \(request.path)")])
        default:
            return await json(
                404,
                [
                    "error": .string(
                        "no such path: \(BrowserGuard.printable(request.path)) (try /status, /api/generate, /api/chat, /v1/chat/completions)")
                ])
        }
    }

    // MARK: Generation

    enum Outcome: Sendable {
        case result(GenerateResult)
        case clientGone
        /// The watch on the client's side ended without it going: bytes of its next request.
        case early([UInt8])
        case held
    }

    func generation(
        _ parsed: Result<ProxyCall, HTTPRefusal>, _ dialect: ProxyDialect, _ request: HTTPServerRequest, _ connection: UnixConnection,
        keepAlive: Bool, cors: [(String, String)]
    ) async -> (usable: Bool, early: [UInt8]) {
        let call: ProxyCall
        switch parsed {
        case .failure(let refusal):
            logger.info("\(request.method) \(request.path): \(refusal.status) \(refusal.message)")
            let body = ProxyAnswer.error(dialect, status: refusal.status, message: refusal.message, field: refusal.field)
            let bytes = HTTPServerResponse.whole(
                refusal.status, contentType: "application/json", body: body.serializedBytes + [10], keepAlive: keepAlive, headers: cors)
            do { try await connection.write(bytes, progressTimeoutMs: writeProgressMs, onProgress: ConnectionProgress.current?.marker) } catch {
                return (false, [])
            }
            return (true, [])
        case .success(let value):
            call = value
        }
        if call.loadOnly {
            let bytes = HTTPServerResponse.whole(
                200, contentType: "application/json", body: ProxyAnswer.loaded(call, nowMs: wallClockMilliseconds()).serializedBytes + [10],
                keepAlive: keepAlive, headers: cors)
            do { try await connection.write(bytes, progressTimeoutMs: writeProgressMs, onProgress: ConnectionProgress.current?.marker) } catch {
                return (false, [])
            }
            return (true, [])
        }
        let started = monotonicNanoseconds()
        let id = (call.dialect == .openAICompletion ? "cmpl-" : "chatcmpl-") + Self.randomID()
        let responder = Responder(connection: connection, call: call, id: id, keepAlive: keepAlive, cors: cors, writeProgressMs: writeProgressMs)
        let upstream = self.upstream
        let timeoutMs = requestTimeoutMs
        let hold = call.stream ? streamHoldMs : wholeHoldMs
        let pulse = pulseMs
        var outcome: Outcome?
        var early: [UInt8] = []
        await withTaskGroup(of: Outcome.self) { group in
            group.addTask {
                .result(
                    await upstream.generate(
                        call.ask, timeoutMs: timeoutMs,
                        onDelta: { [logger, id] text in
                            if await responder.piece(text) { logger.debug("\(id): the first piece of text went to the HTTP client") }
                        }))
            }
            group.addTask { await Self.watch(connection) }
            group.addTask {
                await responder.hold(ms: hold, pulseMs: pulse)
                return .held
            }
            while let next = await group.next() {
                switch next {
                case .result, .clientGone:
                    if outcome == nil {
                        outcome = next
                        group.cancelAll()
                    }
                case .early(let bytes):
                    early = bytes
                case .held:
                    break
                }
            }
        }
        let durationMs = Int64((monotonicNanoseconds() - started) / 1_000_000)
        let label = "\(request.method) \(request.path) (\(call.stream ? "streamed" : "whole"))"
        if Task.isCancelled {
            // The proxy is stopping (SIGTERM): the request ends now, not when the worker is done.
            await responder.finish(.notConnected("the proxy is stopping"), durationMs: durationMs)
            logger.info("\(label): the proxy is stopping, answered after \(durationMs) ms")
            return (false, [])
        }
        switch outcome {
        case .result(let result)?:
            let status = await responder.finish(result, durationMs: durationMs)
            logger.info("\(label): \(status) in \(durationMs) ms")
            return (await responder.usable, early)
        default:
            logger.info("\(label): the client went away after \(durationMs) ms; the request was cancelled")
            return (false, [])
        }
    }

    /// Waits for the client to go away while its answer is produced (a read of 0 bytes or
    /// an error: Go's net/http, hence Ollama, treats a half-close the same way). Bytes it
    /// sends meanwhile belong to its next request and are kept (up to a bound).
    static func watch(_ connection: UnixConnection) async -> Outcome {
        var early: [UInt8] = []
        while early.count < 65_536 {
            let bytes: [UInt8]
            do { bytes = try await connection.read(max: 16_384) } catch {
                return Task.isCancelled ? .early(early) : .clientGone
            }
            if bytes.isEmpty { return Task.isCancelled ? .early(early) : .clientGone }
            early += bytes
        }
        await suspendUntilCancelled()
        return .early(early)
    }

    static func randomID() -> String {
        var generator = SystemRandomNumberGenerator()
        let digits = Array("0123456789abcdef")
        return String((0..<24).map { _ in digits[Int(generator.next() % 16)] })
    }
}

/// Writes one answer in order, whoever has something to write: the worker's pieces of
/// text, the hold timer (the head, the pulses) and the end. Writes never interleave; a
/// write that fails shuts the socket down, which ends the watch on the client and so
/// cancels the request.
actor Responder {
    enum State { case pending, open, finished, broken }

    let connection: UnixConnection
    let call: ProxyCall
    let id: String
    let keepAlive: Bool
    let cors: [(String, String)]
    let writeProgressMs: Int64
    /// Captured when the answer starts: pieces may be written from the upstream's own task.
    let progress = ConnectionProgress.current
    private var state = State.pending
    private var streamed = ""
    private var queue: [[UInt8]] = []
    private var writing = false
    private var drained: [CheckedContinuation<Void, Never>] = []

    init(connection: UnixConnection, call: ProxyCall, id: String, keepAlive: Bool, cors: [(String, String)], writeProgressMs: Int64) {
        self.writeProgressMs = writeProgressMs
        self.connection = connection
        self.call = call
        self.id = id
        self.keepAlive = keepAlive
        self.cors = cors
    }

    var usable: Bool { state == .finished && keepAlive }

    /// A piece of the worker's text, out at once.
    /// Writes a piece of the answer's text; true for the answer's first.
    @discardableResult
    func piece(_ text: String) async -> Bool {
        guard !text.isEmpty, state == .pending || state == .open else { return false }
        openHead()
        let first = streamed.isEmpty
        streamed += text
        enqueue(HTTPServerResponse.chunk(ProxyAnswer.piece(call, text, nowMs: wallClockMilliseconds(), id: id)))
        await flush()
        return first
    }

    /// After `ms` without the answer, the head goes out; a whole answer then gets a space
    /// every `pulseMs` until it is ready. Returns when cancelled.
    func hold(ms: Int64, pulseMs: Int64) async {
        do { try await Task.sleep(nanoseconds: UInt64(ms) * 1_000_000) } catch { return }
        guard state == .pending else { return await suspendUntilCancelled() }
        openHead()
        await flush()
        guard !call.stream else { return await suspendUntilCancelled() }
        while true {
            do { try await Task.sleep(nanoseconds: UInt64(pulseMs) * 1_000_000) } catch { return }
            guard state == .open else { return }
            enqueue(HTTPServerResponse.chunk([32]))
            await flush()
        }
    }

    /// Ends the answer with the result; returns the HTTP status the client got.
    @discardableResult
    func finish(_ result: GenerateResult, durationMs: Int64) async -> Int {
        defer { if state != .broken { state = .finished } }
        let now = wallClockMilliseconds()
        guard state == .open else {
            guard state == .pending else { return 0 }
            if call.stream, ProxyAnswer.failure(result) == nil, case .answered(_, let output, _, _) = result {
                openHead()
                let rest = ProxyAnswer.unsent(output: output, streamed: streamed)
                if !rest.isEmpty { enqueue(HTTPServerResponse.chunk(ProxyAnswer.piece(call, rest, nowMs: now, id: id))) }
                enqueue(
                    HTTPServerResponse.chunk(ProxyAnswer.streamEnd(call, durationMs: durationMs, nowMs: now, id: id)) + HTTPServerResponse.lastChunk)
                await flush()
                return 200
            }
            let (status, body) = ProxyAnswer.whole(call, result, durationMs: durationMs, nowMs: now, id: id)
            enqueue(
                HTTPServerResponse.whole(
                    status, contentType: "application/json", body: body.serializedBytes + [10], keepAlive: keepAlive, headers: cors))
            await flush()
            return status
        }
        if call.stream {
            if let (status, message) = ProxyAnswer.failure(result) {
                enqueue(HTTPServerResponse.chunk(ProxyAnswer.streamError(call, status: status, message: message)))
            } else if case .answered(_, let output, _, _) = result {
                let rest = ProxyAnswer.unsent(output: output, streamed: streamed)
                if !rest.isEmpty { enqueue(HTTPServerResponse.chunk(ProxyAnswer.piece(call, rest, nowMs: now, id: id))) }
                enqueue(HTTPServerResponse.chunk(ProxyAnswer.streamEnd(call, durationMs: durationMs, nowMs: now, id: id)))
            }
        } else {
            // The head said 200 already: a failure can only travel in the body.
            let body = ProxyAnswer.whole(call, result, durationMs: durationMs, nowMs: now, id: id).body
            enqueue(HTTPServerResponse.chunk(body.serializedBytes + [10]))
        }
        enqueue(HTTPServerResponse.lastChunk)
        await flush()
        return 200
    }

    private func openHead() {
        guard state == .pending else { return }
        state = .open
        let type = call.stream ? ProxyAnswer.streamContentType(call.dialect) : "application/json"
        enqueue(
            HTTPServerResponse.chunkedHead(200, contentType: type, keepAlive: keepAlive, headers: cors)
                + (call.stream ? HTTPServerResponse.chunk(ProxyAnswer.streamOpening(call, nowMs: wallClockMilliseconds(), id: id)) : []))
    }

    private func enqueue(_ bytes: [UInt8]) {
        if !bytes.isEmpty { queue.append(bytes) }
    }

    /// Writes what is queued; when another caller is writing already, waits for it to
    /// have written this caller's bytes too.
    private func flush() async {
        if writing {
            await withCheckedContinuation { drained.append($0) }
            return
        }
        writing = true
        while !queue.isEmpty {
            // All that is queued in one send: a head and the first piece leave together.
            let bytes = queue.count == 1 ? queue[0] : Array(queue.joined())
            queue.removeAll()
            guard state != .broken else { continue }
            do { try await connection.write(bytes, progressTimeoutMs: writeProgressMs, onProgress: progress?.marker) } catch {
                state = .broken
                // Wakes the watch on the client's side, which cancels the request.
                _ = shutdown(connection.fd, Int32(SHUT_RDWR))
            }
        }
        writing = false
        let waiting = drained
        drained = []
        waiting.forEach { $0.resume() }
    }
}

/// One admitted connection's record: its address and when it last moved (a byte read or
/// written), for the caps and eviction (`ConnectionAdmission`).
final class ConnectionProgress: Sendable {
    /// The connection the current task serves.
    @TaskLocal static var current: ConnectionProgress?

    let id: Int
    let address: String
    let connection: UnixConnection
    private let lastNs: Mutex<UInt64>

    init(id: Int, address: String, connection: UnixConnection, nowNs: UInt64) {
        self.id = id
        self.address = address
        self.connection = connection
        self.lastNs = Mutex(nowNs)
    }

    func mark() { lastNs.withLock { $0 = monotonicNanoseconds() } }
    var marker: @Sendable () -> Void { { [self] in mark() } }
    var lastProgressNs: UInt64 { lastNs.withLock { $0 } }
}

/// The proxy's open connections under its caps: admits, evicts the stalest at a cap (its
/// socket is shut down, which ends its reads and writes, so its own task closes it) and
/// forgets a connection when it is closed.
actor ConnectionRegistry {
    let limits: ConnectionAdmission.Limits
    private var open: [Int: ConnectionProgress] = [:]
    private var nextID = 0

    init(limits: ConnectionAdmission.Limits) { self.limits = limits }

    var count: Int { open.count }

    /// The new connection's record, or nil and why it is refused.
    func admit(_ connection: UnixConnection, address: String) -> (ConnectionProgress?, String?) {
        let now = monotonicNanoseconds()
        let snapshot = open.values.map { ConnectionAdmission.Open(id: $0.id, address: $0.address, lastProgressNs: $0.lastProgressNs) }
        switch ConnectionAdmission.decide(open: snapshot, address: address, limits: limits, nowNs: now) {
        case .refuse(let why):
            return (nil, why)
        case .admitEvicting(let id):
            if let evicted = open.removeValue(forKey: id) { _ = shutdown(evicted.connection.fd, Int32(SHUT_RDWR)) }
        case .admit:
            break
        }
        nextID += 1
        let record = ConnectionProgress(id: nextID, address: address, connection: connection, nowNs: now)
        open[nextID] = record
        return (record, nil)
    }

    func leave(_ id: Int) { open.removeValue(forKey: id) }
}
