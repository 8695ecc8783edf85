import Foundation
import Tasks
import TestSupport
import Testing
import Logging
@testable import BlueZ
@testable import Daemon
import ModelBackend
import Posix
import StateStore
@testable import WorkerCore

/// The daemon's side of a protocol-bluetooth §2 request: a chat with its options reaches the backend's
/// chat API whole, streamed pieces reach the peripheral in order, and a cancelled request
/// stops the backend call and is recorded as cancelled.
@Suite struct BluetoothBridgeTests {
    let dir = NSTemporaryDirectory() + "ecw-bt-bridge-" + UUID().uuidString

    func bridge(_ transport: ScriptedTransport) throws -> (PeripheralBridge, WorkerState) {
        let paths = DaemonPaths(configPath: "/dev/null", stateDirectory: dir, runtimeDirectory: dir + "/run", sysfsRoot: "/")
        let daemon = WorkerState(
            config: WorkerConfig(), paths: paths, directory: try StateDirectory(path: dir),
            logger: Logger(label: "test", handler: MemoryLogHandler()), clock: TestClock.realTime { 1_000 })
        var config = WorkerConfig.Backend()
        config.kind = .openai
        config.url = "http://127.0.0.1:9"
        config.model = "tiny"
        return (PeripheralBridge(daemon: daemon, backend: ModelBackend(config: config, client: transport), timeoutMs: 30_000), daemon)
    }

    static func chat() -> BluetoothRequest {
        var request = BluetoothRequest(id: "chat-1", prompt: "", maxTokens: 20)
        request.stream = true
        request.messages = [
            ChatTurn(role: "user", content: "hi"), ChatTurn(role: "assistant", content: "hello"), ChatTurn(role: "user", content: "more"),
        ]
        request.system = "be brief"
        request.options.temperature = 0.3
        request.options.seed = 42
        request.options.stop = ["END"]
        return request
    }

    @Test func aStreamedChatReachesTheChatAPIWithItsOptionsAndItsPiecesArriveInOrder() async throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let sse =
            #"data: {"choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}"# + "\n\n"
            + #"data: {"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2}}"#
            + "\n\n"
            + "data: [DONE]\n\n"
        let transport = ScriptedTransport(defaults: ["/v1/chat/completions": .json(200, sse)])
        let (bridge, daemon) = try bridge(transport)
        let pieces = Pieces()
        let outcome = await bridge.serve(Self.chat(), client: "AA:BB", cancellation: ServeCancellation()) { await pieces.add($0) }
        #expect(outcome.ok && outcome.output == "Hello", "\(outcome)")
        // Both pieces came in one read of the body: they reach the peripheral as one, in order.
        #expect(await pieces.all == ["Hello"])
        #expect(outcome.evalCount == 2)
        let body = try #require(transport.calls(to: "/v1/chat/completions").first?.body)
        #expect(
            body["messages"] == [
                ["role": "system", "content": "be brief"], ["role": "user", "content": "hi"],
                ["role": "assistant", "content": "hello"], ["role": "user", "content": "more"],
            ])
        #expect(body["temperature"] == .double(0.3) && body["seed"] == 42 && body["stop"] == ["END"] && body["stream"] == true)
        #expect(body["max_tokens"] == 20)
        let record = await daemon.tasksJSON(limit: 1)["tasks"]?.arrayValue?.first
        #expect(record?["state"] == "done" && record?["prompt"] == "more", "the task shows the chat's last turn")
    }

    @Test func aCancelledRequestStopsAHangingServerCallAndIsRecordedCancelled() async throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // A server that never answers (stand-in): only the cancel can end the call.
        let transport = ScriptedTransport(defaults: ["/v1/chat/completions": .hang])
        let (bridge, daemon) = try bridge(transport)
        let cancellation = ServeCancellation()
        let started = Date()
        let winner = await race(
            {
                await bridge.serve(Self.chat(), client: "AA:BB", cancellation: cancellation) { _ in }
            },
            {
                try? await Task.sleep(nanoseconds: 200_000_000)
                cancellation.cancel(reason: "cancelled")
                await cancellation.wait()
            })
        #expect(Date().timeIntervalSince(started) < 5, "the hanging call was aborted")
        if case .first(let outcome) = winner { Issue.record("the serve ended by itself: \(outcome)") }
        let record = await daemon.tasksJSON(limit: 1)["tasks"]?.arrayValue?.first
        #expect(record?["state"] == "cancelled" && record?["error"] == "cancelled", "\(String(describing: record))")
        #expect(transport.calls(to: "/v1/chat/completions").count == 1)
    }
}

actor Pieces {
    var all: [String] = []
    func add(_ piece: String) { all.append(piece) }
}
