import Testing
@testable import WorkerCore

/// `bluetooth.pairingAgent` (protocol-bluetooth §3): who answers Just Works pairings, over every
/// combination that decides it, and what the worker's agent answers each Agent1 request.
@Suite struct PairingAgentChoiceTests {
    static let desktop = HostBootTarget(defaultTarget: "graphical.target", displayManager: true)
    /// Debian's and Raspberry Pi OS's stock link, on a server: graphical.target, nothing graphical.
    static let stockServer = HostBootTarget(defaultTarget: "graphical.target", displayManager: false)
    static let multiUser = HostBootTarget(defaultTarget: "multi-user.target", displayManager: false)
    static let multiUserWithIdleDM = HostBootTarget(defaultTarget: "multi-user.target", displayManager: true)
    static let noDefault = HostBootTarget(defaultTarget: nil, displayManager: false)
    static let boots = [desktop, stockServer, multiUser, multiUserWithIdleDM, noDefault]
    static let allowed: [BluetoothAllowedClients] = [.any, .bonded, .addresses(["00:AA:01:01:00:01"])]

    /// The whole table: the worker answers only for `encrypted`, never with `bonded`, and then
    /// by the setting, `auto` following the boot target.
    @Test func everyCombinationDecidesAsTheTableSays() {
        for security in BluetoothSecurity.allCases {
            for allowedClients in Self.allowed {
                for setting in BluetoothPairingAgentSetting.allCases {
                    for boot in Self.boots {
                        let choice = PairingAgentChoice.decide(security: security, allowedClients: allowedClients, setting: setting, boot: boot)
                        let expected: PairingAgentChoice.Answerer
                        if security != .encrypted || allowedClients == .bonded {
                            expected = .host
                        } else {
                            switch setting {
                            case .worker: expected = .worker
                            case .host: expected = .host
                            case .auto: expected = boot == Self.desktop ? .host : .worker
                            }
                        }
                        #expect(choice.answerer == expected, "\(security) \(allowedClients) \(setting) \(boot.description): \(choice.reason)")
                        #expect(choice.registersAgent == (expected == .worker))
                        #expect(!choice.reason.isEmpty)
                    }
                }
            }
        }
    }

    @Test func theReasonNamesWhatDecided() {
        func reason(
            _ security: BluetoothSecurity, _ allowed: BluetoothAllowedClients = .any, _ setting: BluetoothPairingAgentSetting = .auto,
            _ boot: HostBootTarget = Self.multiUser
        ) -> String {
            PairingAgentChoice.decide(security: security, allowedClients: allowed, setting: setting, boot: boot).reason
        }
        #expect(reason(.open).hasPrefix("security is open"))
        #expect(reason(.authenticated, .any, .worker).hasPrefix("security is authenticated"), "worker never weakens authenticated")
        #expect(reason(.encrypted, .bonded, .worker).contains("any stranger bond"), "worker never weakens bonded")
        #expect(reason(.encrypted, .any, .host).contains("bluetooth.pairingAgent is host"))
        #expect(reason(.encrypted, .any, .auto, Self.desktop).contains("default.target is graphical.target, a display manager is enabled"))
        #expect(
            reason(.encrypted, .any, .auto, Self.stockServer).contains("boots to no desktop (default.target is graphical.target, no display manager)")
        )
        #expect(reason(.encrypted, .any, .auto, Self.noDefault).contains("no default.target"))
    }

    @Test func onlyGraphicalTargetWithADisplayManagerIsADesktop() {
        #expect(Self.desktop.isGraphicalDesktop)
        for boot in Self.boots where boot != Self.desktop { #expect(!boot.isGraphicalDesktop, "\(boot.description)") }
    }

    // MARK: The agent's answers

    static let hci0 = "/org/bluez/hci0"
    static let dev = "/org/bluez/hci0/dev_00_AA_01_01_00_01"

    @Test func justWorksOfTheAdaptersDeviceIsAcceptedWithItsAddress() {
        #expect(
            JustWorksAgent.answer(.authorization(device: Self.dev), adapterPath: Self.hci0, transport: .le) == .accept(address: "00:AA:01:01:00:01"))
    }

    @Test(arguments: [
        PairingWindow.Request.confirmation(device: dev, passkey: 123_456),
        .passkey(device: dev),
        .displayPasskey(device: dev, passkey: 1, entered: 0),
        .pinCode(device: dev),
        .displayPinCode(device: dev, pinCode: "0000"),
        .authorizeService(device: dev, uuid: "0000110b-0000-1000-8000-00805f9b34fb"),
    ])
    func everythingButJustWorksIsRefused(_ request: PairingWindow.Request) {
        guard case .reject(let why) = JustWorksAgent.answer(request, adapterPath: Self.hci0, transport: .le) else {
            Issue.record("\(request) was accepted"); return
        }
        #expect(why.hasPrefix("00:AA:01:01:00:01 asks"))
    }

    @Test(arguments: [
        "/org/bluez/hci1/dev_00_AA_01_01_00_01",
        "/org/bluez/hci01/dev_00_AA_01_01_00_01",
        "/org/bluez/hci0/dev_00_AA_01_01_00_01/service0001",
        "/org/bluez/hci0",
        "not a path",
        "/org/bluez/hci0/dev_\u{1B}[2J_AA_01_01_00_01",
        "",
    ])
    func justWorksOfAnyOtherObjectIsRefused(_ device: String) {
        guard case .reject(let why) = JustWorksAgent.answer(.authorization(device: device), adapterPath: Self.hci0, transport: .le) else {
            Issue.record("\(device) was accepted"); return
        }
        #expect(why.contains("is not a device of the worker's adapter /org/bluez/hci0"))
        #expect(!why.contains("\u{1B}"), "bus text is never echoed raw")
    }

    @Test func withoutAnAdapterNothingIsAccepted() {
        #expect(
            JustWorksAgent.answer(.authorization(device: Self.dev), adapterPath: nil, transport: .le)
                == .reject("/org/bluez/hci0/dev_00_AA_01_01_00_01 is not a device of the worker's adapter"))
    }
}
