import Foundation
import Testing
import DBus
import TestSupport

/// Kept alive only by a reply handler: once it is gone, so is the handler.
private final class Witness {}

/// What happens to a call's reply handler however the call ends: answered, timed out, the
/// connection dropped, or the `Bus` released with the call pending. The peer called is a
/// connection that never reads its queue, so a call to it stays pending.
@Suite struct BusPendingCallTests {
    @Test func releasingABusWithACallPendingReleasesTheHandlerWithoutCallingIt() throws {
        let daemon = try PrivateBus()
        defer { daemon.stop() }
        let silent = try Bus.connect(address: daemon.address)
        var client: Bus? = try Bus.connect(address: daemon.address)
        weak var witness: Witness?
        var calls = 0
        do {
            let held = Witness()
            witness = held
            try client!.call(destination: silent.uniqueName!, path: "/t", interface: "x.Silent", member: "Wait") { _ in
                withExtendedLifetime(held) { calls += 1 }
            }
        }
        for _ in 0..<20 { while try client!.process() {}; usleep(1_000) }
        #expect(witness != nil, "the pending call holds its handler")
        client = nil
        #expect(witness == nil, "the handler (and what it captured) leaked with the closed bus")
        #expect(calls == 0)
        _ = silent
    }

    @Test func anAnsweredCallReleasesItsHandlerAfterOneCall() throws {
        let daemon = try PrivateBus()
        defer { daemon.stop() }
        let server = try Bus.connect(address: daemon.address)
        let client = try Bus.connect(address: daemon.address)
        let slot = try server.exportObjects(under: "/t") { _ in .reply([.string("hi")]) }
        weak var witness: Witness?
        var answers: [Result<[DBusValue], DBusError>] = []
        do {
            let held = Witness()
            witness = held
            try client.call(destination: server.uniqueName!, path: "/t", interface: "x.Echo", member: "Hi") { answer in
                withExtendedLifetime(held) { answers.append(answer) }
            }
        }
        try pump([server, client]) { !answers.isEmpty }
        for _ in 0..<20 { while try client.process() {}; usleep(1_000) }
        #expect(answers.count == 1)
        #expect(try answers.first?.get() == [.string("hi")])
        #expect(witness == nil, "the bus is open, but the answered call's handler must be gone")
        _ = slot
    }

    @Test func aTimedOutCallFailsOnceAndReleasesItsHandler() throws {
        let daemon = try PrivateBus()
        defer { daemon.stop() }
        let silent = try Bus.connect(address: daemon.address)
        let client = try Bus.connect(address: daemon.address)
        weak var witness: Witness?
        var answers: [Result<[DBusValue], DBusError>] = []
        do {
            let held = Witness()
            witness = held
            try client.call(destination: silent.uniqueName!, path: "/t", interface: "x.Silent", member: "Wait", timeoutUsec: 50_000) { answer in
                withExtendedLifetime(held) { answers.append(answer) }
            }
        }
        try pump([client]) { !answers.isEmpty }
        for _ in 0..<20 { while try client.process() {}; usleep(1_000) }
        #expect(answers.count == 1)
        guard case .failure? = answers.first else { Issue.record("a call nobody answered succeeded"); return }
        #expect(witness == nil)
        _ = silent
    }

    @Test func aDroppedConnectionFailsPendingCallsOnceAndReleasesTheirHandlers() throws {
        let daemon = try PrivateBus()
        var running = true
        defer { if running { daemon.stop() } }
        let silent = try Bus.connect(address: daemon.address)
        let client = try Bus.connect(address: daemon.address)
        weak var witness: Witness?
        var answers: [Result<[DBusValue], DBusError>] = []
        do {
            let held = Witness()
            witness = held
            for member in ["First", "Second"] {
                try client.call(destination: silent.uniqueName!, path: "/t", interface: "x.Silent", member: member) { answer in
                    withExtendedLifetime(held) { answers.append(answer) }
                }
            }
        }
        for _ in 0..<20 { while try client.process() {}; usleep(1_000) }
        #expect(answers.isEmpty)
        daemon.stop()
        running = false
        // The connection is gone: process() hands each pending call an error, then throws.
        for _ in 0..<2_000 where answers.count < 2 {
            while (try? client.process()) == true {}
            usleep(1_000)
        }
        for _ in 0..<20 { _ = try? client.process() }
        #expect(answers.count == 2)
        #expect(answers.allSatisfy { if case .failure = $0 { true } else { false } })
        #expect(witness == nil)
        #expect(!client.isOpen)
        _ = silent
    }
}
