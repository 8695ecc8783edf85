// Micro-benchmarks run by `make bench`: each figure beside a baseline measured in the
// same run, so the ratio means something on any machine. Figures, not assertions.
#if canImport(Glibc)
import Glibc
#endif
import Posix
import Telemetry
import WorkerCore

// `worker-bench state-writes` runs only the state-writes figures (the rest takes minutes).
if CommandLine.arguments.dropFirst().first == "state-writes" {
    jsonBench()
    jsonEscapesBench()

    await stateWritesBench()
    exit(0)
}
// `worker-bench json` runs only the JSON object figures.
if CommandLine.arguments.dropFirst().first == "json" {
    jsonBench()
    jsonEscapesBench()
    exit(0)
}
// `worker-bench stream URL` measures streaming against a llama.cpp server at URL.
if CommandLine.arguments.dropFirst().first == "stream", CommandLine.arguments.count > 2 {
    await streamBench(url: CommandLine.arguments[2])
    exit(0)
}

func measure(_ label: String, iterations: Int, batches: Int = 15, _ body: () -> Void) -> Double {
    var perCall: [Double] = []
    for _ in 0..<batches {
        let start = monotonicNanoseconds()
        for _ in 0..<iterations { body() }
        perCall.append(Double(monotonicNanoseconds() - start) / Double(iterations) / 1_000)
    }
    perCall.sort()
    return perCall[perCall.count / 2]
}

