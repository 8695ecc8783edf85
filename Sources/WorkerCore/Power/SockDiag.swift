/// The listening TCP sockets from the kernel's sock_diag netlink family (NETLINK_SOCK_DIAG,
/// what `ss -lt` reads). A dump of state LISTEN walks the listening hash only, where reading
/// `/proc/net/tcp` walks every bucket of the established hash as well: on a big host that
/// walk was most of an idle daemon's CPU in mode on, once per power reading. Pure: a
/// request's bytes out, a reply datagram's bytes in; every reply is hostile input.
public enum SockDiag {
    /// NETLINK_SOCK_DIAG.
    public static let netlinkProtocol: Int32 = 4
    /// SOCK_DIAG_BY_FAMILY, the type of the request and of each answer.
    static let byFamily: UInt16 = 20
    /// nlmsghdr (16 bytes) + inet_diag_req_v2 (56 bytes).
    static let requestLength = 72
    /// inet_diag_msg.
    static let answerLength = 72

    /// A dump of one family's (AF_INET 2, AF_INET6 10) TCP sockets in state LISTEN.
    public static func listenersRequest(family: UInt8, sequence: UInt32) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: requestLength)
        func put32(_ value: UInt32, at i: Int) { for k in 0..<4 { bytes[i + k] = UInt8(truncatingIfNeeded: value >> (8 * UInt32(k))) } }
        put32(UInt32(requestLength), at: 0)
        bytes[4] = UInt8(byFamily)
        bytes[6] = 0x01  // NLM_F_REQUEST
        bytes[7] = 0x03  // NLM_F_DUMP (NLM_F_ROOT | NLM_F_MATCH), high byte of the flags
        put32(sequence, at: 8)
        bytes[16] = family
        bytes[17] = 6  // IPPROTO_TCP
        put32(1 << 10, at: 20)  // idiag_states: 1 << TCP_LISTEN
        return bytes
    }

    /// What one reply datagram says.
    public struct Reply: Sendable, Equatable {
        /// The sockets listening on the port asked about (any address).
        public var listeners: [ProcNetTCP.Listener] = []
        /// NLMSG_DONE was read: the dump is whole.
        public var done = false
        /// NLMSG_ERROR's errno (the kernel or a sandbox refused the dump).
        public var errno: Int32?
        /// A message that cannot be framed or read: the rest of the datagram is dropped.
        public var malformed: String?
    }

    /// The listeners on `port` in one datagram of a dump that `listenersRequest` asked for.
    public static func parse(_ bytes: [UInt8], port: UInt16) -> Reply {
        var reply = Reply()
        var offset = 0
        while offset < bytes.count {
            guard bytes.count - offset >= Rtnetlink.headerLength else {
                reply.malformed = "\(bytes.count - offset) bytes left at byte \(offset), a header needs \(Rtnetlink.headerLength)"
                return reply
            }
            let length = Int(Rtnetlink.u32(bytes, offset))
            let type = Rtnetlink.u16(bytes, offset + 4)
            guard length >= Rtnetlink.headerLength, length <= bytes.count - offset else {
                reply.malformed = "length \(length) at byte \(offset) does not fit the \(bytes.count - offset) bytes left"
                return reply
            }
            let payload = offset + Rtnetlink.headerLength
            switch type {
            case 2:  // NLMSG_ERROR: -errno (wrapping: a hostile INT32_MIN must not trap)
                guard length - Rtnetlink.headerLength >= 4 else {
                    reply.malformed = "NLMSG_ERROR at byte \(offset) is shorter than its errno"
                    return reply
                }
                reply.errno = 0 &- Int32(bitPattern: Rtnetlink.u32(bytes, payload))
                return reply
            case 3:  // NLMSG_DONE
                reply.done = true
                return reply
            case byFamily:
                guard length - Rtnetlink.headerLength >= answerLength else {
                    reply.malformed = "inet_diag_msg at byte \(offset) has \(length - Rtnetlink.headerLength) bytes, needs \(answerLength)"
                    return reply
                }
                // inet_diag_msg: family, state, timer, retrans, then the socket id whose ports
                // are in network order; uid at 64, inode at 68.
                let state = bytes[payload + 1]
                let localPort = UInt16(bytes[payload + 4]) << 8 | UInt16(bytes[payload + 5])
                let inode = Rtnetlink.u32(bytes, payload + 68)
                if state == ProcNetTCP.listen, localPort == port, inode > 0 {
                    reply.listeners.append(ProcNetTCP.Listener(inode: UInt64(inode), uid: Rtnetlink.u32(bytes, payload + 64)))
                }
            default:
                break  // NLMSG_NOOP and anything newer: skipped
            }
            offset += Rtnetlink.align(length)
        }
        return reply
    }
}
