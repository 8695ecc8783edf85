/// The aggregate `cpu` line of `/proc/stat`, in clock ticks since boot.
public struct CPUTimes: Sendable, Equatable {
    /// `idle` + `iowait`: a CPU waiting for a disk is free for our work.
    public var idle: UInt64
    /// user + nice + system + idle + iowait + irq + softirq + steal. `guest` and
    /// `guest_nice` are already inside user and nice, so they are not added again.
    public var total: UInt64

    public init(idle: UInt64, total: UInt64) {
        self.idle = idle
        self.total = total
    }

    /// The first line of `/proc/stat` (`cpu  user nice system idle [iowait …]`); nil
    /// when it is missing, has fewer than four counters, or holds anything but numbers.
    public static func parse(procStat contents: [UInt8]?) -> CPUTimes? {
        guard let contents else { return nil }
        let line = contents.prefix { $0 != UInt8(ascii: "\n") }
        let fields = line.split(separator: UInt8(ascii: " "), omittingEmptySubsequences: true)
        guard fields.count >= 5, fields[0].elementsEqual("cpu".utf8) else { return nil }
        var counters: [UInt64] = []
        for field in fields.dropFirst().prefix(8) {
            guard field.count <= 20, field.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
                let value = UInt64(String(decoding: field, as: UTF8.self))
            else { return nil }
            counters.append(value)
        }
        var total: UInt64 = 0
        for value in counters {
            let (sum, overflow) = total.addingReportingOverflow(value)
            if overflow { return nil }
            total = sum
        }
        let idle = counters[3] &+ (counters.count > 4 ? counters[4] : 0)  // cannot overflow: both are in total
        return CPUTimes(idle: idle, total: total)
    }

    /// modes-and-power §3.1: the share of non-idle time between two samples, 0–100. nil when no
    /// time passed or the counters went backwards (a different boot, a broken file).
    /// `iowait` may dip between samples on some kernels; the result is clamped.
    public static func usagePct(from earlier: CPUTimes, to later: CPUTimes) -> Double? {
        guard later.total > earlier.total else { return nil }
        let elapsed = Double(later.total - earlier.total)
        let idle = Double(later.idle) - Double(earlier.idle)
        let busy = (elapsed - idle) / elapsed * 100
        return min(100, max(0, busy))
    }
}

public enum MemoryInfo {
    /// modes-and-power §3.1: `1 − MemAvailable/MemTotal` from `/proc/meminfo`, as a percentage; nil
    /// when either line is missing or unreadable, MemTotal is 0, or MemAvailable exceeds
    /// MemTotal. Kernels before 3.14 have no MemAvailable: unknown, not a guess.
    public static func usagePct(meminfo contents: [UInt8]?) -> Double? {
        guard let contents else { return nil }
        var total: UInt64?
        var available: UInt64?
        for line in contents.split(separator: UInt8(ascii: "\n")) {
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { continue }
            let key = line[line.startIndex..<colon]
            let isTotal = key.elementsEqual("MemTotal".utf8)
            let isAvailable = key.elementsEqual("MemAvailable".utf8)
            guard (isTotal && total == nil) || (isAvailable && available == nil) else { continue }
            let fields = line[(colon + 1)...].split(separator: UInt8(ascii: " "), omittingEmptySubsequences: true)
            guard let first = fields.first, first.count <= 20,
                first.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
                let value = UInt64(String(decoding: first, as: UTF8.self))
            else { return nil }
            if isTotal { total = value } else { available = value }
        }
        guard let total, let available, total > 0, available <= total else { return nil }
        return (1 - Double(available) / Double(total)) * 100
    }
}
