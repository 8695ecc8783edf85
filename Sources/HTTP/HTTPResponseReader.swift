/// The status line and headers of an answer.
public struct HTTPResponseHead: Sendable, Equatable {
    public var status: Int
    public var headers: [HTTPHeaderField]

    public init(status: Int, headers: [HTTPHeaderField]) {
        self.status = status
        self.headers = headers
    }

    /// Every value of a header, by case-insensitive name, in the order received.
    public func values(of name: String) -> [String] {
        let lower = name.lowercased()
        return headers.filter { $0.name.lowercased() == lower }.map(\.value)
    }
}

public struct HTTPHeaderField: Sendable, Equatable {
    public var name: String
    public var value: String

    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }
}

/// Reads one HTTP/1.1 answer from a connection's bytes as they arrive, pure: bytes in,
/// the head and the body's pieces out, so a streamed body (Ollama's NDJSON in chunked
/// encoding) reaches its reader line by line. Frames the body by `Transfer-Encoding:
/// chunked`, `Content-Length`, or the connection's end; skips interim 1xx answers; every
/// size is bounded. Malformed framing is a `failure` of kind `.transfer` saying what was
/// wrong; a body over `maxBodyBytes` is `.responseTooLarge`, as on libcurl's path.
/// Whether the connection may carry another request afterwards is `keepsConnection`.
public struct HTTPResponseReader: Sendable {
    /// What one `feed` produced.
    public struct Progress: Sendable, Equatable {
        /// The head, in the feed that completed it (interim 1xx answers are never shown).
        public var head: HTTPResponseHead?
        /// The body bytes this feed completed, chunk framing removed.
        public var body: [UInt8] = []
        /// The answer ended: nothing after it is read.
        public var isComplete = false
        /// The answer broke after what `head` and `body` carry: a stream's reader gets the
        /// status and the body before it, then this error. Every later feed repeats it.
        public var failure: HTTPError?
    }

    /// The status lines and headers of all heads (interim ones too) together; also the
    /// bound of a chunked body's trailers.
    public static let maxHeadBytes = 65_536
    /// A chunk-size line with its extensions. Sizes need 16 hex digits at most; servers
    /// send no extensions to speak of.
    public static let maxChunkLineBytes = 1_024

    private enum State {
        case head
        case fixed(remaining: Int)
        case chunkSize
        case chunkData(remaining: Int)
        case chunkDataEnd
        case trailers
        case untilClose
        case done
    }

    public let maxBodyBytes: Int
    /// A HEAD request's answer has no body, whatever its headers say.
    public let isHeadRequest: Bool
    private var state = State.head
    /// The unfinished line of the head, a chunk-size line or the trailers.
    private var line: [UInt8] = []
    private var headBytes = 0
    private var trailerBytes = 0
    private var statusLine: (status: Int, text: String, isHTTP11: Bool)?
    private var headers: [HTTPHeaderField] = []
    private var bodyBytes = 0
    private var sawAnyByte = false
    private var failure: HTTPError?
    /// The final head's version and `Connection` header let the connection stay open.
    private var headAllowsKeepAlive = false
    /// Bytes came after the end of the answer: the connection is out of step.
    private var sawBytesAfterEnd = false

    public init(maxBodyBytes: Int, isHeadRequest: Bool = false) {
        self.maxBodyBytes = maxBodyBytes
        self.isHeadRequest = isHeadRequest
    }

    /// Whether the answer ended.
    public var isComplete: Bool {
        if case .done = state { return true }
        return false
    }

    /// Whether the connection may carry the next request: the answer ended with its length
    /// known (Content-Length, chunked, or no body by its status), the server let the
    /// connection stay open (HTTP/1.1 without `Connection: close`, HTTP/1.0 only with
    /// `Connection: keep-alive`), and nothing came after the answer.
    public var keepsConnection: Bool {
        isComplete && failure == nil && headAllowsKeepAlive && !sawBytesAfterEnd
    }

    /// Feeds the bytes that came off the connection. Bytes after the end of the answer
    /// are not read (and the connection is then not kept).
    public mutating func feed(_ bytes: ArraySlice<UInt8>) -> Progress {
        var progress = Progress()
        do {
            try consume(bytes, into: &progress)
        } catch {
            failure = error
        }
        progress.isComplete = isComplete && failure == nil
        progress.failure = failure
        return progress
    }

    public mutating func feed(_ bytes: [UInt8]) -> Progress { feed(bytes[...]) }

