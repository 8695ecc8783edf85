#if canImport(Glibc)
import Glibc
#endif
import Posix
import WorkerCore

/// A stand-in for the Bluetooth link, for tests only (`proxy --test-upstream-script
/// FILE`): real HTTP clients against the real proxy on a machine without Bluetooth. It
/// answers every request with the script's pieces of text, one every `delayMs`, and
/// appends what happened to the script's `record` file, one JSON line each: `{"event":
/// "asked", "request": <the request as the worker would get it>}`, then `{"event":
/// "answered"}` or `{"event": "cancelled"}`. A prompt or last message containing
/// `FAIL` is answered `ok: false`. The real link is tested in the BlueZ VM.
public actor StandInUpstream: ProxyUpstream {
    let deltas: [String]
    let delayMs: Int64
    let recordPath: String?
    private var count = 0

    /// Reads the script: `{"deltas": ["Hel", "lo"], "delayMs": 100, "record": "/path"}`.
    public init(script bytes: [UInt8]) throws(HTTPRefusal) {
        let value: JSONValue
        do { value = try JSON.parse(bytes) } catch { throw HTTPRefusal(400, "the test upstream script is not JSON: \(error)") }
        guard let pieces = value["deltas"]?.arrayValue?.compactMap(\.stringValue), !pieces.isEmpty else {
            throw HTTPRefusal(400, "the test upstream script needs \"deltas\": a non-empty array of strings")
        }
        deltas = pieces
        delayMs = max(0, value["delayMs"]?.intValue ?? 50)
        recordPath = value["record"]?.stringValue
    }

    public var currentStatus: ProxyStatus {
        var status = ProxyStatus()
        status.connected = true
        status.modelState = "ready"
        status.deviceName = "EdgeCoder-stand-in"
        status.deviceAddress = "00:AA:01:00:00:00"
        status.selection = "device"
        status.pinnedDevice = "00:AA:01:00:00:00"
        return status
    }

    public func generate(_ ask: WorkerAsk, timeoutMs: Int64, onDelta: @escaping @Sendable (String) async -> Void) async -> GenerateResult {
        count += 1
        let id = "stand-in-\(count)"
        let request = (try? JSON.parse(ask.wire(id: id))) ?? .null
        record(["event": "asked", "request": request])
        let text = ask.messages?.last?.content ?? ask.prompt
        if text.contains("FAIL") {
            record(["event": "answered", "id": .string(id), "ok": false])
            return .answered(ok: false, output: "", error: "model_unavailable: the stand-in was told to fail", workerDurationMs: 1)
        }
        for piece in deltas {
            do { try await Task.sleep(nanoseconds: UInt64(delayMs) * 1_000_000) } catch {
                record(["event": "cancelled", "id": .string(id)])
                return .answered(ok: false, output: "", error: "cancelled", workerDurationMs: 0)
            }
            if ask.stream { await onDelta(piece) }
        }
        record(["event": "answered", "id": .string(id), "ok": true])
        return .answered(ok: true, output: deltas.joined(), error: nil, workerDurationMs: delayMs * Int64(deltas.count))
    }

    private func record(_ line: JSONValue) {
        guard let recordPath else { return }
        let fd = open(recordPath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return }
        defer { close(fd) }
        let bytes = line.serializedBytes + [10]
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }
}
