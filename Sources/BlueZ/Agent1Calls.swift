import DBus
import WorkerCore

/// org.bluez.Agent1's calls (doc/agent-api.txt) decoded from bluetoothd's messages, for both
/// agents: the operator's pairing window (PairingAgent) and the daemon's Just Works agent
/// (GattPeripheral). Arguments come from the bus: any mismatch is `.malformed`, never a trap.
enum Agent1Calls {
    static let interface = "org.bluez.Agent1"
    static let manager = (destination: "org.bluez", path: "/org/bluez", interface: "org.bluez.AgentManager1")

    /// nil for a member Agent1 does not have.
    static func decode(member: String, _ args: [DBusValue]) -> JustWorksAgent.Call? {
        func device() -> String? { args.first?.stringValue }
        func number(_ i: Int) -> Int64? { i < args.count ? args[i].integerValue : nil }
        func string(_ i: Int) -> String? { i < args.count ? args[i].stringValue : nil }
        let request: PairingWindow.Request?
        switch member {
        case "Release": return .release
        case "Cancel": return .cancel
        case "RequestConfirmation":
            request = device().flatMap { d in number(1).flatMap(UInt32.init(exactly:)).map { .confirmation(device: d, passkey: $0) } }
        case "RequestAuthorization":
            request = device().map { .authorization(device: $0) }
        case "RequestPasskey":
            request = device().map { .passkey(device: $0) }
        case "DisplayPasskey":
            if let d = device(), let p = number(1).flatMap(UInt32.init(exactly:)), let e = number(2).flatMap(UInt16.init(exactly:)) {
                request = .displayPasskey(device: d, passkey: p, entered: e)
            } else {
                request = nil
            }
        case "RequestPinCode":
            request = device().map { .pinCode(device: $0) }
        case "DisplayPinCode":
            request = device().flatMap { d in string(1).map { .displayPinCode(device: d, pinCode: $0) } }
        case "AuthorizeService":
            request = device().flatMap { d in string(1).map { .authorizeService(device: d, uuid: $0) } }
        default:
            return nil
        }
        return request.map { .request($0) } ?? .malformed(member: member)
    }
}
