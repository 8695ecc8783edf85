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
