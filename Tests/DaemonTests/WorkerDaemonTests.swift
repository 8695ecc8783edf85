import Foundation
import Synchronization
import Systemd
import TestSupport
import Testing
import Logging
@testable import Daemon
import StateStore
import WorkerCore

/// The daemon's state actor in-process, with an injected clock: what the coordinator loop
/// and the Bluetooth service will ask before taking work.
@Suite struct HoldNewWork {
    let dir = NSTemporaryDirectory() + "ecw-daemon-" + UUID().uuidString

    func daemon(_ config: WorkerConfig = WorkerConfig(), logs: MemoryLogHandler = MemoryLogHandler()) throws -> WorkerState {
        let paths = DaemonPaths(configPath: "/dev/null", stateDirectory: dir, runtimeDirectory: dir + "/run", sysfsRoot: "/")
        return WorkerState(
            config: config, paths: paths, directory: try StateDirectory(path: dir), logger: Logger(label: "test", handler: logs),
            clock: TestClock.realTime { 1_000 })
    }

    func reading(battery: Int, mains: Bool, cpu: Double? = nil) -> PowerReading {
        PowerReading(
            telemetry: PowerTelemetry(onExternalPower: mains, batteryPct: battery, cpuUsagePct: cpu, hasSystemBattery: true, updatedAtMs: 1),
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
        let counters = await daemon.power.holdCounters
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

/// What the daemon writes, and when: mode and policy are durable before the answer,
/// events and task history are written behind and flushed by the stop.
@Suite struct DaemonStateWrites {
    let dir = NSTemporaryDirectory() + "ecw-daemon-writes-" + UUID().uuidString

    func daemon(logs: MemoryLogHandler = MemoryLogHandler()) throws -> WorkerState {
        let paths = DaemonPaths(configPath: "/dev/null", stateDirectory: dir, runtimeDirectory: dir + "/run", sysfsRoot: "/")
        return WorkerState(
            config: WorkerConfig(), paths: paths, directory: try StateDirectory(path: dir), logger: Logger(label: "test", handler: logs),
            clock: TestClock.realTime { 1_000 })
    }

    func file(_ name: String) -> String? {
        (try? Data(contentsOf: URL(fileURLWithPath: dir + "/" + name))).map { String(decoding: $0, as: UTF8.self) }
    }

    @Test func anAgentIdDerivedOnAnotherMachineIsReportedAtStart() async throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let own = try #require(ServiceManager.machineAppSpecificID().map { String($0.prefix(12)) }, "this machine has a machine id")
        let other = own == "000000000000" ? "111111111111" : "000000000000"
        try WorkerStateFiles(directory: StateDirectory(path: dir)).saveAgentID("cloned-\(other)")
        let logs = MemoryLogHandler()
        let copied = try daemon(logs: logs)
        let problem = await copied.statusJSON()["daemon"]?["identityProblem"]?.stringValue
        #expect(problem?.contains("cloned-\(other)") == true)
        #expect(await copied.statusLine().contains("agent id copied from another machine"))
        #expect(logs.records.contains { $0.level == .warning && $0.message.contains("was not derived from this machine's id") })
        // The first daemon writes its id behind (the writer); done before this one is saved.
        await copied.writer.flush()
        try WorkerStateFiles(directory: StateDirectory(path: dir)).saveAgentID("host-\(own)")
        #expect(await (try daemon()).statusJSON()["daemon"]?["identityProblem"] == .null, "its own id is not judged")
    }

    @Test func aModeChangeIsOnDiskWhenTheRequestReturns() async throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let daemon = try daemon()
        let result = await daemon.request(.operatorSet(.bluetooth, by: "test"))
        #expect(result.outcome == .changed)
        let mode = try #require(file(WorkerStateFiles.modeFile))
        #expect(mode.contains("\"bluetooth\""))
    }

    @Test func aPolicyChangeIsOnDiskWhenItReturns() async throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let daemon = try daemon()
        _ = await daemon.changePolicy(.set(key: "minBatteryPct", value: 30), by: "test")
        #expect(file(WorkerStateFiles.policyFile)?.contains("minBatteryPct") == true)
    }

