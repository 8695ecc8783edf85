/// What the operator's tools decide from values alone: whether `status` says the selected
/// mode's work can proceed, which command a mistyped name meant, whether `coordinator.url`
/// is the example placeholder, and the config file with a new `coordinator.url`
/// (docs/reference/command-line.md, Exit codes; json-output.md, Stability).

/// `status`'s verdict for scripts: read from the `status --json` object, whose keys are stable.
public enum StatusVerdict: Sendable, Equatable {
    /// The selected mode's work can proceed (or mode off: there is nothing to proceed).
    case proceeds
    /// The daemon runs but the selected mode's work is held or failing, and why.
    case held(String)

    /// The verdict for one `status --json` object.
    public static func of(_ status: JSONValue) -> StatusVerdict {
        let mode = status["mode"]?["mode"]?.stringValue ?? "off"
        guard mode != "off" else { return .proceeds }
        if let runtime = status["mode"]?["runtime"], runtime["state"]?.stringValue != "running" {
            return .held("mode \(mode) is not running: \(runtime["reason"]?.stringValue ?? "no reason given")")
        }
        if let gate = status["power"]?["chargeGate"]?.stringValue, gate != "open" { return .held("charge gate \(gate)") }
        if let decision = status["power"]?["decision"], decision["allowed"]?.boolValue == false {
            return .held("new work held: \(decision["reason"]?.stringValue ?? "the power policy")")
        }
        switch mode {
        case "on":
            let coordinator = status["coordinator"]
            if let rejection = coordinator?["rejection"]?.stringValue { return .held("rejected by the coordinator: \(rejection)") }
            if coordinator?["registered"]?.boolValue != true {
                let last = coordinator?["lastError"]?.stringValue.map { " (last error: \($0))" } ?? ""
                return .held("not registered with the coordinator\(last)")
            }
            if let deferred = coordinator?["deferredReason"]?.stringValue { return .held("pulls deferred: \(deferred)") }
        case "bluetooth":
            let bluetooth = status["bluetooth"]
            if bluetooth?["advertising"]?.boolValue != true {
                let problem = bluetooth?["problem"]?.stringValue.map { ": \($0)" } ?? ""
                return .held("not advertising over Bluetooth\(problem)")
            }
        default:
            break
        }
        if let state = status["backend"]?["modelState"]?.stringValue, !["ready", "idle", "loading"].contains(state) {
            return .held("model backend \(state): \(status["backend"]?["detail"]?.stringValue ?? "")")
        }
        return .proceeds
    }
}

/// "Did you mean": the closest name by edit distance, when it is close enough to be a typo.
public enum Suggestion {
    /// The candidate nearest to `word`, if at most a third of its length (at least 1, at
    /// most 3) of single-character edits away; ties go to the earlier candidate.
    public static func closest(to word: String, among candidates: [String]) -> String? {
        let limit = min(3, max(1, word.count / 3))
        var best: (name: String, distance: Int)?
        for candidate in candidates {
            let distance = editDistance(word.lowercased(), candidate)
            if distance <= limit && distance < (best?.distance ?? Int.max) { best = (candidate, distance) }
        }
        return best?.name
    }

    /// Levenshtein distance over characters.
    public static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        guard !a.isEmpty else { return b.count }
        guard !b.isEmpty else { return a.count }
        var previous = Array(0...b.count)
        var current = previous
        for i in 1...a.count {
            current[0] = i
            for j in 1...b.count {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            swap(&previous, &current)
        }
        return previous[b.count]
    }
}

/// The example coordinator address the package ships (`https://coordinator.example`), which
/// cannot join anything: `mode on` refuses it and `config check` warns about it.
public enum CoordinatorPlaceholder {
    /// The hint every refusal carries.
    public static let hint = "run 'edgecoder-worker enroll --coordinator URL' or set coordinator.url in the config file"

    /// Why `url` cannot be joined because it is a placeholder (a host under the reserved
    /// `.example` name, RFC 2606), or nil.
    public static func problem(_ url: String?) -> String? {
        guard let url, var host = HTTPURL.host(of: url)?.lowercased() else { return nil }
        if host.hasSuffix(".") { host.removeLast() }
        guard host == "example" || host.hasSuffix(".example") else { return nil }
        return "coordinator.url is the example placeholder \(url): \(hint)"
    }
}

/// A config file with a new `coordinator.url`, edited in its text so that every other key,
/// their order and the file's layout stay as they were.
public enum ConfigEdit {
    public enum Failure: Error, Equatable, CustomStringConvertible {
        case notJSON(String)
        case notAnObject(String)

        public var description: String {
            switch self {
            case .notJSON(let why): return "the config file is not JSON: \(why)"
            case .notAnObject(let what): return "\(what) is not a JSON object, so coordinator.url cannot be set in it"
            }
        }
    }

