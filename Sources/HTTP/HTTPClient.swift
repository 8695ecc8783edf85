#if canImport(Glibc)
import Glibc
#endif

/// An HTTP request: always a full URL, a method, headers and an optional body.
public struct HTTPRequest: Sendable {
    public var method: String
    public var url: String
    public var headers: [(String, String)]
    public var body: [UInt8]?
    public var connectTimeoutMs: Int64
    public var totalTimeoutMs: Int64
    /// Larger response bodies are an error (`responseTooLarge`), never buffered whole.
    public var maxResponseBytes: Int

    public init(
        method: String = "GET", url: String, headers: [(String, String)] = [], body: [UInt8]? = nil,
        connectTimeoutMs: Int64 = 5_000, totalTimeoutMs: Int64 = 30_000, maxResponseBytes: Int = 1_048_576
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.connectTimeoutMs = connectTimeoutMs
        self.totalTimeoutMs = totalTimeoutMs
        self.maxResponseBytes = maxResponseBytes
    }
}

public struct HTTPResponse: Sendable {
    public var status: Int
    public var body: [UInt8]
    /// From the start of the transfer to its end.
    public var durationMicroseconds: Int64

    /// `durationMicroseconds` is 0 for a transport with no transfer to time.
    public init(status: Int, body: [UInt8], durationMicroseconds: Int64 = 0) {
        self.status = status
        self.body = body
        self.durationMicroseconds = durationMicroseconds
    }
}

/// Why a request got no HTTP answer. `kind` is what callers match on.
public struct HTTPError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        case couldNotResolve = "could-not-resolve"
        case couldNotConnect = "could-not-connect"
        case timedOut = "timed-out"
        case tls
        case responseTooLarge = "response-too-large"
        case badURL = "bad-url"
        case transfer
    }
    public var kind: Kind
    public var message: String
    public var description: String { message }

    /// `message` says what failed for the operator; `kind` is what code matches on.
    public init(kind: Kind, message: String) {
        self.kind = kind
        self.message = message
    }
}

/// The one HTTP client the worker uses: plain `http://` through its own HTTP/1.1 client
/// (`PlainHTTPTransport`, connections kept alive between requests), `https://` and what a
/// proxy in the environment takes through libcurl (`CurlTransport`), which is loaded only
/// then (`HTTPRoute` decides, purely).
public final class HTTPClient: HTTPTransport {
    /// The process-wide client. Neither side spends a thread before its first request.
    public static let shared = HTTPClient()

    public static let userAgent = "edgecoder-worker"

    let plain: PlainHTTPTransport
    let curl: CurlTransport
    /// A variable of the process environment, nil when unset (an empty value is kept:
    /// libcurl tells the two apart for `no_proxy`).
    private let environment: @Sendable (String) -> String?

    init(
        plain: PlainHTTPTransport = PlainHTTPTransport(), curl: CurlTransport = CurlTransport(),
        environment: @escaping @Sendable (String) -> String? = { name in getenv(name).map { String(cString: $0) } }
    ) {
        self.plain = plain
        self.curl = curl
        self.environment = environment
    }

    /// The route `request` takes, read from the environment as it is now.
    func route(of request: HTTPRequest) -> HTTPRoute {
        HTTPRoute.choose(url: request.url, environment: environment)
    }

    public func perform(_ request: HTTPRequest) async throws -> HTTPResponse {
        try PlainHTTPRequestHead.checkFields(of: request)
        switch route(of: request) {
        case .plain: return try await plain.perform(request)
        case .libcurl: return try await curl.perform(request)
        }
    }

    public func stream(_ request: HTTPRequest) async throws -> HTTPStreamResponse {
        try PlainHTTPRequestHead.checkFields(of: request)
        switch route(of: request) {
        case .plain: return try await plain.stream(request)
        case .libcurl: return try await curl.stream(request)
        }
    }
}
