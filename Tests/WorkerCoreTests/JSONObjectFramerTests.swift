import Testing
@testable import WorkerCore

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
