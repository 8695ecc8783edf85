#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
@testable import BlueZ
import DBus
import TestSupport
import Posix
import Synchronization
import WorkerCore

/// `bluetooth pair`'s D-Bus side against the stand-in bluetoothd (FakeBluez), for what
/// real BlueZ never does: Agent1 calls with wrong argument types or out-of-range values,
/// and calls from a process that is not bluetoothd. What real BlueZ does (Just Works,
/// numeric comparison, the window closing after a pairing) is tested in the VM suite's
/// phase `security`.
@Suite(.serialized) struct PairingAgentFakeBluezTests {
    final class Lines: Sendable {
        private let lock = Mutex<[String]>([])
        func append(_ line: String) { lock.withLock { $0.append(line) } }
        var all: [String] { lock.withLock { $0 } }
    }

    static let dev = "/org/bluez/hci0/dev_00_AA_01_01_00_01"

    /// A pairing window on hci0 of a stand-in bluetoothd; its terminal is a pipe the test
    /// types into (`typing`), what it shows goes to `lines`.
    struct OpenWindow {
        let daemon: PrivateBus, bluez: FakeBluez
        let typing: Int32, reading: Int32
        let lines = Lines(), stop = PairingStop(), wake = WakeEvent()
        let task: Task<PairingAgent.Outcome, Never>

        init() async throws {
            (daemon, bluez) = try await startFakeBluez()
            var fds: [Int32] = [0, 0]
            #expect(pipe(&fds) == 0)
            (reading, typing) = (fds[0], fds[1])
            let (input, address, lines, stop, wake) = (reading, daemon.address, lines, stop, wake)
            task = Task {
                let agent = PairingAgent(adapter: "hci0", durationMs: 30_000, input: input, busAddress: address, stop: stop, wake: wake) {
                    lines.append($0)
                }
                return await agent.run()
            }
        }

        func close() {
            bluez.stop()
            daemon.stop()
            Glibc.close(reading)
            Glibc.close(typing)
        }
    }

