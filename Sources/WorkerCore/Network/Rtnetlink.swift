/// rtnetlink messages (links, addresses, routes) parsed from raw bytes, without any
/// socket: what the kernel sends is hostile input like any other, so every length is
/// checked against the bytes actually present.
public enum RtnetlinkMessage: Sendable, Equatable {
    case link(RtLink, deleted: Bool)
    case address(RtAddress, deleted: Bool)
    case route(RtRoute, deleted: Bool)
    /// The end of a dump.
    case done(sequence: UInt32)
    /// An acknowledgement or error for a request (errno is 0 for an ack).
    case error(errno: Int32, sequence: UInt32)
    /// The kernel dropped messages: the table must be dumped again.
    case overrun
    /// A message type we do not track.
    case other(type: UInt16)
}

public struct RtLink: Sendable, Equatable {
    public var index: Int32
    public var name: String
    public var flags: UInt32
    public var isUp: Bool { flags & 0x1 != 0 }
    public var isLoopback: Bool { flags & 0x8 != 0 }
    /// IFF_RUNNING: the kernel's "operationally up" (carrier and, for 802.1X, authorised).
    public var isRunning: Bool { flags & 0x40 != 0 }
    public init(index: Int32, name: String, flags: UInt32) {
        self.index = index
        self.name = name
        self.flags = flags
    }
}

public enum AddressFamily: UInt8, Sendable, Equatable {
    case ipv4 = 2
    case ipv6 = 10
    public var name: String { self == .ipv4 ? "IPv4" : "IPv6" }
}

public struct RtAddress: Sendable, Equatable, Hashable {
    public var family: AddressFamily
    public var index: Int32
    public var prefixLength: UInt8
    public var scope: UInt8
    public var flags: UInt32
    public var address: [UInt8]

    public init(family: AddressFamily, index: Int32, prefixLength: UInt8, scope: UInt8, flags: UInt32, address: [UInt8]) {
        self.family = family
        self.index = index
        self.prefixLength = prefixLength
        self.scope = scope
        self.flags = flags
        self.address = address
    }

    /// Global scope, and (IPv6) past duplicate address detection.
    public var isGlobal: Bool {
        let tentative: UInt32 = 0x40, dadFailed: UInt32 = 0x08
        return scope == 0 && flags & (tentative | dadFailed) == 0
    }

    public var text: String {
        switch family {
        case .ipv4: return address.map(String.init).joined(separator: ".")
        case .ipv6:
            var groups: [String] = []
            var i = 0
            while i + 1 < address.count {
                groups.append(String(UInt16(address[i]) << 8 | UInt16(address[i + 1]), radix: 16))
                i += 2
            }
            return groups.joined(separator: ":")
        }
    }
}

public struct RtRoute: Sendable, Equatable, Hashable {
    public var family: AddressFamily
    public var destinationLength: UInt8
    public var table: UInt32
    public var type: UInt8
    /// Output interfaces: one, or several for a multipath route.
    public var outputInterfaces: [Int32]
    public var priority: UInt32
    public var destination: [UInt8]
    public var gateway: [UInt8]

    public init(
        family: AddressFamily, destinationLength: UInt8, table: UInt32, type: UInt8, outputInterfaces: [Int32], priority: UInt32 = 0,
        destination: [UInt8] = [], gateway: [UInt8] = []
    ) {
        self.family = family
        self.destinationLength = destinationLength
        self.table = table
        self.type = type
        self.outputInterfaces = outputInterfaces
        self.priority = priority
        self.destination = destination
        self.gateway = gateway
    }

    /// A unicast default route in the main table.
    public var isDefault: Bool { destinationLength == 0 && type == 1 && table == 254 }
}

public struct RtnetlinkParseError: Error, Sendable, Equatable, CustomStringConvertible {
    public var offset: Int
    public var message: String
    public var description: String { "malformed netlink message at byte \(offset): \(message)" }
}

public enum Rtnetlink {
    public static let headerLength = 16

