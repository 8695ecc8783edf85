import Testing
@testable import Proxy
import WorkerCore

@Suite struct HTTPRequestReading {
    func read(_ text: String, chunk: Int = 1_000_000, maxBody: Int = 1_048_576) -> HTTPRequestReader.Progress {
        var reader = HTTPRequestReader(maxHeadBytes: 1_024, maxBodyBytes: maxBody)
        let bytes = Array(text.utf8)
        var last = HTTPRequestReader.Progress.needMore
        for start in stride(from: 0, to: bytes.count, by: chunk) {
            last = reader.feed(bytes[start..<min(start + chunk, bytes.count)])
            if case .needMore = last { continue }
            return last
        }
        return last
    }

    @Test(arguments: [1, 7, 1_000_000])
    func aPostWithABodyIsReadWhateverTheChunking(chunk: Int) {
        let progress = read("POST /api/generate?x=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 15\r\n\r\n{\"prompt\":\"hi\"}", chunk: chunk)
        guard case .complete(let request) = progress else { Issue.record("\(progress)"); return }
        #expect(request.method == "POST" && request.path == "/api/generate" && request.header("content-length") == "15")
        #expect(request.body == Array("{\"prompt\":\"hi\"}".utf8))
    }

    @Test func aGetWithoutBodyIsComplete() {
        guard case .complete(let request) = read("GET /status HTTP/1.0\r\n\r\n") else { Issue.record("not complete"); return }
        #expect(request.path == "/status" && request.body.isEmpty)
    }

    @Test func aPartialRequestNeedsMore() {
        #expect(read("GET /status HTTP/1.1\r\nHost: x") == .needMore)
        #expect(read("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc") == .needMore)
    }

    @Test(arguments: [
        ("GARBAGE\r\n\r\n", 400),
        ("GET /x HTTP/2\r\n\r\n", 400),
        ("get /x HTTP/1.1\r\n\r\n", 400),
        ("GET x HTTP/1.1\r\n\r\n", 400),
        ("GET /x HTTP/1.1\r\nNoColon\r\n\r\n", 400),
        ("GET /x HTTP/1.1\r\nBad Name: v\r\n\r\n", 400),
        ("POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
        ("POST /x HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", 400),
        ("POST /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
        ("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
        ("POST /x HTTP/1.1\r\nContent-Length: 2000000\r\n\r\n", 413),
        ("GET /x HTTP/1.1\r\n\u{FF}: v\r\n\r\n", 400),
    ])
    func brokenRequestsAreRefusedWithAStatus(text: String, status: Int) {
        guard case .refused(let refusal) = read(text) else { Issue.record("accepted: \(text)"); return }
        #expect(refusal.status == status)
        #expect(!refusal.message.isEmpty)
    }

    @Test func anEndlessHeadIsRefusedAtTheBound() {
        var reader = HTTPRequestReader(maxHeadBytes: 1_024)
        var progress = HTTPRequestReader.Progress.needMore
        for _ in 0..<200 where progress == .needMore { progress = reader.feed(Array("X-Filler: aaaaaaaaaa\r\n".utf8)) }
        #expect(progress == .refused(HTTPRefusal(431, "the request head is over 1024 bytes")))
    }

    @Test func invalidUTF8InTheHeadIsRefused() {
        var reader = HTTPRequestReader()
        #expect(
            reader.feed([0x47, 0x45, 0x54, 0x20, 0x2F, 0xC3, 0x28, 0x20] + Array("HTTP/1.1\r\n\r\n".utf8))
                == .refused(HTTPRefusal(400, "the request head is not valid UTF-8")))
    }

    @Test func randomBytesNeverCrashTheReader() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            var reader = HTTPRequestReader(maxHeadBytes: 512, maxBodyBytes: 512)
            for _ in 0..<8 {
                let bytes = (0..<Int.random(in: 0...128, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
                if case .needMore = reader.feed(bytes) { continue }
                break
            }
        }
    }

    @Test func responsesCarryLengthAndClose() {
        let text = String(decoding: HTTPServerResponse.json(503, ["error": "x"]), as: UTF8.self)
        #expect(text.hasPrefix("HTTP/1.1 503 Service Unavailable\r\n"))
        #expect(text.contains("Content-Length: 14\r\n") && text.contains("Connection: close\r\n"))
        #expect(text.hasSuffix("\r\n\r\n{\"error\":\"x\"}\n"))
    }
}