    @Test func hostileCallsAreRefusedAnOperatorYesAcceptsAndTheWindowCleansUp() async throws {
        let open = try await OpenWindow()
        defer { open.close() }
        let (daemon, bluez, lines, window) = (open.daemon, open.bluez, open.lines, open.task)
        let fds = [open.reading, open.typing]
        await eventually("the window to open") { lines.all.contains { $0.hasPrefix("Pairing window open on hci0") } }
        #expect(bluez.with { $0.pairable }, "the adapter is pairable while the window is open")
        #expect(bluez.with { $0.agentDefault })
        guard let agent = bluez.with({ $0.agent }) else { Issue.record("no agent registered"); return }
        #expect(agent.path == PairingAgent.objectPath)

        func call(_ key: String, _ member: String, _ arguments: [DBusValue]) {
            bluez.call(key, to: agent.owner, path: agent.path, interface: "org.bluez.Agent1", member: member, arguments: arguments)
        }
        call("types", "RequestConfirmation", [.string("not a path"), .string("123456")])
        call("none", "RequestConfirmation", [])
        call("range", "RequestConfirmation", [.objectPath(Self.dev), .int64(1 << 40)])
        call("negative", "DisplayPasskey", [.objectPath(Self.dev), .int32(-1), .uint16(0)])
        call("otherAdapter", "RequestConfirmation", [.objectPath("/org/bluez/hci1/dev_00_AA_01_01_00_01"), .uint32(1)])
        call("pin", "RequestPinCode", [.objectPath(Self.dev)])
        call("service", "AuthorizeService", [.objectPath(Self.dev), .string("0000110b-0000-1000-8000-00805f9b34fb")])
        await eventually("the answers") { bluez.with { $0.replies.count } == 7 }
        let replies = bluez.with { $0.replies }
        for key in ["types", "none", "range", "negative"] {
            guard case .failure(let error)? = replies[key] else { Issue.record("\(key) was accepted"); continue }
            #expect(error.name == "org.freedesktop.DBus.Error.InvalidArgs", "\(key): \(error)")
        }
        for key in ["otherAdapter", "pin", "service"] {
            guard case .failure(let error)? = replies[key] else { Issue.record("\(key) was accepted"); continue }
            #expect(error.name == "org.bluez.Error.Rejected", "\(key): \(error)")
        }

        // Another process on the bus may not drive the agent.
        let intruder = try Bus.connect(address: daemon.address)
        var intruded: Result<[DBusValue], DBusError>?
        try intruder.call(
            destination: agent.owner, path: agent.path, interface: "org.bluez.Agent1", member: "RequestConfirmation",
            arguments: [.objectPath(Self.dev), .uint32(111_111)]
        ) { intruded = $0 }
        for _ in 0..<5_000 where intruded == nil { while try intruder.process() {}; usleep(1_000) }
        guard case .failure(let denied)? = intruded else {
            Issue.record("the intruder's call was not refused: \(String(describing: intruded))"); return
        }
        #expect(denied.name == "org.freedesktop.DBus.Error.AccessDenied")
        #expect(!lines.all.contains { $0.contains("111111") }, "the operator was never asked about the intruder's passkey")

        // A line typed before the question is dropped, not taken as its answer.
        _ = write(fds[1], "y\n", 2)
        try? await Task.sleep(nanoseconds: 200_000_000)
        call("confirm", "RequestConfirmation", [.objectPath(Self.dev), .uint32(4_321)])
        await eventually("the prompt") { lines.all.contains { $0.contains("passkey 004321? [y/N]") } }
        try? await Task.sleep(nanoseconds: 300_000_000)
        #expect(bluez.with { $0.replies["confirm"] } == nil, "the stale y did not answer")
        _ = write(fds[1], "y\n", 2)
        await eventually("the confirmation's answer") { bluez.with { $0.replies["confirm"] } != nil }
        #expect((try? bluez.with { $0.replies["confirm"] }?.get()) == [])

        // bluetoothd says the device paired: the window closes by itself and cleans up.
        bluez.enqueue { bus in
            try bus.emitSignal(
                path: Self.dev, interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
                arguments: [.string("org.bluez.Device1"), .properties([("Paired", .bool(true)), ("Bonded", .bool(true))]), .strings([])])
        }
        let outcome = await window.value
        #expect(outcome == .paired("00:AA:01:01:00:01"))
        #expect(bluez.with { $0.agentUnregistered }, "the agent is unregistered at the end")
        #expect(!bluez.with { $0.pairable }, "Pairable is back to false")
    }

    @Test func aSignalClosesTheWindowAndRefusesTheHeldCall() async throws {
        let open = try await OpenWindow()
        defer { open.close() }
        let (bluez, lines, stop, wake, window) = (open.bluez, open.lines, open.stop, open.wake, open.task)
        await eventually("the window to open") { lines.all.contains { $0.hasPrefix("Pairing window open") } }
        guard let agent = bluez.with({ $0.agent }) else { Issue.record("no agent registered"); return }
        bluez.call(
            "held", to: agent.owner, path: agent.path, interface: "org.bluez.Agent1", member: "RequestPasskey", arguments: [.objectPath(Self.dev)])
        await eventually("the prompt") { lines.all.contains { $0.contains("Type the 6-digit passkey") } }
        stop.set(SIGINT)
        wake.signal()
        let outcome = await window.value
        #expect(outcome == .closed("interrupted (SIGINT)"))
        await eventually("the held call's answer") { bluez.with { $0.replies["held"] } != nil }
        guard case .failure(let error)? = bluez.with({ $0.replies["held"] }) else { Issue.record("the held call was accepted"); return }
        #expect(error.name == "org.bluez.Error.Rejected")
        #expect(bluez.with { $0.agentUnregistered })
        #expect(!bluez.with { $0.pairable })
    }
}
