import Testing
@testable import WorkerCore

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

@Suite struct WorkerAskWire {
    @Test func aPlainAskIsTheMacProxysRequestByteForByte() {
        let ask = WorkerAsk(prompt: "write \"main\"", maxTokens: 64)
        #expect(String(decoding: ask.wire(id: "r1"), as: UTF8.self) == #"{"id":"r1","prompt":"write \"main\"","maxTokens":64}"#)
    }

    @Test func aChatAskCarriesItsMessagesAndOptionsInsteadOfAPrompt() throws {
        var ask = WorkerAsk(prompt: "", maxTokens: 100)
        ask.messages = [ChatTurn(role: "user", content: "hi")]
        ask.system = "be brief"
        ask.format = "json"
        ask.stream = true
        ask.options.temperature = 0.5
        ask.options.stop = ["\n\n"]
        ask.options.seed = 7
        let value = try JSON.parse(ask.wire(id: "r2"))
        #expect(value["prompt"] == nil)
        #expect(value["messages"]?.arrayValue?.first?["content"]?.stringValue == "hi")
        #expect(value["system"]?.stringValue == "be brief")
        #expect(value["format"]?.stringValue == "json")
        #expect(value["stream"]?.boolValue == true)
        #expect(value["options"]?["temperature"] == .double(0.5))
        #expect(value["options"]?["stop"]?.arrayValue?.first?.stringValue == "\n\n")
        #expect(value["options"]?["seed"]?.intValue == 7)
        #expect(value["options"]?["top_k"] == nil)
    }
}
