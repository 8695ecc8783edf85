/// The little of the kernel's Bluetooth management protocol (mgmt, a raw HCI socket bound
/// to HCI_CHANNEL_CONTROL) the worker reads: each controller's current settings. bluetoothd
/// does not show on D-Bus whether an adapter is Bluetooth Classic connectable (page scan
/// on), and anyone with CAP_NET_ADMIN can switch it on behind bluetoothd's back (`btmgmt
/// connectable on`); the kernel's settings say it. The commands used here and the events
/// they need are the ones the kernel allows a socket without CAP_NET_ADMIN ("untrusted"),
/// so the worker's unprivileged unit can read them.
///
/// Every message is a 6-byte header (opcode or event code, controller index, parameter
/// length; all little-endian) and its parameters. Values in, values out: no I/O here.
public enum MgmtWire {
    public static let headerBytes = 6
    /// The controller index of a command that is about no controller.
    public static let noController: UInt16 = 0xFFFF
    /// Larger datagrams are no message the worker asked for: dropped whole.
    public static let maxMessageBytes = 4_096

    public enum Command: UInt16, Sendable {
        case readIndexList = 0x0003
        case readInfo = 0x0004
    }

    enum EventCode: UInt16 {
        case commandComplete = 0x0001
        case commandStatus = 0x0002
        case indexAdded = 0x0004
        case indexRemoved = 0x0005
        case newSettings = 0x0006
    }

    /// A controller's settings bitmask (Read Controller Information, New Settings).
    public struct Settings: OptionSet, Sendable, Hashable {
        public let rawValue: UInt32
        public init(rawValue: UInt32) { self.rawValue = rawValue }
        public static let powered = Settings(rawValue: 1 << 0)
        public static let connectable = Settings(rawValue: 1 << 1)
        public static let discoverable = Settings(rawValue: 1 << 3)
        public static let bondable = Settings(rawValue: 1 << 4)
        public static let bredr = Settings(rawValue: 1 << 7)
        public static let le = Settings(rawValue: 1 << 9)

        /// Page scan may be on: Bluetooth Classic devices can connect to the controller
        /// (and, with a NoInputNoOutput agent registered, pair by Just Works). Connectable
        /// alone is about LE advertising on an LE-only controller; BR/EDR off means no page scan.
        public var classicConnectable: Bool { contains(.connectable) && contains(.bredr) }
    }

    /// What one datagram from the kernel says, as far as the worker cares.
    public enum Message: Sendable, Equatable {
        /// The answer to Read Controller Index List.
        case controllers([UInt16])
        /// A controller's current settings: the answer to Read Controller Information, or
        /// the New Settings event.
        case settings(controller: UInt16, Settings)
        case controllerAdded(UInt16)
        case controllerRemoved(UInt16)
        /// A command of ours failed (Command Status, or a Command Complete with a status).
        case failed(command: UInt16, controller: UInt16, status: UInt8)
        /// An event the worker does not read (the kernel sends untrusted sockets a few more).
        case other(event: UInt16)
    }

    public enum ParseError: Error, Sendable, Equatable {
        case tooShort(Int)
        case tooLong(Int)
        /// The header's length does not match the datagram's.
        case lengthMismatch(header: Int, actual: Int)
        /// An event's parameters are shorter than its kind needs.
        case truncated(event: UInt16, bytes: Int)
        /// A controller list whose count does not match its entries.
        case badList(count: Int, bytes: Int)
    }

    /// One command to the kernel.
    public static func command(_ command: Command, controller: UInt16 = noController) -> [UInt8] {
        le16(command.rawValue) + le16(controller) + le16(0)
    }

    /// One datagram, whole: header and parameters. Anything else is an error, never a guess.
    public static func parse(_ bytes: [UInt8]) -> Result<Message, ParseError> {
        guard bytes.count >= headerBytes else { return .failure(.tooShort(bytes.count)) }
        guard bytes.count <= maxMessageBytes else { return .failure(.tooLong(bytes.count)) }
        let code = u16(bytes, 0), controller = u16(bytes, 2), length = Int(u16(bytes, 4))
        guard length == bytes.count - headerBytes else { return .failure(.lengthMismatch(header: length, actual: bytes.count - headerBytes)) }
        let params = Array(bytes[headerBytes...])
        func need(_ count: Int) -> ParseError? { params.count < count ? .truncated(event: code, bytes: params.count) : nil }
        switch EventCode(rawValue: code) {
        case .commandComplete:
            if let error = need(3) { return .failure(error) }
            let command = u16(params, 0), status = params[2]
            guard status == 0 else { return .success(.failed(command: command, controller: controller, status: status)) }
            let reply = Array(params[3...])
            switch Command(rawValue: command) {
            case .readIndexList:
                guard reply.count >= 2 else { return .failure(.truncated(event: code, bytes: params.count)) }
                let count = Int(u16(reply, 0))
                guard reply.count == 2 + 2 * count else { return .failure(.badList(count: count, bytes: reply.count)) }
                return .success(.controllers((0..<count).map { u16(reply, 2 + 2 * $0) }))
            case .readInfo:
                // Address 6, version 1, manufacturer 2, supported 4, then current settings.
                guard reply.count >= 17 else { return .failure(.truncated(event: code, bytes: params.count)) }
                return .success(.settings(controller: controller, Settings(rawValue: u32(reply, 13))))
            case nil:
                return .success(.other(event: code))
            }
        case .commandStatus:
            if let error = need(3) { return .failure(error) }
            return .success(.failed(command: u16(params, 0), controller: controller, status: params[2]))
        case .newSettings:
            if let error = need(4) { return .failure(error) }
            return .success(.settings(controller: controller, Settings(rawValue: u32(params, 0))))
        case .indexAdded:
            return .success(.controllerAdded(controller))
        case .indexRemoved:
            return .success(.controllerRemoved(controller))
        case nil:
            return .success(.other(event: code))
        }
    }

    static func u16(_ bytes: [UInt8], _ at: Int) -> UInt16 { UInt16(bytes[at]) | UInt16(bytes[at + 1]) << 8 }
    static func u32(_ bytes: [UInt8], _ at: Int) -> UInt32 { UInt32(u16(bytes, at)) | UInt32(u16(bytes, at + 2)) << 16 }
    static func le16(_ value: UInt16) -> [UInt8] { [UInt8(value & 0xFF), UInt8(value >> 8)] }
}
