import WorkerCore

/// The small HTTP/1.1 server side the proxy needs, pure: bytes in, a request or a clear
/// refusal out; responses serialized (whole, or chunked for streams). Keep-alive with
/// requests one after another on a connection; `Content-Length` bodies only, every size
/// bounded.

public struct HTTPServerRequest: Sendable, Equatable {
    public var method: String
    /// The path without the query string.
    public var path: String
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    /// `HTTP/1.1` or `HTTP/1.0`.
    public var version = "HTTP/1.1"

    public init(method: String, path: String, headers: [(name: String, value: String)], body: [UInt8], version: String = "HTTP/1.1") {
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
        self.version = version
    }

    /// Whether the client lets the connection stay open after the answer: HTTP/1.1's
    /// default unless `Connection: close`; HTTP/1.0 only with `Connection: keep-alive`.
    public var keepAlive: Bool {
        let tokens = (header("Connection") ?? "").lowercased().split(separator: ",").map { String($0).trimmingSpaces }
        if tokens.contains("close") { return false }
        return version == "HTTP/1.1" || tokens.contains("keep-alive")
    }

    /// The first value of a header, by case-insensitive name.
    public func header(_ name: String) -> String? {
        let lower = name.lowercased()
        return headers.first { $0.name.lowercased() == lower }?.value
    }

    public static func == (a: HTTPServerRequest, b: HTTPServerRequest) -> Bool {
        a.method == b.method && a.path == b.path && a.body == b.body && a.version == b.version
            && a.headers.map(\.name) == b.headers.map(\.name) && a.headers.map(\.value) == b.headers.map(\.value)
    }
}

/// A request the server refuses, with the status to answer.
public struct HTTPRefusal: Error, Sendable, Equatable {
    public var status: Int
    public var message: String
    /// The request field at fault (`options.temperature`), for answers that name it apart
    /// (OpenAI's `param`).
    public var field: String?
    public init(_ status: Int, _ message: String, field: String? = nil) {
        self.status = status
        self.message = message
        self.field = field
    }
}

/// Reads one request from a connection's bytes, as they arrive.
public struct HTTPRequestReader: Sendable {
    public enum Progress: Sendable, Equatable {
        case needMore
        case complete(HTTPServerRequest)
        case refused(HTTPRefusal)
    }

    public let maxHeadBytes: Int
    public let maxBodyBytes: Int
    private var buffer: [UInt8] = []
    private var head: (method: String, path: String, version: String, headers: [(name: String, value: String)], bodyStart: Int, length: Int)?
    /// Where the search for the blank line resumes (linear overall).
    private var searchFrom = 0
    private var continueOwed = false

    /// Bytes of the next request already received (a client may send it before our answer).
    public var buffered: Int { buffer.count }

    public init(maxHeadBytes: Int = 16_384, maxBodyBytes: Int = 1_048_576) {
        self.maxHeadBytes = maxHeadBytes
        self.maxBodyBytes = maxBodyBytes
    }

    /// Feeds bytes; after `.complete`, the bytes past that request stay for the next one
    /// (feed an empty collection to look at them).
    public mutating func feed(_ bytes: some Collection<UInt8>) -> Progress {
        buffer.append(contentsOf: bytes)
        if head == nil {
            guard let end = findBlankLine() else {
                if buffer.count > maxHeadBytes { return .refused(HTTPRefusal(431, "the request head is over \(maxHeadBytes) bytes")) }
                return .needMore
            }
            if end > maxHeadBytes { return .refused(HTTPRefusal(431, "the request head is over \(maxHeadBytes) bytes")) }
            switch parseHead(Array(buffer[0..<end])) {
            case .failure(let refusal): return .refused(refusal)
            case .success(let parsed):
                head = (parsed.method, parsed.path, parsed.version, parsed.headers, end + 4, parsed.length)
                continueOwed =
                    parsed.length > 0 && parsed.headers.contains { $0.name.lowercased() == "expect" && $0.value.lowercased() == "100-continue" }
            }
        }
        guard let head else { return .needMore }
        let have = buffer.count - head.bodyStart
        if have < head.length { return .needMore }
        let end = head.bodyStart + head.length
        let request = HTTPServerRequest(
            method: head.method, path: head.path, headers: head.headers, body: Array(buffer[head.bodyStart..<end]), version: head.version)
        buffer.removeFirst(end)
        self.head = nil
        searchFrom = 0
        continueOwed = false
        return .complete(request)
    }

