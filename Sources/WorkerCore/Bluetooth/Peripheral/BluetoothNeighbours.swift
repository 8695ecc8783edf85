/// protocol-bluetooth §3, the pure parts: what link the service's characteristics require, which
/// devices may become clients, and the limits that keep one device from holding or
/// flooding the service.

/// `bluetooth.security`: the link the characteristics require, as BlueZ's flags say it.
public enum BluetoothSecurity: String, Sendable, CaseIterable {
    /// Today's flags: any connected device may read, write and subscribe.
    case open
    /// `encrypt-*`: an encrypted link (LE "Just Works" pairing, done by the central itself).
    case encrypted
    /// `encrypt-authenticated-*`: MITM-protected pairing (a passkey the operator confirms).
    case authenticated

    /// The BlueZ `Flags` (doc/gatt-api.txt) for a characteristic of these properties.
    /// `open` is exactly the properties; the others replace read, write and notify with
    /// their encrypted forms (write-without-response has none: the attribute's write
    /// permission covers it).
    public func flags(_ properties: [GattLayout.Property]) -> [String] {
        properties.map { property in
            let prefix: String
            switch self {
            case .open: return property.rawValue
            case .encrypted: prefix = "encrypt-"
            case .authenticated: prefix = "encrypt-authenticated-"
            }
            switch property {
            case .read, .write, .notify: return prefix + property.rawValue
            case .writeWithoutResponse: return property.rawValue
            }
        }
    }
}

/// `bluetooth.allowedClients`.
public enum BluetoothAllowedClients: Sendable, Equatable, CustomStringConvertible {
    case any
    /// Only devices bonded with the adapter (BlueZ's `Bonded`, else `Paired`).
    case bonded
    /// Only these addresses (upper case, `AA:BB:CC:DD:EE:FF`).
    case addresses([String])

    /// `aa:bb:cc:dd:ee:ff` or `AA-BB-…` as `AA:BB:CC:DD:EE:FF`; nil when it is not six hex pairs.
    public static func normalizedAddress(_ text: String) -> String? {
        let parts =
            text.split(separator: ":", omittingEmptySubsequences: false).count == 6
            ? text.split(separator: ":", omittingEmptySubsequences: false)
            : text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 6, parts.allSatisfy({ $0.count == 2 && $0.allSatisfy(\.isHexDigit) && $0.allSatisfy(\.isASCII) }) else { return nil }
        return parts.map { $0.uppercased() }.joined(separator: ":")
    }

    /// Whether a device with this address (and bond) may become a client.
    public func allows(address: String, bonded: Bool) -> Bool {
        switch self {
        case .any: true
        case .bonded: bonded
        case .addresses(let list): list.contains(Self.normalizedAddress(address) ?? address.uppercased())
        }
    }

    public var description: String {
        switch self {
        case .any: "any"
        case .bonded: "bonded"
        case .addresses(let list): "[" + list.joined(separator: ", ") + "]"
        }
    }
}

/// The limits of protocol-bluetooth §3's fairness and bounds.
public struct NeighbourLimits: Sendable, Equatable {
    /// A client with no request for this long loses its slot to a device that wants it.
    public var clientIdleMs: Int64 = 120_000
    /// This many writes with bad input within `badWriteWindowMs` cut the client off …
    public var badWritesLimit = 8
    public var badWriteWindowMs: Int64 = 10_000
    /// … and refuse it for this long.
    public var coolDownMs: Int64 = 60_000
    /// Messages waiting for the link per client; beyond it the oldest rejection is dropped.
    public var maxOutboundPerClient = 4
    /// A refused device is told why (the response read), then disconnected this much later.
    public var refusalDisconnectDelayMs: Int64 = 1_000
    public init() {}
}

/// Why a device that touched the service is not served.
public enum ClientRefusal: String, Sendable, Equatable {
    case notAllowed = "not_allowed"
    case busy
    case coolingDown = "cooling_down"
    case stopping

    /// The error of the refusal message (the response read returns it).
    public func error(maxClients: Int) -> String {
        switch self {
        case .notAllowed: "not_allowed: this device is not allowed to use the worker (bluetooth.allowedClients)"
        case .busy: "busy: \(maxClients) client(s) already use the worker (bluetooth.maxClients); try again later"
        case .coolingDown: "cooling_down: too much bad input from this device; refused for a while"
        case .stopping: "stopping: the worker's Bluetooth service is stopping"
        }
    }

    /// `{"id": "", "ok": false, "error": …}`: what the refused device reads on the response.
    public func message(maxClients: Int) -> [UInt8] {
        JSONValue.object(JSONObject([("id", .string("")), ("ok", .bool(false)), ("error", .string(error(maxClients: maxClients)))])).serializedBytes
    }
}

/// `bluetooth.allowedClients` naming devices (`bonded` or an address list) while
/// `bluetooth.security` is `open`: valid, but the admission proves nothing. On an
/// unencrypted link a device's address is whatever it claims (any controller can send
/// another's public address), and a bond is checked only by encrypting with its key, which
/// `open` never asks for; so a stranger claiming a listed or bonded address is admitted.
/// `config check` and `doctor` say so as a warning (the file stays valid: exit 0).
public struct AllowedClientsWarning: Sendable, Equatable {
    public let path: String
    public let message: String

    public static func of(security: BluetoothSecurity, allowedClients: BluetoothAllowedClients) -> AllowedClientsWarning? {
        guard security == .open else { return nil }
        let message: String
        switch allowedClients {
        case .any:
            return nil
        case .bonded:
            message =
                "bluetooth.allowedClients is bonded, but security is open: a bond is only checked by encrypting with its key, which an open link never does, so any device can claim a bonded device's address and be admitted; set bluetooth.security to \"encrypted\" (or \"authenticated\") so that only the device holding the key gets through"
        case .addresses:
            // With `encrypted` alone a stranger could still pair anew under a listed address
            // (the worker's agent accepts Just Works): the bond is what proves a client.
            message =
                "bluetooth.allowedClients lists addresses, but security is open: on an unencrypted link any device can claim a listed address and be admitted; to admit only known clients set bluetooth.security to \"encrypted\" (or \"authenticated\") with allowedClients \"bonded\", and pair each client once (edgecoder-worker bluetooth pair)"
        }
        return AllowedClientsWarning(path: "bluetooth.allowedClients", message: message)
    }

    public static func of(_ config: WorkerConfig) -> AllowedClientsWarning? {
        of(security: config.bluetooth.security, allowedClients: config.bluetooth.allowedClients)
    }
}