    /// The connection ended (EOF): completes a body read to the close, or says what was cut.
    public mutating func finish() -> Progress {
        var progress = Progress()
        if failure == nil {
            do throws(HTTPError) {
                try end()
            } catch {
                failure = error
            }
        }
        progress.isComplete = isComplete && failure == nil
        progress.failure = failure
        return progress
    }

    private mutating func consume(_ bytes: ArraySlice<UInt8>, into progress: inout Progress) throws(HTTPError) {
        if let failure { throw failure }
        if !bytes.isEmpty { sawAnyByte = true }
        var rest = bytes
        while !rest.isEmpty {
            switch state {
            case .done:
                sawBytesAfterEnd = true
                return
            case .head:
                guard let end = try takeLine(from: &rest, limit: Self.maxHeadBytes - headBytes, what: .head) else { continue }
                headBytes += end
                if let head = try headLine() {
                    progress.head = head
                    // Too large to take, known from the head: the status still goes out first.
                    if case .fixed(let length) = state, length > maxBodyBytes { throw tooLarge() }
                }
            case .fixed(let remaining):
                let piece = rest.prefix(remaining)
                rest = rest.dropFirst(piece.count)
                try appendBody(piece, to: &progress)
                state = remaining == piece.count ? .done : .fixed(remaining: remaining - piece.count)
            case .chunkSize:
                guard try takeLine(from: &rest, limit: Self.maxChunkLineBytes, what: .chunkSize) != nil else { continue }
                let size = try Self.chunkSize(line)
                line.removeAll()
                state = size == 0 ? .trailers : .chunkData(remaining: size)
                if size > 0, bodyBytes + size > maxBodyBytes { throw tooLarge() }
            case .chunkData(let remaining):
                let piece = rest.prefix(remaining)
                rest = rest.dropFirst(piece.count)
                try appendBody(piece, to: &progress)
                state = remaining == piece.count ? .chunkDataEnd : .chunkData(remaining: remaining - piece.count)
            case .chunkDataEnd:
                // CRLF, or a bare LF as curl tolerates.
                guard try takeLine(from: &rest, limit: 2, what: .chunkEnd) != nil else { continue }
                guard line.isEmpty else { throw framing("a chunk's data is not followed by CRLF") }
                state = .chunkSize
            case .trailers:
                guard let end = try takeLine(from: &rest, limit: Self.maxHeadBytes - trailerBytes, what: .trailers) else { continue }
                trailerBytes += end
                // Trailer fields are read past, never used.
                if line.isEmpty { state = .done }
                line.removeAll()
            case .untilClose:
                try appendBody(rest, to: &progress)
                rest = rest.dropFirst(rest.count)
            }
        }
    }

    private mutating func end() throws(HTTPError) {
        switch state {
        case .done:
            return
        case .untilClose:
            state = .done
        case .head:
            if !sawAnyByte { throw framing("the server closed the connection without answering") }
            throw framing("the connection closed in the middle of the answer's status line and headers")
        case .fixed(let remaining):
            throw framing("the connection closed after \(bodyBytes) of the \(bodyBytes + remaining) body bytes its Content-Length announced")
        case .chunkSize, .chunkData, .chunkDataEnd, .trailers:
            throw framing("the connection closed in the middle of a chunked body (after \(bodyBytes) bytes, before its last chunk)")
        }
    }

    // MARK: lines

    private enum LineKind { case head, chunkSize, chunkEnd, trailers }

    /// Moves bytes of `rest` into `line` up to its LF (CRLF or a bare LF, as curl accepts).
    /// Returns the line's length with its terminator once complete, `line` then holding it
    /// without; nil when `rest` ran out first.
    private mutating func takeLine(from rest: inout ArraySlice<UInt8>, limit: Int, what: LineKind) throws(HTTPError) -> Int? {
        let lf = rest.firstIndex(of: 10)
        let piece = rest[..<(lf ?? rest.endIndex)]
        if line.count + piece.count + (lf == nil ? 0 : 1) > limit {
            switch what {
            case .head: throw framing("the answer's status line and headers are over \(Self.maxHeadBytes) bytes")
            case .chunkSize: throw framing("a chunk-size line is over \(Self.maxChunkLineBytes) bytes")
            case .chunkEnd: throw framing("a chunk's data is not followed by CRLF")
            case .trailers: throw framing("the trailers after a chunked body are over \(Self.maxHeadBytes) bytes")
            }
        }
        line.append(contentsOf: piece)
        guard let lf else {
            rest = rest[rest.endIndex...]
            return nil
        }
        rest = rest[rest.index(after: lf)...]
        let length = line.count + 1
        if line.last == 13 { line.removeLast() }
        return length
    }