    /// Keeps bytes for later without reading them (bytes of a next request that came while
    /// the current one was answered); the next `feed` reads them.
    public mutating func keep(_ bytes: some Collection<UInt8>) {
        buffer.append(contentsOf: bytes)
    }

    /// True once per request whose head asked `Expect: 100-continue` while its body has not
    /// arrived yet: curl waits a second for the interim answer before sending a body.
    public mutating func takeContinue() -> Bool {
        guard continueOwed, let head, buffer.count - head.bodyStart < head.length else { return false }
        continueOwed = false
        return true
    }

    private mutating func findBlankLine() -> Int? {
        var i = max(0, searchFrom - 3)
        while i + 4 <= buffer.count {
            if buffer[i] == 13 && buffer[i + 1] == 10 && buffer[i + 2] == 13 && buffer[i + 3] == 10 { return i }
            i += 1
        }
        searchFrom = buffer.count
        return nil
    }

    private func parseHead(_ bytes: [UInt8]) -> Result<
        (method: String, path: String, version: String, headers: [(name: String, value: String)], length: Int), HTTPRefusal
    > {
        guard let text = String(validating: bytes, as: UTF8.self) else { return .failure(HTTPRefusal(400, "the request head is not valid UTF-8")) }
        var lines = text.split(separator: "\r\n", omittingEmptySubsequences: false).map(String.init)
        guard !lines.isEmpty else { return .failure(HTTPRefusal(400, "empty request")) }
        let requestLine = lines.removeFirst().split(separator: " ", omittingEmptySubsequences: false)
        guard requestLine.count == 3, requestLine[2] == "HTTP/1.1" || requestLine[2] == "HTTP/1.0" else {
            return .failure(HTTPRefusal(400, "malformed request line: expected METHOD PATH HTTP/1.1"))
        }
        let method = String(requestLine[0])
        guard !method.isEmpty, method.allSatisfy({ $0.isASCII && $0.isUppercase }) else { return .failure(HTTPRefusal(400, "malformed method")) }
        let target = String(requestLine[1])
        guard target.hasPrefix("/"), target.allSatisfy({ $0.isASCII && !$0.isWhitespace }) else {
            return .failure(HTTPRefusal(400, "malformed request target"))
        }
        let path = String(target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)[0])
        var headers: [(name: String, value: String)] = []
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { return .failure(HTTPRefusal(400, "malformed header line")) }
            let name = String(line[..<colon])
            guard !name.isEmpty, name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }) else {
                return .failure(HTTPRefusal(400, "malformed header name"))
            }
            let value = String(line[line.index(after: colon)...]).trimmingSpaces
            headers.append((name, value))
            if headers.count > 100 { return .failure(HTTPRefusal(431, "more than 100 headers")) }
        }
        let get = { (wanted: String) in headers.filter { $0.name.lowercased() == wanted }.map(\.value) }
        if let encoding = get("transfer-encoding").first, encoding.lowercased() != "identity" {
            return .failure(HTTPRefusal(501, "Transfer-Encoding \(encoding) is not supported: send a Content-Length"))
        }
        let lengths = get("content-length")
        var length = 0
        if let first = lengths.first {
            guard lengths.allSatisfy({ $0 == first }), first.count <= 12, let n = Int(first), n >= 0 else {
                return .failure(HTTPRefusal(400, "malformed Content-Length"))
            }
            length = n
        }
        if length > maxBodyBytes { return .failure(HTTPRefusal(413, "the body is over \(maxBodyBytes) bytes")) }
        return .success((method, path, String(requestLine[2]), headers, length))
    }
}

public enum HTTPServerResponse {
    public static func reason(_ status: Int) -> String {
        switch status {
        case 100: "Continue"
        case 200: "OK"
        case 204: "No Content"
        case 400: "Bad Request"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 408: "Request Timeout"
        case 413: "Payload Too Large"
        case 431: "Request Header Fields Too Large"
        case 500: "Internal Server Error"
        case 501: "Not Implemented"
        case 502: "Bad Gateway"
        case 503: "Service Unavailable"
        case 504: "Gateway Timeout"
        default: "Status"
        }
    }

