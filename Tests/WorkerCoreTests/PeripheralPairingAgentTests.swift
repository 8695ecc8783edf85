import TestSupport
import Testing
@testable import WorkerCore

/// The Just Works agent's life in the peripheral's machine: registered while the session
/// serves `encrypted` with the worker answering, again after bluetoothd returns, taken back
/// at stop; its calls answered for the worker's adapter only, and only from bluetoothd.
@Suite struct PeripheralPairingAgentTests {
    typealias H = PeripheralHarness
    static let worker = PairingAgentChoice(answerer: .worker, reason: "bluetooth.pairingAgent is worker")
    static let host = PairingAgentChoice(answerer: .host, reason: "bluetooth.pairingAgent is host")

    static func unregistrations(_ commands: [PeripheralMachine.Command]) -> [PeripheralMachine.Registered] {
        commands.compactMap { if case .unregister(let what, _) = $0 { what } else { nil } }
    }
    static func reply(_ commands: [PeripheralMachine.Command]) -> PeripheralMachine.Reply? {
        commands.compactMap { if case .reply(let reply) = $0 { reply } else { nil } }.first
    }

    static func started(_ choice: PairingAgentChoice) -> H {
        var h = H(pairingAgent: choice)
        h.on(.busOpened)
        h.on(.bluez(.owner(H.bluez)))
        return h
    }

    @Test func theAgentIsRegisteredBeforeTheApplicationAndShownInStatus() {
        var h = Self.started(Self.worker)
        #expect(h.machine.status.pairingAgent == "worker")
        #expect(h.machine.status.pairingAgentReason == Self.worker.reason)
        let first = h.on(.bluez(.managedObjects([H.hci0: H.adapter()])))
        #expect(H.registrations(first) == [.agent, .application], "the agent first: it answers the first client's pairing")
        #expect(h.machine.pairingAgent.registration == .pending)
        let registered = h.on(.registration(.agent, epoch: h.machine.epoch, .accepted))
        #expect(h.machine.pairingAgent.registration == .done)
        #expect(h.machine.status.pairingAgentRegistered)
        #expect(H.logs(registered).contains { $0.hasPrefix("pairing agent registered (NoInputNoOutput, bluetoothd's default agent)") })
        h.on(.registration(.application, epoch: h.machine.epoch, .accepted))
        h.on(.registration(.advertisement, epoch: h.machine.epoch, .accepted))
        #expect(H.registrations(h.advance(60_000)).isEmpty, "registered once")
    }

    @Test func theHostsChoiceRegistersNoAgentAndRefusesAgentCalls() {
        var h = Self.started(Self.host)
        let first = h.on(.bluez(.managedObjects([H.hci0: H.adapter()])))
        #expect(H.registrations(first) == [.application])
        let answer = h.on(.call(sender: H.bluez, .agent(.request(.authorization(device: H.device(1))))))
        #expect(Self.reply(answer) == .error(name: "org.bluez.Error.Rejected", message: "the worker's pairing agent is not registered"))
        #expect(h.machine.status.pairingsAccepted == 0)
    }

