import Testing
@testable import WorkerCLI
import WorkerCore
import Posix

/// A command read from `words` as the CLI reads it: its own options, then nothing left over.
private func parseCommand<C: Command>(_ words: [String]) throws(UsageError) -> C {
    var arguments = Arguments(words)
    let command = try C(&arguments)
    try arguments.finish()
    return command
}

@Suite struct TasksShowArguments {
    func parse(_ words: [String]) throws(UsageError) -> TasksCommand { try parseCommand(words) }

    @Test func showTakesOneIdAndTheListTakesNone() throws {
        #expect(try parse([]).showID == nil)
        #expect(try parse(["show", "sub-1", "--json"]).showID == "sub-1")
        #expect(try parse(["--limit", "3"]).limit == 3)
        // An id that looks odd is still an id; `--` lets one start with a dash.
        #expect(try parse(["show", "--", "-x"]).showID == "-x")
    }

    @Test(arguments: [
        ["show"], ["show", "a", "b"], ["list"], ["sub-1"], ["show", "a", "--limit", "2"],
        ["show", String(repeating: "i", count: ControlRequest.maxTaskIDBytes + 1)],
    ])
    func everythingElseIsAUsageError(words: [String]) {
        #expect(throws: UsageError.self) { try parse(words) }
    }

    @Test func theTextPrintsTheHeaderThenPromptAndAnswerWithTheirSizes() {
        let task: JSONValue = [
            "id": "s1", "source": "bluetooth", "origin": "00:AA", "state": "failed", "started": "2026-12-04 16:00:00 UTC",
            "durationMs": 1500, "error": "held", "wholeText": true,
            "prompt": "two\nlines", "promptBytes": 9, "promptCut": false,
            "output": "cut here", "outputBytes": 100_000, "outputCut": true,
        ]
        let text = TasksCommand.wholeText(task)
        #expect(text.hasPrefix("task s1\nsource:   bluetooth (client 00:AA)\nstate:    failed\n"))
        #expect(text.contains("error:    held\n"))
        #expect(text.contains("--- prompt (9 bytes) ---\ntwo\nlines\n--- answer (100000 bytes; cut: the first 8 kept) ---\ncut here\n"))
        #expect(!text.contains("not kept"))
        let previews = TasksCommand.wholeText([
            "id": "s2", "source": "coordinator", "origin": "t", "state": "running", "wholeText": false, "prompt": "p",
        ])
        #expect(previews.contains("the whole text is not kept") && previews.hasSuffix("--- prompt ---\np\n"))
        #expect(TasksCommand.wholeText(.null).hasPrefix("task ?\n"))
    }

    @Test func controlCharactersAreShownNotSentToTheTerminal() {
        #expect(TasksCommand.terminalSafe("a\tb\nc") == "a\tb\nc")
        #expect(TasksCommand.terminalSafe("\u{1b}[2J\u{7}\r\u{9b}x\u{7f}") == "\\u{1b}[2J\\u{7}\\u{d}\\u{9b}x\\u{7f}")
        #expect(TasksCommand.terminalSafe("") == "")
        #expect(TasksCommand.terminalSafe("é👍🏽") == "é👍🏽")
    }
}

@Suite struct ModePauseArguments {
    func parse(_ words: [String]) throws(UsageError) -> ModeCommand { try parseCommand(words) }

    @Test func forGoesWithOffAndIsReadAsADuration() throws {
        let pause = try parse(["off", "--for", "1h30m"])
        #expect(pause.target == .off && pause.pauseMs == 5_400_000)
        #expect(try parse(["off", "--for=30m"]).pauseMs == 1_800_000)
        #expect(try parse(["off"]).pauseMs == nil)
    }

    @Test(arguments: [
        ["on", "--for", "1h"], ["bluetooth", "--for", "1h"], ["--for", "1h"], ["off", "--for", "soon"],
        ["off", "--for", ""], ["off", "--for"], ["off", "--for", "0s"], ["off", "--for", "99d"],
    ])
    func everythingElseIsAUsageError(words: [String]) {
        #expect(throws: UsageError.self) { try parse(words) }
    }

    @Test func describeShowsWhenThePauseEnds() {
        let mode: JSONValue = [
            "mode": "off", "since": "x", "reason": "paused", "resumesMode": "on", "resumesAt": "2026-12-04 18:00:00 UTC",
            "resumesAtMs": .int(wallClockMilliseconds() + 3_600_000),
        ]
        let text = ModeCommand.describe(mode)
        #expect(text.contains("paused: back to on at 2026-12-04 18:00:00 UTC (in ") && text.contains("cancels it"))
        #expect(!ModeCommand.describe(["mode": "on", "reason": "set"]).contains("paused"))
    }
}
