/// The worker's own CPU load, so that it is not "other load" (modes-and-power §3.2 `maxCpuUsagePct`):
/// the worker and its model server with the server's children, found from procfs. Pure:
/// bytes of `/proc/net/tcp`, `/proc/PID/stat` and `/proc/PID/status` in, sets and
/// percentages out. Every file is hostile input (a process can name itself anything).
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

/// One process as `/proc/PID/stat` describes it.
public struct ProcessSample: Sendable, Equatable {
    public var pid: Int32
    public var parent: Int32
    /// utime + stime, in clock ticks (the unit of `/proc/stat`).
    public var ticks: UInt64
    /// When it started, in clock ticks since boot: tells a reused pid from the old process.
    public var startTime: UInt64

    public init(pid: Int32, parent: Int32, ticks: UInt64, startTime: UInt64) {
        self.pid = pid
        self.parent = parent
        self.ticks = ticks
        self.startTime = startTime
    }

    /// `pid (comm) state ppid … utime stime … starttime …`. The name may hold spaces and
    /// parentheses, so the fields are counted after the last `)`.
    public static func parse(stat contents: [UInt8]) -> ProcessSample? {
        guard contents.count <= 4_096, let open = contents.firstIndex(of: UInt8(ascii: "(")),
            let close = contents.lastIndex(of: UInt8(ascii: ")")), open < close,
            let pid = decimal(contents[..<open].filter { $0 != UInt8(ascii: " ") }[...]), pid > 0, pid <= UInt64(Int32.max)
        else { return nil }
        let rest = contents[(close + 1)...].split(whereSeparator: { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\n") })
        // rest[0] is field 3 (state); field n is rest[n - 3].
        guard rest.count >= 20, let parent = decimal(rest[1]), parent <= UInt64(Int32.max),
            let utime = decimal(rest[11]), let stime = decimal(rest[12]), let start = decimal(rest[19])
        else { return nil }
        let (ticks, overflow) = utime.addingReportingOverflow(stime)
        guard !overflow else { return nil }
        return ProcessSample(pid: Int32(pid), parent: Int32(parent), ticks: ticks, startTime: start)
    }

    /// The real uid from `/proc/PID/status` (`Uid:\treal\teffective\t…`).
    public static func uid(status contents: [UInt8]) -> UInt32? {
        for line in contents.split(separator: UInt8(ascii: "\n")) where line.starts(with: "Uid:".utf8) {
            let fields = line.dropFirst(4).split(whereSeparator: { $0 == UInt8(ascii: "\t") || $0 == UInt8(ascii: " ") })
            guard let first = fields.first, let uid = decimal(first), uid <= UInt64(UInt32.max) else { return nil }
            return UInt32(uid)
        }
        return nil
    }
}

public enum ProcessTree {
    /// `roots` and every process below them, by parent links; safe against cycles and
    /// parents that are not in the table. Pids 0 and 1 are never roots: everything on the
    /// host descends from them (and systemd holds socket-activated servers' sockets).
    public static func descendants(of roots: Set<Int32>, parents: [Int32: Int32]) -> Set<Int32> {
        var children: [Int32: [Int32]] = [:]
        for (pid, parent) in parents where pid != parent { children[parent, default: []].append(pid) }
        var found = roots.filter { $0 > 1 }
        var queue = Array(found)
        while let next = queue.popLast() {
            for child in children[next] ?? [] where found.insert(child).inserted { queue.append(child) }
        }
        return found
    }
}

/// The CPU figure the policy compares (and the heartbeat sends), and the host's.
public struct CPUShare: Sendable, Equatable {
    /// The whole host, 0–100.
    public var hostPct: Double
    /// The worker's and its model server's share, 0–100 of the host.
    public var ownPct: Double
    /// Everything else: what `maxCpuUsagePct` holds on and the heartbeat's `cpuUsagePct`.
    public var otherPct: Double

    public init(hostPct: Double, ownPct: Double, otherPct: Double) {
        self.hostPct = hostPct
        self.ownPct = ownPct
        self.otherPct = otherPct
    }

    /// Between two samples: the host's counters and the own processes' ticks (keyed by pid
    /// and start time, so a reused pid is a new process). A process seen only in the
    /// later sample started in between and counts whole; one seen only in the earlier
    /// one ended and its last ticks are lost (at most one interval's worth). nil when no
    /// time passed or the host's counters went backwards.
    /// The model server measured by its cgroup (`server`, two samples) adds its CPU time
    /// there, converted with `ticksPerSecond` (`sysconf(_SC_CLK_TCK)`); its processes
    /// are then not among `own`.
    public static func between(
        host earlier: CPUTimes, _ later: CPUTimes, own before: [ProcessSample], _ after: [ProcessSample],
        server serverBefore: CgroupUsage? = nil, _ serverAfter: CgroupUsage? = nil,
        ticksPerSecond: Double = 100
    ) -> CPUShare? {
        guard let host = CPUTimes.usagePct(from: earlier, to: later) else { return nil }
        let elapsed = Double(later.total - earlier.total)
        var previous: [Int32: ProcessSample] = [:]
        for sample in before { previous[sample.pid] = sample }
        var ownTicks = 0.0
        for sample in after {
            if let old = previous[sample.pid], old.startTime == sample.startTime {
                ownTicks += sample.ticks >= old.ticks ? Double(sample.ticks - old.ticks) : 0
            } else {
                ownTicks += Double(sample.ticks)
            }
        }
        ownTicks += CgroupUsage.ticks(from: serverBefore, to: serverAfter, ticksPerSecond: ticksPerSecond)
        // Ticks are counted per process and per CPU slightly apart: never more than the host.
        let own = min(host, max(0, ownTicks / elapsed * 100))
        return CPUShare(hostPct: host, ownPct: own, otherPct: max(0, host - own))
    }
}

/// Digits only, bounded; nil for anything else (signs, spaces, overflow).
func decimal(_ bytes: some Collection<UInt8>) -> UInt64? {
    guard !bytes.isEmpty, bytes.count <= 20 else { return nil }
    var value: UInt64 = 0
    for byte in bytes {
        guard byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") else { return nil }
        let (times, o1) = value.multipliedReportingOverflow(by: 10)
        let (sum, o2) = times.addingReportingOverflow(UInt64(byte - UInt8(ascii: "0")))
        if o1 || o2 { return nil }
        value = sum
    }
    return value
}

/// A pid written in decimal (1 to Int32.max, as /proc names them); nil for anything else.
public func decimalPID(_ bytes: some Collection<UInt8>) -> Int32? {
    guard let value = decimal(bytes), value >= 1, value <= UInt64(Int32.max) else { return nil }
    return Int32(value)
}

/// Hex digits only, at most `maxDigits`.
func hex(_ bytes: some Collection<UInt8>, maxDigits: Int) -> UInt64? {
    guard !bytes.isEmpty, bytes.count <= maxDigits else { return nil }
    var value: UInt64 = 0
    for byte in bytes {
        let digit: UInt8
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
        default: return nil
        }
        value = value << 4 | UInt64(digit)
    }
    return value
}

public enum LoopbackServer {
    /// The TCP port of a model server reached on this host (`127.0.0.0/8`, `localhost`,
    /// `[::1]`); nil for a remote server, whose CPU is not this host's.
    public static func port(of url: String) -> UInt16? {
        let lower = url.lowercased()
        let rest: Substring
        let defaultPort: UInt16
        if lower.hasPrefix("http://") {
            rest = lower.dropFirst(7); defaultPort = 80
        } else if lower.hasPrefix("https://") {
            rest = lower.dropFirst(8); defaultPort = 443
        } else {
            return nil
        }
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        let host: Substring
        var portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if after.hasPrefix(":") { portText = after.dropFirst() } else if !after.isEmpty { return nil }
        } else {
            let parts = authority.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            host = parts[0]
            if parts.count == 2 { portText = parts[1] }
        }
        let loopback = host == "localhost" || host == "::1" || host.hasPrefix("127.")
        guard loopback else { return nil }
        guard let portText else { return defaultPort }
        guard let value = decimal(portText.utf8), value >= 1, value <= 65_535 else { return nil }
        return UInt16(value)
    }
}