    /// Parses every message of one datagram. Parsing stops at the first malformed
    /// header (the rest of the datagram cannot be framed); messages before it are kept.
    public static func parse(_ bytes: [UInt8]) -> (messages: [RtnetlinkMessage], error: RtnetlinkParseError?) {
        var messages: [RtnetlinkMessage] = []
        var offset = 0
        while offset < bytes.count {
            guard bytes.count - offset >= headerLength else {
                return (messages, RtnetlinkParseError(offset: offset, message: "\(bytes.count - offset) bytes left, a header needs \(headerLength)"))
            }
            let length = Int(u32(bytes, offset))
            let type = u16(bytes, offset + 4)
            let sequence = u32(bytes, offset + 8)
            guard length >= headerLength, length <= bytes.count - offset else {
                return (
                    messages, RtnetlinkParseError(offset: offset, message: "length \(length) does not fit the \(bytes.count - offset) bytes left")
                )
            }
            let payload = bytes[(offset + headerLength)..<(offset + length)]
            do {
                messages.append(try message(type: type, sequence: sequence, payload: payload))
            } catch {
                return (messages, RtnetlinkParseError(offset: offset, message: error.message))
            }
            offset += align(length)
        }
        return (messages, nil)
    }

    struct PayloadError: Error { var message: String }

    static func message(type: UInt16, sequence: UInt32, payload: ArraySlice<UInt8>) throws(PayloadError) -> RtnetlinkMessage {
        switch type {
        case 1: return .other(type: type)  // NLMSG_NOOP
        case 2:
            guard payload.count >= 4 else { throw PayloadError(message: "NLMSG_ERROR shorter than its errno") }
            // nlmsgerr carries -errno; wrapping negation, as a hostile -INT32_MIN must not trap.
            return .error(errno: 0 &- Int32(bitPattern: u32(payload, payload.startIndex)), sequence: sequence)
        case 3: return .done(sequence: sequence)
        case 4: return .overrun
        case 16, 17: return .link(try link(payload), deleted: type == 17)
        case 20, 21: return .address(try address(payload), deleted: type == 21)
        case 24, 25:
            guard let route = try route(payload) else { return .other(type: type) }
            return .route(route, deleted: type == 25)
        default: return .other(type: type)
        }
    }

    static func link(_ p: ArraySlice<UInt8>) throws(PayloadError) -> RtLink {
        guard p.count >= 16 else { throw PayloadError(message: "ifinfomsg needs 16 bytes, got \(p.count)") }
        let base = p.startIndex
        var link = RtLink(index: Int32(bitPattern: u32(p, base + 4)), name: "", flags: u32(p, base + 8))
        try attributes(p, from: base + 16) { (type, value) throws(PayloadError) in
            if type == 3 { link.name = String(decoding: value.prefix(while: { $0 != 0 }).prefix(64), as: UTF8.self) }
        }
        if link.name.isEmpty { link.name = "if\(link.index)" }
        return link
    }

    static func address(_ p: ArraySlice<UInt8>) throws(PayloadError) -> RtAddress {
        guard p.count >= 8 else { throw PayloadError(message: "ifaddrmsg needs 8 bytes, got \(p.count)") }
        let base = p.startIndex
        guard let family = AddressFamily(rawValue: p[base]) else { throw PayloadError(message: "address family \(p[base]) is not IPv4 or IPv6") }
        var result = RtAddress(
            family: family, index: Int32(bitPattern: u32(p, base + 4)), prefixLength: p[base + 1],
            scope: p[base + 3], flags: UInt32(p[base + 2]), address: [])
        var local: [UInt8] = []
        try attributes(p, from: base + 8) { (type, value) throws(PayloadError) in
            switch type {
            case 1: result.address = Array(value)
            case 2: local = Array(value)
            case 8: if value.count >= 4 { result.flags = u32(value, value.startIndex) }
            default: break
            }
        }
        // On point-to-point links IFA_LOCAL is our address and IFA_ADDRESS the peer's.
        if !local.isEmpty { result.address = local }
        let expected = family == .ipv4 ? 4 : 16
        guard result.address.count == expected else { throw PayloadError(message: "\(family.name) address of \(result.address.count) bytes") }
        return result
    }

