import WorkerCore

/// A usage mistake: printed once with the command's usage, exit 64 (EX_USAGE).
struct UsageError: Error {
    var message: String
    init(_ message: String) { self.message = message }
}

/// Exit codes, documented in docs/reference/command-line.md (Exit codes).
enum ExitCode {
    static let ok: Int32 = 0
    static let failure: Int32 = 1
    static let invalidConfig: Int32 = 2
    static let refused: Int32 = 3
    /// What the command names does not exist (`tasks show` with an unknown id).
    static let notFound: Int32 = 4
    static let usage: Int32 = 64
    static let daemonUnavailable: Int32 = 69
    static let permission: Int32 = 77
}

/// A minimal argument reader: flags (`--json`), options with values (`--config F` or
/// `--config=F`) and positionals, with every unknown option an error. After `--` every
/// argument is positional, so a value that starts with `-` can still be given.
struct Arguments {
    private var items: [String]
    private var consumed: [Bool]
    /// Where options end: the index of `--`, or the end.
    private let optionsEnd: Int

    init(_ items: [String]) {
        self.items = items
        self.consumed = Array(repeating: false, count: items.count)
        self.optionsEnd = items.firstIndex(of: "--") ?? items.count
    }

    /// An argument that names an option or flag (`-` alone is a value: stdin, by custom).
    private static func isOption(_ item: String) -> Bool { item.hasPrefix("-") && item.count > 1 }

    mutating func flag(_ name: String) -> Bool {
        var found = false
        for i in 0..<optionsEnd where !consumed[i] && items[i] == name {
            consumed[i] = true
            found = true
        }
        return found
    }

    /// `--name value` or `--name=value`. A following flag is not a value (`--config --json`
    /// is a usage error); a value that starts with `-` is given as `--name=value`.
    mutating func option(_ name: String) throws(UsageError) -> String? {
        var value: String?
        var i = 0
        while i < optionsEnd {
            defer { i += 1 }
            guard !consumed[i] else { continue }
            if items[i] == name {
                guard i + 1 < optionsEnd, !consumed[i + 1], !Arguments.isOption(items[i + 1]) else {
                    throw UsageError("\(name) needs a value")
                }
                consumed[i] = true
                consumed[i + 1] = true
                value = items[i + 1]
                i += 1
            } else if items[i].hasPrefix(name + "=") {
                consumed[i] = true
                value = String(items[i].dropFirst(name.count + 1))
            }
        }
        if let value, value.isEmpty { throw UsageError("\(name) needs a non-empty value") }
        return value
    }

    /// Every value of a repeatable option (`--name value` or `--name=value`), in order.
    mutating func options(_ name: String) throws(UsageError) -> [String] {
        var values: [String] = []
        while let value = try firstOption(name) { values.append(value) }
        return values
    }

    private mutating func firstOption(_ name: String) throws(UsageError) -> String? {
        for i in 0..<optionsEnd where !consumed[i] {
            if items[i] == name {
                guard i + 1 < optionsEnd, !consumed[i + 1], !Arguments.isOption(items[i + 1]) else { throw UsageError("\(name) needs a value") }
                consumed[i] = true
                consumed[i + 1] = true
                guard !items[i + 1].isEmpty else { throw UsageError("\(name) needs a non-empty value") }
                return items[i + 1]
            } else if items[i].hasPrefix(name + "=") {
                consumed[i] = true
                let value = String(items[i].dropFirst(name.count + 1))
                guard !value.isEmpty else { throw UsageError("\(name) needs a non-empty value") }
                return value
            }
        }
        return nil
    }

    /// An option whose value must be a whole number in `range`; nil when absent.
    mutating func number(_ name: String, in range: ClosedRange<Int>) throws(UsageError) -> Int? {
        guard let text = try option(name) else { return nil }
        guard let n = Int(text), range.contains(n) else {
            throw UsageError("\(name) must be a number in \(range.lowerBound)…\(range.upperBound), got '\(printable(text))'")
        }
        return n
    }

    /// The arguments left once every option has been read: call it last. Everything
    /// after `--` is positional, dashes included.
    mutating func positionals() -> [String] {
        var out: [String] = []
        for (i, item) in items.enumerated() where !consumed[i] {
            if i == optionsEnd { consumed[i] = true; continue }
            if i < optionsEnd && Arguments.isOption(item) { continue }
            consumed[i] = true
            out.append(item)
        }
        return out
    }

    /// Fails on anything not consumed: unknown options, extra positionals.
    func finish() throws(UsageError) {
        for (i, item) in items.enumerated() where !consumed[i] && i != optionsEnd {
            if i < optionsEnd && item.hasPrefix("-") { throw UsageError("unknown option \(item)") }
            throw UsageError("unexpected argument \(item)")
        }
    }
}
