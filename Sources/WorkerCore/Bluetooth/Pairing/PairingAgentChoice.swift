/// `bluetooth.pairingAgent` (protocol-bluetooth §3, "encrypted"): who answers the confirmation Linux asks
/// for every LE Secure Connections pairing, Just Works included (since 5.8), while the
/// worker serves with `bluetooth.security: "encrypted"`. Pure: the host's boot target is
/// read by an adapter (Daemon/BootTarget.swift) and passed in.
public enum BluetoothPairingAgentSetting: String, Sendable, CaseIterable {
    /// `worker` on a host that does not boot to a graphical desktop, else `host`.
    case auto
    /// The daemon registers its own Just Works agent while it serves `encrypted`.
    case worker
    /// Never: the host's own agent (a desktop's) answers, or nobody does.
    case host
}

/// What systemd starts at boot, as far as the choice needs it: the unit `default.target`
/// resolves to, and whether a display manager is enabled.
public struct HostBootTarget: Sendable, Equatable {
    /// The unit default.target links to (`graphical.target`, `multi-user.target`); nil
    /// when no default.target exists in systemd's unit directories.
    public var defaultTarget: String?
    /// `display-manager.service` exists: the alias GDM, LightDM, SDDM and XDM install when
    /// they are enabled.
    public var displayManager: Bool

    public init(defaultTarget: String?, displayManager: Bool) {
        self.defaultTarget = defaultTarget
        self.displayManager = displayManager
    }

    /// A desktop whose user answers pairing prompts. Both facts are needed: systemd's own
    /// package links default.target to graphical.target (Debian 12, Raspberry Pi OS), so a
    /// headless server "boots to graphical.target" too, with nothing graphical to start.
    public var isGraphicalDesktop: Bool { defaultTarget == "graphical.target" && displayManager }

    public var description: String {
        let target = defaultTarget.map { "default.target is \($0)" } ?? "no default.target"
        return target + (displayManager ? ", a display manager is enabled" : ", no display manager")
    }
}

/// Whether the daemon registers its Just Works agent, and why: `security` × `allowedClients`
/// × `bluetooth.pairingAgent` × the host's boot target.
public struct PairingAgentChoice: Sendable, Equatable {
    public enum Answerer: String, Sendable { case worker, host }

    /// Who answers pairings of the worker's adapter: the daemon's agent, or the host's.
    public let answerer: Answerer
    /// In words, for status and the journal.
    public let reason: String

    public var registersAgent: Bool { answerer == .worker }

    public init(answerer: Answerer, reason: String) {
        self.answerer = answerer
        self.reason = reason
    }

    /// The agent accepts every Just Works pairing of the adapter, from anyone in range, so
    /// it runs only where that grants nothing beyond an encrypted link: never for
    /// `authenticated` (MITM protection needs a person comparing digits) and never with
    /// `allowedClients: "bonded"` (any stranger could bond, and bonded is the admission).
    public static func decide(
        security: BluetoothSecurity, allowedClients: BluetoothAllowedClients,
        setting: BluetoothPairingAgentSetting, boot: HostBootTarget
    ) -> PairingAgentChoice {
        switch security {
        case .open:
            return PairingAgentChoice(answerer: .host, reason: "security is open: no pairing is needed")
        case .authenticated:
            return PairingAgentChoice(
                answerer: .host,
                reason:
                    "security is authenticated: a pairing needs a person to compare the passkey (edgecoder-worker bluetooth pair), so the worker never answers one"
            )
        case .encrypted:
            break
        }
        if allowedClients == .bonded {
            return PairingAgentChoice(
                answerer: .host,
                reason:
                    "allowedClients is bonded: only devices the operator paired are admitted, and an agent accepting every Just Works pairing would let any stranger bond (edgecoder-worker bluetooth pair)"
            )
        }
        switch setting {
        case .host:
            return PairingAgentChoice(answerer: .host, reason: "bluetooth.pairingAgent is host: the host's own agent answers pairings")
        case .worker:
            return PairingAgentChoice(
                answerer: .worker, reason: "bluetooth.pairingAgent is worker: the worker accepts Just Works pairings of its adapter")
        case .auto where boot.isGraphicalDesktop:
            return PairingAgentChoice(
                answerer: .host, reason: "the host boots to a desktop (\(boot.description)): its agent asks its user (bluetooth.pairingAgent auto)")
        case .auto:
            return PairingAgentChoice(
                answerer: .worker,
                reason:
                    "the host boots to no desktop (\(boot.description)), so nobody could answer a pairing: the worker accepts Just Works pairings of its adapter (bluetooth.pairingAgent auto)"
            )
        }
    }
}

