import TestSupport
import Testing
@testable import WorkerCore

/// Issue #26 row 8: the worker's Just Works agent pairs LE devices only (a stranger in
/// range must not get a persistent Bluetooth Classic bond), decided from what bluetoothd
/// shows of the device; and the bonds it made for devices that never used the service
/// within `bluetooth.clientIdleSec` are removed, so they do not pile up.
@Suite struct DeviceTransportRules {
    @Test func aRandomAddressIsLEWhateverElseIsShown() {
        #expect(DeviceTransport.of(addressType: "random", classOfDevice: nil) == .le)
        // Only LE uses random addresses: a Class on it changes nothing.
        #expect(DeviceTransport.of(addressType: "random", classOfDevice: 0x5A020C) == .le)
    }

    @Test func aPublicAddressWithoutAClassOfDeviceIsLE() {
        #expect(DeviceTransport.of(addressType: "public", classOfDevice: nil) == .le)
    }

    @Test func aPublicAddressWithAClassOfDeviceWasSeenOnClassic() throws {
        guard case .notLE(let why) = DeviceTransport.of(addressType: "public", classOfDevice: 0x5A020C) else {
            Issue.record("a device with a Class of Device taken for LE"); return
        }
        #expect(why.contains("Bluetooth Classic"))
        #expect(why.contains("0x5a020c"))
    }

    @Test(arguments: [nil, "", "Public", "le-random", "random ", "\u{1B}[2Jpublic"] as [String?])
    func aMissingOrUnknownAddressTypeIsNotLE(_ type: String?) {
        guard case .notLE(let why) = DeviceTransport.of(addressType: type, classOfDevice: nil) else {
            Issue.record("\(String(describing: type)) taken for LE"); return
        }
        #expect(why.contains("AddressType"))
        #expect(!why.contains("\u{1B}"), "bus text is never echoed raw")
    }

    @Test func anUnknownDeviceIsNotLE() {
        guard case .notLE(let why) = DeviceTransport.of(nil) else { Issue.record("an unknown device taken for LE"); return }
        #expect(why.contains("bluetoothd shows no such device"))
        var device = BlueZObjects.Device(address: "00:AA:01:01:00:01", adapter: "/org/bluez/hci0", connected: true)
        device.addressType = "public"
        #expect(DeviceTransport.of(device) == .le)
        device.classOfDevice = 0x000104
        #expect(DeviceTransport.of(device) != .le)
    }

    static let hci0 = "/org/bluez/hci0"
    static let dev = "/org/bluez/hci0/dev_00_AA_01_01_00_01"

    @Test func justWorksIsAcceptedOverLEAndRefusedOtherwiseSayingWhy() {
        #expect(
            JustWorksAgent.answer(.authorization(device: Self.dev), adapterPath: Self.hci0, transport: .le) == .accept(address: "00:AA:01:01:00:01"))
        let refused = JustWorksAgent.answer(.authorization(device: Self.dev), adapterPath: Self.hci0, transport: .notLE("it has a Class of Device"))
        guard case .reject(let why) = refused else { Issue.record("a Classic device was accepted"); return }
        #expect(why.hasPrefix("00:AA:01:01:00:01 is not known to be an LE device (it has a Class of Device)"))
        #expect(why.contains("edgecoder-worker bluetooth pair"))
    }

    @Test func anotherAdaptersDeviceIsRefusedForThatEvenOverLE() {
        guard
            case .reject(let why) = JustWorksAgent.answer(
                .authorization(device: "/org/bluez/hci1/dev_00_AA_01_01_00_01"), adapterPath: Self.hci0, transport: .le)
        else {
            Issue.record("accepted"); return
        }
        #expect(why.contains("is not a device of the worker's adapter"))
    }
}

@Suite struct AgentBondCleanupTests {
    typealias H = PeripheralHarness
    static let worker = PairingAgentChoice(answerer: .worker, reason: "bluetooth.pairingAgent is worker")

    static func device(_ n: Int, addressType: String? = "public", classOfDevice: UInt32? = nil) -> BlueZInterfaces {
        BlueZInterfaces(
            device: .init(
                address: "00:AA:01:01:00:0\(n)", adapter: H.hci0, connected: true,
                addressType: addressType, classOfDevice: classOfDevice))
    }

    static func removals(_ commands: [PeripheralMachine.Command]) -> [String] {
        commands.compactMap { if case .removeDevice(let adapter, let device, _) = $0, adapter == H.hci0 { device } else { nil } }
    }

    /// Serving with the agent registered, clientIdleSec 120.
    static func serving() -> H {
        var h = H(pairingAgent: worker)
        h.bringUp()
        h.on(.registration(.agent, epoch: h.machine.epoch, .accepted))
        return h
    }

