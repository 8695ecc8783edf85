/// The model server's CPU time from its cgroup: systemd puts a service and every process
/// it starts in one cgroup, whose `cpu.stat` counts their CPU time even when their
/// processes are hidden from the worker (`ProtectProc=invisible` hides other users'
/// processes in procfs; cgroupfs is not procfs). Pure: bytes in, values out; every file is
/// hostile input.
public enum Cgroup {
    /// Longest `cpu.stat` accepted: the kernel writes a few hundred bytes.
    public static let maxStatBytes = 4_096
    /// Longest cgroup path accepted (a unit name is at most 255 bytes; slices nest).
    public static let maxPathBytes = 1_024

    /// `usage_usec` of a cgroup v2 `cpu.stat` (`key value` lines): the CPU time of every
    /// process that ran in the cgroup, in microseconds. nil when the file is too long,
    /// the key is missing or repeated, or its value is not a plain decimal.
    public static func usageMicroseconds(cpuStat contents: [UInt8]?) -> UInt64? {
        guard let contents, contents.count <= maxStatBytes else { return nil }
        var found: UInt64?
        for line in contents.split(separator: UInt8(ascii: "\n")) {
            let fields = line.split(separator: UInt8(ascii: " "), omittingEmptySubsequences: true)
            guard fields.count == 2, fields[0].elementsEqual("usage_usec".utf8) else { continue }
            guard found == nil, let value = decimal(fields[1]) else { return nil }
            found = value
        }
        return found
    }

    /// The unified (v2) cgroup of a process from `/proc/PID/cgroup`: the path of its
    /// `0::` line. nil when there is none or it is not a clean absolute path.
    public static func unifiedPath(procCgroup contents: [UInt8]?) -> String? {
        guard let contents, contents.count <= 64 * 1_024 else { return nil }
        for line in contents.split(separator: UInt8(ascii: "\n")) where line.starts(with: "0::".utf8) {
            return cleanPath(String(decoding: line.dropFirst(3), as: UTF8.self))
        }
        return nil
    }

    /// `path` when it is absolute, short, printable, and has no `.`/`..` components or
    /// empty components (it is joined below `/sys/fs/cgroup`); nil otherwise.
    public static func cleanPath(_ path: String) -> String? {
        guard path.hasPrefix("/"), path.utf8.count <= maxPathBytes, path != "/" else { return nil }
        guard !path.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }) else { return nil }
        let components = path.dropFirst().split(separator: "/", omittingEmptySubsequences: false)
        guard !components.contains(where: { $0.isEmpty || $0 == "." || $0 == ".." }) else { return nil }
        return path
    }

    /// The cgroup of the unit a process runs in: its path cut after the deepest component
    /// that is a service or a scope (`/system.slice/ollama.service`, a container's
    /// `docker-….scope`), so the server's children in sub-cgroups count too. nil when the
    /// process is in no such unit, or in one that holds more than the server: a login
    /// session (`session-N.scope`), a user's manager (`user@N.service`), `init.scope`.
    public static func unitPath(of path: String) -> String? {
        guard let path = cleanPath(path) else { return nil }
        let components = path.dropFirst().split(separator: "/")
        guard let index = components.lastIndex(where: { $0.hasSuffix(".service") || $0.hasSuffix(".scope") }) else { return nil }
        let unit = components[index]
        if unit == "init.scope" || (unit.hasPrefix("session-") && unit.hasSuffix(".scope")) || (unit.hasPrefix("user@") && unit.hasSuffix(".service"))
        {
            return nil
        }
        return "/" + components[...index].joined(separator: "/")
    }

    /// A systemd service name that can be joined into a path: `name.service`, name made
    /// of letters, digits and `:-_.\@`, at most 255 bytes. nil otherwise.
    public static func serviceName(_ name: String) -> String? {
        guard name.hasSuffix(".service"), name.utf8.count > 8, name.utf8.count <= 255, !name.hasPrefix(".") else { return nil }
        let allowed = name.utf8.allSatisfy { byte in
            (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || ":-_.\\@".utf8.contains(byte)
        }
        return allowed ? name : nil
    }

    /// Whether a `cgroup.procs` lists at least one process (the unit is running).
    public static func hasProcesses(cgroupProcs contents: [UInt8]?) -> Bool {
        guard let contents else { return false }
        return contents.split(separator: UInt8(ascii: "\n")).contains { line in decimal(line).map { $0 > 0 } ?? false }
    }
}

/// The CPU time of the cgroup measured for the model server, at one sample.
public struct CgroupUsage: Sendable, Equatable {
    /// The cgroup's path below the cgroup root: a counter is compared only with the same
    /// cgroup's.
    public var path: String
    public var usageMicroseconds: UInt64

    public init(path: String, usageMicroseconds: UInt64) {
        self.path = path
        self.usageMicroseconds = usageMicroseconds
    }

    /// Clock ticks used between two samples of the same cgroup; 0 when the counter went
    /// backwards. A cgroup seen first in `later` (the server found, started or moved in
    /// between) counts whole, as a process that started in between does: the caller caps
    /// own load at the host's, so a long-lived server found late makes one interval read
    /// "all own" rather than its busy loop reading "other" (busy, hot) to the coordinator
    /// and holding the worker's own next subtask as `cpu-busy`.
    public static func ticks(from earlier: CgroupUsage?, to later: CgroupUsage?, ticksPerSecond: Double) -> Double {
        guard let later, ticksPerSecond.isFinite, ticksPerSecond > 0 else { return 0 }
        guard let earlier, earlier.path == later.path else { return Double(later.usageMicroseconds) / 1_000_000 * ticksPerSecond }
        guard later.usageMicroseconds >= earlier.usageMicroseconds else { return 0 }
        return Double(later.usageMicroseconds - earlier.usageMicroseconds) / 1_000_000 * ticksPerSecond
    }
}