    /// The file's bytes with `coordinator.url` set to `url`: its value replaced where the key
    /// is, else the key added first in `coordinator`, else `coordinator` added first in the file.
    public static func settingCoordinatorURL(_ bytes: [UInt8], to url: String) throws(Failure) -> [UInt8] {
        let original: JSONValue
        do { original = try JSON.parse(bytes) } catch { throw .notJSON("\(error)") }
        guard case .object(let top) = original else { throw .notAnObject("the file") }
        if let coordinator = top["coordinator"], coordinator.objectValue == nil { throw .notAnObject("coordinator") }
        let value = Array(JSONValue.string(url).serialized.utf8)
        var scanner = Scanner(bytes)
        let edited: [UInt8]
        if let coordinator = scanner.member("coordinator", inObjectAt: scanner.skipSpace(0)) {
            let object = scanner.skipSpace(coordinator.valueStart)
            if let member = scanner.member("url", inObjectAt: object) {
                edited = Array(bytes[..<member.valueStart]) + value + Array(bytes[member.valueEnd...])
            } else {
                edited = insert(Array("\"url\": ".utf8) + value, intoObjectAt: object, of: bytes, scanner: &scanner)
            }
        } else {
            let object: [UInt8] = Array("\"coordinator\": {\"url\": ".utf8) + value + Array("}".utf8)
            edited = insert(object, intoObjectAt: scanner.skipSpace(0), of: bytes, scanner: &scanner)
        }
        // The edit must change nothing but the one value.
        guard case .object(var expected) = original, let result = try? JSON.parse(edited) else { throw .notJSON("the edit did not parse") }
        var coordinator = expected["coordinator"]?.objectValue ?? JSONObject()
        coordinator["url"] = .string(url)
        expected["coordinator"] = .object(coordinator)
        guard sameMembers(result, .object(expected)) else { throw .notJSON("the edit changed more than coordinator.url") }
        return edited
    }

    private static func insert(_ member: [UInt8], intoObjectAt open: Int, of bytes: [UInt8], scanner: inout Scanner) -> [UInt8] {
        let after = scanner.skipSpace(open + 1)
        let empty = after < bytes.count && bytes[after] == UInt8(ascii: "}")
        if empty { return Array(bytes[...open]) + member + Array(bytes[(open + 1)...]) }
        // One member a line: the new one on a line of its own, indented like the next.
        let space = Array(bytes[(open + 1)..<after])
        if space.contains(0x0A) { return Array(bytes[...open]) + space + member + Array(",".utf8) + Array(bytes[(open + 1)...]) }
        return Array(bytes[...open]) + member + Array(", ".utf8) + Array(bytes[(open + 1)...])
    }

    /// Equal as JSON, ignoring the order of members (a new member is added first).
    private static func sameMembers(_ a: JSONValue, _ b: JSONValue) -> Bool {
        switch (a, b) {
        case (.object(let x), .object(let y)):
            return x.keys.sorted() == y.keys.sorted() && x.keys.allSatisfy { key in sameMembers(x[key] ?? .null, y[key] ?? .null) }
        case (.array(let x), .array(let y)):
            return x.count == y.count && zip(x, y).allSatisfy { sameMembers($0, $1) }
        default:
            return a == b
        }
    }

    /// Offsets in well-formed JSON text (the parser has already accepted it).
    struct Scanner {
        let bytes: [UInt8]
        init(_ bytes: [UInt8]) { self.bytes = bytes }

        func skipSpace(_ start: Int) -> Int {
            var i = start
            while i < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[i]) { i += 1 }
            return i
        }

        /// The end (one past) of the value starting at `start`.
        func valueEnd(_ start: Int) -> Int {
            var i = start
            if bytes[i] == UInt8(ascii: "\"") { return stringEnd(i) }
            if bytes[i] == UInt8(ascii: "{") || bytes[i] == UInt8(ascii: "[") {
                var depth = 0
                while i < bytes.count {
                    switch bytes[i] {
                    case UInt8(ascii: "\""): i = stringEnd(i); continue
                    case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                    case UInt8(ascii: "}"), UInt8(ascii: "]"):
                        depth -= 1
                        if depth == 0 { return i + 1 }
                    default: break
                    }
                    i += 1
                }
                return i
            }
            while i < bytes.count, !",}] \t\r\n".utf8.contains(bytes[i]) { i += 1 }
            return i
        }

        func stringEnd(_ start: Int) -> Int {
            var i = start + 1
            while i < bytes.count {
                if bytes[i] == UInt8(ascii: "\\") { i += 2; continue }
                if bytes[i] == UInt8(ascii: "\"") { return i + 1 }
                i += 1
            }
            return i
        }