    /// Takes the complete line of the head in `line`: the status line, a header, or the blank
    /// line that ends the head. Returns the head when it ends with a final status.
    private mutating func headLine() throws(HTTPError) -> HTTPResponseHead? {
        defer { line.removeAll(keepingCapacity: true) }
        guard let status = statusLine else {
            let (status, text) = try Self.parseStatusLine(line)
            statusLine = (status, text, line[7] == UInt8(ascii: "1"))  // the minor version: HTTP/1.1
            return nil
        }
        if !line.isEmpty {
            try addHeader()
            return nil
        }
        statusLine = nil
        let head = HTTPResponseHead(status: status.status, headers: headers)
        headers = []
        switch status.status {
        case 101:
            throw framing("the server switched protocols (101 \(status.text)), which this client never asks for")
        case 100..<200:
            // An interim answer (100 Continue, 103 Early Hints): the real one follows.
            return nil
        default:
            state = try framingState(of: head)
            // A body that ends with the connection leaves nothing to keep.
            if case .untilClose = state {
                headAllowsKeepAlive = false
            } else {
                headAllowsKeepAlive = Self.allowsKeepAlive(head, isHTTP11: status.isHTTP11)
            }
            return head
        }
    }

    private mutating func addHeader() throws(HTTPError) {
        if let bad = line.first(where: { ($0 < 0x20 && $0 != 9) || $0 == 0x7F }) {
            throw framing("a header line holds the control byte \(Self.hex(bad)): \(Self.excerpt(line))")
        }
        if line.first == 32 || line.first == 9 {
            // Obsolete line folding: the line continues the previous header's value.
            guard !headers.isEmpty else { throw framing("the first header line starts with whitespace: \(Self.excerpt(line))") }
            headers[headers.count - 1].value += " " + Self.trimmed(line[...])
            return
        }
        guard let colon = line.firstIndex(of: 58) else { throw framing("a header line has no colon: \(Self.excerpt(line))") }
        let name = line[..<colon]
        guard !name.isEmpty, name.allSatisfy(PlainHTTPRequestHead.isTokenByte) else {
            throw framing("a header name is not a token (letters, digits, -, _ and the like): \(Self.excerpt(line))")
        }
        headers.append(HTTPHeaderField(name: String(decoding: name, as: UTF8.self), value: Self.trimmed(line[(colon + 1)...])))
    }