func write(_ root: String, _ path: String, _ text: String) {
    let full = root + "/" + path
    var dir = full
    while dir.last != "/" { dir.removeLast() }
    try? makeDirectories(String(dir.dropLast()), mode: 0o755)
    let fd = open(full, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
    try? writeAll(fd: fd, Array((text + "\n").utf8), name: full)
    close(fd)
}

// A laptop tree with two batteries, an adapter, a mouse, three zones and hwmon sensors.
let root = "/tmp/ecw-bench-sysfs-\(getpid())"
write(root, "sys/class/power_supply/AC/type", "Mains")
write(root, "sys/class/power_supply/AC/online", "1")
for (name, capacity) in [("BAT0", "42"), ("BAT1", "80")] {
    write(root, "sys/class/power_supply/\(name)/type", "Battery")
    write(root, "sys/class/power_supply/\(name)/status", "Charging")
    write(root, "sys/class/power_supply/\(name)/capacity", capacity)
    write(root, "sys/class/power_supply/\(name)/energy_full", "50000000")
}
write(root, "sys/class/power_supply/hidpp_battery_0/type", "Battery")
write(root, "sys/class/power_supply/hidpp_battery_0/scope", "Device")
write(root, "sys/class/power_supply/hidpp_battery_0/capacity", "90")
for zone in 0..<3 {
    write(root, "sys/class/thermal/thermal_zone\(zone)/type", "acpitz\(zone)")
    write(root, "sys/class/thermal/thermal_zone\(zone)/temp", "48000")
    write(root, "sys/class/thermal/thermal_zone\(zone)/trip_point_0_type", "passive")
    write(root, "sys/class/thermal/thermal_zone\(zone)/trip_point_0_temp", "90000")
    write(root, "sys/class/thermal/thermal_zone\(zone)/trip_point_1_type", "critical")
    write(root, "sys/class/thermal/thermal_zone\(zone)/trip_point_1_temp", "105000")
}
write(root, "sys/class/hwmon/hwmon0/name", "coretemp")
for i in 1...4 { write(root, "sys/class/hwmon/hwmon0/temp\(i)_input", "5\(i)000") }
write(root, "sys/firmware/acpi/platform_profile", "balanced")
write(root, "sys/class/dmi/id/chassis_type", "10")
write(root, "proc/stat", "cpu  1000 0 500 90000 100 0 0 0 0 0\n")
write(root, "proc/meminfo", "MemTotal: 16000000 kB\nMemFree: 1000000 kB\nMemAvailable: 9000000 kB\n")

var laptop = TelemetryReader(root: root)
var host = TelemetryReader(root: "/")
let oneFile = measure("one small file", iterations: 2_000) { _ = try? readFile(root + "/sys/class/power_supply/AC/online", limit: 64) }
let laptopRead = measure("fake laptop", iterations: 200) { _ = laptop.read() }
let hostRead = measure("this host", iterations: 200) { _ = host.read() }
let reading = laptop.read()
var policy = PowerPolicy()
policy.maxCpuUsagePct = 50
var previous: PowerDecision? = nil
var now: Int64 = 0
let decision = measure("decision", iterations: 200_000) {
    now += 1
    previous = PowerDecision.decide(reading.telemetry, policy: policy, previous: previous, nowMs: now)
}
let heartbeat = measure("heartbeat JSON", iterations: 50_000) { _ = reading.telemetry.heartbeatJSON.serialized }

func format(_ value: Double) -> String {
    let rounded = (value * 100).rounded() / 100
    return String(rounded)
}
print("== power telemetry (release build; medians of 15 batches)")
print("   one full reading, fake laptop (2 batteries, AC, mouse, 7 sensors):    \(format(laptopRead)) µs")
print("   one full reading, this host:                                        \(format(hostRead)) µs")
print(
    "   baseline: open+read+close of one sysfs-sized file:                  \(format(oneFile)) µs   (laptop reading = \(format(laptopRead / oneFile))x one file)"
)
print("   one policy decision:                                                \(format(decision)) µs")
print("   heartbeat powerTelemetry JSON:                                      \(format(heartbeat)) µs")
_ = previous
// Clean up the tree.
_ = system("rm -rf '\(root)'")

// 100 workers lose their coordinator at t = 0 and it returns at t = 30 s. Each retries
// with the daemon's Backoff (full jitter); the baseline retries on the same exponential
// schedule without jitter. Reported: when each first reaches the coordinator again.
func firstSuccessAfterOutage(workers: Int, outageMs: Int64, jitter: Bool) -> [Int64] {
    var generator = SystemRandomNumberGenerator()
    let backoff = Backoff()
    return (0..<workers).map { _ in
        var t: Int64 = 0
        var failures = 0
        while t < outageMs {
            failures += 1
            t += jitter ? backoff.delay(failures: failures) { Int64.random(in: $0, using: &generator) } : backoff.ceiling(failures: failures)
        }
        return t
    }.sorted()
}

func spread(_ times: [Int64]) -> String {
    let buckets = Dictionary(grouping: times, by: { $0 / 100 }).values.map(\.count).max() ?? 0
    return
        "first retry after the outage: min \(times.first! - 30_000) ms, median \(times[times.count / 2] - 30_000) ms, max \(times.last! - 30_000) ms; busiest 100 ms window: \(buckets) of \(times.count) workers"
}
print("== 100 workers after a 30 s coordinator outage (backoff base 1.5 s, cap 60 s)")
print("   full jitter (this daemon): " + spread(firstSuccessAfterOutage(workers: 100, outageMs: 30_000, jitter: true)))
print("   no jitter (baseline):      " + spread(firstSuccessAfterOutage(workers: 100, outageMs: 30_000, jitter: false)))

// Bluetooth request reassembly (protocol-bluetooth §1): the linear scan against re-parsing the whole
// buffer after every chunk, as EdgeCoder's phone and proxy do, for a 64 KiB request.
let bigRequest = Array((#"{"id":"bench","prompt":""# + String(repeating: "lorem ipsum ", count: 5_450) + #""}"#).utf8)
for chunk in [20, 509] {
    let scan = measure("scan", iterations: 3, batches: 5) {
        var assembler = RequestAssembler(maxRequestBytes: 1 << 20)
        var offset = 0
        while offset < bigRequest.count {
            _ = assembler.feed(bigRequest[offset..<min(offset + chunk, bigRequest.count)], nowMs: 0)
            offset += chunk
        }
    }
    let reparse = measure("reparse", iterations: 1, batches: 3) {
        var buffer: [UInt8] = []
        var offset = 0
        while offset < bigRequest.count {
            buffer += bigRequest[offset..<min(offset + chunk, bigRequest.count)]
            if (try? JSON.parse(buffer)) != nil { break }
            offset += chunk
        }
    }
    print("== Bluetooth reassembly of a \(bigRequest.count / 1024) KiB request in \(chunk)-byte writes")
    print(
        "   linear scan (this daemon): \(format(scan / 1000)) ms; re-parse after every write (EdgeCoder): \(format(reparse / 1000)) ms; ratio \(format(reparse / scan))x"
    )
}

await stateWritesBench()
