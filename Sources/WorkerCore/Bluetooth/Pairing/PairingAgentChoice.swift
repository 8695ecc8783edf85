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
