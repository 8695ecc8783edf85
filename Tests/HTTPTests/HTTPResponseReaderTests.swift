import Testing

@testable import HTTP

/// What a reader made of a whole input: the head, the body, whether it completed.
private struct Reading: Equatable {
    var head: HTTPResponseHead?
    var body: [UInt8] = []
    var isComplete = false
}

/// Feeds `pieces` one after another, then the connection's end when `eof`.
private func read(_ pieces: [[UInt8]], eof: Bool = true, maxBody: Int = 1_048_576, isHead: Bool = false) throws(HTTPError) -> Reading {
    var reader = HTTPResponseReader(maxBodyBytes: maxBody, isHeadRequest: isHead)
    var reading = Reading()
    func take(_ progress: HTTPResponseReader.Progress) throws(HTTPError) {
        if let head = progress.head {
            #expect(reading.head == nil, "a second head")
            reading.head = head
        }
        #expect(progress.body.isEmpty || reading.head != nil, "body before the head")
        #expect(!reading.isComplete || progress.body.isEmpty, "body after the end")
        reading.body += progress.body
        reading.isComplete = reading.isComplete || progress.isComplete
        if let failure = progress.failure { throw failure }
    }
    for piece in pieces { try take(reader.feed(piece)) }
    if eof && !reading.isComplete { try take(reader.finish()) }
    return reading
}

private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

private func failure(_ pieces: [[UInt8]], eof: Bool = true, maxBody: Int = 1_048_576) -> HTTPError? {
    do {
        _ = try read(pieces, eof: eof, maxBody: maxBody)
        return nil
    } catch {
        return error
    }
}

