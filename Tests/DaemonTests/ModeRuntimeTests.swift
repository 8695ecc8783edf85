import Foundation
import Tasks
import TestSupport
import Testing
import Logging
@testable import Daemon
import ModelBackend
import Posix
import StateStore
import Synchronization
import WorkerCore

/// Each working mode has one runtime in `ModeRuntimes`, and the daemon flips that runtime's
/// signal, and only that one, as the mode changes.
@Suite struct ModeRuntimeWiring {
    let dir = NSTemporaryDirectory() + "ecw-runtimes-" + UUID().uuidString

    func daemon(coordinatorURL: String?) throws -> WorkerState {
        var config = WorkerConfig()
        config.coordinator.url = coordinatorURL
        let paths = DaemonPaths(configPath: "/dev/null", stateDirectory: dir, runtimeDirectory: dir + "/run", sysfsRoot: "/")
        return WorkerState(
            config: config, paths: paths, directory: try StateDirectory(path: dir),
            logger: Logger(label: "test", handler: MemoryLogHandler()), clock: TestClock.realTime { 1_000 })
    }

    func active(_ daemon: WorkerState) -> [Mode] { Mode.allCases.filter { daemon.signals.runtime(for: $0).value } }

    @Test func everyWorkingModeHasExactlyOneRuntime() {
        for mode in Mode.allCases where mode != .off {
            #expect(ModeRuntimes.all.filter { $0.mode == mode }.count == 1, "\(mode)")
        }
        #expect(ModeRuntimes.runtime(for: .off) == nil)
    }

    @Test func onlyTheSelectedModesRuntimeIsSignalledToRun() async throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let daemon = try daemon(coordinatorURL: "http://127.0.0.1:9")
        #expect(active(daemon) == [])
        await daemon.request(.operatorSet(.on, by: "test"))
        #expect(active(daemon) == [.on])
        #expect(await daemon.statusJSON()["coordinator"]?["active"] == true)
        await daemon.request(.operatorSet(.bluetooth, by: "test"))
        #expect(active(daemon) == [.bluetooth])
        #expect(await daemon.statusJSON()["coordinator"]?["active"] == false)
        #expect(await daemon.statusJSON()["bluetooth"]?["active"] == true)
        await daemon.request(.operatorSet(.off, by: "test"))
        #expect(active(daemon) == [])
    }

    @Test func aRuntimeThatLacksItsConfigurationStaysStoppedAndSaysWhy() async throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let daemon = try daemon(coordinatorURL: nil)
        await daemon.request(.operatorSet(.on, by: "test"))
        #expect(active(daemon) == [])
        let runtime = await daemon.modeJSON()["runtime"]
        #expect(runtime?["state"] == "blocked")
        #expect(runtime?["reason"] == "coordinator.url is not configured: set it in the config file and restart")
        #expect(await daemon.statusLine().hasPrefix("mode on, blocked: coordinator.url is not configured"))
    }
}

/// A service cancelled before it was asked to stop (a second SIGTERM during the stop)
/// must end: a cancelled wait returns at once, and a loop that only checked its shutdown
/// token started its runtime again and again, for ever (issue 12 §6).
@Suite struct ModeRuntimeCancellation {
    let dir = NSTemporaryDirectory() + "ecw-runtime-cancel-" + UUID().uuidString

    final class Ended: Sendable {
        private let flag = Mutex(false)
        func set() { flag.withLock { $0 = true } }
        var value: Bool { flag.withLock { $0 } }
    }

