/// The small HTTP/1.1 server side the proxy needs, pure: bytes in, a request or a clear
/// refusal out; responses serialized. One request per connection (`Connection: close`),
/// `Content-Length` bodies only, every size bounded.

public struct HTTPRequest: Sendable, Equatable {
    public var method: String
    /// The path without the query string.
    public var path: String
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    public func header(_ name: String) -> String? {
        let lower = name.lowercased()
        return headers.first { $0.name.lowercased() == lower }?.value
    }

    public static func == (a: HTTPRequest, b: HTTPRequest) -> Bool {
        a.method == b.method && a.path == b.path && a.body == b.body
            && a.headers.map(\.name) == b.headers.map(\.name) && a.headers.map(\.value) == b.headers.map(\.value)
    }
}

/// A request the server refuses, with the status to answer.
public struct HTTPRefusal: Error, Sendable, Equatable {
    public var status: Int
    public var message: String
    public init(_ status: Int, _ message: String) {
        self.status = status
        self.message = message
    }
}

/// Reads one request from a connection's bytes, as they arrive.
public struct HTTPRequestReader: Sendable {
    public enum Progress: Sendable, Equatable {
        case needMore
        case complete(HTTPRequest)
        case refused(HTTPRefusal)
    }

    public let maxHeadBytes: Int
    public let maxBodyBytes: Int
    private var buffer: [UInt8] = []
    private var head: (method: String, path: String, headers: [(name: String, value: String)], bodyStart: Int, length: Int)?
    /// Where the search for the blank line resumes (linear overall).
    private var searchFrom = 0

    public init(maxHeadBytes: Int = 16_384, maxBodyBytes: Int = 1_048_576) {
        self.maxHeadBytes = maxHeadBytes
        self.maxBodyBytes = maxBodyBytes
    }

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
            case .success(let parsed): head = (parsed.method, parsed.path, parsed.headers, end + 4, parsed.length)
            }
        }
        guard let head else { return .needMore }
        let have = buffer.count - head.bodyStart
        if have < head.length { return .needMore }
        return .complete(HTTPRequest(method: head.method, path: head.path, headers: head.headers,
                                     body: Array(buffer[head.bodyStart..<(head.bodyStart + head.length)])))
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

    private func parseHead(_ bytes: [UInt8]) -> Result<(method: String, path: String, headers: [(name: String, value: String)], length: Int), HTTPRefusal> {
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
        guard target.hasPrefix("/"), target.allSatisfy({ $0.isASCII && !$0.isWhitespace }) else { return .failure(HTTPRefusal(400, "malformed request target")) }
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
        return .success((method, path, headers, length))
    }
}

public enum HTTPServerResponse {
    public static func reason(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 400: "Bad Request"
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
        let payload = body.serializedBytes + [10]
        let head = "HTTP/1.1 \(status) \(reason(status))\r\nContent-Type: \(contentType)\r\nContent-Length: \(payload.count)\r\nConnection: close\r\n\r\n"
        return Array(head.utf8) + payload
    }
}

private extension String {
    var trimmingSpaces: String {
        var scalars = Substring(self)
        while scalars.first == " " || scalars.first == "\t" { scalars = scalars.dropFirst() }
        while scalars.last == " " || scalars.last == "\t" { scalars = scalars.dropLast() }
        return String(scalars)
    }
}