    @Test func theStopMakesEveryRecordedEventAndTaskDurable() async throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let daemon = try daemon()
        for i in 0..<50 { await daemon.recordHook(name: "hook \(i)", outcome: .exited(0)) }
        await daemon.upsertTask(TaskRecord(id: "t1", source: .bluetooth, origin: "test", prompt: "p", startedAtMs: 1_000))
        await daemon.stop(reason: "test stop")
        let events = try #require(file(WorkerStateFiles.eventsFile))
        #expect(events.contains("hook 49 exited with status 0"))
        #expect(events.contains("test stop"))
        #expect(file(WorkerStateFiles.tasksFile)?.contains("\"t1\"") == true)
    }

    @Test func aTaskIsShownWholeFromItsOwnFileAndTheFileGoesWithTheRecord() async throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let daemon = try daemon()
        let prompt = "first line\n" + String(repeating: "p", count: TaskText.limitBytes)
        var record = TaskRecord(id: "whole", source: .coordinator, origin: "task-1", prompt: prompt, startedAtMs: 1_000)
        await daemon.upsertTask(record)
        record.finish(ok: true, output: "the answer, whole: " + String(repeating: "a", count: 2_000), error: nil, atMs: 2_000)
        await daemon.upsertTask(record)
        let shown = try #require(await daemon.taskJSON(id: "whole")?["task"])
        #expect(shown["wholeText"] == true && shown["state"] == "done" && shown["origin"] == "task-1")
        #expect(shown["prompt"]?.stringValue == TaskText.cut(prompt) && shown["promptCut"] == true)
        #expect(shown["promptBytes"]?.intValue == Int64(prompt.utf8.count))
        #expect(shown["output"]?.stringValue?.count == 2_019 && shown["outputCut"] == false)
        #expect(file(WorkerStateFiles.tasksFile)?.contains(String(repeating: "a", count: 501)) == false, "the history keeps previews")
        // Posted: the record comes back from the history without its text; the file stays whole.
        await daemon.markTaskPosted("whole", ok: true)
        #expect(await daemon.taskJSON(id: "whole")?["task"]?["output"]?.stringValue?.count == 2_019)
        #expect(await daemon.taskJSON(id: "missing") == nil)
        // Trimmed from the history: its file goes too.
        let name = TaskText.fileName(source: .coordinator, id: "whole")
        #expect(file(name) != nil)
        for i in 0..<TaskHistory.keepPerSource {
            await daemon.upsertTask(TaskRecord(id: "later-\(i)", source: .coordinator, origin: "t", prompt: "p", startedAtMs: 3_000))
        }
        await daemon.writer.flush()
        #expect(file(name) == nil)
        #expect(await daemon.taskJSON(id: "whole") == nil)
        #expect(await daemon.taskJSON(id: "later-0")?["task"]?["prompt"] == "p")
    }

    @Test func aPauseEndsAtItsDeadlineAndOutlivesARestart() async throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let now = Mutex<Int64>(1_000)
        let paths = DaemonPaths(configPath: "/dev/null", stateDirectory: dir, runtimeDirectory: dir + "/run", sysfsRoot: "/")
        func start() throws -> WorkerState {
            WorkerState(
                config: WorkerConfig(), paths: paths, directory: try StateDirectory(path: dir),
                logger: Logger(label: "test", handler: MemoryLogHandler()), clock: TestClock.realTime { now.withLock { $0 } })
        }
        let first = try start()
        await first.request(.operatorSet(.bluetooth, by: "test"))
        first.signals.pauseChanged.set(false)
        await first.request(.operatorPause(forMs: 60_000, by: "test"))
        #expect(await first.currentMode == .off)
        #expect(first.signals.pauseChanged.value, "the timer is woken for the new deadline")
        #expect(await first.pauseLeftMs == 60_000)
        let paused = await first.modeJSON()
        #expect(paused["resumesMode"] == "bluetooth" && paused["resumesAtMs"]?.intValue == 61_000)
        await first.stop(reason: "restart")

        now.withLock { $0 = 30_000 }
        let second = try start()
        #expect(await second.currentMode == .off)
        #expect(second.signals.pauseChanged.value == false)
        #expect(await second.pauseLeftMs == 31_000, "the deadline came back from the mode file")
        await second.endPauseIfDue()
        #expect(await second.currentMode == .off)
        now.withLock { $0 = 61_000 }
        await second.endPauseIfDue()
        #expect(await second.currentMode == .bluetooth)
        #expect(second.signals.pauseChanged.value)
        #expect(await second.pauseLeftMs == nil)
        #expect(await second.modeJSON()["resumesAt"] == nil)
        #expect(await second.recentEvents(limit: 1).last?.reason == "the pause ended: back to bluetooth")
    }

    @Test func aTaskWhoseFileIsGoneShowsItsPreviews() async throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let daemon = try daemon()
        await daemon.upsertTask(TaskRecord(id: "b1", source: .bluetooth, origin: "00:AA", prompt: "hello", startedAtMs: 1_000))
        await daemon.writer.flush()
        try FileManager.default.removeItem(atPath: dir + "/" + TaskText.fileName(source: .bluetooth, id: "b1"))
        let shown = try #require(await daemon.taskJSON(id: "b1")?["task"])
        #expect(shown["wholeText"] == false && shown["prompt"] == "hello" && shown["promptBytes"] == nil)
    }

    @Test func aStateDirectoryThatCannotBeWrittenShowsInStatusAndTheLog() async throws {
        let logs = MemoryLogHandler()
        let daemon = try daemon(logs: logs)
        await daemon.writer.flush()
        try FileManager.default.removeItem(atPath: dir)
        // The mode write fails, yet the change is answered (and shown as not persisted).
        let result = await daemon.request(.operatorSet(.bluetooth, by: "test"))
        #expect(result.outcome == .changed)
        let status = await daemon.statusJSON()
        #expect(status["daemon"]?["persistenceProblem"]?.stringValue?.contains("cannot write the state directory \(dir)") == true)
        #expect(await daemon.statusLine().contains("state not writable"))
        #expect(logs.records.contains { $0.level == .error && $0.message.contains("cannot write the state directory") })
    }
}

