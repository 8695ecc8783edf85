import Testing
@testable import WorkerCore

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
        #expect(reader.feed([0x47, 0x45, 0x54, 0x20, 0x2F, 0xC3, 0x28, 0x20] + Array("HTTP/1.1\r\n\r\n".utf8)) == .refused(HTTPRefusal(400, "the request head is not valid UTF-8")))
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

@Suite struct GenerateBodies {
    func parse(_ text: String) -> Result<GenerateRequest, HTTPRefusal> { GenerateRequest.parse(Array(text.utf8)) }

    @Test func edgecoderShape() throws {
        #expect(try parse(#"{"prompt":"hi","maxTokens":64}"#).get() == GenerateRequest(prompt: "hi", maxTokens: 64, shape: .edgecoder))
        #expect(try parse(#"{"prompt":"hi"}"#).get().maxTokens == 512)
    }

    @Test func ollamaShape() throws {
        #expect(try parse(#"{"model":"x","prompt":"hi","stream":false,"options":{"num_predict":7}}"#).get()
                == GenerateRequest(prompt: "hi", maxTokens: 7, shape: .ollama(model: "x", stream: false)))
        #expect(try parse(#"{"model":"x","prompt":"hi"}"#).get().shape == .ollama(model: "x", stream: true), "Ollama streams by default")
    }

    @Test(arguments: [
        "", "[]", "nope", #"{"prompt":""}"#, #"{"prompt":5}"#, #"{"maxTokens":3}"#, #"{"prompt":"x","maxTokens":0}"#,
        #"{"prompt":"x","maxTokens":99999}"#, #"{"prompt":"x","maxTokens":"5"}"#, #"{"model":1,"prompt":"x"}"#,
        #"{"model":"m","prompt":"x","stream":"no"}"#, #"{"model":"m","prompt":"x","options":[]}"#,
        #"{"model":"m","prompt":"x","options":{"num_predict":-1}}"#, String(repeating: "[", count: 10_000),
    ])
    func badBodiesAre400(text: String) {
        guard case .failure(let refusal) = parse(text) else { Issue.record("accepted \(text)"); return }
        #expect(refusal.status == 400)
    }

    @Test func answersPerShape() {
        let edge = GenerateRequest(prompt: "p", maxTokens: 5, shape: .edgecoder)
        let ok = ProxyAnswer.generate(edge, .answered(ok: true, output: "out", error: nil, workerDurationMs: 3), durationMs: 9, nowMs: 0)
        #expect(ok.status == 200 && ok.body["output"] == "out" && ok.body["response"] == "out" && ok.body["ok"] == true && ok.body["durationMs"]?.intValue == 9)
        #expect(ProxyAnswer.generate(edge, .notConnected("no worker"), durationMs: 0, nowMs: 0).status == 503)
        #expect(ProxyAnswer.generate(edge, .timedOut(100), durationMs: 0, nowMs: 0).status == 504)
        let failed = ProxyAnswer.generate(edge, .answered(ok: false, output: "", error: "busy: x", workerDurationMs: 0), durationMs: 1, nowMs: 0)
        #expect(failed.status == 502 && failed.body["error"] == "busy: x" && failed.body["ok"] == false)
        let ollama = GenerateRequest(prompt: "p", maxTokens: 5, shape: .ollama(model: "m", stream: false))
        let answer = ProxyAnswer.generate(ollama, .answered(ok: true, output: "out", error: nil, workerDurationMs: 3), durationMs: 2, nowMs: 0)
        #expect(answer.status == 200 && !answer.ndjson && answer.body["response"] == "out" && answer.body["done"] == true && answer.body["model"] == "m")
        #expect(ProxyAnswer.generate(ollama, .notConnected("x"), durationMs: 0, nowMs: 0).body["error"] == "x")
        #expect(ProxyAnswer.tags(connected: true, deviceName: "EdgeCoder-a")["models"]?.arrayValue?.count == 1)
        #expect(ProxyAnswer.tags(connected: false, deviceName: nil)["models"]?.arrayValue?.isEmpty == true)
    }

    @Test func statusHasTheMacProxysKeys() {
        var status = ProxyStatus()
        status.connected = true
        status.deviceName = "EdgeCoder-x"
        status.deviceAddress = "00:AA:01:00:00:00"
        status.rssi = -40
        status.batteryPct = 80
        for key in ["connected", "scanning", "modelState", "lastSeenMs", "deviceName", "deviceId", "batteryPct", "rssi", "requestsInFlight"] {
            #expect(status.json[key] != nil, "missing \(key)")
        }
    }
}

@Suite struct JSONFraming {
    @Test func responsesSplitAcrossChunksComeOutWholeAndInOrder() {
        var framer = JSONObjectFramer(maxBytes: 1 << 20)
        let a = BluetoothMessage.response(id: "a", output: "x{}\"]", ok: true, durationMs: 1)
        let b = BluetoothMessage.status(modelState: "ready", batteryPct: nil)
        var objects: [[UInt8]] = []
        for chunk in BluetoothMessage.chunks(a + b, mtu: 23) {
            for event in framer.feed(chunk, nowMs: 0) { if case .object(let bytes) = event { objects.append(bytes) } }
        }
        #expect(objects == [a, b])
    }
}