    static func pair(_ h: inout H, _ n: Int, addressType: String? = "public", classOfDevice: UInt32? = nil) -> PeripheralMachine.Reply? {
        h.on(.bluez(.interfacesAdded(path: H.device(n), device(n, addressType: addressType, classOfDevice: classOfDevice))))
        return H.replies(h.on(.call(sender: H.bluez, .agent(.request(.authorization(device: H.device(n))))))).first
    }

    static func bonded(_ h: inout H, _ n: Int) {
        h.on(.bluez(.propertiesChanged(path: H.device(n), BlueZInterfaces(device: .init(bonded: true)))))
    }

    @Test func aClassicDeviceIsRefusedAndCounted() {
        var h = Self.serving()
        guard case .error(let name, let message)? = Self.pair(&h, 1, classOfDevice: 0x5A020C) else {
            Issue.record("a Classic device was accepted"); return
        }
        #expect(name == "org.bluez.Error.Rejected")
        #expect(message.contains("Bluetooth Classic"))
        #expect(h.machine.status.pairingsRefused == 1 && h.machine.status.pairingsAccepted == 0)
        #expect(h.machine.pairingAgent.bonds.isEmpty)
    }

    @Test func aDeviceBluetoothdDoesNotShowIsRefused() {
        var h = Self.serving()
        let reply = H.replies(h.on(.call(sender: H.bluez, .agent(.request(.authorization(device: H.device(3))))))).first
        guard case .error(_, let message)? = reply else { Issue.record("an unknown device was accepted"); return }
        #expect(message.contains("bluetoothd shows no such device"))
    }

    @Test func aBondThatNeverUsedTheServiceIsRemovedAfterClientIdleSecOnce() {
        var h = Self.serving()
        #expect(Self.pair(&h, 1, addressType: "random") == .empty)
        Self.bonded(&h, 1)
        #expect(h.machine.pairingAgent.bonds[H.device(1)] != nil)
        #expect(Self.removals(h.advance(119_000)).isEmpty, "not before clientIdleSec")
        let due = h.advance(2_000)
        #expect(Self.removals(due) == [H.device(1)])
        #expect(H.logs(due).contains { $0.hasPrefix("removing the bond of 00:AA:01:01:00:01: paired by the worker's agent 120 s ago") })
        #expect(h.machine.status.agentBondsRemoved == 1)
        #expect(Self.removals(h.advance(300_000)).isEmpty, "removed once")
        #expect(h.machine.pairingAgent.bonds.isEmpty)
    }

    @Test func aBondWhoseDeviceUsedTheServiceIsKept() {
        var h = Self.serving()
        #expect(Self.pair(&h, 1) == .empty)
        Self.bonded(&h, 1)
        h.advance(30_000)
        _ = h.write(#"{"id":"a","prompt":"p"}"#, from: 1)
        #expect(h.machine.pairingAgent.bonds.isEmpty, "it used the service: its bond is the operator's to keep")
        #expect(Self.removals(h.advance(600_000)).isEmpty)
    }

    @Test func aDeviceThatLeavesWithoutUsingTheServiceStillHasItsBondRemoved() {
        var h = Self.serving()
        #expect(Self.pair(&h, 2) == .empty)
        Self.bonded(&h, 2)
        h.on(.bluez(.propertiesChanged(path: H.device(2), BlueZInterfaces(device: .init(connected: false)))))
        #expect(Self.removals(h.advance(121_000)) == [H.device(2)])
    }

    @Test func aDeviceBluetoothdForgotIsNotRemovedAgain() {
        var h = Self.serving()
        #expect(Self.pair(&h, 1) == .empty)
        h.on(.bluez(.interfacesRemoved(path: H.device(1), [.device])))
        #expect(h.machine.pairingAgent.bonds.isEmpty)
        #expect(Self.removals(h.advance(200_000)).isEmpty)
    }

    @Test func bondsTheAgentDidNotMakeAreNeverRemoved() {
        var h = Self.serving()
        h.on(.bluez(.interfacesAdded(path: H.device(4), Self.device(4))))
        Self.bonded(&h, 4)
        #expect(Self.removals(h.advance(600_000)).isEmpty, "a bond from a pairing window or the desktop is the operator's")
    }

    @Test func aRefusedPairingLeavesNothingToRemove() {
        var h = Self.serving()
        _ = h.on(.call(sender: H.bluez, .agent(.request(.confirmation(device: H.device(1), passkey: 1)))))
        #expect(h.machine.pairingAgent.bonds.isEmpty)
    }

    @Test func theRecordsAreBoundedAgainstAFloodOfRandomAddresses() {
        var h = Self.serving()
        func hex(_ value: Int) -> String { let text = String(value, radix: 16, uppercase: true); return text.count == 1 ? "0" + text : text }
        var removed: [String] = []
        let paths = (0..<(PeripheralMachine.maxAgentBonds + 20)).map { "/org/bluez/hci0/dev_C0_00_00_00_\(hex($0 / 256))_\(hex($0 % 256))" }
        for path in paths {
            h.on(.bluez(.interfacesAdded(path: path, BlueZInterfaces(device: .init(adapter: H.hci0, connected: true, addressType: "random")))))
            removed += Self.removals(h.on(.call(sender: H.bluez, .agent(.request(.authorization(device: path))))))
        }
        #expect(h.machine.pairingAgent.bonds.count == PeripheralMachine.maxAgentBonds)
        // The oldest unused bonds go first, at once, instead of a table without bound.
        #expect(removed == Array(paths.prefix(20)))
    }
}

/// #26 row 8, Bluetooth Classic: registered, the worker's NoInputNoOutput default agent makes
/// the adapter bondable, and the kernel accepts a Classic Just Works pairing by itself
/// (measured in the VM with BR/EDR controllers). While the adapter is discoverable Classic
/// devices can page it, so the agent stands back, and comes back when it is not.
@Suite struct AgentStandsBackWhileDiscoverableTests {
    typealias H = PeripheralHarness

