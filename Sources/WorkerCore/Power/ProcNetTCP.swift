// The worker's own CPU load, so that it is not "other load" (modes-and-power §3.2
// `maxCpuUsagePct`): the worker and its model server with the server's children, found from
// procfs (this file, ProcessSample, ProcessTree, CPUShare and LoopbackServer). Pure: bytes
// of `/proc/net/tcp`, `/proc/PID/stat` and `/proc/PID/status` in, sets and percentages out.
// Every file is hostile input (a process can name itself anything).

/// The listening sockets of `/proc/net/tcp`: which inode serves the model server's port.
public enum ProcNetTCP {
    /// The TCP state `LISTEN` in `/proc/net/tcp`.
    static let listen: UInt8 = 0x0A

    /// One listening socket: its inode and the uid that owns it.
    public struct Listener: Sendable, Equatable {
        public var inode: UInt64
        public var uid: UInt32
        public init(inode: UInt64, uid: UInt32) {
            self.inode = inode
            self.uid = uid
        }
    }

    /// The sockets listening on `port` in a `/proc/net/tcp` or `/proc/net/tcp6` table, on
    /// any address (a server bound to 0.0.0.0 or :: also serves loopback). Lines that do
    /// not parse are skipped; at most `limit` lines are read.
    public static func listeners(_ table: [UInt8], port: UInt16, limit: Int = 65_536) -> [Listener] {
        var found: [Listener] = []
        for (index, line) in table.split(separator: UInt8(ascii: "\n")).enumerated() {
            if index == 0 { continue }  // the header
            if index > limit { break }
            let fields = line.split(separator: UInt8(ascii: " "), omittingEmptySubsequences: true)
            // sl local rem st queues timer retrnsmt uid timeout inode …
            guard fields.count >= 10 else { continue }
            let local = fields[1]
            guard let colon = local.lastIndex(of: UInt8(ascii: ":")), hex(local[..<colon], maxDigits: 32) != nil,
                let localPort = hex(local[(colon + 1)...], maxDigits: 4), localPort == UInt64(port),
                let state = hex(fields[3], maxDigits: 2), state == UInt64(listen),
                let uid = decimal(fields[7]), uid <= UInt64(UInt32.max),
                let inode = decimal(fields[9]), inode > 0
            else { continue }
            found.append(Listener(inode: inode, uid: UInt32(uid)))
        }
        return found
    }

    /// The inode of an fd's link target `socket:[12345]`; nil for anything else.
    public static func socketInode(link: String) -> UInt64? {
        guard link.hasPrefix("socket:["), link.hasSuffix("]") else { return nil }
        return decimal(Array(link.utf8.dropFirst(8).dropLast())[...])
    }
}