/// The daemon's Agent1 (capability NoInputNoOutput, so every pairing bluetoothd offers it is
/// Just Works): what it answers each call. Pure.
///
/// bluetoothd 5.66 (src/device.c, device_confirm_passkey) turns the kernel's Just Works
/// confirmation (confirm_hint set) into RequestAuthorization and a numeric comparison into
/// RequestConfirmation; so RequestAuthorization is the only request accepted here.
public enum JustWorksAgent {
    public static let capability = "NoInputNoOutput"

    /// An Agent1 call, decoded by the adapter.
    public enum Call: Sendable, Equatable {
        case request(PairingWindow.Request)
        /// bluetoothd dropped the agent (it unregistered it, or is going away).
        case release
        /// bluetoothd withdrew a request it had made (none is ever held here).
        case cancel
        /// A known member with arguments that do not match doc/agent-api.txt.
        case malformed(member: String)
    }

    public enum Answer: Sendable, Equatable {
        /// Accept the Just Works pairing of this address.
        case accept(address: String)
        /// Reply org.bluez.Error.Rejected with this reason.
        case reject(String)
    }

    /// `adapterPath`: the adapter the worker serves on (nil while it has none);
    /// `transport`: what bluetoothd shows of the device (`DeviceTransport.of`).
    public static func answer(_ request: PairingWindow.Request, adapterPath: String?, transport: DeviceTransport) -> Answer {
        let device = request.device
        // The default agent hears about every adapter of the host: another adapter's
        // devices (a laptop's mouse, a phone pairing with another app) are not the worker's.
        guard let adapterPath, let address = PairingWindow.address(ofDevice: device, under: adapterPath) else {
            return .reject("\(PairingWindow.printable(device)) is not a device of the worker's adapter\(adapterPath.map { " \($0)" } ?? "")")
        }
        switch request {
        case .authorization:
            // bluetoothd 5.66 asks the same RequestAuthorization for a Classic (BR/EDR)
            // Secure Simple Pairing when the kernel leaves it to user space (a device whose
            // link key it already has): accepting it would give a persistent Classic bond,
            // which the worker, an LE peripheral, never needs. A first Classic Just Works
            // pairing the kernel accepts by itself under a NoInputNoOutput default agent,
            // without asking: docs/operating/bluetooth-pairing.md, "Bluetooth Classic".
            if case .notLE(let why) = transport {
                return .reject(
                    "\(address) is not known to be an LE device (\(why)); the worker's agent pairs LE devices only, pair it with edgecoder-worker bluetooth pair if it must be"
                )
            }
            return .accept(address: address)
        case .confirmation:
            return .reject(
                "\(address) asks for numeric comparison; the worker's agent accepts Just Works only (security encrypted), pair it with edgecoder-worker bluetooth pair"
            )
        case .passkey, .displayPasskey:
            return .reject(
                "\(address) asks for passkey entry; the worker's agent accepts Just Works only (security encrypted), pair it with edgecoder-worker bluetooth pair"
            )
        case .pinCode, .displayPinCode:
            return .reject("\(address) asks for Bluetooth Classic PIN pairing; the worker is an LE peripheral and offers none")
        case .authorizeService(_, let uuid):
            return .reject("\(address) asks to use service \(PairingWindow.printable(uuid)); the worker's agent only pairs")
        }
    }
}

/// Whether a device bluetoothd asks the agent about is an LE device, as far as what
/// bluetoothd 5.66 shows of it tells (it has no bearer property before 5.8x): `AddressType`
/// "random" exists only on LE; "public" is LE unless the device has a `Class` (a Class of
/// Device reaches bluetoothd only from Classic inquiry and Classic connections, so the
/// device was seen on BR/EDR: a Classic or dual-mode device, whose pairing may make a
/// Classic bond). Anything else is not known to be LE, and refused. Pure.
public enum DeviceTransport: Sendable, Equatable {
    case le
    /// Why it is not known to be LE, in words for the journal and the refusal.
    case notLE(String)

    public static func of(addressType: String?, classOfDevice: UInt32?) -> DeviceTransport {
        switch addressType {
        case "random":
            return .le
        case "public":
            guard let cod = classOfDevice else { return .le }
            return .notLE("it has a Class of Device, 0x\(String(cod, radix: 16)), so bluetoothd saw it on Bluetooth Classic")
        case nil:
            return .notLE("bluetoothd shows no AddressType for it")
        case let other?:
            return .notLE("its AddressType is \"\(PairingWindow.printable(other))\", neither public nor random")
        }
    }

    /// `device`: bluetoothd's object for it (nil when the worker knows none).
    public static func of(_ device: BlueZObjects.Device?) -> DeviceTransport {
        guard let device else { return .notLE("bluetoothd shows no such device") }
        return of(addressType: device.addressType, classOfDevice: device.classOfDevice)
    }
}
