/// The Bluetooth side of `status` (service §1).
public struct BluetoothStatus: Sendable, Equatable {
    public enum State: String, Sendable {
        /// Mode bluetooth is not running.
        case inactive
        /// Waiting for bluetoothd or an adapter (see `problem`).
        case waiting
        /// Registration asked of bluetoothd, not answered yet.
        case registering
        /// GATT application registered and the advertisement on air.
        case advertising
        /// Registration refused; retried (see `problem`).
        case failed
    }

    public struct Client: Sendable, Equatable {
        public var address: String
        public var mtu: Int?
        public init(address: String, mtu: Int?) {
            self.address = address
            self.mtu = mtu
        }
    }

    public var state: State = .inactive
    public var adapter: String?
    public var address: String?
    public var localName = ""
    public var applicationRegistered = false
    public var advertising = false
    public var problem: String?
    public var clients: [Client] = []
    public var requestsServed: Int64 = 0
    public var requestsFailed: Int64 = 0
    /// Bad input answered with `ok: false` before reaching the model (protocol-bluetooth §1).
    public var requestsRejected: Int64 = 0
    /// Requests their client cancelled (queued or running), answered `cancelled`.
    public var requestsCancelled: Int64 = 0
    /// Bytes of notifications handed to bluetoothd (chunks of every characteristic).
    public var bytesNotified: Int64 = 0
    public var clientsRefused: Int64 = 0
    /// Devices refused by `bluetooth.allowedClients` (protocol-bluetooth §3).
    public var clientsNotAllowed: Int64 = 0
    /// Idle clients disconnected for a device that wanted their slot.
    public var clientsEvicted: Int64 = 0
    /// Clients cut off for too much bad input.
    public var clientsCooledDown: Int64 = 0
    /// Rejections dropped because their client's outbound queue was full.
    public var rejectionsDropped: Int64 = 0
    public var queued = 0
    public var registrations: Int64 = 0
    /// How notifications are paced (`bytes` or `chunks`) and the ATT bearers that decided it.
    public var pacing = NotificationPacer.Rule.chunks.rawValue
    public var attBearers: Int?
    /// Who answers pairings of the adapter (`worker`: the daemon's Just Works agent, or
    /// `host`), whether the daemon's agent is registered now, and why (PairingAgentChoice).
    public var pairingAgent = PairingAgentChoice.Answerer.host.rawValue
    public var pairingAgentRegistered = false
    public var pairingAgentReason = ""
    /// Pairings the worker's agent accepted and refused in this session.
    public var pairingsAccepted: Int64 = 0
    public var pairingsRefused: Int64 = 0
    /// Bonds the worker's agent made and removed again: their device never used the
    /// service within `bluetooth.clientIdleSec`.
    public var agentBondsRemoved: Int64 = 0

    public init() {}

    public var json: JSONValue {
        var object = JSONObject([("state", .string(state.rawValue))])
        object["adapter"] = .optional(adapter)
        object["address"] = .optional(address)
        object["localName"] = .string(localName)
        object["applicationRegistered"] = .bool(applicationRegistered)
        object["advertising"] = .bool(advertising)
        object["problem"] = .optional(problem)
        object["clients"] = .array(
            clients.map { client in
                var entry = JSONObject([("address", .string(client.address))])
                entry["mtu"] = client.mtu.map { .int(Int64($0)) } ?? .null
                return .object(entry)
            })
        object["requestsServed"] = .int(requestsServed)
        object["requestsFailed"] = .int(requestsFailed)
        object["requestsRejected"] = .int(requestsRejected)
        object["requestsCancelled"] = .int(requestsCancelled)
        object["bytesNotified"] = .int(bytesNotified)
        object["clientsRefused"] = .int(clientsRefused)
        object["clientsNotAllowed"] = .int(clientsNotAllowed)
        object["clientsEvicted"] = .int(clientsEvicted)
        object["clientsCooledDown"] = .int(clientsCooledDown)
        object["rejectionsDropped"] = .int(rejectionsDropped)
        object["queued"] = .int(Int64(queued))
        object["registrations"] = .int(registrations)
        object["pacing"] = .string(pacing)
        object["attBearers"] = attBearers.map { .int(Int64($0)) } ?? .null
        object["pairingAgent"] = .string(pairingAgent)
        object["pairingAgentRegistered"] = .bool(pairingAgentRegistered)
        object["pairingAgentReason"] = .string(pairingAgentReason)
        object["pairingsAccepted"] = .int(pairingsAccepted)
        object["pairingsRefused"] = .int(pairingsRefused)
        object["agentBondsRemoved"] = .int(agentBondsRemoved)
        return .object(object)
    }

    /// A few words for the status line.
    public var summary: String {
        switch state {
        case .inactive: return "bluetooth inactive"
        case .advertising: return "bluetooth advertising on \(adapter ?? "?"), \(clients.count) client(s)"
        case .registering: return "bluetooth registering on \(adapter ?? "?")"
        case .waiting, .failed: return "bluetooth \(state.rawValue): \(problem ?? "?")"
        }
    }
}
