import Testing
@testable import WorkerCLI

@Suite struct ArgumentsReading {
    @Test func readsFlagsOptionsInBothFormsAndPositionals() throws {
        var arguments = Arguments(["check", "--json", "--config", "/etc/a.json", "--timeout-ms=250"])
        #expect(try arguments.option("--config") == "/etc/a.json")
        #expect(try arguments.number("--timeout-ms", in: 1...1_000) == 250)
        let json = arguments.flag("--json")
        #expect(json)
        let verbose = arguments.flag("--verbose")
        #expect(!verbose)
        let positionals = arguments.positionals()
        #expect(positionals == ["check"])
        try arguments.finish()
    }

    @Test func aFlagIsNeverTakenAsAnOptionsValue() {
        var arguments = Arguments(["check", "--config", "--json"])
        #expect(throws: UsageError.self) { try arguments.option("--config") }
        do {
            _ = try arguments.option("--config")
        } catch {
            #expect(error.message == "--config needs a value")
        }
    }

    @Test func aValueThatStartsWithADashIsGivenWithEquals() throws {
        var arguments = Arguments(["--reason=-x-"])
        #expect(try arguments.option("--reason") == "-x-")
        try arguments.finish()
    }

    @Test func aLoneDashIsAValue() throws {
        var arguments = Arguments(["--config", "-"])
        #expect(try arguments.option("--config") == "-")
    }

    @Test func everythingAfterDoubleDashIsPositional() throws {
        var arguments = Arguments(["set", "--json", "--", "--config", "x", "--json", "-5", "--"])
        #expect(try arguments.option("--config") == nil, "an option after -- is not read")
        let json = arguments.flag("--json")
        #expect(json)
        let jsonAgain = arguments.flag("--json")
        #expect(!jsonAgain, "the --json after -- is not a flag")
        let positionals = arguments.positionals()
        #expect(positionals == ["set", "--config", "x", "--json", "-5", "--"])
        try arguments.finish()
    }

    @Test func anOptionCannotTakeItsValueFromAcrossDoubleDash() {
        var arguments = Arguments(["--config", "--", "x"])
        #expect(throws: UsageError.self) { try arguments.option("--config") }
    }

    @Test func aTrailingDoubleDashAloneIsAccepted() throws {
        var arguments = Arguments(["--json", "--"])
        let json = arguments.flag("--json")
        #expect(json)
        try arguments.finish()
    }

    @Test func argumentsAfterDoubleDashThatNoCommandReadAreUnexpected() {
        var arguments = Arguments(["--", "--json"])
        let json = arguments.flag("--json")
        #expect(!json)
        do {
            try arguments.finish()
            Issue.record("finish accepted an argument nobody read")
        } catch {
            #expect(error.message == "unexpected argument --json")
        }
    }

    @Test func unknownOptionsAndExtraPositionalsAreUsageErrors() {
        var unknown = Arguments(["--jsn"])
        let json = unknown.flag("--json")
        #expect(!json)
        #expect(throws: UsageError.self) { try unknown.finish() }
        // A command that takes no positionals never reads them: finish names the first.
        let extra = Arguments(["check", "again"])
        do {
            try extra.finish()
            Issue.record("finish accepted a positional nobody read")
        } catch {
            #expect(error.message == "unexpected argument check")
        }
    }

    @Test func anEmptyOrOutOfRangeValueIsAUsageError() {
        var empty = Arguments(["--config="])
        #expect(throws: UsageError.self) { try empty.option("--config") }
        var range = Arguments(["--timeout-ms", "0"])
        #expect(throws: UsageError.self) { try range.number("--timeout-ms", in: 1...10) }
    }
}

@Suite struct CommandLineUsage {
    @Test(arguments: [
        ["config", "check", "--config", "--json"],
        ["config", "check", "--config"],
        ["status", "--", "--json"],
        ["no-such-command"],
    ])
    func isAUsageErrorWithExit64(_ argv: [String]) async {
        #expect(await CLI.main(["edgecoder-worker"] + argv) == ExitCode.usage)
    }

    @Test func aDoubleDashTurnsHelpIntoAnArgument() async {
        #expect(await CLI.main(["edgecoder-worker", "version", "--", "--help"]) == ExitCode.usage)
        #expect(await CLI.main(["edgecoder-worker", "version", "--help"]) == ExitCode.ok)
    }
}