    @Test(arguments: [Mode.off, .on, .bluetooth])
    func everyModeRuntimeEndsWhenCancelledWhateverTheMode(mode: Mode) async throws {
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var config = WorkerConfig()
        // Nothing listens there: the coordinator's session fails fast, as it did in the loop.
        config.coordinator.url = "http://127.0.0.1:9"
        let paths = DaemonPaths(configPath: "/dev/null", stateDirectory: dir, runtimeDirectory: dir + "/run", sysfsRoot: "/")
        let directory = try StateDirectory(path: dir)
        let logs = MemoryLogHandler()
        let logger = Logger(label: "test", handler: logs)
        let daemon = WorkerState(config: config, paths: paths, directory: directory, logger: logger, clock: TestClock.realTime { 1_000 })
        await daemon.request(.operatorSet(mode, by: "test"))
        let context = ModeRuntimeContext(
            daemon: daemon, config: config, directory: directory,
            backend: ModelBackend(config: config.backend), logger: logger)
        for runtime in ModeRuntimes.all {
            let service = runtime.make(context)
            let before = logs.records.count
            let ended = Ended()
            let task = Task {
                try? await service.run(shutdown: GracefulShutdown())
                ended.set()
            }
            try await Task.sleep(nanoseconds: 50_000_000)
            task.cancel()
            let deadline = monotonicNanoseconds() + 5_000_000_000
            while !ended.value && monotonicNanoseconds() < deadline { try await Task.sleep(nanoseconds: 10_000_000) }
            #expect(ended.value, "\(service.name) in mode \(mode.rawValue) did not end within 5 s of its cancellation")
            let records = logs.records.dropFirst(before)
            let starts = records.filter {
                $0.message.hasPrefix("starting the Bluetooth runtime") || $0.message.hasPrefix("coordinator session starting")
            }.count
            #expect(
                starts <= (runtime.mode == mode ? 1 : 0),
                "\(service.name) in mode \(mode.rawValue) started its runtime \(starts) times: \(records.map(\.message))")
        }
    }
}

/// The one mode-runtime loop (#27): a session runs while its mode should, is told to stop
/// (never cancelled) when it should not or a restart is asked, and the loop ends with the
/// daemon's shutdown.
@Suite struct RunWhileActiveTests {
    final class Sessions: Sendable {
        private let log = Mutex<[String]>([])
        func add(_ entry: String) { log.withLock { $0.append(entry) } }
        var entries: [String] { log.withLock { $0 } }
    }

    func eventually(_ condition: () -> Bool) async throws -> Bool {
        let deadline = monotonicNanoseconds() + 5_000_000_000
        while !condition() && monotonicNanoseconds() < deadline { try await Task.sleep(nanoseconds: 5_000_000) }
        return condition()
    }

    @Test func sessionsFollowTheSignalTheRestartAndTheShutdown() async throws {
        let active = StateSignal(false)
        let restart = StateSignal(false)
        let shutdown = GracefulShutdown()
        let sessions = Sessions()
        let loop = Task {
            await runWhileActive(active, restart: restart, shutdown: shutdown) { stop in
                sessions.add("start")
                await stop.wait()
                sessions.add(Task.isCancelled ? "cancelled" : "stopped")
            }
        }
        try await Task.sleep(nanoseconds: 50_000_000)
        #expect(sessions.entries.isEmpty, "no session while the mode should not run")
        active.set(true)
        #expect(try await eventually { sessions.entries == ["start"] })
        restart.set(true)
        #expect(try await eventually { sessions.entries == ["start", "stopped", "start"] }, "a restart stops the session and starts the next")
        #expect(restart.value == false, "the new start is the restart asked")
        active.set(false)
        #expect(try await eventually { sessions.entries.count == 4 })
        #expect(sessions.entries.last == "stopped", "told to stop, not cancelled")
        shutdown.trigger()
        await loop.value
        #expect(sessions.entries == ["start", "stopped", "start", "stopped"])
    }

    @Test func theDaemonsShutdownStopsARunningSessionGracefully() async throws {
        let active = StateSignal(true)
        let shutdown = GracefulShutdown()
        let sessions = Sessions()
        let loop = Task {
            await runWhileActive(active, shutdown: shutdown) { stop in
                sessions.add("start")
                await stop.wait()
                sessions.add(Task.isCancelled ? "cancelled" : "stopped")
            }
        }
        #expect(try await eventually { sessions.entries == ["start"] })
        shutdown.trigger()
        await loop.value
        #expect(sessions.entries == ["start", "stopped"])
    }
}