    static func discoverable(_ h: inout H, _ on: Bool) -> [PeripheralMachine.Command] {
        h.on(.bluez(.propertiesChanged(path: H.hci0, BlueZInterfaces(adapter: .init(discoverable: on)))))
    }

    static func unregistrations(_ commands: [PeripheralMachine.Command]) -> [PeripheralMachine.Registered] {
        commands.compactMap { if case .unregister(let what, _) = $0 { what } else { nil } }
    }

    @Test func theAgentIsUnregisteredWhileDiscoverableAndRegisteredAgainAfter() {
        var h = AgentBondCleanupTests.serving()
        #expect(h.machine.pairingAgent.registration == .done)
        let on = Self.discoverable(&h, true)
        #expect(Self.unregistrations(on) == [.agent])
        #expect(H.logs(on).contains { $0.hasPrefix("hci0 is discoverable: while it is, a Bluetooth Classic device can pair with it by Just Works") })
        h.on(.unregistered(.agent))
        #expect(h.machine.status.pairingAgentRegistered == false)
        #expect(h.machine.status.pairingAgentReason.contains("stands back until hci0 is not discoverable"))
        let meanwhile = h.advance(120_000)
        #expect(H.registrations(meanwhile).isEmpty && Self.unregistrations(meanwhile).isEmpty, "nothing while discoverable")
        #expect(H.logs(meanwhile).allSatisfy { !$0.contains("is discoverable") }, "said once")
        let off = Self.discoverable(&h, false)
        #expect(H.registrations(off) == [.agent])
        h.on(.registration(.agent, epoch: h.machine.epoch, .accepted))
        #expect(h.machine.status.pairingAgentRegistered)
        #expect(h.machine.status.pairingAgentReason == AgentBondCleanupTests.worker.reason)
    }

    @Test func anAdapterDiscoverableAtTheStartGetsNoAgent() {
        var h = H(pairingAgent: AgentBondCleanupTests.worker)
        h.on(.busOpened)
        h.on(.bluez(.owner(H.bluez)))
        var adapter = H.adapter()
        adapter.adapter?.discoverable = true
        let up = h.on(.bluez(.managedObjects([H.hci0: adapter])))
        #expect(H.registrations(up) == [.application], "the service is offered; the agent is not")
        #expect(h.machine.status.pairingAgentReason.hasPrefix("hci0 is discoverable"))
    }

    @Test func aRequestWhileStandingBackIsRefused() {
        var h = AgentBondCleanupTests.serving()
        _ = Self.discoverable(&h, true)
        h.on(.unregistered(.agent))
        guard case .error(let name, _)? = AgentBondCleanupTests.pair(&h, 1, addressType: "random") else {
            Issue.record("accepted while standing back"); return
        }
        #expect(name == "org.bluez.Error.Rejected")
        #expect(h.machine.pairingAgent.bonds.isEmpty)
    }