/// Well-formed answers and what they carry.
private let wellFormed: [(name: String, wire: String, status: Int, body: String, needsEOF: Bool)] = [
    ("content-length", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}", 200, "{\"ok\":true}", false),
    (
        "chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\npiece 0\n\r\n8\r\npiece 1\n\r\n0\r\n\r\n", 200, "piece 0\npiece 1\n",
        false
    ),
    (
        "chunked with extensions and trailers",
        "HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\n\r\n5;name=value\r\nhello\r\n1 ; x\r\n!\r\n0;last\r\nX-Checksum: abc\r\nX-Other: d\r\n\r\n",
        200, "hello!", false
    ),
    ("close-delimited", "HTTP/1.0 200 OK\r\nServer: old\r\n\r\nall of it until the end", 200, "all of it until the end", true),
    ("interim 100 then the answer", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok", 201, "ok", false),
    (
        "two interim answers",
        "HTTP/1.1 100 Continue\r\nX: 1\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
        404, "", false
    ),
    ("204 with no framing", "HTTP/1.1 204 No Content\r\nX: y\r\n\r\n", 204, "", false),
    ("304 with a length it does not send", "HTTP/1.1 304 Not Modified\r\nContent-Length: 50\r\n\r\n", 304, "", false),
    ("bare LF line ends", "HTTP/1.1 200 OK\nContent-Length: 3\n\nabc", 200, "abc", false),
    ("a status line without a reason", "HTTP/1.1 503\r\nContent-Length: 1\r\n\r\nx", 503, "x", false),
    ("identity is no coding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\nContent-Length: 2\r\n\r\nab", 200, "ab", false),
    ("equal Content-Lengths", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\ncontent-length: 2, 2\r\n\r\nab", 200, "ab", false),
]

@Suite struct HTTPResponseReaderReadsWellFormedAnswers {
    @Test(arguments: wellFormed.map(\.name))
    func wholeAndByteByByteGiveTheSameAnswer(name: String) throws {
        let sample = try #require(wellFormed.first { $0.name == name })
        let wire = bytes(sample.wire)
        for pieces in [[wire], wire.map { [$0] }] {
            let reading = try read(pieces)
            #expect(reading.head?.status == sample.status)
            #expect(reading.body == bytes(sample.body))
            #expect(reading.isComplete)
        }
        // Complete without the connection's end, unless the close frames the body.
        let unclosed = try read([wire], eof: false)
        #expect(unclosed.isComplete == !sample.needsEOF)
    }

    @Test(arguments: wellFormed.map(\.name))
    func everySplitInTwoGivesTheSameAnswer(name: String) throws {
        let sample = try #require(wellFormed.first { $0.name == name })
        let wire = bytes(sample.wire)
        for split in 0...wire.count {
            let reading = try read([Array(wire[..<split]), Array(wire[split...])])
            #expect(reading.body == bytes(sample.body), "split at \(split)")
            #expect(reading.head?.status == sample.status)
        }
    }

    @Test(arguments: wellFormed.filter { !$0.needsEOF }.map(\.name))
    func truncatedAtEveryByteIsAnErrorNeverAnAnswer(name: String) throws {
        let sample = try #require(wellFormed.first { $0.name == name })
        let wire = bytes(sample.wire)
        for cut in 0..<wire.count {
            let error = failure([Array(wire[..<cut])])
            #expect(error?.kind == .transfer, "cut at \(cut) of \(wire.count): \(String(describing: error))")
        }
    }

    @Test func headersAreFoundByAnyCase() throws {
        let reading = try read([bytes("HTTP/1.1 200 OK\r\nX-Thing:  a b \r\nx-thing:c\r\nContent-Length: 0\r\n\r\n")])
        #expect(reading.head?.values(of: "X-THING") == ["a b", "c"])
        #expect(reading.head?.headers.first == HTTPHeaderField(name: "X-Thing", value: "a b"))
    }

    @Test func aFoldedHeaderLineContinuesTheValueBeforeIt() throws {
        let reading = try read([bytes("HTTP/1.1 200 OK\r\nX-Long: one\r\n  two\r\nContent-Length: 0\r\n\r\n")])
        #expect(reading.head?.values(of: "x-long") == ["one two"])
    }

    @Test func aHEADAnswerHasNoBodyWhateverItsLength() throws {
        let wire = bytes("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        let reading = try read([wire], eof: false, isHead: true)
        #expect(reading.isComplete && reading.body.isEmpty)
        let chunked = try read([bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")], eof: false, isHead: true)
        #expect(chunked.isComplete)
    }

    @Test func eachChunkComesOutOfTheFeedThatCompletedIt() throws {
        var reader = HTTPResponseReader(maxBodyBytes: 1_000)
        let first = reader.feed(bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"))
        #expect(first.head?.status == 200 && first.body.isEmpty && !first.isComplete)
        #expect(reader.feed(bytes("8\r\npiece 0\n\r\n")).body == bytes("piece 0\n"))
        // Part of a chunk is handed on at once: a stream's reader needs no whole chunk.
        #expect(reader.feed(bytes("8\r\npie")).body == bytes("pie"))
        #expect(reader.feed(bytes("ce 1\n\r")).body == bytes("ce 1\n"))
        let last = reader.feed(bytes("\n0\r\n\r\n"))
        #expect(last.body.isEmpty && last.isComplete)
        #expect(reader.isComplete)
    }

    @Test func bytesAfterTheAnswerAreIgnored() throws {
        let reading = try read([bytes("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nabEXTRA"), bytes("more")], eof: false)
        #expect(reading.body == bytes("ab") && reading.isComplete)
    }

    @Test func anEmptyCloseDelimitedBodyIsAnAnswer() throws {
        let reading = try read([bytes("HTTP/1.1 200 OK\r\n\r\n")])
        #expect(reading.head?.status == 200 && reading.body.isEmpty && reading.isComplete)
    }
}

/// Hostile and broken answers: each is `.transfer` with words that say what was wrong.
private let broken: [(wire: String, says: String)] = [
    ("SSH-2.0-OpenSSH_9.2p1 Debian\r\n", "the status line is not HTTP/1.x"),
    ("HTTP/2 200\r\n\r\n", "the status line is not HTTP/1.x"),
    ("HTTP/1.1 20 OK\r\n\r\n", "the status line is not HTTP/1.x"),
    ("HTTP/1.1 2000 OK\r\n\r\n", "the status line is not HTTP/1.x"),
    ("HTTP/1.1 999 Odd\r\n\r\n", "status 999 is not one HTTP defines"),
    ("HTTP/1.1 200 O\u{1}K\r\n\r\n", "control byte 0x01"),
    ("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n", "switched protocols"),
    ("HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "a header line has no colon"),
    ("HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n", "is not a token"),
    ("HTTP/1.1 200 OK\r\n: empty name\r\n\r\n", "is not a token"),
    ("HTTP/1.1 200 OK\r\nX: a\u{0}b\r\n\r\n", "control byte 0x00"),
    ("HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n", "control byte 0x0d"),
    ("HTTP/1.1 200 OK\r\n folded first\r\n\r\n", "starts with whitespace"),
    ("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", "both Content-Length and Transfer-Encoding"),
    ("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", "conflicting Content-Length values 5 and 6"),
    ("HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\nhello!", "conflicting Content-Length values 5 and 6"),
    ("HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n", "is not a number"),
    ("HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n", "is not a number"),
    ("HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n", "is not a number"),
    ("HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n", "too large to be true"),
    ("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "Transfer-Encoding gzip, chunked is not supported"),
    ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "a chunk size is not hexadecimal"),
    ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n", "a chunk size is not hexadecimal"),
    ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\n", "a chunk size is not hexadecimal"),
    ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\n", "has no size"),
    ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n", "a chunk size overflows"),
    ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n", "not followed by CRLF"),
    ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", "in the middle of a chunked body"),
    ("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "after 3 of the 10 body bytes"),
    ("HTTP/1.1 200 OK\r\nContent-Le", "in the middle of the answer's status line and headers"),
    ("", "closed the connection without answering"),
]

@Suite struct HTTPResponseReaderRefusesBrokenAnswers {
    @Test(arguments: broken.indices)
    func isATransferErrorThatSaysWhatWasWrong(index: Int) {
        let sample = broken[index]
        let error = failure([bytes(sample.wire)])
        #expect(error?.kind == .transfer, "\(sample.wire.debugDescription): \(String(describing: error))")
        #expect(error?.message.contains(sample.says) == true, "\(sample.wire.debugDescription): \(error?.message ?? "no error")")
    }

    @Test func hostileBytesAreQuotedNotEchoedRaw() {
        let error = failure([[0x1B, 0x5B, 0x32, 0x4A, 0xFF, 0x0D, 0x0A]])
        #expect(error?.message.contains("\"\\x1b[2J\\xff\"") == true, "\(error?.message ?? "")")
    }

    @Test func theHeadIsBoundedTo64KiB() throws {
        let filler = String(repeating: "X-Filler: " + String(repeating: "a", count: 90) + "\r\n", count: 700)
        let error = failure([bytes("HTTP/1.1 200 OK\r\n" + filler + "\r\n")], eof: false)
        #expect(error?.kind == .transfer)
        #expect(error?.message.contains("over 65536 bytes") == true)
        // One line that never ends is bounded alike.
        let endless = failure([bytes("HTTP/1.1 200 OK\r\nX: " + String(repeating: "a", count: 70_000))], eof: false)
        #expect(endless?.message.contains("over 65536 bytes") == true)
        // Just under the bound is an answer.
        let near = String(repeating: "X-Filler: " + String(repeating: "a", count: 90) + "\r\n", count: 640)
        #expect(try read([bytes("HTTP/1.1 200 OK\r\n" + near + "Content-Length: 0\r\n\r\n")]).head?.status == 200)
    }

    @Test func endlessInterimAnswersCountAgainstTheSameBound() {
        let interim = String(repeating: "HTTP/1.1 100 Continue\r\n\r\n", count: 3_000)
        let error = failure([bytes(interim)], eof: false)
        #expect(error?.message.contains("over 65536 bytes") == true)
    }

    @Test func aChunkSizeLineIsBounded() {
        let line = "5;" + String(repeating: "e", count: 2_000) + "\r\n"
        let error = failure([bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + line)], eof: false)
        #expect(error?.message.contains("a chunk-size line is over 1024 bytes") == true)
    }

    @Test func trailersAreBounded() {
        let trailers = String(repeating: "X-T: " + String(repeating: "t", count: 95) + "\r\n", count: 700)
        let error = failure([bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n" + trailers)], eof: false)
        #expect(error?.message.contains("trailers") == true)
    }
}

@Suite struct HTTPResponseReaderBoundsTheBody {
    @Test func aContentLengthOverTheLimitIsTooLargeAtOnceWithTheHead() {
        var reader = HTTPResponseReader(maxBodyBytes: 100)
        let progress = reader.feed(bytes("HTTP/1.1 200 OK\r\nContent-Length: 101\r\n\r\n"))
        // The status still goes out first, so a stream opens and then fails, as with libcurl.
        #expect(progress.head?.status == 200)
        #expect(progress.failure?.kind == .responseTooLarge)
        #expect(progress.failure?.message == "the answer is larger than 100 bytes")
        #expect(reader.feed(bytes("more")).failure?.kind == .responseTooLarge, "a failure stays")
        #expect(reader.finish().failure?.kind == .responseTooLarge)
    }

    @Test func chunksOverTheLimitAreTooLarge() {
        let chunk = "32\r\n" + String(repeating: "c", count: 50) + "\r\n"
        let error = failure([bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk + chunk + chunk)], eof: false, maxBody: 100)
        #expect(error?.kind == .responseTooLarge)
    }

    @Test func aCloseDelimitedBodyOverTheLimitIsTooLarge() {
        let error = failure(
            [bytes("HTTP/1.1 200 OK\r\n\r\n"), [UInt8](repeating: 0x61, count: 60), [UInt8](repeating: 0x61, count: 60)], eof: false, maxBody: 100)
        #expect(error?.kind == .responseTooLarge)
    }

    @Test func exactlyTheLimitIsAnAnswer() throws {
        let body = String(repeating: "b", count: 100)
        #expect(try read([bytes("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + body)], maxBody: 100).body.count == 100)
        #expect(try read([bytes("HTTP/1.1 200 OK\r\n\r\n" + body)], maxBody: 100).body.count == 100)
        #expect(
            try read([bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n64\r\n" + body + "\r\n0\r\n\r\n")], maxBody: 100).body.count == 100)
    }
}

/// Whether the connection may carry the next request after the answer (keep-alive).
@Suite struct HTTPResponseReaderSaysWhetherTheConnectionIsKept {
    /// An answer fed whole (no EOF unless `eof`), and whether the reader keeps its connection.
    private static let answers: [(name: String, wire: String, isHead: Bool, eof: Bool, keeps: Bool)] = [
        ("HTTP/1.1 with a length", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false, false, true),
        ("HTTP/1.1 chunked, ended", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", false, false, true),
        ("HTTP/1.1 204", "HTTP/1.1 204 No Content\r\n\r\n", false, false, true),
        ("HTTP/1.1 HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", true, false, true),
        ("HTTP/1.1 after 100 Continue", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false, false, true),
        ("HTTP/1.1 Connection: close", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", false, false, false),
        ("HTTP/1.1 close among options", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nconnection: Upgrade, CLOSE\r\n\r\nok", false, false, false),
        ("HTTP/1.0 with a length", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", false, false, false),
        ("HTTP/1.0 keep-alive", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: Keep-Alive\r\n\r\nok", false, false, true),
        ("HTTP/1.1 ended by the close", "HTTP/1.1 200 OK\r\n\r\nall of it", false, true, false),
        ("HTTP/1.1 with bytes after the answer", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1", false, false, false),
        ("HTTP/1.1 short of its length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nok", false, false, false),
        ("HTTP/1.1 chunked without its last chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n", false, false, false),
    ]

    @Test(arguments: answers.map(\.name))
    func keepsTheConnectionOnlyAfterACleanEndTheServerAllows(name: String) throws {
        let answer = try #require(Self.answers.first { $0.name == name })
        var reader = HTTPResponseReader(maxBodyBytes: 1_000, isHeadRequest: answer.isHead)
        _ = reader.feed(bytes(answer.wire))
        if answer.eof { _ = reader.finish() }
        #expect(reader.keepsConnection == answer.keeps)
    }

    @Test func anAnswerOverTheLimitDoesNotKeepIt() {
        var reader = HTTPResponseReader(maxBodyBytes: 1)
        #expect(reader.feed(bytes("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")).failure?.kind == .responseTooLarge)
        #expect(!reader.keepsConnection)
    }

    @Test func anAnswerSplitAtEveryByteKeepsItOnlyAtTheEnd() {
        let wire = bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n")
        var reader = HTTPResponseReader(maxBodyBytes: 100)
        for (index, byte) in wire.enumerated() {
            _ = reader.feed([byte])
            #expect(reader.keepsConnection == (index == wire.count - 1), "after byte \(index)")
        }
    }
}