    /// nil for families that carry no IP path (bridge, MPLS).
    static func route(_ p: ArraySlice<UInt8>) throws(PayloadError) -> RtRoute? {
        guard p.count >= 12 else { throw PayloadError(message: "rtmsg needs 12 bytes, got \(p.count)") }
        let base = p.startIndex
        guard let family = AddressFamily(rawValue: p[base]) else { return nil }
        var route = RtRoute(family: family, destinationLength: p[base + 1], table: UInt32(p[base + 4]), type: p[base + 7], outputInterfaces: [])
        try attributes(p, from: base + 12) { (type, value) throws(PayloadError) in
            switch type {
            case 1: route.destination = Array(value)
            case 4: if value.count >= 4 { route.outputInterfaces.append(Int32(bitPattern: u32(value, value.startIndex))) }
            case 5: route.gateway = Array(value)
            case 6: if value.count >= 4 { route.priority = u32(value, value.startIndex) }
            case 15: if value.count >= 4 { route.table = u32(value, value.startIndex) }
            case 9: route.outputInterfaces += try nexthops(value)
            default: break
            }
        }
        return route
    }

    /// RTA_MULTIPATH: a list of rtnexthop {len u16, flags u8, hops u8, ifindex i32, attrs…}.
    static func nexthops(_ p: ArraySlice<UInt8>) throws(PayloadError) -> [Int32] {
        var out: [Int32] = []
        var offset = p.startIndex
        while p.endIndex - offset >= 8 {
            let length = Int(u16(p, offset))
            guard length >= 8, length <= p.endIndex - offset else { throw PayloadError(message: "nexthop length \(length) does not fit") }
            out.append(Int32(bitPattern: u32(p, offset + 4)))
            offset += align(length)
        }
        return out
    }

    /// Walks rtattr {len u16, type u16, value} records, 4-byte aligned.
    static func attributes(_ p: ArraySlice<UInt8>, from start: Int, _ body: (UInt16, ArraySlice<UInt8>) throws(PayloadError) -> Void)
        throws(PayloadError)
    {
        var offset = start
        while p.endIndex - offset >= 4 {
            let length = Int(u16(p, offset))
            let type = u16(p, offset + 2) & 0x3FFF  // without NLA_F_NESTED / NLA_F_NET_BYTEORDER
            guard length >= 4, length <= p.endIndex - offset else {
                throw PayloadError(message: "attribute \(type) of length \(length) does not fit")
            }
            try body(type, p[(offset + 4)..<(offset + length)])
            offset += align(length)
        }
    }

    static func align(_ n: Int) -> Int { (n + 3) & ~3 }

    // Netlink is in host byte order; every host we build for is little-endian.
    static func u16<C: RandomAccessCollection>(_ b: C, _ i: C.Index) -> UInt16 where C.Element == UInt8, C.Index == Int {
        UInt16(b[i]) | UInt16(b[i + 1]) << 8
    }
    static func u32<C: RandomAccessCollection>(_ b: C, _ i: C.Index) -> UInt32 where C.Element == UInt8, C.Index == Int {
        UInt32(b[i]) | UInt32(b[i + 1]) << 8 | UInt32(b[i + 2]) << 16 | UInt32(b[i + 3]) << 24
    }

    /// A dump request (RTM_GETLINK 18, RTM_GETADDR 22, RTM_GETROUTE 26) for every family.
    public static func dumpRequest(type: UInt16, sequence: UInt32) -> [UInt8] {
        // nlmsghdr + rtgenmsg (1 byte family, AF_UNSPEC), padded to 20 bytes.
        var bytes = [UInt8](repeating: 0, count: 20)
        func put32(_ value: UInt32, at i: Int) { for k in 0..<4 { bytes[i + k] = UInt8(truncatingIfNeeded: value >> (8 * UInt32(k))) } }
        func put16(_ value: UInt16, at i: Int) { bytes[i] = UInt8(value & 0xFF); bytes[i + 1] = UInt8(value >> 8) }
        put32(20, at: 0)
        put16(type, at: 4)
        put16(0x1 | 0x300, at: 6)  // NLM_F_REQUEST | NLM_F_DUMP
        put32(sequence, at: 8)
        return bytes
    }
}