    @Test func hostAnswersPairingsWithNoAgentWhateverTheAdapter() {
        var h = H(pairingAgent: PairingAgentChoice(answerer: .host, reason: "bluetooth.pairingAgent is host"))
        h.bringUp()
        #expect(Self.unregistrations(Self.discoverable(&h, true)).isEmpty)
        #expect(H.registrations(Self.discoverable(&h, false)).isEmpty)
        #expect(h.machine.status.pairingAgentReason == "bluetooth.pairingAgent is host")
    }
}

/// #26 row 8, the gap the discoverable rule left: page scan switched on outside bluetoothd
/// (`btmgmt connectable on`) opens the adapter to Classic pairings just the same, and only
/// the kernel's settings show it (`MgmtWire`, read by the peripheral's interpreter).
@Suite struct AgentStandsBackWhileClassicConnectableTests {
    typealias H = PeripheralHarness

    static func connectable(_ h: inout H, _ on: Bool, adapter: String = "hci0") -> [PeripheralMachine.Command] {
        h.on(.classicConnectable(adapter: adapter, on))
    }

    @Test func theAgentStandsBackWhileTheKernelSaysConnectableAndComesBackAfter() {
        var h = AgentBondCleanupTests.serving()
        let on = Self.connectable(&h, true)
        #expect(AgentStandsBackWhileDiscoverableTests.unregistrations(on) == [.agent])
        #expect(H.logs(on).contains { $0.hasPrefix("hci0 is Bluetooth Classic connectable (page scan on, set outside bluetoothd") })
        h.on(.unregistered(.agent))
        #expect(h.machine.status.pairingAgentRegistered == false)
        #expect(h.machine.status.pairingAgentReason.contains("stands back until hci0 is not connectable"))
        let meanwhile = h.advance(120_000)
        #expect(H.registrations(meanwhile).isEmpty, "nothing while connectable")
        #expect(Self.connectable(&h, true).isEmpty, "the same settings again change nothing")
        let off = Self.connectable(&h, false)
        #expect(H.registrations(off) == [.agent])
        h.on(.registration(.agent, epoch: h.machine.epoch, .accepted))
        #expect(h.machine.status.pairingAgentRegistered)
        #expect(h.machine.status.pairingAgentReason == AgentBondCleanupTests.worker.reason)
    }

    @Test func anotherAdapterConnectableChangesNothing() {
        var h = AgentBondCleanupTests.serving()
        let other = Self.connectable(&h, true, adapter: "hci1")
        #expect(AgentStandsBackWhileDiscoverableTests.unregistrations(other).isEmpty)
        #expect(h.machine.status.pairingAgentRegistered)
    }

    @Test func connectableBeforeBluetoothdIsSeenKeepsTheAgentOut() {
        var h = H(pairingAgent: AgentBondCleanupTests.worker)
        h.on(.busOpened)
        _ = Self.connectable(&h, true)
        h.on(.bluez(.owner(H.bluez)))
        let up = h.on(.bluez(.managedObjects([H.hci0: H.adapter()])))
        #expect(H.registrations(up) == [.application], "the service is offered; the agent is not")
        #expect(h.machine.status.pairingAgentReason.hasPrefix("hci0 is Bluetooth Classic connectable"))
    }

    @Test func discoverableIsSaidFirstAndConnectableStillHoldsAfterIt() {
        var h = AgentBondCleanupTests.serving()
        _ = Self.connectable(&h, true)
        _ = AgentStandsBackWhileDiscoverableTests.discoverable(&h, true)
        h.on(.unregistered(.agent))
        #expect(h.machine.status.pairingAgentReason.hasPrefix("hci0 is discoverable"))
        let notDiscoverable = AgentStandsBackWhileDiscoverableTests.discoverable(&h, false)
        #expect(H.registrations(notDiscoverable).isEmpty, "still connectable")
        #expect(h.machine.status.pairingAgentReason.hasPrefix("hci0 is Bluetooth Classic connectable"))
        #expect(H.registrations(Self.connectable(&h, false)) == [.agent])
    }

    @Test func aRequestWhileStandingBackIsRefused() {
        var h = AgentBondCleanupTests.serving()
        _ = Self.connectable(&h, true)
        h.on(.unregistered(.agent))
        guard case .error(let name, _)? = AgentBondCleanupTests.pair(&h, 1, addressType: "random") else {
            Issue.record("accepted while standing back"); return
        }
        #expect(name == "org.bluez.Error.Rejected")
    }

    @Test func hostAgentIgnoresTheKernelSettings() {
        var h = H(pairingAgent: PairingAgentChoice(answerer: .host, reason: "bluetooth.pairingAgent is host"))
        h.bringUp()
        #expect(Self.connectable(&h, true).allSatisfy { if case .unregister = $0 { false } else { true } })
        #expect(h.machine.status.pairingAgentReason == "bluetooth.pairingAgent is host")
    }
}
