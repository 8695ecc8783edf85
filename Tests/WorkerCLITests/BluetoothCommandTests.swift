import Testing
@testable import WorkerCLI

/// `edgecoder-worker bluetooth pair`'s arguments: every mistake is a usage error (exit 64)
/// before anything touches the bus.
@Suite struct BluetoothCommandArguments {
    static func parse(_ words: [String]) throws(UsageError) -> BluetoothCommand {
        var arguments = Arguments(words)
        let command = try BluetoothCommand(&arguments)
        try arguments.finish()
        return command
    }

    @Test func pairAloneTakesTheDefaults() throws {
        let c = try Self.parse(["pair"])
        #expect(c.timeoutSec == 120)
        #expect(c.adapter == nil)
    }

    @Test func pairWithTimeoutAndAdapter() throws {
        let c = try Self.parse(["pair", "--timeout", "30", "--adapter=hci1"])
        #expect(c.timeoutSec == 30)
        #expect(c.adapter == "hci1")
    }

    @Test(arguments: [
        [], ["unpair"], ["pair", "extra"], ["pair", "--timeout", "9"], ["pair", "--timeout", "3601"],
        ["pair", "--timeout", "abc"], ["pair", "--timeout", ""], ["pair", "--timeout=-5"], ["pair", "--timeout"],
        ["pair", "--adapter", "hci0;rm -rf /"], ["pair", "--adapter", ""], ["pair", "--adapter", "../../hci0"],
        ["pair", "--adapter", "hci"], ["pair", "--verbose"], ["--", "pair", "--timeout", "30"], ["pair\u{0}"],
        [String(repeating: "p", count: 10_000)],
    ])
    func mistakesAreUsageErrors(words: [String]) {
        #expect(throws: UsageError.self) { _ = try Self.parse(words) }
    }
}
