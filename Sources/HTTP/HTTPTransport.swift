/// Whatever carries a request to a server and brings back its answer: `HTTPClient` (the
/// worker's own HTTP/1.1 client or libcurl) in production, a scripted stand-in in tests (so the loops that talk HTTP run
/// in-process, in milliseconds).
public protocol HTTPTransport: Sendable {
    /// Sends `request`; returns the status and body, throws `HTTPError` when no HTTP
    /// answer came back and `CancellationError` when the calling task is cancelled.
    func perform(_ request: HTTPRequest) async throws -> HTTPResponse

    /// Sends `request` and returns as soon as the answer's first bytes arrived (or it
    /// ended empty): the status, and the body as the chunks come off the connection.
    /// Ending the iteration early, or cancelling the task that iterates, aborts the
    /// transfer, so the server sees the client leave. `request.maxResponseBytes` bounds
    /// the whole body, as in `perform`.
    func stream(_ request: HTTPRequest) async throws -> HTTPStreamResponse
}

/// An answer whose body is still arriving.
public struct HTTPStreamResponse: Sendable {
    public var status: Int
    /// The body in the chunks it arrived in; throws `HTTPError` when the transfer fails
    /// midway (a timeout, a reset, `responseTooLarge`).
    public var body: AsyncThrowingStream<[UInt8], any Error>

    public init(status: Int, body: AsyncThrowingStream<[UInt8], any Error>) {
        self.status = status
        self.body = body
    }

    /// The whole body, at most `limit` bytes (the rest is dropped, and the transfer with it).
    public func collect(limit: Int) async throws -> [UInt8] {
        var bytes: [UInt8] = []
        for try await chunk in body {
            bytes.append(contentsOf: chunk.prefix(max(0, limit - bytes.count)))
            if bytes.count >= limit { break }
        }
        return bytes
    }
}

extension HTTPTransport {
    /// A transport without a streaming path of its own (a scripted stand-in) streams
    /// its whole answer as one chunk.
    public func stream(_ request: HTTPRequest) async throws -> HTTPStreamResponse {
        let response = try await perform(request)
        let (body, continuation) = AsyncThrowingStream<[UInt8], any Error>.makeStream()
        if !response.body.isEmpty { continuation.yield(response.body) }
        continuation.finish()
        return HTTPStreamResponse(status: response.status, body: body)
    }
}

/// Who waits for a transfer, in either transport: a caller of `perform` for the whole
/// answer, or a caller of `stream` for the status, then the chunks.
enum HTTPWaiter: Sendable {
    case whole(CheckedContinuation<HTTPResponse, any Error>)
    case stream(CheckedContinuation<HTTPStreamResponse, any Error>)

    func fail(_ error: any Error) {
        switch self {
        case .whole(let continuation): continuation.resume(throwing: error)
        case .stream(let continuation): continuation.resume(throwing: error)
        }
    }
}
