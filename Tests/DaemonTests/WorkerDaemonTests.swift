import Foundation
import Testing
import Logging
@testable import Daemon
import StateStore
import WorkerCore

/// The daemon's state actor in-process, with an injected clock: what the coordinator loop
/// and the Bluetooth service will ask before taking work.
@Suite struct HoldNewWork {
    let dir = NSTemporaryDirectory() + "ecw-daemon-" + UUID().uuidString

    func daemon(_ config: WorkerConfig = WorkerConfig(), logs: MemoryLogHandler = MemoryLogHandler()) throws -> WorkerDaemon {
        let paths = DaemonPaths(configPath: "/dev/null", stateDirectory: dir, runtimeDirectory: dir + "/run", sysfsRoot: "/")
        return WorkerDaemon(config: config, paths: paths, directory: try StateDirectory(path: dir), logger: Logger(label: "test", handler: logs), clock: { 1_000 })
    }

    func reading(battery: Int, mains: Bool, cpu: Double? = nil) -> PowerReading {
        PowerReading(telemetry: PowerTelemetry(onExternalPower: mains, batteryPct: battery, cpuUsagePct: cpu, hasSystemBattery: true, updatedAtMs: 1),
                     supplies: [], sensors: [], platformProfile: nil, chassisType: nil, cpuSampled: false, cpuHadPreviousSample: false, memoryRead: false)
    }

    @Test func heldWorkIsRefusedAndCountedPerReason() async throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let daemon = try daemon()
        await daemon.updateReading(reading(battery: 80, mains: false), monotonicMs: 0)
        #expect(await daemon.admitNewWork() == nil)
        await daemon.updateReading(reading(battery: 15, mains: false), monotonicMs: 1_000)
        #expect(await daemon.admitNewWork() == .batteryLow)
        #expect(await daemon.admitNewWork() == .batteryLow)
        await daemon.updateReading(reading(battery: 50, mains: false, cpu: 99), monotonicMs: 2_000)
        #expect(await daemon.admitNewWork() == .cpuBusy)
        let counters = await daemon.holdCounters
        #expect(counters.count(.batteryLow) == 2)
        #expect(counters.count(.cpuBusy) == 1)
        #expect(counters.total == 3)
        let status = await daemon.statusJSON()
        #expect(status["power"]?["held"]?["battery-low"] == 2)
        let kinds = await daemon.recentEvents(limit: nil).map(\.kind)
        #expect(kinds.contains(.powerHold))
    }

    @Test func resumingWaitsForTheDwell() async throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let daemon = try daemon()
        await daemon.updateReading(reading(battery: 50, mains: true, cpu: 99), monotonicMs: 0)
        #expect(await daemon.admitNewWork() == .cpuBusy)
        await daemon.updateReading(reading(battery: 50, mains: true, cpu: 10), monotonicMs: 5_000)
        #expect(await daemon.admitNewWork() == .cpuBusy, "clear for 0 s of a 30 s dwell")
        await daemon.updateReading(reading(battery: 50, mains: true, cpu: 10), monotonicMs: 34_999)
        #expect(await daemon.admitNewWork() == .cpuBusy)
        await daemon.updateReading(reading(battery: 50, mains: true, cpu: 10), monotonicMs: 35_000)
        #expect(await daemon.admitNewWork() == nil)
        #expect(await daemon.recentEvents(limit: nil).map(\.kind).contains(.powerResume))
    }

    @Test func aPolicyChangeDecidesAgainAtOnce() async throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let daemon = try daemon()
        await daemon.updateReading(reading(battery: 25, mains: false), monotonicMs: 0)
        #expect(await daemon.admitNewWork() == nil)
        _ = await daemon.changePolicy(.set(key: "resumeBatteryPct", value: 50), by: "test")
        _ = await daemon.changePolicy(.set(key: "minBatteryPct", value: 30), by: "test")
        #expect(await daemon.admitNewWork() == .batteryLow)
    }
}
