/// The GATT identifiers of protocol-bluetooth §1.
public enum BluetoothUUID {
    public static let service = "ec0d0001-ec0d-ec0d-ec0d-ec0d0001ec0d"
    public static let request = "ec0d0002-ec0d-ec0d-ec0d-ec0d0002ec0d"
    public static let response = "ec0d0003-ec0d-ec0d-ec0d-ec0d0003ec0d"
    public static let status = "ec0d0004-ec0d-ec0d-ec0d-ec0d0004ec0d"

    /// `EdgeCoder-<first 16 characters of agentId>` (protocol-bluetooth §1).
    public static func localName(agentID: String) -> String { "EdgeCoder-" + String(agentID.prefix(16)) }
}
