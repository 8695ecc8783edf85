import Foundation
import Testing
import Logging
import Posix
import TestSupport
@testable import Proxy
import WorkerCore

/// A stand-in for the Bluetooth link (the real one is tested in the BlueZ VM): answers as
/// the test says, after streaming its pieces of text (one every `delayMs`) when the ask
/// streams; records what it was asked and how many requests were cancelled.
actor ScriptedUpstream: ProxyUpstream {
    var answer: GenerateResult
    var status: ProxyStatus
    let deltas: [String]
    let delayMs: UInt64
    private(set) var asked: [(prompt: String, maxTokens: Int, timeoutMs: Int64)] = []
    private(set) var asks: [WorkerAsk] = []
    private(set) var cancelled = 0

    init(answer: GenerateResult, status: ProxyStatus = ScriptedUpstream.connected, deltas: [String] = [], delayMs: UInt64 = 0) {
        self.answer = answer
        self.status = status
        self.deltas = deltas
        self.delayMs = delayMs
    }

    static var connected: ProxyStatus {
        var status = ProxyStatus()
        status.connected = true
        status.deviceName = "EdgeCoder-abc"
        status.deviceAddress = "00:AA:01:00:00:00"
        status.modelState = "ready"
        status.batteryPct = 87
        status.rssi = -40
        return status
    }

    func generate(_ ask: WorkerAsk, timeoutMs: Int64, onDelta: @escaping @Sendable (String) async -> Void) async -> GenerateResult {
        asked.append((ask.prompt, ask.maxTokens, timeoutMs))
        asks.append(ask)
        for piece in deltas {
            if delayMs > 0 {
                do { try await Task.sleep(nanoseconds: delayMs * 1_000_000) } catch {
                    cancelled += 1
                    return .answered(ok: false, output: "", error: "cancelled", workerDurationMs: 0)
                }
            }
            if ask.stream { await onDelta(piece) }
        }
        return answer
    }

    var currentStatus: ProxyStatus { status }
}

/// The proxy's HTTP side over real TCP against an upstream in the test's hand: every
/// success path (and each kind of failure the link reports) in-process, in milliseconds.
/// The real link to a worker is tested in the BlueZ VM (IntegrationTests/bluez/proxy-phase.sh).
@Suite struct ProxyUpstreamTests {
    let helper = HTTPTestClient()

    func withServer(_ upstream: ScriptedUpstream, _ body: @escaping @Sendable (UInt16) async throws -> Void) async throws {
        let listener = try LoopbackTCPListener(port: 0)
        let server = ProxyServer(
            listener: listener, upstream: upstream, version: "9.9.9", logger: Logger(label: "t", level: .error),
            requestTimeoutMs: 7_000)
        let serving = Task { await server.run() }
        let outcome: Result<Void, any Error>
        do { try await body(listener.port); outcome = .success(()) } catch { outcome = .failure(error) }
        serving.cancel()
        await serving.value
        listener.close()
        try outcome.get()
    }