        /// The last member named `key` of the object whose `{` is at `open` (the parser keeps the last of duplicates).
        mutating func member(_ key: String, inObjectAt open: Int) -> (valueStart: Int, valueEnd: Int)? {
            guard open < bytes.count, bytes[open] == UInt8(ascii: "{") else { return nil }
            var found: (Int, Int)?
            var i = skipSpace(open + 1)
            while i < bytes.count, bytes[i] == UInt8(ascii: "\"") {
                let keyEnd = stringEnd(i)
                let name = (try? JSON.parse(Array(bytes[i..<keyEnd])))?.stringValue
                let colon = skipSpace(keyEnd)
                let start = skipSpace(colon + 1)
                let end = valueEnd(start)
                if name == key { found = (start, end) }
                i = skipSpace(end)
                if i < bytes.count, bytes[i] == UInt8(ascii: ",") { i = skipSpace(i + 1) } else { break }
            }
            return found
        }
    }
}

/// `doctor`'s look at `/etc/machine-id`, from which the agent id is derived (an HMAC of
/// it, `ConfigKeys` agentId): missing, empty or not yet initialised, the id falls back to
/// random digits that change with every fresh state directory, and a cloned SD-card image
/// whose machine id was kept shares one agent id with every copy.
public enum MachineIDCheck {
    /// What is read of the file at most; a machine id is 33 bytes.
    public static let readLimit = 4096

    /// The problem with the file's content (nil bytes: the file could not be read), or nil.
    public static func problem(_ bytes: [UInt8]?, path: String = "/etc/machine-id") -> String? {
        let why = "the agent id is derived from it, so every copy of a cloned image shares one id at the coordinator"
        let fix =
            "run 'rm -f \(path) && systemd-machine-id-setup' (each clone, before the worker's first start), then 'edgecoder-worker identity reset' where the worker already ran"
        guard let bytes else { return "\(path) is missing: \(why) unless each host gets its own; \(fix)" }
        var text = String(decoding: bytes, as: UTF8.self)
        while text.last?.isWhitespace == true { text.removeLast() }
        if text.isEmpty { return "\(path) is empty: systemd fills it at the next boot, so the agent id may change then; \(why); \(fix)" }
        if text == "uninitialized" { return "\(path) is 'uninitialized': the first boot has not finished; \(fix)" }
        let isID = text.utf8.count == 32 && text.utf8.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) }
        return isID ? nil : "\(path) is not a machine id (32 lowercase hex digits): '\(printable(text, limit: 40))'; \(fix)"
    }
}

/// A state directory that came from another machine keeps that machine's identity: a
/// cloned image whose `/etc/machine-id` was renewed (as `doctor` advises) but whose state
/// directory was not reset. A derived agent id ends in 12 hex digits of the machine's
/// app-specific id, so a suffix that is not this machine's says so.
public enum CopiedIdentityCheck {
    /// The problem, or nil. `configured`: the agent id is the config's (the operator's
    /// choice, never judged); `machineSuffix`: the first 12 hex digits of this machine's
    /// app-specific id (nil when it cannot be read: no judgement).
    public static func problem(agentID: String, configured: Bool, machineSuffix: String?) -> String? {
        guard !configured, let machineSuffix, machineSuffix.utf8.count == 12 else { return nil }
        guard let dash = agentID.lastIndex(of: "-") else { return nil }
        let suffix = agentID[agentID.index(after: dash)...]
        let isDerived = suffix.utf8.count == 12 && suffix.utf8.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) }
        guard isDerived, suffix != machineSuffix else { return nil }
        return
            "the agent id \(agentID) was not derived from this machine's id (\(machineSuffix)…): the state directory was copied from another machine (a cloned image) or made before /etc/machine-id was set, and a coordinator takes every copy for one worker; stop the daemon, run 'edgecoder-worker identity reset', and start it again"
    }
}

/// `identity reset`'s decisions: which state files make the identity, and when the reset
/// waits for the operator.
public enum IdentityReset {
    /// The agent id and the mesh token (StateStore's WorkerStateFiles names).
    public static let files = ["agent-id", "mesh-token"]

    /// Why the reset is refused, from the running daemon's `status --json` (nil: no daemon
    /// answered), or nil. In mode on (running or held) a coordinator knows the worker by
    /// this id: the operator stops it first, or insists.
    public static func refusal(status: JSONValue?, force: Bool) -> String? {
        guard !force, let status, status["mode"]?["mode"]?.stringValue == "on" else { return nil }
        return "mode on is running with this agent id at the coordinator: stop the daemon first (systemctl stop edgecoder-worker), or pass --force"
    }
}
