import TestSupport
import Testing
@testable import WorkerCore

/// The proxy's link speaking protocol-bluetooth §2: partials handed on in order, the final message
/// ending a request, and a request its HTTP client abandoned cancelled on the worker.
@Suite struct CentralStreamingTests {
    typealias H = CentralHarness

    static func partials(_ commands: [CentralMachine.Command]) -> [(id: String, text: String)] {
        commands.compactMap { if case .partial(let id, let text) = $0 { (id, text) } else { nil } }
    }

    mutating func notify(_ h: inout H, _ text: String, by size: Int = 20) -> [CentralMachine.Command] {
        let bytes = Array(text.utf8)
        return stride(from: 0, to: bytes.count, by: size).flatMap {
            h.on(.bluez(.characteristicValue(path: H.characteristic(1, .response), Array(bytes[$0..<min($0 + size, bytes.count)]))))
        }
    }

    @Test mutating func partialsGoToTheCallerInOrderAndTheFinalMessageEndsTheRequest() {
        var h = H()
        h.connect()
        h.on(.request(id: "s", bytes: Array(#"{"id":"s","prompt":"x","stream":true}"#.utf8), timeoutMs: 60_000))
        _ = h.acceptWrites(of: "s")
        let out = notify(
            &h,
            #"{"id":"s","delta":"Hel","done":false}{"id":"other","delta":"no","done":false}"#
                + #"{"id":"s","delta":"lo, \"w\"","done":false}{"id":"s","delta":"","done":false}"#
                + #"{"id":"s","ok":true,"done":true,"durationMs":33,"evalCount":4}"#)
        #expect(Self.partials(out).map(\.id) == ["s", "s"], "another id's partial and an empty delta are not handed on")
        #expect(Self.partials(out).map(\.text).joined() == #"Hello, "w""#)
        let resolveAt = out.firstIndex { if case .resolve = $0 { true } else { false } }
        let lastPartialAt = out.lastIndex { if case .partial = $0 { true } else { false } }
        #expect(resolveAt != nil && lastPartialAt! < resolveAt!, "the result comes after every partial")
        #expect(
            H.resolved(out) == ["s": .answered(ok: true, output: #"Hello, "w""#, error: nil, workerDurationMs: 33)],
            "the result's output is the partials joined (the final message has none)")
        #expect(h.machine.inFlight == 0)
        #expect(Self.partials(notify(&h, #"{"id":"s","delta":"late","done":false}"#)).isEmpty, "nothing after the end")
    }

    @Test mutating func aFailurePartWayEndsTheRequestWithTheWorkersError() {
        var h = H()
        h.connect()
        h.on(.request(id: "f", bytes: Array(#"{"id":"f","prompt":"x","stream":true}"#.utf8), timeoutMs: 60_000))
        _ = h.acceptWrites(of: "f")
        let out = notify(&h, #"{"id":"f","delta":"part","done":false}{"id":"f","ok":false,"done":true,"error":"model_unavailable: gone"}"#)
        #expect(Self.partials(out).map(\.text) == ["part"])
        #expect(H.resolved(out) == ["f": .answered(ok: false, output: "part", error: "model_unavailable: gone", workerDurationMs: 0)])
    }

    @Test mutating func partialsDoNotExtendTheTimeout() {
        var h = H()
        h.connect()
        h.on(.request(id: "t", bytes: Array(#"{"id":"t","prompt":"x","stream":true}"#.utf8), timeoutMs: 5_000))
        _ = h.acceptWrites(of: "t")
        h.advance(4_000)
        _ = notify(&h, #"{"id":"t","delta":"a","done":false}"#)
        #expect(H.resolved(h.advance(1_001)) == ["t": .timedOut(5_000)])
    }

    @Test func anAbandonedRequestResolvesAtOnceAndTheWorkerIsToldToCancelIt() throws {
        var h = H()
        h.connect()
        h.on(.request(id: "c", bytes: Array(#"{"id":"c","prompt":"x","stream":true}"#.utf8), timeoutMs: 60_000))
        _ = h.acceptWrites(of: "c")
        let out = h.on(.abandon(id: "c"))
        #expect(H.resolved(out) == ["c": .notConnected(CentralMachine.abandonedReason)])
        let cancel = try #require(H.writes(out).first)
        #expect(try JSON.parse(cancel.chunk) == ["id": "c", "cancel": true])
        #expect(h.acceptWrites(of: "c") == BluetoothMessage.cancel(id: "c"))
        #expect(h.machine.inFlight == 0)
        // The worker's last words about it are ignored.
        let late = h.on(
            .bluez(.characteristicValue(path: H.characteristic(1, .response), Array(#"{"id":"c","ok":false,"done":true,"error":"cancelled"}"#.utf8))))
        #expect(H.resolved(late).isEmpty)
        #expect(H.resolved(h.on(.abandon(id: "c"))).isEmpty, "a second abandon has nothing to do")
    }

    @Test func aRequestAbandonedBeforeItsFirstByteIsNeverSent() {
        var h = H()
        h.connect()
        h.on(.request(id: "first", bytes: Array(String(repeating: "a", count: 400).utf8), timeoutMs: 60_000))
        h.on(.request(id: "queued", bytes: Array(#"{"id":"queued","prompt":"x"}"#.utf8), timeoutMs: 60_000))
        let out = h.on(.abandon(id: "queued"))
        #expect(H.resolved(out)["queued"] == .notConnected(CentralMachine.abandonedReason))
        _ = h.acceptWrites(of: "first")
        #expect(!H.writes(h.all).contains { $0.id == "queued" }, "neither the request nor a cancel went out")
    }

    @Test func aRequestAbandonedMidWriteIsWrittenWholeThenCancelled() throws {
        var h = H()
        h.connect(mtu: 23)
        let body = Array((#"{"id":"m","prompt":""# + String(repeating: "p", count: 100) + #""}"#).utf8)
        h.on(.request(id: "m", bytes: body, timeoutMs: 60_000))
        h.on(.writeAnswered(id: "m", error: nil))
        h.on(.abandon(id: "m"))
        // The worker would otherwise hold a partial request that garbles the next one.
        let written = h.acceptWrites(of: "m")
        #expect(written == Array(body[20...]) + BluetoothMessage.cancel(id: "m"))
    }

    @Test func anAbandonWithoutALinkOnlyResolves() {
        var h = H()
        h.connect()
        h.on(.request(id: "x", bytes: Array(#"{"id":"x","prompt":"x"}"#.utf8), timeoutMs: 60_000))
        _ = h.acceptWrites(of: "x")
        h.on(.bluez(.propertiesChanged(path: H.worker(1), BlueZInterfaces(device: .init(connected: false)))))
        #expect(H.resolved(h.on(.abandon(id: "x"))).isEmpty, "the link's loss already answered it")
    }
}
