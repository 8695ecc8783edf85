#if canImport(Glibc)
import Glibc
#endif
import WorkerCore

/// How the CLI prints for scripts: `--json` output carries `schemaVersion` (docs/reference/json-output.md, Stability),
/// and with `--json` an error is one JSON object on stdout instead of text on stderr.
enum Output {
    /// The version of every `--json` document; it changes only when a key is removed or
    /// changes meaning (docs/reference/json-output.md, Stability).
    static let schemaVersion: Int64 = 1

    /// Whether the command line asked for `--json` (set once by `CLI.main`).
    @TaskLocal static var json = false

    /// `value` with `schemaVersion` first, when it is an object.
    static func versioned(_ value: JSONValue) -> JSONValue {
        guard case .object(let object) = value else { return value }
        var out = JSONObject([("schemaVersion", .int(schemaVersion))])
        for member in object.members where member.key != "schemaVersion" { out[member.key] = member.value }
        return .object(out)
    }

    /// Prints one `--json` document on its own line.
    static func printJSON(_ value: JSONValue) {
        print(versioned(value).serialized)
    }

    /// The `code` of a JSON error for an exit code (codes are matched by value).
    static func errorCode(_ exit: Int32) -> String {
        switch exit {
        case ExitCode.invalidConfig: return "invalid-config"
        case ExitCode.refused: return "refused"
        case ExitCode.notFound: return "not-found"
        case ExitCode.usage: return "usage"
        case ExitCode.daemonUnavailable: return "daemon-unavailable"
        case ExitCode.permission: return "permission-denied"
        default: return "failure"
        }
    }

    /// Reports a failure once: `{"schemaVersion": 1, "error": {"code", "message"}}` on stdout
    /// under `--json`, else `text` (default: the message) on stderr. Returns `exit`.
    @discardableResult
    static func fail(_ exit: Int32, _ message: String, text: String? = nil) -> Int32 {
        if json {
            printJSON(["error": ["code": .string(errorCode(exit)), "message": .string(message)]])
        } else {
            printErr(text ?? message)
        }
        return exit
    }
}
