#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
@testable import BlueZ
import DBus
import TestSupport
import Logging
import WorkerCore

/// The daemon's Just Works agent (bluetooth.pairingAgent) against the stand-in bluetoothd:
/// registered as the default agent with NoInputNoOutput, hostile and malformed Agent1 calls
/// refused without harm, calls from another process refused, registered again when
/// bluetoothd returns, unregistered at stop. Real pairings are the VM suite's (phase security).
@Suite(.serialized) struct JustWorksAgentFakeBluezTests {
    static let dev = "/org/bluez/hci0/dev_00_AA_01_01_00_01"

    @Test func theAgentAnswersBluetoothdsJustWorksOnlySurvivesHostileCallsAndFollowsBluetoothd() async throws {
        let (daemon, bluez) = try await startFakeBluez()
        defer { bluez.stop(); daemon.stop() }
        var settings = peripheralSettings(on: daemon)
        settings.retryMs = 200
        settings.pairingAgent = PairingAgentChoice(answerer: .worker, reason: "bluetooth.pairingAgent is worker")
        // Short, so that the bond of the accepted device, which never uses the service, goes.
        settings.limits.clientIdleMs = 1_500
        let host = RecordingHost()
        let peripheral = GattPeripheral(settings: settings, host: host, logger: Logger(label: "test", level: .error))
        let session = Task { await peripheral.run() }

        await eventually("the agent registered as the default") { bluez.with { $0.agentDefault } }
        let agent = try #require(bluez.with { $0.agent })
        #expect(agent.path == GattObjects.agent)
        #expect(bluez.with { $0.agentCapability } == "NoInputNoOutput")
        await eventually("status: the agent registered") { await host.last?.pairingAgentRegistered == true }

        func call(_ key: String, _ member: String, _ arguments: [DBusValue]) {
            bluez.call(key, to: agent.owner, path: agent.path, interface: "org.bluez.Agent1", member: member, arguments: arguments)
        }
        call("types", "RequestConfirmation", [.objectPath(Self.dev), .string("123456")])
        call("notAPath", "RequestAuthorization", [.string("not a path")])
        call("none", "RequestAuthorization", [])
        call("range", "RequestConfirmation", [.objectPath(Self.dev), .int64(1 << 40)])
        call("negative", "DisplayPasskey", [.objectPath(Self.dev), .int32(-1), .uint16(0)])
        call("otherAdapter", "RequestAuthorization", [.objectPath("/org/bluez/hci1/dev_00_AA_01_01_00_01")])
        call("comparison", "RequestConfirmation", [.objectPath(Self.dev), .uint32(123_456)])
        call("passkey", "RequestPasskey", [.objectPath(Self.dev)])
        call("pin", "RequestPinCode", [.objectPath(Self.dev)])
        call("service", "AuthorizeService", [.objectPath(Self.dev), .string("0000110b-0000-1000-8000-00805f9b34fb")])
        call("unknown", "Explode", [.objectPath(Self.dev)])
        call("justWorks", "RequestAuthorization", [.objectPath(Self.dev)])
        await eventually("the answers") { bluez.with { $0.replies.count } == 12 }
        let replies = bluez.with { $0.replies }
        for key in ["types", "none", "range", "negative"] {
            guard case .failure(let error)? = replies[key] else { Issue.record("\(key) was accepted"); continue }
            #expect(error.name == "org.freedesktop.DBus.Error.InvalidArgs", "\(key): \(error)")
        }
        for key in ["notAPath", "otherAdapter", "comparison", "passkey", "pin", "service"] {
            guard case .failure(let error)? = replies[key] else { Issue.record("\(key) was accepted"); continue }
            #expect(error.name == "org.bluez.Error.Rejected", "\(key): \(error)")
        }
        guard case .failure? = replies["unknown"] else { Issue.record("an unknown member was answered"); return }
        #expect((try? replies["justWorks"]?.get()) == [], "bluetoothd's Just Works request of hci0's device is accepted")

        // Another process on the bus may not drive the agent, not even with a good request.
        let intruder = try Bus.connect(address: daemon.address)
        var intruded: Result<[DBusValue], DBusError>?
        try intruder.call(
            destination: agent.owner, path: agent.path, interface: "org.bluez.Agent1", member: "RequestAuthorization",
            arguments: [.objectPath(Self.dev)]
        ) { intruded = $0 }
        for _ in 0..<5_000 where intruded == nil { while try intruder.process() {}; usleep(1_000) }
        guard case .failure(let denied)? = intruded else { Issue.record("the intruder's call was obeyed: \(String(describing: intruded))"); return }
        #expect(denied.name == "org.freedesktop.DBus.Error.AccessDenied")
        await eventually("the counts in status") {
            let last = await host.last; return last?.pairingsAccepted == 1 && last?.pairingsRefused == 6
        }
        // #26 row 8: the accepted device never used the service: its bond is removed.
        await eventually("the unused bond removed") { bluez.with { $0.removedDevices } == [Self.dev] }
        await eventually("counted in status") { await host.last?.agentBondsRemoved == 1 }

        // bluetoothd goes away and comes back: the agent is registered and the default again.
        bluez.releaseName()
        await eventually("waiting without bluetoothd") { await host.last?.state == .waiting }
        #expect(await host.last?.pairingAgentRegistered == false)
        bluez.with { $0.agentDefault = false }
        bluez.enqueue { bus in bluez.requestName(bus) }
        await eventually("the agent registered again") { bluez.with { $0.agentRegistrations == 2 && $0.agentDefault } }

        await peripheral.stop()
        #expect(bluez.with { $0.agentUnregistered }, "stop unregisters the agent")
        session.cancel()
        _ = await session.value
    }

    @Test func withTheHostAnsweringNoAgentIsRegisteredAndAgentCallsAreRefused() async throws {
        let (daemon, bluez) = try await startFakeBluez()
        defer { bluez.stop(); daemon.stop() }
        var settings = peripheralSettings(on: daemon)
        settings.pairingAgent = PairingAgentChoice(answerer: .host, reason: "bluetooth.pairingAgent is host")
        let host = RecordingHost()
        let peripheral = GattPeripheral(settings: settings, host: host, logger: Logger(label: "test", level: .error))
        let session = Task { await peripheral.run() }
        await eventually("advertising") { await host.last?.state == .advertising }
        #expect(bluez.with { $0.agentRegistrations } == 0)
        #expect(await host.last?.pairingAgent == "host")
        // bluetoothd's own name calling the (unregistered) object: refused, never accepted.
        let owner = try #require(await uniqueNameOfWorker(daemon: daemon, excluding: bluez))
        bluez.call(
            "justWorks", to: owner, path: GattObjects.agent, interface: "org.bluez.Agent1", member: "RequestAuthorization",
            arguments: [.objectPath(Self.dev)])
        await eventually("the answer") { bluez.with { $0.replies["justWorks"] } != nil }
        guard case .failure(let error)? = bluez.with({ $0.replies["justWorks"] }) else { Issue.record("accepted without an agent"); return }
        #expect(error.name == "org.bluez.Error.Rejected")
        await peripheral.stop()
        #expect(!bluez.with { $0.agentUnregistered })
        session.cancel()
        _ = await session.value
    }
}