    /// How the body after `head` is framed (RFC 9112 section 6.3).
    private func framingState(of head: HTTPResponseHead) throws(HTTPError) -> State {
        if isHeadRequest || head.status == 204 || head.status == 304 { return .done }
        let lengths = head.values(of: "content-length").flatMap { $0.split(separator: ",", omittingEmptySubsequences: false) }
        let codings = head.values(of: "transfer-encoding").flatMap { $0.split(separator: ",") }
            .map { Self.trimmed(Array($0.utf8)[...]).lowercased() }.filter { !$0.isEmpty && $0 != "identity" }
        if !codings.isEmpty {
            guard codings == ["chunked"] else {
                throw framing("the body's Transfer-Encoding \(codings.joined(separator: ", ")) is not supported (only chunked)")
            }
            if !lengths.isEmpty { throw framing("the answer has both Content-Length and Transfer-Encoding: chunked, so its end is ambiguous") }
            return .chunkSize
        }
        var length: Int?
        for text in lengths {
            let digits = Self.trimmed(Array(text.utf8)[...])
            guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) else {
                throw framing("Content-Length \(Self.excerpt(Array(text.utf8))) is not a number")
            }
            guard digits.utf8.count <= 18, let value = Int(digits) else { throw framing("Content-Length \(digits) is too large to be true") }
            if let length, length != value { throw framing("conflicting Content-Length values \(length) and \(value)") }
            length = value
        }
        guard let length else { return .untilClose }
        return length == 0 ? .done : .fixed(remaining: length)
    }

    private mutating func appendBody(_ piece: some Collection<UInt8>, to progress: inout Progress) throws(HTTPError) {
        if bodyBytes + piece.count > maxBodyBytes { throw tooLarge() }
        bodyBytes += piece.count
        progress.body.append(contentsOf: piece)
    }

    private func tooLarge() -> HTTPError {
        HTTPError(kind: .responseTooLarge, message: "the answer is larger than \(maxBodyBytes) bytes")
    }

    // MARK: pure pieces

    /// RFC 9112 section 9.3: HTTP/1.1 keeps the connection unless `Connection: close`;
    /// HTTP/1.0 closes it unless `Connection: keep-alive`.
    static func allowsKeepAlive(_ head: HTTPResponseHead, isHTTP11: Bool) -> Bool {
        let options = connectionOptions(head.values(of: "connection"))
        if options.contains("close") { return false }
        return isHTTP11 || options.contains("keep-alive")
    }

    /// RFC 9110 section 7.6.1: the options of `Connection` fields (VALUES), each a
    /// comma-separated list, trimmed and lowercased: an answer's and a request's alike.
    static func connectionOptions(_ values: [String]) -> [String] {
        values.flatMap { $0.split(separator: ",") }.map { trimmed(Array($0.utf8)[...]).lowercased() }
    }

    /// `HTTP/1.1 200 OK`: the version (1.0 or 1.1), a three-digit status, an optional reason.
    static func parseStatusLine(_ line: [UInt8]) throws(HTTPError) -> (status: Int, text: String) {
        let prefix = Array("HTTP/1.".utf8)
        guard line.count >= 12, line.starts(with: prefix), line[7] == 48 || line[7] == 49, line[8] == 32,
            line[9...11].allSatisfy({ $0 >= 48 && $0 <= 57 }), line.count == 12 || line[12] == 32
        else {
            throw framing("the status line is not HTTP/1.x (is something else listening on that port?): \(excerpt(line))")
        }
        if let bad = line.first(where: { ($0 < 0x20 && $0 != 9) || $0 == 0x7F }) {
            throw framing("the status line holds the control byte \(hex(bad)): \(excerpt(line))")
        }
        let status = Int(line[9] - 48) * 100 + Int(line[10] - 48) * 10 + Int(line[11] - 48)
        guard (100...599).contains(status) else { throw framing("status \(status) is not one HTTP defines: \(excerpt(line))") }
        return (status, String(decoding: line.dropFirst(13), as: UTF8.self))
    }

    /// A chunk-size line: hex digits, then optionally `;` and extensions (ignored).
    static func chunkSize(_ line: [UInt8]) throws(HTTPError) -> Int {
        let end = line.firstIndex(of: 59) ?? line.count
        var digits = line[..<end]
        while let last = digits.last, last == 32 || last == 9 { digits.removeLast() }
        guard !digits.isEmpty else { throw framing("a chunk-size line has no size: \(excerpt(line))") }
        var size = 0
        for byte in digits {
            guard let digit = hexValue(byte) else { throw framing("a chunk size is not hexadecimal: \(excerpt(line))") }
            let (shifted, overflow) = size.multipliedReportingOverflow(by: 16)
            guard !overflow, shifted <= Int.max - digit else { throw framing("a chunk size overflows: \(excerpt(line))") }
            size = shifted + digit
        }
        return size
    }

    private static func hexValue(_ byte: UInt8) -> Int? {
        switch byte {
        case 48...57: Int(byte - 48)
        case 65...70: Int(byte - 55)
        case 97...102: Int(byte - 87)
        default: nil
        }
    }

    private static func trimmed(_ bytes: ArraySlice<UInt8>) -> String {
        var slice = bytes
        while let first = slice.first, first == 32 || first == 9 { slice.removeFirst() }
        while let last = slice.last, last == 32 || last == 9 { slice.removeLast() }
        return String(decoding: slice, as: UTF8.self)
    }

    private static func framing(_ what: String) -> HTTPError {
        HTTPError(kind: .transfer, message: what)
    }

    private func framing(_ what: String) -> HTTPError { Self.framing(what) }

    private static func hex(_ byte: UInt8) -> String {
        let digits = Array("0123456789abcdef")
        return "0x" + String(digits[Int(byte >> 4)]) + String(digits[Int(byte & 15)])
    }

    /// The start of what the server sent, quoted, at most 60 bytes, bytes outside
    /// printable ASCII as \xNN: the operator sees what answered without the terminal
    /// seeing raw bytes.
    static func excerpt(_ bytes: some Collection<UInt8>) -> String {
        var out = "\""
        for byte in bytes.prefix(60) {
            switch byte {
            case 34, 92: out += "\\" + String(UnicodeScalar(byte))
            case 32..<127: out += String(UnicodeScalar(byte))
            default: out += "\\x" + hex(byte).dropFirst(2)
            }
        }
        return out + (bytes.count > 60 ? "…\"" : "\"")
    }
}