/// A reload that changes bluetooth.security or bluetooth.pairingAgent asks the Bluetooth
/// runtime to start its session again (with the new level and agent); other keys do not.
@Suite struct BluetoothReload {
    let dir = NSTemporaryDirectory() + "ecw-daemon-" + UUID().uuidString

    @Test func aNewSecurityLevelRestartsTheBluetoothSessionAndIsTheRunningConfig() async throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let paths = DaemonPaths(configPath: "/dev/null", stateDirectory: dir, runtimeDirectory: dir + "/run", sysfsRoot: "/")
        var running = WorkerConfig()
        running.bluetooth.security = .encrypted
        let daemon = WorkerState(
            config: running, paths: paths, directory: try StateDirectory(path: dir),
            logger: Logger(label: "test", handler: MemoryLogHandler()), clock: TestClock.realTime { 1_000 })
        var file = running
        file.log.level = .debug
        await daemon.reload(file: file)
        #expect(!daemon.signals.bluetoothRestart.value, "a log level leaves the session alone")
        file.bluetooth.security = .authenticated
        file.bluetooth.maxClients = 3
        let status = await daemon.reload(file: file)
        #expect(status.appliedKeys == ["bluetooth.security"])
        #expect(status.restartKeys == ["bluetooth.maxClients"])
        #expect(daemon.signals.bluetoothRestart.value)
        #expect(await daemon.config.bluetooth.security == .authenticated)
    }
}
