import TestSupport
import Testing
@testable import Proxy
import WorkerCore

@Suite struct GenerateBodies {
    func parse(_ text: String) -> Result<ProxyCall, HTTPRefusal> { ProxyCall.generate(Array(text.utf8)) }

    @Test func edgecoderShape() throws {
        let call = try parse(#"{"prompt":"hi","maxTokens":64}"#).get()
        #expect(call.dialect == .edgecoder && call.ask == WorkerAsk(prompt: "hi", maxTokens: 64) && !call.stream)
        #expect(try parse(#"{"prompt":"hi"}"#).get().ask.maxTokens == 512)
        // EdgeCoder's IDE router sends stream: false with its {prompt, maxTokens}.
        #expect(try parse(#"{"prompt":"hi","maxTokens":9,"stream":false}"#).get().dialect == .edgecoder)
    }

    @Test func ollamaShape() throws {
        let call = try parse(#"{"model":"x","prompt":"hi","stream":false,"options":{"num_predict":7}}"#).get()
        #expect(call.dialect == .ollamaGenerate && call.model == "x" && call.ask.prompt == "hi" && call.ask.maxTokens == 7 && !call.stream)
        #expect(try parse(#"{"model":"x","prompt":"hi"}"#).get().stream, "Ollama streams by default")
    }

    @Test func numPredictMinusOneIsTheWorkersCap() throws {
        #expect(try parse(#"{"model":"m","prompt":"x","options":{"num_predict":-1}}"#).get().ask.maxTokens == BluetoothRequest.maxTokensLimit)
        #expect(try parse(#"{"model":"m","prompt":"x","options":{"num_predict":-2}}"#).get().ask.maxTokens == BluetoothRequest.maxTokensLimit)
    }

    @Test func systemFormatAndOptionsReachTheWorker() throws {
        let call = try parse(
            #"""
            {"model":"m","prompt":"x","system":"be brief","format":"json","keep_alive":"5m","think":false,
             "options":{"temperature":0.2,"top_p":0.9,"top_k":40,"seed":7,"stop":["\n\n","END"],"num_ctx":4096,"num_thread":4}}
            """#
        ).get()
        #expect(call.ask.system == "be brief" && call.ask.format == "json")
        var options = GenerationOptions()
        options.temperature = 0.2
        options.topP = 0.9
        options.topK = 40
        options.seed = 7
        options.stop = ["\n\n", "END"]
        options.numCtx = 4096
        #expect(call.ask.options == options)
        #expect(try parse(#"{"model":"m","prompt":"x","options":{"stop":"END"}}"#).get().ask.options.stop == ["END"])
    }

    @Test func aModelWithoutPromptIsOllamasLoadRequest() throws {
        #expect(try parse(#"{"model":"m"}"#).get().loadOnly)
        let loaded = ProxyAnswer.loaded(try parse(#"{"model":"m"}"#).get(), nowMs: 0)
        #expect(loaded["done"] == true && loaded["done_reason"] == "load" && loaded["response"] == "")
    }

    @Test(arguments: [
        "", "[]", "nope", #"{"prompt":""}"#, #"{"prompt":5}"#, #"{"maxTokens":3}"#, #"{"prompt":"x","maxTokens":0}"#,
        #"{"prompt":"x","maxTokens":99999}"#, #"{"prompt":"x","maxTokens":"5"}"#, #"{"model":1,"prompt":"x"}"#,
        #"{"model":"m","prompt":"x","stream":"no"}"#, #"{"model":"m","prompt":"x","options":[]}"#,
        #"{"model":"m","prompt":"x","options":{"num_predict":0}}"#, String(repeating: "[", count: 10_000),
    ])
    func badBodiesAre400(text: String) {
        guard case .failure(let refusal) = parse(text) else { Issue.record("accepted \(text)"); return }
        #expect(refusal.status == 400)
    }

    /// Fields the worker cannot honour: a 400 that names each, never a silent drop.
    @Test(arguments: [
        (#"{"model":"m","prompt":"x","images":["aGk="]}"#, "images"),
        (#"{"model":"m","prompt":"x","suffix":"}"}"#, "suffix"),
        (#"{"model":"m","prompt":"x","raw":true}"#, "raw"),
        (#"{"model":"m","prompt":"x","template":"{{ .Prompt }}"}"#, "template"),
        (#"{"model":"m","prompt":"x","context":[1,2]}"#, "context"),
        (#"{"model":"m","prompt":"x","format":{"type":"object"}}"#, "format"),
        (#"{"model":"m","prompt":"x","think":true}"#, "think"),
        (#"{"model":"m","prompt":"x","options":{"mirostat":1}}"#, "options.mirostat"),
        (#"{"model":"m","prompt":"x","options":{"temperature":"hot"}}"#, "options.temperature"),
        (#"{"model":"m","prompt":"x","options":{"stop":[1]}}"#, "options.stop"),
        (#"{"model":"m","prompt":"x","options":{"top_p":2}}"#, "options.top_p"),
        (#"{"model":"m","prompt":"x","system":5}"#, "system"),
    ])
    func fieldsTheWorkerCannotHonourAre400NamingTheField(text: String, field: String) {
        guard case .failure(let refusal) = parse(text) else { Issue.record("accepted \(text)"); return }
        #expect(refusal.status == 400 && refusal.field == field && refusal.message.contains("\"\(field)\""), "\(refusal)")
    }

    @Test func answersPerShape() {
        let edge = ProxyCall(dialect: .edgecoder, model: ProxyAnswer.modelName, ask: WorkerAsk(prompt: "p", maxTokens: 5))
        let ok = ProxyAnswer.whole(edge, .answered(ok: true, output: "out", error: nil, workerDurationMs: 3), durationMs: 9, nowMs: 0, id: "i")
        #expect(
            ok.status == 200 && ok.body["output"] == "out" && ok.body["response"] == "out" && ok.body["ok"] == true
                && ok.body["durationMs"]?.intValue == 9)
        #expect(ProxyAnswer.whole(edge, .notConnected("no worker"), durationMs: 0, nowMs: 0, id: "i").status == 503)
        #expect(ProxyAnswer.whole(edge, .timedOut(100), durationMs: 0, nowMs: 0, id: "i").status == 504)
        let failed = ProxyAnswer.whole(
            edge, .answered(ok: false, output: "", error: "busy: x", workerDurationMs: 0), durationMs: 1, nowMs: 0, id: "i")
        #expect(failed.status == 502 && failed.body["error"] == "busy: x" && failed.body["ok"] == false)
        let ollama = ProxyCall(dialect: .ollamaGenerate, model: "m", ask: WorkerAsk(prompt: "p", maxTokens: 5))
        let answer = ProxyAnswer.whole(ollama, .answered(ok: true, output: "out", error: nil, workerDurationMs: 3), durationMs: 2, nowMs: 0, id: "i")
        #expect(answer.status == 200 && answer.body["response"] == "out" && answer.body["done"] == true && answer.body["model"] == "m")
        #expect(ProxyAnswer.whole(ollama, .notConnected("x"), durationMs: 0, nowMs: 0, id: "i").body["error"] == "x")
        #expect(ProxyAnswer.tags(connected: true, deviceName: "EdgeCoder-a")["models"]?.arrayValue?.count == 1)
        #expect(ProxyAnswer.tags(connected: false, deviceName: nil)["models"]?.arrayValue?.isEmpty == true)
    }
}

@Suite struct ChatBodies {
    @Test func edgecodersIDERouterCallIsAChatWithItsMaxTokens() throws {
        let call = try ProxyCall.chat(
            Array(#"{"messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"}],"maxTokens":4096,"stream":false}"#.utf8)
        ).get()
        #expect(call.dialect == .ollamaChat && !call.stream && call.ask.maxTokens == 4096 && call.model == ProxyAnswer.modelName)
        #expect(call.ask.messages == [ChatTurn(role: "system", content: "s"), ChatTurn(role: "user", content: "hi")])
        let answer = ProxyAnswer.whole(call, .answered(ok: true, output: "hello", error: nil, workerDurationMs: 1), durationMs: 1, nowMs: 0, id: "i")
        #expect(answer.body["message"]?["content"] == "hello" && answer.body["message"]?["role"] == "assistant")
    }

    @Test func ollamasChatStreamsByDefaultAndTakesOptions() throws {
        let call = try ProxyCall.chat(Array(#"{"model":"m","messages":[{"role":"user","content":"hi"}],"options":{"num_predict":-1,"seed":3}}"#.utf8))
            .get()
        #expect(call.stream && call.ask.maxTokens == BluetoothRequest.maxTokensLimit && call.ask.options.seed == 3 && call.ask.prompt.isEmpty)
        #expect(try ProxyCall.chat(Array(#"{"model":"m","messages":[]}"#.utf8)).get().loadOnly)
    }

    @Test(arguments: [
        (#"{"model":"m","messages":[{"role":"tool","content":"x"}]}"#, "messages[0].role"),
        (#"{"model":"m","messages":[{"role":"user","content":"x","images":["aGk="]}]}"#, "messages[0].images"),
        (#"{"model":"m","messages":[{"role":"user","content":{"a":1}}]}"#, "messages[0].content"),
        (#"{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]}"#, "tools"),
        (#"{"model":"m","messages":"hi"}"#, "messages"),
        (#"{"model":"m","messages":[5]}"#, "messages[0]"),
        (#"{"messages":[]}"#, "messages"),
    ])
    func unusableChatFieldsAre400NamingTheField(text: String, field: String) {
        guard case .failure(let refusal) = ProxyCall.chat(Array(text.utf8)) else { Issue.record("accepted \(text)"); return }
        #expect(refusal.status == 400 && refusal.field == field, "\(refusal)")
    }

    @Test func tooManyTurnsAre400() {
        let turns = Array(repeating: #"{"role":"user","content":"x"}"#, count: ProxyCall.maxTurns + 1).joined(separator: ",")
        guard case .failure(let refusal) = ProxyCall.chat(Array(#"{"model":"m","messages":[\#(turns)]}"#.utf8)) else {
            Issue.record("accepted"); return
        }
        #expect(refusal.status == 400 && refusal.field == "messages")
    }
}

@Suite struct OpenAIBodies {
    @Test func chatCompletionsMapToAChat() throws {
        let call = try ProxyCall.openAIChat(
            Array(
                #"""
                {"model":"gpt-x","messages":[{"role":"developer","content":"d"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
                 "max_tokens":30,"temperature":0.5,"stop":"END","seed":1,"response_format":{"type":"json_object"},"stream":true,"stream_options":{"include_usage":true},
                 "n":1,"user":"u","presence_penalty":0}
                """#.utf8)
        ).get()
        #expect(call.dialect == .openAIChat && call.model == "gpt-x" && call.stream && call.ask.maxTokens == 30 && call.ask.format == "json")
        #expect(call.ask.messages == [ChatTurn(role: "system", content: "d"), ChatTurn(role: "user", content: "a\nb")])
        #expect(call.ask.options.temperature == 0.5 && call.ask.options.stop == ["END"] && call.ask.options.seed == 1)
        #expect(
            try ProxyCall.openAIChat(Array(#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_completion_tokens":12}"#.utf8)).get().ask
                .maxTokens == 12)
        #expect(
            try !ProxyCall.openAIChat(Array(#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#.utf8)).get().stream,
            "OpenAI does not stream by default")
    }

    @Test(arguments: [
        (#"{"messages":[{"role":"user","content":"x"}]}"#, "model"),
        (#"{"model":"m","messages":[]}"#, "messages"),
        (#"{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}"#, "messages[0].content[0]"),
        (#"{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]}"#, "tools"),
        (#"{"model":"m","messages":[{"role":"user","content":"x"}],"n":2}"#, "n"),
        (#"{"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true}"#, "logprobs"),
        (#"{"model":"m","messages":[{"role":"user","content":"x"}],"frequency_penalty":0.5}"#, "frequency_penalty"),
        (#"{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema"}}"#, "response_format"),
        (#"{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":3}"#, "temperature"),
        (#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":0}"#, "max_tokens"),
    ])
    func unusableChatFieldsAre400NamingTheField(text: String, field: String) {
        guard case .failure(let refusal) = ProxyCall.openAIChat(Array(text.utf8)) else { Issue.record("accepted \(text)"); return }
        #expect(refusal.status == 400 && refusal.field == field, "\(refusal)")
        let body = ProxyAnswer.error(.openAIChat, status: 400, message: refusal.message, field: refusal.field)
        #expect(body["error"]?["param"]?.stringValue == field && body["error"]?["type"] == "invalid_request_error")
    }

    @Test func completionsTakeAPromptAndRefuseWhatTheyCannotDo() throws {
        let call = try ProxyCall.openAICompletion(Array(#"{"model":"m","prompt":["def f():"],"max_tokens":20}"#.utf8)).get()
        #expect(call.dialect == .openAICompletion && call.ask.prompt == "def f():" && call.ask.maxTokens == 20 && call.ask.messages == nil)
        for (text, field) in [
            (#"{"model":"m","prompt":[1,2]}"#, "prompt"), (#"{"model":"m","prompt":"x","suffix":"y"}"#, "suffix"),
            (#"{"model":"m","prompt":"x","echo":true}"#, "echo"), (#"{"model":"m","prompt":"x","best_of":3}"#, "best_of"),
        ] {
            guard case .failure(let refusal) = ProxyCall.openAICompletion(Array(text.utf8)) else { Issue.record("accepted \(text)"); continue }
            #expect(refusal.field == field)
        }
    }

    @Test func streamsAreServerSentEventsEndingWithDone() throws {
        let call = try ProxyCall.openAIChat(Array(#"{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}"#.utf8)).get()
        #expect(ProxyAnswer.streamContentType(.openAIChat) == "text/event-stream")
        let opening = String(decoding: ProxyAnswer.streamOpening(call, nowMs: 1_000, id: "c1"), as: UTF8.self)
        #expect(opening.hasPrefix("data: {") && opening.hasSuffix("}\n\n") && opening.contains(#""role":"assistant""#))
        let piece = String(decoding: ProxyAnswer.piece(call, "hi", nowMs: 1_000, id: "c1"), as: UTF8.self)
        let json = try JSON.parse(String(piece.dropFirst("data: ".count)))
        #expect(json["object"] == "chat.completion.chunk" && json["choices"]?.arrayValue?.first?["delta"]?["content"] == "hi" && json["id"] == "c1")
        let end = String(decoding: ProxyAnswer.streamEnd(call, durationMs: 1, nowMs: 1_000, id: "c1"), as: UTF8.self)
        #expect(end.contains(#""finish_reason":"stop""#) && end.hasSuffix("data: [DONE]\n\n"))
        let error = String(decoding: ProxyAnswer.streamError(call, status: 502, message: "boom"), as: UTF8.self)
        #expect(error.contains(#""message":"boom""#) && error.hasSuffix("data: [DONE]\n\n"))
    }
}

@Suite struct StreamedText {
    @Test func theResultsOutputIsSentOnlyWhereThePiecesDidNotCarryIt() {
        // A worker without protocol-bluetooth §2 streams nothing and answers with the whole output.
        #expect(ProxyAnswer.unsent(output: "hello", streamed: "") == "hello")
        #expect(ProxyAnswer.unsent(output: "hello", streamed: "hel") == "lo")
        #expect(ProxyAnswer.unsent(output: "hello", streamed: "hello") == "")
        #expect(ProxyAnswer.unsent(output: "", streamed: "hello") == "")
    }

    @Test func ollamaStreamsLinesWithTheTextThenADoneLine() throws {
        let call = ProxyCall(dialect: .ollamaChat, model: "m", ask: WorkerAsk(prompt: "", maxTokens: 5))
        let piece = try JSON.parse(ProxyAnswer.piece(call, "hi", nowMs: 0, id: "i"))
        #expect(piece["message"]?["content"] == "hi" && piece["done"] == false && piece["created_at"] == "1970-01-01T00:00:00.000Z")
        let end = try JSON.parse(ProxyAnswer.streamEnd(call, durationMs: 5, nowMs: 0, id: "i"))
        #expect(end["done"] == true && end["done_reason"] == "stop" && end["total_duration"]?.intValue == 5_000_000)
        let error = try JSON.parse(ProxyAnswer.streamError(call, status: 502, message: "link_lost"))
        #expect(error["error"] == "link_lost")
    }

    @Test func showPsAndModelsDescribeTheWorker() {
        var status = ProxyStatus()
        status.connected = true
        status.modelState = "ready"
        status.deviceName = "EdgeCoder-a"
        #expect(ProxyAnswer.ps(status, nowMs: 0)["models"]?.arrayValue?.count == 1)
        status.modelState = "loading"
        #expect(ProxyAnswer.ps(status, nowMs: 0)["models"]?.arrayValue?.isEmpty == true)
        let show = ProxyAnswer.show(model: "m", status: status)
        #expect(show["model_info"] != nil && show["details"]?["family"] == "edgecoder" && show["capabilities"]?.arrayValue?.first == "completion")
        #expect(ProxyAnswer.openAIModels(connected: true)["data"]?.arrayValue?.first?["id"] == "edgecoder-bluetooth")
        #expect(ProxyAnswer.openAIModels(connected: false)["data"]?.arrayValue?.isEmpty == true)
    }
}

@Suite struct BrowserGuardTests {
    @Test(arguments: [
        "localhost", "localhost:11435", "LOCALHOST", "app.localhost:3000", "127.0.0.1", "127.0.0.1:11435", "127.1.2.3",
        "[::1]", "[::1]:11435", "localhost.",
    ])
    func loopbackHostsAreServed(host: String) {
        #expect(BrowserGuard.isLoopbackHost(host))
        #expect(BrowserGuard().check(host: host, origin: nil) == .allowed(corsOrigin: nil))
    }

    @Test(arguments: [
        "evil.com", "evil.com:11435", "localhost.evil.com", "127.0.0.1.evil.com", "128.0.0.1", "0.0.0.0", "[::2]", "[::1]x",
        "127.0.0.256", "127.0.0", "", "localhost:abc", "[::ffff:127.0.0.1]", ".localhost", "127.0.0.1:999999",
    ])
    func otherHostsAre403(host: String) {
        guard case .forbidden(let why) = BrowserGuard().check(host: host, origin: nil) else { Issue.record("served Host \(host)"); return }
        #expect(why.contains("Host"))
    }

    @Test func originsAreLoopbackOnesAndThoseAllowed() {
        let guardian = BrowserGuard(allowedOrigins: ["https://app.example.com", "https://*.tools.example"])
        for origin in [
            "http://localhost", "http://localhost:3000", "https://127.0.0.1:8443", "http://[::1]:80", "https://app.example.com",
            "https://a.tools.example",
        ] {
            #expect(guardian.check(host: "127.0.0.1:11435", origin: origin) == .allowed(corsOrigin: origin), "\(origin)")
        }
        for origin in ["https://evil.com", "null", "http://localhost.evil.com", "file://", "https://app.example.com.evil.com", "http://localhost/x"] {
            guard case .forbidden(let why) = guardian.check(host: "127.0.0.1:11435", origin: origin) else {
                Issue.record("allowed \(origin)"); continue
            }
            #expect(why.contains("--allow-origin"))
        }
        #expect(BrowserGuard(allowedOrigins: ["*"]).isAllowedOrigin("https://anything.example"))
    }

    @Test func originPatternsAreValidated() {
        #expect(
            BrowserGuard.isOriginPattern("https://app.example.com") && BrowserGuard.isOriginPattern("*")
                && BrowserGuard.isOriginPattern("http://localhost:*"))
        #expect(
            !BrowserGuard.isOriginPattern("app.example.com") && !BrowserGuard.isOriginPattern("https://a.example/path")
                && !BrowserGuard.isOriginPattern("https://"))
    }
}

@Suite struct KeepAliveReading {
    @Test func aSecondRequestInTheSameBytesIsKeptForTheNextRead() throws {
        var reader = HTTPRequestReader()
        let two = "POST /a HTTP/1.1\r\nContent-Length: 2\r\n\r\nhiGET /b HTTP/1.1\r\n\r\n"
        guard case .complete(let first) = reader.feed(Array(two.utf8)) else { Issue.record("no first request"); return }
        #expect(first.path == "/a" && first.body == Array("hi".utf8))
        guard case .complete(let second) = reader.feed([UInt8]()) else { Issue.record("no second request"); return }
        #expect(second.path == "/b" && second.method == "GET")
        #expect(reader.feed([UInt8]()) == .needMore)
    }

    @Test func keepAliveFollowsTheVersionAndConnectionHeader() {
        func request(_ version: String, _ connection: String?) -> HTTPServerRequest {
            HTTPServerRequest(method: "GET", path: "/", headers: connection.map { [("Connection", $0)] } ?? [], body: [], version: version)
        }
        #expect(request("HTTP/1.1", nil).keepAlive)
        #expect(!request("HTTP/1.1", "close").keepAlive)
        #expect(!request("HTTP/1.0", nil).keepAlive)
        #expect(request("HTTP/1.0", "Keep-Alive").keepAlive)
    }

    @Test func expectContinueIsOwedOnceUntilTheBodyArrives() {
        var reader = HTTPRequestReader()
        #expect(reader.feed(Array("POST /a HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n".utf8)) == .needMore)
        let first = reader.takeContinue()
        let second = reader.takeContinue()
        #expect(first && !second)
    }

    @Test func chunkedFramingEndsWithTheLastChunk() {
        #expect(HTTPServerResponse.chunk(Array("hello".utf8)) == Array("5\r\nhello\r\n".utf8))
        #expect(HTTPServerResponse.chunk([]) == [], "an empty chunk would end the body")
        let head = String(decoding: HTTPServerResponse.chunkedHead(200, contentType: "application/x-ndjson", keepAlive: true), as: UTF8.self)
        #expect(head.contains("Transfer-Encoding: chunked\r\n") && !head.contains("Connection: close") && head.hasSuffix("\r\n\r\n"))
    }
}