    @Test func bluetoothdsCallsAreAnsweredForItsAdapterOnlyAndOthersCallsRefused() {
        var h = Self.started(Self.worker)
        h.on(.bluez(.managedObjects([H.hci0: H.adapter()])))
        h.on(.registration(.agent, epoch: h.machine.epoch, .accepted))
        h.on(.bluez(.interfacesAdded(path: H.device(1), BlueZInterfaces(device: .init(adapter: H.hci0, connected: true, addressType: "random")))))
        let accepted = h.on(.call(sender: H.bluez, .agent(.request(.authorization(device: H.device(1))))))
        #expect(Self.reply(accepted) == .empty)
        #expect(H.logs(accepted).contains("accepted a Just Works pairing from 00:AA:01:01:00:01 (the worker's pairing agent)"))
        let comparison = h.on(.call(sender: H.bluez, .agent(.request(.confirmation(device: H.device(1), passkey: 1)))))
        guard case .error(let name, _)? = Self.reply(comparison) else { Issue.record("numeric comparison accepted"); return }
        #expect(name == "org.bluez.Error.Rejected")
        let otherAdapter = h.on(.call(sender: H.bluez, .agent(.request(.authorization(device: "/org/bluez/hci1/dev_00_AA_01_01_00_01")))))
        guard case .error(let name2, _)? = Self.reply(otherAdapter) else { Issue.record("another adapter's device accepted"); return }
        #expect(name2 == "org.bluez.Error.Rejected")
        let intruder = h.on(.call(sender: ":1.99", .agent(.request(.authorization(device: H.device(2))))))
        guard case .error(let name3, _)? = Self.reply(intruder) else { Issue.record("a stranger's call was obeyed"); return }
        #expect(name3 == "org.freedesktop.DBus.Error.AccessDenied")
        let anonymous = h.on(.call(sender: nil, .agent(.request(.authorization(device: H.device(2))))))
        #expect(Self.reply(anonymous).map { if case .error = $0 { true } else { false } } == true)
        let malformed = h.on(.call(sender: H.bluez, .agent(.malformed(member: "RequestAuthorization"))))
        #expect(
            Self.reply(malformed) == .error(name: "org.freedesktop.DBus.Error.InvalidArgs", message: "unexpected arguments for RequestAuthorization"))
        #expect(Self.reply(h.on(.call(sender: H.bluez, .agent(.cancel)))) == .empty)
        #expect(h.machine.status.pairingsAccepted == 1)
        #expect(h.machine.status.pairingsRefused == 2)
    }

    @Test func bluetoothdsRestartRegistersTheAgentAgain() {
        var h = Self.started(Self.worker)
        h.on(.bluez(.managedObjects([H.hci0: H.adapter()])))
        h.on(.registration(.agent, epoch: h.machine.epoch, .accepted))
        h.on(.bluez(.owner(nil)))
        #expect(h.machine.pairingAgent.registration == .none)
        #expect(!h.machine.status.pairingAgentRegistered)
        h.on(.bluez(.owner(":1.8")))
        let again = h.on(.bluez(.managedObjects([H.hci0: H.adapter()])))
        #expect(H.registrations(again).first == .agent)
        h.on(.registration(.agent, epoch: h.machine.epoch, .accepted))
        #expect(h.machine.pairingAgent.registration == .done)
    }

    @Test func anAgentBeingRegisteredWhenTheAdapterGoesOffIsRegisteredAgain() {
        var h = Self.started(Self.worker)
        h.on(.bluez(.managedObjects([H.hci0: H.adapter()])))
        let epoch = h.machine.epoch
        h.on(.bluez(.propertiesChanged(path: H.hci0, BlueZInterfaces(adapter: .init(powered: false)))))
        h.on(.registration(.agent, epoch: epoch, .accepted))
        #expect(h.machine.pairingAgent.registration == .none, "the answer of the old epoch is dropped")
        let back = h.on(.bluez(.propertiesChanged(path: H.hci0, BlueZInterfaces(adapter: .init(powered: true)))))
        #expect(H.registrations(back).first == .agent)
    }

    @Test func aRefusalOrAReleaseIsRetriedAfterTheDelay() {
        var h = Self.started(Self.worker)
        h.on(.bluez(.managedObjects([H.hci0: H.adapter()])))
        let refused = h.on(.registration(.agent, epoch: h.machine.epoch, .refused("org.freedesktop.DBus.Error.AccessDenied: no")))
        #expect(
            H.logs(refused).contains {
                $0.hasPrefix("bluetoothd refused the pairing agent: org.freedesktop.DBus.Error.AccessDenied: no; retrying every 5 s")
            })
        #expect(h.machine.status.pairingAgentReason.hasPrefix("bluetoothd refused the pairing agent"))
        #expect(H.registrations(h.advance(4_000)).filter { $0 == .agent }.isEmpty)
        #expect(H.registrations(h.advance(1_500)).filter { $0 == .agent } == [.agent])
        h.on(.registration(.agent, epoch: h.machine.epoch, .accepted))
        #expect(h.machine.status.pairingAgentReason == Self.worker.reason)
        let released = h.on(.call(sender: H.bluez, .agent(.release)))
        #expect(Self.reply(released) == .empty)
        #expect(h.machine.pairingAgent.registration == .none)
        #expect(H.registrations(h.advance(5_500)).filter { $0 == .agent } == [.agent])
    }

    @Test func stopUnregistersTheAgentAndWaitsForIt() {
        var h = Self.started(Self.worker)
        h.bringUpAgain()
        let stop = h.on(.stop)
        #expect(Set(Self.unregistrations(stop)) == [.agent, .advertisement, .application])
        h.on(.unregistered(.advertisement))
        h.on(.unregistered(.application))
        #expect(!h.machine.stopped, "not stopped while bluetoothd holds the agent")
        let gone = h.on(.unregistered(.agent))
        #expect(h.machine.stopped)
        #expect(H.logs(gone).contains { $0.hasPrefix("pairing agent unregistered") })
        let late = h.on(.call(sender: H.bluez, .agent(.request(.authorization(device: H.device(1))))))
        guard case .error? = Self.reply(late) else { Issue.record("accepted after stop"); return }
    }
}

extension PeripheralHarness {
    /// After `.busOpened` and bluetoothd's owner: hci0, the agent, application and advertisement accepted.
    mutating func bringUpAgain() {
        on(.bluez(.managedObjects([Self.hci0: Self.adapter()])))
        on(.registration(.agent, epoch: machine.epoch, .accepted))
        on(.registration(.application, epoch: machine.epoch, .accepted))
        on(.registration(.advertisement, epoch: machine.epoch, .accepted))
    }
}
