import Foundation
import TestSupport
import Testing
import Posix
@testable import StateStore
import WorkerCore

struct SimulatedCrash: Error {}

@Suite struct AtomicStateWrites {
    @Test func writeReplacesTheWholeFile() throws {
        let tmp = TemporaryDirectory(prefix: "ecw-state-")
        let dir = try StateDirectory(path: tmp.path)
        try dir.write("mode.json", Array("first version, long content\n".utf8))
        try dir.write("mode.json", Array("second\n".utf8))
        #expect(tmp.read("mode.json") == "second\n")
        #expect(tmp.names == ["mode.json"])
    }

    @Test func crashBetweenTempWriteAndRenameKeepsTheOldState_simulatedByAThrowingHook() throws {
        // The kill between two system calls cannot be caused deterministically from
        // outside, so a hook throws exactly there: the temp file is written and fsynced,
        // the rename never happens.
        let tmp = TemporaryDirectory(prefix: "ecw-state-")
        let dir = try StateDirectory(path: tmp.path)
        try dir.write("mode.json", Array("old\n".utf8))
        #expect(throws: SimulatedCrash.self) {
            try dir.write("mode.json", Array("new\n".utf8), beforeRename: { throw SimulatedCrash() })
        }
        #expect(tmp.read("mode.json") == "old\n")
        #expect(tmp.names.contains { $0.contains(".tmp-") }, "the crashed write's temp file should be there")
        // The next start cleans the leftover and still reads the old content.
        let reopened = try StateDirectory(path: tmp.path)
        #expect(tmp.names == ["mode.json"])
        #expect(try reopened.read("mode.json", limit: 100) == Array("old\n".utf8))
    }

    @Test func filesAreCreatedWithTheRequestedMode() throws {
        let tmp = TemporaryDirectory(prefix: "ecw-state-")
        let dir = try StateDirectory(path: tmp.path)
        try dir.write("mesh-token", Array("secret".utf8), mode: 0o600)
        let attributes = try FileManager.default.attributesOfItem(atPath: tmp.path + "/mesh-token")
        #expect((attributes[.posixPermissions] as? Int).map { $0 & 0o077 } == 0)
    }

    @Test func readRefusesFilesOverTheLimit() throws {
        let tmp = TemporaryDirectory(prefix: "ecw-state-")
        tmp.write("big", String(repeating: "x", count: 5000))
        let dir = try StateDirectory(path: tmp.path)
        #expect(throws: SystemError.self) { try dir.read("big", limit: 4096) }
        #expect(try dir.read("absent", limit: 10) == nil)
    }

    @Test func quarantineNeverOverwritesAnEarlierCorruptCopy() throws {
        let tmp = TemporaryDirectory(prefix: "ecw-state-")
        let dir = try StateDirectory(path: tmp.path)
        tmp.write("mode.json", "one")
        let first = try dir.quarantine("mode.json", nowMs: 1_000)
        tmp.write("mode.json", "two")
        let second = try dir.quarantine("mode.json", nowMs: 1_000)
        #expect(first != second)
        #expect(tmp.read(first) == "one")
        #expect(tmp.read(second) == "two")
        #expect(first.hasPrefix("mode.json.corrupt-19700101T000001Z"))
    }
}

@Suite struct CorruptStateFiles {
    let now: Int64 = 1_800_000_000_000

    @Test(arguments: ["", "{not json", "{\"mode\": \"turbo\", \"sinceMs\": 1, \"reason\": \"x\"}", "[]", "\u{0}\u{0}\u{0}"])
    func unparseableModeFileIsMovedAsideAndReported(content: String) throws {
        let tmp = TemporaryDirectory(prefix: "ecw-state-")
        tmp.write("mode.json", content)
        let files = WorkerStateFiles(directory: try StateDirectory(path: tmp.path))
        let loaded = files.loadJSON("mode.json", nowMs: now) { ModeState.from(json: $0) }
        guard case .recovered(let file) = loaded else {
            Issue.record("expected a recovery, got \(loaded)")
            return
        }
        #expect(file.file == "mode.json")
        #expect(file.movedTo.hasPrefix("mode.json.corrupt-"))
        #expect(tmp.read(file.movedTo) == content, "the corrupt content must be kept")
        #expect(tmp.read("mode.json") == nil)
    }

    @Test func oversizedStateFileIsMovedAside() throws {
        let tmp = TemporaryDirectory(prefix: "ecw-state-")
        tmp.write("events.json", String(repeating: " ", count: WorkerStateFiles.maxStateFileBytes + 1))
        let files = WorkerStateFiles(directory: try StateDirectory(path: tmp.path))
        guard case .recovered(let file) = files.loadJSON("events.json", nowMs: now, decode: { EventLog.from(json: $0) }) else {
            Issue.record("an oversized file was accepted")
            return
        }
        #expect(file.problem.contains("cannot be read"))
    }

    @Test func modeAndEventsRoundTrip() throws {
        let tmp = TemporaryDirectory(prefix: "ecw-state-")
        let files = WorkerStateFiles(directory: try StateDirectory(path: tmp.path))
        let mode = ModeState(mode: .on, sinceMs: 5, reason: "set by root")
        var log = EventLog()
        log.append(EventDraft(kind: .modeChange, from: .off, to: .on, reason: "set by root"), timeMs: 5)
        try files.saveMode(mode)
        try files.saveEvents(log)
        guard case .loaded(let loadedMode) = files.loadJSON("mode.json", nowMs: now, decode: { ModeState.from(json: $0) }),
            case .loaded(let loadedLog) = files.loadJSON("events.json", nowMs: now, decode: { EventLog.from(json: $0) })
        else { Issue.record("state did not load back"); return }
        #expect(loadedMode == mode)
        #expect(loadedLog == log)
    }

    @Test func invalidAgentIDIsMovedAside() throws {
        let tmp = TemporaryDirectory(prefix: "ecw-state-")
        tmp.write("agent-id", "bad id with spaces\n")
        let files = WorkerStateFiles(directory: try StateDirectory(path: tmp.path))
        guard case .recovered = files.loadAgentID(nowMs: now) else { Issue.record("accepted a bad agent id"); return }
        try files.saveAgentID("host-0123456789ab")
        guard case .loaded(let id) = files.loadAgentID(nowMs: now) else { Issue.record("did not load"); return }
        #expect(id == "host-0123456789ab")
    }
}