    func ndjson(_ body: String) -> [[String: Any]] {
        body.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    @Test func edgecodersShapeGetsTheOutputAndTheTimings() async throws {
        let upstream = ScriptedUpstream(answer: .answered(ok: true, output: "fn main() {}", error: nil, workerDurationMs: 450))
        try await withServer(upstream) { port in
            let answer = try await helper.post(port, "/api/generate", #"{"prompt":"write main","maxTokens":64}"#)
            #expect(answer.head.hasPrefix("HTTP/1.1 200"))
            #expect(answer.head.lowercased().contains("content-type: application/json"))
            #expect(answer.json?["ok"] as? Bool == true)
            #expect(answer.json?["output"] as? String == "fn main() {}")
            #expect(answer.json?["response"] as? String == "fn main() {}")
            #expect(answer.json?["workerDurationMs"] as? Int == 450)
            #expect(answer.json?["durationMs"] is Int)
        }
        let asked = await upstream.asked
        #expect(asked.count == 1 && asked[0].prompt == "write main" && asked[0].maxTokens == 64 && asked[0].timeoutMs == 7_000)
    }

    @Test func ollamasDefaultStreamsNDJSONLinesEndingWithDoneAndStreamFalseIsPlainJSON() async throws {
        let upstream = ScriptedUpstream(answer: .answered(ok: true, output: "hello", error: nil, workerDurationMs: 10))
        try await withServer(upstream) { port in
            let streamed = try await helper.post(port, "/api/generate", #"{"model":"edgecoder-bluetooth","prompt":"hi","options":{"num_predict":9}}"#)
            #expect(streamed.head.hasPrefix("HTTP/1.1 200"))
            #expect(streamed.head.lowercased().contains("content-type: application/x-ndjson"))
            let lines = ndjson(streamed.body)
            // The text in a line with done false (LiteLLM's ollama/ provider ignores the
            // text of a done line), then the done line.
            #expect(lines.count == 2, "\(streamed.body)")
            #expect(
                lines.first?["response"] as? String == "hello" && lines.first?["done"] as? Bool == false
                    && lines.first?["model"] as? String == "edgecoder-bluetooth")
            #expect(lines.last?["done"] as? Bool == true && lines.last?["done_reason"] as? String == "stop" && lines.last?["total_duration"] is Int)
            let plain = try await helper.post(port, "/api/generate", #"{"model":"m","prompt":"hi","stream":false}"#)
            #expect(plain.head.lowercased().contains("content-type: application/json"))
            #expect(plain.json?["response"] as? String == "hello")
        }
        #expect(await upstream.asked.map(\.maxTokens) == [9, BluetoothRequest.defaultMaxTokens])
    }

    @Test(arguments: [
        (
            GenerateResult.answered(ok: false, output: "", error: "model_unavailable: down", workerDurationMs: 0), "HTTP/1.1 502",
            "model_unavailable: down"
        ),
        (.timedOut(7_000), "HTTP/1.1 504", "within 7000 ms"),
        (.notConnected("no worker connected: scanning"), "HTTP/1.1 503", "no worker connected"),
        (.answered(ok: false, output: "", error: "link_lost: the worker disconnected", workerDurationMs: 0), "HTTP/1.1 502", "link_lost"),
    ])
    func eachFailureOfTheLinkHasItsStatusInBothShapes(result: GenerateResult, status: String, text: String) async throws {
        try await withServer(ScriptedUpstream(answer: result)) { port in
            let edge = try await helper.post(port, "/api/generate", #"{"prompt":"p"}"#)
            #expect(edge.head.hasPrefix(status), "\(edge.head)")
            #expect(edge.json?["ok"] as? Bool == false && (edge.json?["error"] as? String)?.contains(text) == true)
            let ollama = try await helper.post(port, "/api/generate", #"{"model":"m","prompt":"p"}"#)
            #expect(ollama.head.hasPrefix(status))
            #expect((ollama.json?["error"] as? String)?.contains(text) == true)
        }
    }

    @Test func statusTagsAndVersionShowTheConnectedWorker() async throws {
        try await withServer(ScriptedUpstream(answer: .timedOut(1))) { port in
            let status = try await helper.exchange(port, helper.http("GET", "/status"))
            for key in [
                #""connected":true"#, #""deviceName":"EdgeCoder-abc""#, #""deviceId":"00:AA:01:00:00:00""#, #""batteryPct":87"#,
                #""rssi":-40"#, #""modelState":"ready""#,
            ] {
                #expect(status.contains(key), "\(key) in \(status)")
            }
            let tags = try await helper.exchange(port, helper.http("GET", "/api/tags"))
            #expect(tags.contains(#""name":"edgecoder-bluetooth""#) && tags.contains(#""worker":"EdgeCoder-abc""#))
            let version = try await helper.exchange(port, helper.http("GET", "/api/version"))
            #expect(version.contains(#""version":"9.9.9""#))
        }
    }
}
