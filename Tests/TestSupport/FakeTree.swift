import Foundation

/// A fake sysfs/procfs tree in a temporary directory, removed when released.
public final class FakeTree: @unchecked Sendable {
    private let directory = TemporaryDirectory(prefix: "telemetry-")
    public var root: String { directory.path }

    public init() {}

    public func write(_ relative: String, _ contents: String) {
        write(relative, bytes: Array(contents.utf8))
    }

    public func write(_ relative: String, bytes: [UInt8]) {
        let path = "\(root)/\(relative)"
        try! FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        if FileManager.default.fileExists(atPath: path) { try! FileManager.default.removeItem(atPath: path) }
        precondition(FileManager.default.createFile(atPath: path, contents: Data(bytes)))
    }

    public func directory(_ relative: String) {
        try! FileManager.default.createDirectory(atPath: "\(root)/\(relative)", withIntermediateDirectories: true)
    }

    public func fifo(_ relative: String) {
        let path = "\(root)/\(relative)"
        try! FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        precondition(mkfifo(path, 0o644) == 0)
    }

    public func remove(_ relative: String) {
        try? FileManager.default.removeItem(atPath: "\(root)/\(relative)")
    }

    /// A power supply with one file per attribute (a value `"\n"`-terminated as sysfs does).
    public func supply(_ name: String, _ attributes: [String: String]) {
        directory("sys/class/power_supply/\(name)")
        for (attribute, value) in attributes { write("sys/class/power_supply/\(name)/\(attribute)", value + "\n") }
    }

    public func thermalZone(_ n: Int, type: String, temp: String, trips: [(String, String)] = []) {
        let zone = "sys/class/thermal/thermal_zone\(n)"
        write("\(zone)/type", type + "\n")
        write("\(zone)/temp", temp + "\n")
        for (i, trip) in trips.enumerated() {
            write("\(zone)/trip_point_\(i)_type", trip.0 + "\n")
            write("\(zone)/trip_point_\(i)_temp", trip.1 + "\n")
        }
    }

    public func hwmon(_ n: Int, name: String, temps: [String]) {
        write("sys/class/hwmon/hwmon\(n)/name", name + "\n")
        for (i, temp) in temps.enumerated() { write("sys/class/hwmon/hwmon\(n)/temp\(i + 1)_input", temp + "\n") }
    }

    public func chassis(_ code: String) { write("sys/class/dmi/id/chassis_type", code + "\n") }

    public func procStat(user: Int, system: Int, idle: Int, iowait: Int) {
        write("proc/stat", "cpu  \(user) 0 \(system) \(idle) \(iowait) 0 0 0 0 0\ncpu0 \(user) 0 \(system) \(idle) \(iowait) 0 0 0 0 0\nintr 1 2 3\n")
    }

    public func meminfo(totalKB: Int, availableKB: Int) {
        write("proc/meminfo", "MemTotal:       \(totalKB) kB\nMemFree:         1000 kB\nMemAvailable:   \(availableKB) kB\n")
    }
}