    /// A whole response with a JSON body (or one NDJSON line); the connection closes after it.
    public static func json(_ status: Int, _ body: JSONValue, contentType: String = "application/json") -> [UInt8] {
        whole(status, contentType: contentType, body: body.serializedBytes + [10], keepAlive: false)
    }

    /// A whole response; `headers` are added as given (CORS); `omitBody` for HEAD (the
    /// length is still the body's).
    public static func whole(
        _ status: Int, contentType: String?, body: [UInt8], keepAlive: Bool,
        headers: [(String, String)] = [], omitBody: Bool = false
    ) -> [UInt8] {
        var head = "HTTP/1.1 \(status) \(reason(status))\r\n"
        if let contentType { head += "Content-Type: \(contentType)\r\n" }
        head += "Content-Length: \(body.count)\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        head += keepAlive ? "\r\n" : "Connection: close\r\n\r\n"
        return Array(head.utf8) + (omitBody ? [] : body)
    }

    /// The head of a response whose body follows in chunks (`chunk`, then `lastChunk`).
    public static func chunkedHead(_ status: Int, contentType: String, keepAlive: Bool, headers: [(String, String)] = []) -> [UInt8] {
        var head = "HTTP/1.1 \(status) \(reason(status))\r\nContent-Type: \(contentType)\r\nTransfer-Encoding: chunked\r\n"
        // No buffering by a reverse proxy in front (nginx honours this header).
        head += "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        head += keepAlive ? "\r\n" : "Connection: close\r\n\r\n"
        return Array(head.utf8)
    }

    /// One chunk of a chunked body (empty data makes none: an empty chunk would end the body).
    public static func chunk(_ data: [UInt8]) -> [UInt8] {
        guard !data.isEmpty else { return [] }
        return Array((String(data.count, radix: 16) + "\r\n").utf8) + data + [13, 10]
    }

    /// The end of a chunked body.
    public static let lastChunk: [UInt8] = Array("0\r\n\r\n".utf8)
    /// The interim answer to `Expect: 100-continue`.
    public static let continueAnswer: [UInt8] = Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)
}

private extension String {
    var trimmingSpaces: String {
        var scalars = Substring(self)
        while scalars.first == " " || scalars.first == "\t" { scalars = scalars.dropFirst() }
        while scalars.last == " " || scalars.last == "\t" { scalars = scalars.dropLast() }
        return String(scalars)
    }
}

/// proxy-api §5's "browsers are not clients": a web page may make the user's browser send
/// requests to 127.0.0.1, directly (its `Origin` says so) or through a DNS name that it
/// rebinds to 127.0.0.1 (its `Host` is then that name). Ollama closed the same hole
/// (CVE-2024-28224) the same way: a Host allowlist and an Origin allowlist.
public struct BrowserGuard: Sendable, Equatable {
    /// Origins allowed besides the loopback ones, as given to `--allow-origin`; `*` in a
    /// pattern stands for any run of characters (`http://localhost:*`, `*`).
    public var allowedOrigins: [String]

    public init(allowedOrigins: [String] = []) {
        self.allowedOrigins = allowedOrigins
    }

    /// Whether a request may be served.
    public enum Verdict: Sendable, Equatable {
        /// Serve it; with `corsOrigin`, answer with `Access-Control-Allow-Origin` for it.
        case allowed(corsOrigin: String?)
        case forbidden(String)
    }

    /// The verdict on a request's `Host` and `Origin` (no `Host`: not a browser, which
    /// always sends one).
    public func check(host: String?, origin: String?) -> Verdict {
        if let host, !Self.isLoopbackHost(host) {
            return .forbidden(
                "Host \"\(Self.printable(host))\" is not a loopback name: the proxy answers only requests to localhost, 127.0.0.1 or [::1]")
        }
        guard let origin else { return .allowed(corsOrigin: nil) }
        guard isAllowedOrigin(origin) else {
            return .forbidden(
                "Origin \"\(Self.printable(origin))\" is not allowed: start the proxy with --allow-origin \(Self.printable(origin)) to let that web page use it"
            )
        }
        return .allowed(corsOrigin: origin)
    }

