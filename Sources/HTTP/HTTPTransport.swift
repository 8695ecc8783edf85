/// Whatever carries a request to a server and brings back its answer: `HTTPClient` over
/// libcurl in production, a scripted stand-in in tests (so the loops that talk HTTP run
/// in-process, in milliseconds).
public protocol HTTPTransport: Sendable {
    /// Sends `request`; returns the status and body, throws `HTTPError` when no HTTP
    /// answer came back and `CancellationError` when the calling task is cancelled.
    func perform(_ request: HTTPRequest) async throws -> HTTPResponse
}

extension HTTPClient: HTTPTransport {}

