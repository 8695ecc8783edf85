/// An `http://` URL taken apart for the worker's own HTTP/1.1 client, pure: where to
/// connect, what to send as `Host`, and the request target.
public struct PlainHTTPURL: Sendable, Equatable {
    /// A name or an address to resolve; an IPv6 literal without its brackets.
    public var host: String
    public var port: UInt16
    /// The `Host` header: the host as written (brackets kept), the port when not 80.
    public var authority: String
    /// The path and query, `/` when the URL has none; never the fragment.
    public var target: String

    /// Parses `text`; anything but a plain `http://host[:port][/path][?query][#fragment]`
    /// is `.badURL`, with what is wrong.
    public init(_ text: String) throws(HTTPError) {
        func bad(_ why: String) -> HTTPError {
            HTTPError(kind: .badURL, message: "URL \(HTTPResponseReader.excerpt(Array(text.utf8))) \(why)")
        }
        let bytes = Array(text.utf8)
        guard bytes.count >= 7, String(decoding: bytes[0..<7], as: UTF8.self).lowercased() == "http://" else {
            throw bad("is not an http:// URL")
        }
        if bytes.contains(where: { $0 <= 0x20 || $0 == 0x7F }) { throw bad("holds a space or a control character") }
        var rest = bytes[7...]
        // The fragment is the client's own: never sent.
        if let hash = rest.firstIndex(of: 35) { rest = rest[..<hash] }
        let authorityEnd = rest.firstIndex(where: { $0 == 47 || $0 == 63 }) ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        let pathAndQuery = rest[authorityEnd...]
        if authority.contains(64) { throw bad("carries credentials (user@host), which the worker never sends in a URL") }
        guard !authority.isEmpty else { throw bad("has no host") }

        var hostPart: ArraySlice<UInt8>
        var portPart: ArraySlice<UInt8>?
        if authority.first == 91 {
            guard let close = authority.firstIndex(of: 93) else { throw bad("has an IPv6 address without its closing ]") }
            hostPart = authority[(authority.startIndex + 1)..<close]
            let after = authority[(close + 1)...]
            if let colon = after.first {
                guard colon == 58 else { throw bad("has something other than :port after its IPv6 address") }
                portPart = after.dropFirst()
            }
            // A zone (fe80::1%25eth0) is written percent-encoded in a URL.
            var address = String(decoding: hostPart, as: UTF8.self)
            if let percent = address.firstRange(of: "%25") { address.replaceSubrange(percent, with: "%") }
            let valid = address.utf8.prefix { $0 != 37 }
            guard valid.contains(58), valid.allSatisfy({ Self.isHexDigit($0) || $0 == 58 || $0 == 46 }) else {
                throw bad("has no valid IPv6 address between [ and ]")
            }
            host = address
        } else {
            if let colon = authority.firstIndex(of: 58) {
                hostPart = authority[..<colon]
                portPart = authority[(colon + 1)...]
            } else {
                hostPart = authority
            }
            guard !hostPart.isEmpty else { throw bad("has no host") }
            guard hostPart.allSatisfy({ Self.isHostByte($0) }) else { throw bad("has a host name with characters a host name cannot have") }
            host = String(decoding: hostPart, as: UTF8.self)
        }
        if let portPart, !portPart.isEmpty {
            guard portPart.count <= 5, portPart.allSatisfy({ $0 >= 48 && $0 <= 57 }), let value = Int(String(decoding: portPart, as: UTF8.self)),
                (1...65_535).contains(value)
            else { throw bad("has a port that is not a number from 1 to 65535") }
            port = UInt16(value)
        } else {
            port = 80
        }
        let hostAsWritten = String(decoding: authority.first == 91 ? authority[...(authority.firstIndex(of: 93)!)] : hostPart, as: UTF8.self)
        self.authority = port == 80 ? hostAsWritten : "\(hostAsWritten):\(port)"
        // Non-ASCII bytes go percent-encoded, as in any URL on the wire.
        var target = pathAndQuery.first == 47 ? "" : "/"
        for byte in pathAndQuery {
            if byte < 0x80 {
                target.unicodeScalars.append(UnicodeScalar(byte))
            } else {
                target += "%" + String(byte, radix: 16, uppercase: true)
            }
        }
        self.target = target
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        (48...57).contains(byte) || (65...70).contains(byte) || (97...102).contains(byte)
    }

    /// Letters, digits, `-`, `.`, `_` (a name or an IPv4 address).
    private static func isHostByte(_ byte: UInt8) -> Bool {
        (48...57).contains(byte) || (65...90).contains(byte) || (97...122).contains(byte) || byte == 45 || byte == 46 || byte == 95
    }
}

/// The bytes of a request as the worker's own client sends it. No `Connection` header of
/// its own: HTTP/1.1 keeps the connection by default, for the next request to reuse.
public enum PlainHTTPRequestHead {
    /// `METHOD target HTTP/1.1`, `Host`, `User-Agent`, `Accept`, the caller's headers
    /// (a caller's `Host`, `User-Agent` or `Accept` replaces ours, as with libcurl),
    /// `Content-Length` with a body, then the body.
    public static func bytes(of request: HTTPRequest, to url: PlainHTTPURL) throws(HTTPError) -> [UInt8] {
        try checkFields(of: request)
        let given = Set(request.headers.map { $0.0.lowercased() })
        var head = "\(request.method) \(url.target) HTTP/1.1\r\n"
        if !given.contains("host") { head += "Host: \(url.authority)\r\n" }
        if !given.contains("user-agent") { head += "User-Agent: \(HTTPClient.userAgent)\r\n" }
        if !given.contains("accept") { head += "Accept: */*\r\n" }
        for (name, value) in request.headers { head += "\(name): \(value)\r\n" }
        if let body = request.body { head += "Content-Length: \(body.count)\r\n" }
        head += "\r\n"
        var bytes = Array(head.utf8)
        if let body = request.body { bytes += body }
        return bytes
    }

    /// Refuses a method that is not a token and header fields that would end the line
    /// early (CR, LF, NUL): a value from a config or a server carried into a header must
    /// never add a header or a request of its own (request splitting). `.badURL`: the
    /// request is malformed before anything is sent.
    public static func checkFields(of request: HTTPRequest) throws(HTTPError) {
        guard !request.method.isEmpty, request.method.utf8.allSatisfy(isTokenByte) else {
            throw HTTPError(
                kind: .badURL, message: "the request method \(HTTPResponseReader.excerpt(Array(request.method.utf8))) is not an HTTP token")
        }
        for (name, value) in request.headers {
            guard !name.isEmpty, name.utf8.allSatisfy(isTokenByte) else {
                throw HTTPError(
                    kind: .badURL, message: "the request header name \(HTTPResponseReader.excerpt(Array(name.utf8))) is not an HTTP token")
            }
            if value.utf8.contains(where: { $0 == 13 || $0 == 10 || $0 == 0 }) {
                throw HTTPError(
                    kind: .badURL,
                    message:
                        "the value of request header \(name) holds a line break or NUL, which would split the request: \(HTTPResponseReader.excerpt(Array(value.utf8)))"
                )
            }
        }
    }

    /// RFC 9110's tchar.
    static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case 48...57, 65...90, 97...122: true
        default: Array("!#$%&'*+-.^_`|~".utf8).contains(byte)
        }
    }
}