    /// A loopback origin (http or https to a loopback host) or one matching `allowedOrigins`.
    public func isAllowedOrigin(_ origin: String) -> Bool {
        let lower = origin.lowercased()
        for scheme in ["http://", "https://"] where lower.hasPrefix(scheme) {
            let authority = String(lower.dropFirst(scheme.count))
            if !authority.contains("/"), Self.isLoopbackHost(authority) { return true }
        }
        return allowedOrigins.contains { Self.glob($0.lowercased(), lower) }
    }

    /// `localhost`, `*.localhost`, `127.0.0.0/8` in dotted decimal, `[::1]`, each with or
    /// without `:port`.
    public static func isLoopbackHost(_ value: String) -> Bool {
        var host = Substring(value.lowercased())
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { return false }
            let inside = host[host.index(after: host.startIndex)..<close]
            let rest = host[host.index(after: close)...]
            guard rest.isEmpty || (rest.first == ":" && isPort(rest.dropFirst())) else { return false }
            return inside == "::1" || inside == "0:0:0:0:0:0:0:1"
        }
        if let colon = host.lastIndex(of: ":") {
            guard isPort(host[host.index(after: colon)...]) else { return false }
            host = host[..<colon]
        }
        if host.hasSuffix(".") { host = host.dropLast() }
        if host == "localhost" || (host.hasSuffix(".localhost") && host.count > ".localhost".count) { return true }
        let octets = host.split(separator: ".", omittingEmptySubsequences: false)
        guard octets.count == 4,
            octets.allSatisfy({ !$0.isEmpty && $0.count <= 3 && $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) && Int($0)! <= 255 })
        else { return false }
        return octets[0] == "127"
    }

    static func isPort(_ text: Substring) -> Bool {
        !text.isEmpty && text.count <= 5 && text.allSatisfy { $0.isASCII && $0.isNumber }
    }

    /// Matches `text` against `pattern` where `*` is any run of characters.
    static func glob(_ pattern: String, _ text: String) -> Bool {
        let p = Array(pattern), t = Array(text)
        var pi = 0, ti = 0, star = -1, mark = 0
        while ti < t.count {
            if pi < p.count && p[pi] != "*" && p[pi] == t[ti] {
                pi += 1; ti += 1
            } else if pi < p.count && p[pi] == "*" {
                star = pi; mark = ti; pi += 1
            } else if star >= 0 {
                pi = star + 1; mark += 1; ti = mark
            } else {
                return false
            }
        }
        while pi < p.count && p[pi] == "*" { pi += 1 }
        return pi == p.count
    }

    /// An origin pattern `--allow-origin` accepts: `*`, or `scheme://host[:port]` (with
    /// `*` anywhere), no path.
    public static func isOriginPattern(_ text: String) -> Bool {
        if text == "*" { return true }
        guard let range = text.firstRange(of: "://"), !text[..<range.lowerBound].isEmpty else { return false }
        let authority = text[range.upperBound...]
        return !authority.isEmpty && !authority.contains("/") && text.allSatisfy { $0.isASCII && !$0.isWhitespace }
    }

    /// The headers of a CORS answer for an allowed origin.
    public static func corsHeaders(origin: String) -> [(String, String)] {
        [("Access-Control-Allow-Origin", origin), ("Vary", "Origin")]
    }

    /// The headers of the answer to an allowed pre-flight (`OPTIONS`).
    public static func preflightHeaders(origin: String, requestedHeaders: String?) -> [(String, String)] {
        corsHeaders(origin: origin) + [
            ("Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS"),
            ("Access-Control-Allow-Headers", requestedHeaders.map(printable) ?? "Authorization, Content-Type"),
            ("Access-Control-Max-Age", "600"),
        ]
    }

    /// At most 200 characters, control and non-ASCII characters as `?` (for messages and logs).
    public static func printable(_ text: String) -> String {
        String(text.prefix(200).map { $0.isASCII && !$0.isWhitespace || $0 == " " ? $0 : "?" })
    }
}
