import Foundation
import Testing
@testable import BlueZ
import Logging
import DBus
import TestSupport
import WorkerCore

@Suite(.serialized) struct PeripheralFakeBluezTests {
    @Test func mockedBluezSendsMalformedCallsAndRestartsTheWorkerRegistersAgainAndServesOn() async throws {
        let (daemon, bluez) = try await startFakeBluez()
        defer { bluez.stop(); daemon.stop() }
        var settings = peripheralSettings(on: daemon)
        settings.chunkPacingMs = 0
        settings.retryMs = 200
        let host = RecordingHost()
        let peripheral = GattPeripheral(settings: settings, host: host, logger: Logger(label: "test", level: .error))
        let session = Task { await peripheral.run() }

        await eventually("registration") { bluez.with { $0.registeredApplications == 1 && $0.registeredAdvertisements == 1 } }
        await eventually("status advertising") { await host.last?.state == .advertising }
        let objects = try #require(bluez.with { $0.objectsOfApplication })
        #expect(objects.signature == "a{oa{sa{sv}}}")

        // Find the worker's unique name through the bus: the only other connection.
        let name = try #require(await uniqueNameOfWorker(daemon: daemon, excluding: bluez))
        let device: DBusValue = .properties([("device", .objectPath("/org/bluez/hci0/dev_00_AA_01_01_00_01")), ("mtu", .uint16(185))])
        bluez.call("no-args", to: name, path: GattObjects.request, member: "WriteValue", arguments: [])
        bluez.call("wrong-types", to: name, path: GattObjects.request, member: "WriteValue", arguments: [.string("{}"), .int32(1)])
        bluez.call("bad-offset", to: name, path: GattObjects.status, member: "ReadValue", arguments: [.properties([("offset", .uint16(60_000))])])
        bluez.call("unknown", to: name, path: GattObjects.request, member: "Explode", arguments: [])
        bluez.call(
            "garbage", to: name, path: GattObjects.request, member: "WriteValue", arguments: [.bytes(Array("{\"id\":\"g\", nope}".utf8)), device])
        bluez.call(
            "good", to: name, path: GattObjects.request, member: "WriteValue",
            arguments: [.bytes(Array(#"{"id":"r-1","prompt":"hello"}"#.utf8)), device])
        await eventually("all answers") { bluez.with { $0.replies.count == 6 } }
        let replies = bluez.with { $0.replies }
        #expect(replies["no-args"].map { if case .failure = $0 { true } else { false } } == true)
        #expect(replies["wrong-types"].map { if case .failure = $0 { true } else { false } } == true)
        #expect(replies["bad-offset"].map { if case .failure(let e) = $0 { e.name == "org.bluez.Error.InvalidOffset" } else { false } } == true)
        #expect(replies["unknown"].map { if case .failure(let e) = $0 { e.name == "org.bluez.Error.NotSupported" } else { false } } == true)
        #expect(replies["good"].map { if case .success = $0 { true } else { false } } == true)

        // The two messages come back whole, in chunks of at most MTU − 5 = 180 bytes.
        await eventually("two responses") { messages(in: bluez).count >= 2 }
        let answers = messages(in: bluez)
        #expect(
            answers.contains { $0["id"]?.stringValue == "g" && $0["ok"] == false && $0["error"]?.stringValue?.hasPrefix("malformed_json") == true })
        #expect(answers.contains { $0["id"]?.stringValue == "r-1" && $0["ok"] == true && $0["output"]?.stringValue == "echo: hello" })
        #expect(bluez.with { $0.notifications }.allSatisfy { $0.count <= 180 })
        #expect(await host.served.map(\.id) == ["r-1"])

        // A caller that is not bluetoothd is refused.
        let stranger = try Bus.connect(address: daemon.address)
        var strangerAnswer: Result<[DBusValue], DBusError>?
        try stranger.call(
            destination: name, path: GattObjects.request, interface: "org.bluez.GattCharacteristic1", member: "WriteValue",
            arguments: [.bytes(Array(#"{"id":"x","prompt":"p"}"#.utf8)), device]
        ) { strangerAnswer = $0 }
        for _ in 0..<500 where strangerAnswer == nil {
            while try stranger.process() {}
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        #expect(strangerAnswer.map { if case .failure(let e) = $0 { e.name.hasSuffix("AccessDenied") } else { false } } == true)

        // bluetoothd goes away and comes back: the worker registers again by itself.
        bluez.releaseName()
        await eventually("waiting without bluetoothd") { await host.last?.state == .waiting }
        bluez.enqueue { bus in bluez.requestName(bus) }
        await eventually("registered again") { bluez.with { $0.registeredApplications == 2 && $0.registeredAdvertisements == 2 } }
        await eventually("advertising again") { await host.last?.state == .advertising }
        #expect(await host.last?.registrations == 2, "both registrations counted")

        // Stopping takes both back.
        await peripheral.stop()
        #expect(bluez.with { $0.unregistered } == 2)
        session.cancel()
        _ = await session.value
    }

}

/// A host whose answers are long and slow, as a real model's are.
actor SlowHost: PeripheralHost {
    let delayMs: UInt64
    let outputBytes: Int
    init(delayMs: UInt64, outputBytes: Int) {
        self.delayMs = delayMs
        self.outputBytes = outputBytes
    }
    func serve(
        _ request: BluetoothRequest, client: String, cancellation: ServeCancellation,
        onPartial: @escaping @Sendable (String) async -> Void
    ) async -> PeripheralOutcome {
        try? await Task.sleep(nanoseconds: delayMs * 1_000_000)
        return PeripheralOutcome(ok: true, output: String(repeating: "w", count: outputBytes), error: nil, durationMs: Int64(delayMs))
    }
    func statusValues() async -> (modelState: String, batteryPct: Int?) { ("ready", nil) }
    func report(_ status: BluetoothStatus) async {}
}

@Suite(.serialized) struct PeripheralPacingTests {
    @Test func pacedAnswersAndStatusArriveWholeOverARealBus() async throws {
        let (daemon, bluez) = try await startFakeBluez()
        defer { bluez.stop(); daemon.stop() }
        var settings = peripheralSettings(on: daemon)
        settings.chunkPacingMs = 10
        let peripheral = GattPeripheral(
            settings: settings, host: SlowHost(delayMs: 1_500, outputBytes: 6_000), logger: Logger(label: "test", level: .error))
        let session = Task { await peripheral.run() }
        await eventually("registration") { bluez.with { $0.registeredApplications == 1 && $0.registeredAdvertisements == 1 } }
        let name = try #require(await uniqueNameOfWorker(daemon: daemon, excluding: bluez))
        let device: DBusValue = .properties([("device", .objectPath("/org/bluez/hci0/dev_00_AA_01_01_00_01")), ("mtu", .uint16(48))])
        bluez.call("subscribe", to: name, path: GattObjects.status, member: "StartNotify", arguments: [])
        bluez.call(
            "write", to: name, path: GattObjects.request, member: "WriteValue",
            arguments: [.bytes(Array(#"{"id":"long-1","prompt":"hello"}"#.utf8)), device])
        await eventually("the answer", seconds: 30) { messages(in: bluez).contains { $0["id"]?.stringValue == "long-1" } }
        let all = messages(in: bluez)
        #expect(all.contains { $0["modelState"]?.stringValue == "ready" }, "the status arrived whole")
        #expect(all.first { $0["id"]?.stringValue == "long-1" }?["output"]?.stringValue?.utf8.count == 6_000)
        #expect(bluez.with { $0.notifications }.allSatisfy { $0.count <= 43 })
        await peripheral.stop()
        session.cancel()
        _ = await session.value
    }
}

/// A host that produces a token every `everyMs`, as a model streams, until cancelled.
actor TokenHost: PeripheralHost {
    let everyMs: UInt64
    let tokens: Int
    var stoppedBecause: String?
    var tokensSent = 0
    init(everyMs: UInt64, tokens: Int) {
        self.everyMs = everyMs
        self.tokens = tokens
    }
    func serve(
        _ request: BluetoothRequest, client: String, cancellation: ServeCancellation,
        onPartial: @escaping @Sendable (String) async -> Void
    ) async -> PeripheralOutcome {
        for n in 0..<tokens {
            do { try await Task.sleep(nanoseconds: everyMs * 1_000_000) } catch {
                stoppedBecause = cancellation.reason ?? "cancelled without a reason"
                return PeripheralOutcome(ok: false, output: "", error: stoppedBecause, durationMs: 0)
            }
            tokensSent += 1
            await onPartial("tok\(n) ")
        }
        return PeripheralOutcome(ok: true, output: "", error: nil, durationMs: Int64(tokens) * Int64(everyMs), evalCount: tokens)
    }
    func statusValues() async -> (modelState: String, batteryPct: Int?) { ("ready", nil) }
    func report(_ status: BluetoothStatus) async {}
}

@Suite(.serialized) struct PeripheralStreamingBusTests {
    @Test func aStreamedAnswerArrivesInPartialsAndACancelStopsTheHostOverARealBus() async throws {
        let (daemon, bluez) = try await startFakeBluez()
        defer { bluez.stop(); daemon.stop() }
        let host = TokenHost(everyMs: 20, tokens: 500)
        let peripheral = GattPeripheral(settings: peripheralSettings(on: daemon), host: host, logger: Logger(label: "test", level: .error))
        let session = Task { await peripheral.run() }
        await eventually("registration") { bluez.with { $0.registeredApplications == 1 && $0.registeredAdvertisements == 1 } }
        let name = try #require(await uniqueNameOfWorker(daemon: daemon, excluding: bluez))
        let device: DBusValue = .properties([("device", .objectPath("/org/bluez/hci0/dev_00_AA_01_01_00_01")), ("mtu", .uint16(185))])
        let started = Date()
        bluez.call(
            "write", to: name, path: GattObjects.request, member: "WriteValue",
            arguments: [.bytes(Array(#"{"id":"s-1","prompt":"hello","stream":true}"#.utf8)), device])
        await eventually("partials") { messages(in: bluez).filter { $0["delta"] != nil }.count >= 3 }
        let firstPartialAfter = Date().timeIntervalSince(started)
        #expect(firstPartialAfter < 5, "partials come while the model runs (500 tokens take 10 s)")
        bluez.call(
            "cancel", to: name, path: GattObjects.request, member: "WriteValue",
            arguments: [.bytes(Array(#"{"id":"s-1","cancel":true}"#.utf8)), device])
        await eventually("the end") { messages(in: bluez).contains { $0["done"] == true } }
        #expect(Date().timeIntervalSince(started) < 8)
        #expect(await host.stoppedBecause == "cancelled", "the host's task was cancelled, with the client's reason")
        #expect(await host.tokensSent < 500)
        let all = messages(in: bluez).filter { $0["id"] == "s-1" }
        #expect(all.last == ["id": "s-1", "ok": false, "done": true, "error": "cancelled"])
        let deltas = all.compactMap { $0["delta"]?.stringValue }.joined()
        #expect(deltas.hasPrefix("tok0 tok1 tok2 "), "in order, none lost")
        await peripheral.stop()
        session.cancel()
        _ = await session.value
    }
}
