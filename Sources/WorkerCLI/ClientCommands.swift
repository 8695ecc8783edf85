#if canImport(Glibc)
import Glibc
#endif
import Posix
import WorkerCore

/// A connection to the daemon's control socket, with errors that say what to do.
struct ControlClient: ~Copyable {
    let socketPath: String
    private let client: UnixClient
    private var buffer: [UInt8] = []

    enum Failure: Error {
        case unavailable(String)
        case daemon(ControlError)
    }

    init(runtimeDirectory: String) throws(Failure) {
        socketPath = runtimeDirectory + "/control.sock"
        do {
            client = try UnixClient.connect(path: socketPath)
        } catch {
            switch error.errno {
            case ENOENT, ECONNREFUSED:
                throw .unavailable(
                    "the daemon is not running (no control socket at \(socketPath)). Start it with 'systemctl start edgecoder-worker' or 'edgecoder-worker run', or pass --runtime-dir."
                )
            case EACCES:
                throw .unavailable("permission denied on \(socketPath): reading needs root, the daemon's user or the group edgecoder")
            default:
                throw .unavailable("cannot reach the daemon at \(socketPath): \(error.errnoDescription)")
            }
        }
    }

    mutating func send(_ request: ControlRequest) throws(Failure) {
        do { try client.send(Array((request.json.serialized + "\n").utf8)) } catch {
            throw .unavailable("cannot send to the daemon at \(socketPath): \(error.errnoDescription)")
        }
    }

    /// The next JSON line from the daemon; nil when it closed the connection.
    mutating func receive() throws(Failure) -> JSONValue? {
        let line: [UInt8]?
        do { line = try client.readLine(buffer: &buffer, limit: 16 * 1_048_576) } catch {
            throw .unavailable("cannot read from the daemon at \(socketPath): \(error.errnoDescription)")
        }
        guard let line else { return nil }
        do { return try JSON.parse(line) } catch {
            throw .unavailable("the daemon sent an answer that is not JSON (\(error)); is \(socketPath) really edgecoder-worker's socket?")
        }
    }

    /// Sends one request and returns its `result`, or throws the daemon's error.
    mutating func call(_ request: ControlRequest) throws(Failure) -> JSONValue {
        try send(request)
        guard let answer = try receive() else {
            throw .unavailable("the daemon closed the connection without answering")
        }
        return try ControlClient.result(of: answer)
    }

    static func result(of answer: JSONValue) throws(Failure) -> JSONValue {
        if answer["ok"]?.boolValue == true { return answer["result"] ?? .null }
        let code = answer["error"]?["code"]?.stringValue.flatMap(ControlError.Code.init(rawValue:)) ?? .internalError
        let message = answer["error"]?["message"]?.stringValue ?? "the daemon refused without a reason"
        throw .daemon(ControlError(code, message))
    }
}

/// Runs a client command body and turns failures into a message and an exit code.
func withDaemon(_ arguments: String, _ body: (inout ControlClient) throws(ControlClient.Failure) -> Int32) -> Int32 {
    do {
        var client = try ControlClient(runtimeDirectory: arguments)
        return try body(&client)
    } catch {
        switch error {
        case .unavailable(let message):
            return Output.fail(ExitCode.daemonUnavailable, message, text: "edgecoder-worker: \(message)")
        case .daemon(let failure):
            let exit: Int32
            switch failure.code {
            case .forbidden: exit = ExitCode.permission
            case .refused: exit = ExitCode.refused
            case .notFound: exit = ExitCode.notFound
            default: exit = ExitCode.failure
            }
            return Output.fail(exit, failure.message, text: failure.code == .refused ? failure.message : "edgecoder-worker: \(failure.message)")
        }
    }
}

// MARK: - mode

struct ModeCommand: Command {
    static let name = "mode"
    static let summary = "show or set the compute mode: off, on, bluetooth"
    static let usage = """
        Usage: edgecoder-worker mode [off|on|bluetooth] [--for DURATION] [--json] [--runtime-dir D]

        Without an argument, prints the mode's name alone on the first line, then why
        and since when, and the state of its runtime. With one, sets it (root or the
        daemon's user only). A refused change (the charge gate) prints the reason and
        exits 3; the mode stays as it was.

          --for DURATION   with off only: a pause (30m, 2h, 1h30m; 1s to 30d). The mode
                           returns to the one before at the deadline, across restarts;
                           status shows when (resumesAt). A later 'mode X' cancels it.
        """
    let target: Mode?
    /// `--for`: the pause's length in milliseconds.
    let pauseMs: Int64?
    let json: Bool
    let runtimeDirectory: String

    init(_ arguments: inout Arguments) throws(UsageError) {
        json = arguments.flag("--json")
        runtimeDirectory = try WorkerCLI.runtimeDirectory(&arguments)
        if let text = try arguments.option("--for") {
            switch PauseDuration.parse(text) {
            case .success(let ms): pauseMs = ms
            case .failure(let error): throw UsageError("--for: \(error.message)")
            }
        } else {
            pauseMs = nil
        }
        let positionals = arguments.positionals()
        guard positionals.count <= 1 else { throw UsageError("expected at most one mode, got \(positionals.count) arguments") }
        if let name = positionals.first {
            guard let mode = Mode(rawValue: name) else { throw UsageError("unknown mode '\(printable(name))'; the modes are off, on and bluetooth") }
            target = mode
        } else {
            target = nil
        }
        if pauseMs != nil && target != .off { throw UsageError("--for goes with 'mode off' (a pause that returns to the mode before)") }
    }

    func run() async -> Int32 {
        withDaemon(runtimeDirectory) { (client) throws(ControlClient.Failure) -> Int32 in
            let request: ControlRequest = pauseMs.map { .pause(forMs: $0) } ?? target.map { .setMode($0) } ?? .getMode
            let result = try client.call(request)
            if json {
                Output.printJSON(result)
                return ExitCode.ok
            }
            print(result["mode"]?.stringValue ?? "unknown")
            if target != nil, let changed = result["changed"]?.boolValue {
                print(changed ? "changed from \(result["previous"]?.stringValue ?? "?")" : "unchanged (already selected)")
            }
            print(ModeCommand.describe(result))
            return ExitCode.ok
        }
    }

    static func describe(_ mode: JSONValue) -> String {
        var text = "selected since \(mode["since"]?.stringValue ?? "?")"
        if let since = mode["sinceMs"]?.intValue { text += " (\(formatDuration(milliseconds: wallClockMilliseconds() - since)) ago)" }
        text += ": \(mode["reason"]?.stringValue ?? "")"
        if let resumes = mode["resumesMode"]?.stringValue {
            text += "\npaused: back to \(resumes) at \(mode["resumesAt"]?.stringValue ?? "?")"
            if let at = mode["resumesAtMs"]?.intValue { text += " (in \(formatDuration(milliseconds: max(0, at - wallClockMilliseconds()))))" }
            text += "; 'edgecoder-worker mode X' cancels it"
        }
        if let runtime = mode["runtime"] {
            text += "\nruntime: \(runtime["state"]?.stringValue ?? "?") — \(runtime["reason"]?.stringValue ?? "")"
        }
        return text
    }
}

// MARK: - status

struct StatusCommand: Command {
    static let name = "status"
    static let summary = "show the daemon's state"
    static let usage = """
        Usage: edgecoder-worker status [--json] [--runtime-dir D]

        Shows the mode and why, the state of its runtime, the daemon, and any state
        file that had to be moved aside. --json prints one object (keys in docs/reference/json-output.md).

        Exit codes for scripts: 0 the selected mode's work can proceed (or mode off),
        3 the daemon runs but the mode's work is held or failing (not registered,
        rejected, held by the power policy or the charge gate, not advertising in mode
        bluetooth, model backend down; the reason on stderr), 69 no daemon answers.
        """
    let json: Bool
    let runtimeDirectory: String
    init(_ arguments: inout Arguments) throws(UsageError) {
        json = arguments.flag("--json")
        runtimeDirectory = try WorkerCLI.runtimeDirectory(&arguments)
    }

    func run() async -> Int32 {
        withDaemon(runtimeDirectory) { (client) throws(ControlClient.Failure) -> Int32 in
            let status = try client.call(.status)
            let exit: Int32
            switch StatusVerdict.of(status) {
            case .proceeds:
                exit = ExitCode.ok
            case .held(let reason):
                // The reason on stderr under --json too: stdout stays the one status object.
                printErr("edgecoder-worker: \(reason)")
                exit = ExitCode.refused
            }
            if json {
                Output.printJSON(status)
                return exit
            }
            var lines: [String] = []
            lines.append("edgecoder-worker: \(status["summary"]?.stringValue ?? "")")
            lines.append("agent:    \(status["agentId"]?.stringValue ?? "?")")
            if let mode = status["mode"] {
                lines.append("mode:     \(mode["mode"]?.stringValue ?? "?")\(mode["downgraded"]?.boolValue == true ? " (downgraded)" : "")")
                lines.append("          " + ModeCommand.describe(mode).split(separator: "\n").joined(separator: "\n          "))
            }
            if let network = status["network"] {
                var line = "network:  \(network["state"]?.stringValue ?? "?")"
                if let interface = network["interface"]?.stringValue { line += " (\(interface))" }
                if let since = network["since"]?.stringValue { line += " since \(since)" }
                lines.append(line + ": \(network["reason"]?.stringValue ?? "")")
                if let hook = network["lastHook"] {
                    lines.append(
                        "          last hook \(hook["name"]?.stringValue ?? "?") at \(hook["time"]?.stringValue ?? "?"): \(hook["outcome"]?.stringValue ?? "?")"
                    )
                }
            }
            if let coordinator = status["coordinator"], coordinator["url"] != .null || coordinator["active"] == true {
                var line = "coordinator: \(coordinator["url"]?.stringValue ?? "not configured")"
                if coordinator["active"] == true {
                    line += coordinator["registered"] == true ? ", registered" : ", not registered"
                    if let at = coordinator["lastHeartbeat"]?.stringValue {
                        line += ", last heartbeat \(at) (\(coordinator["lastHeartbeatLatencyMs"]?.intValue ?? 0) ms)"
                    }
                } else {
                    line += " (inactive)"
                }
                lines.append(line)
                let failures = coordinator["consecutiveFailures"]?.intValue ?? 0
                let heartbeatFailures = coordinator["heartbeatFailures"]?.intValue ?? 0
                if failures > 0 || heartbeatFailures > 0 {
                    lines.append(
                        "          \(failures) consecutive failures (backoff \(coordinator["backoffMs"]?.intValue ?? 0) ms), \(heartbeatFailures) failed heartbeats; last: \(coordinator["lastError"]?.stringValue ?? "")"
                    )
                }
                if let rejection = coordinator["rejection"]?.stringValue {
                    lines.append("          REJECTED by the coordinator: \(rejection); retry at \(coordinator["retryAt"]?.stringValue ?? "?")")
                }
                if let deferred = coordinator["deferredReason"]?.stringValue { lines.append("          pulls deferred: \(deferred)") }
                if let done = coordinator["subtasksDone"]?.intValue {
                    lines.append(
                        "          subtasks done \(done), failed \(coordinator["subtasksFailed"]?.intValue ?? 0), outbox \(coordinator["outboxDepth"]?.intValue ?? 0)"
                            + ((coordinator["running"]?.stringValue).map { ", running \($0)" } ?? ""))
                }
            }
            if let bluetooth = status["bluetooth"], bluetooth["active"] == true || bluetooth["state"]?.stringValue != "inactive" {
                var line = "bluetooth: \(bluetooth["state"]?.stringValue ?? "?")"
                if let adapter = bluetooth["adapter"]?.stringValue {
                    line += " on \(adapter)" + ((bluetooth["address"]?.stringValue).map { " (\($0))" } ?? "")
                }
                line += bluetooth["advertising"] == true ? ", advertising as \(bluetooth["localName"]?.stringValue ?? "?")" : ", not advertising"
                lines.append(line)
                if let problem = bluetooth["problem"]?.stringValue { lines.append("          problem: \(problem)") }
                let clients = (bluetooth["clients"]?.arrayValue ?? []).map { client in
                    (client["address"]?.stringValue ?? "?") + ((client["mtu"]?.intValue).map { " (MTU \($0))" } ?? "")
                }
                lines.append(
                    "          clients: \(clients.isEmpty ? "none" : clients.joined(separator: ", ")) of at most \(bluetooth["maxClients"]?.intValue ?? 1); refused \(bluetooth["clientsRefused"]?.intValue ?? 0)"
                )
                lines.append(
                    "          not allowed \(bluetooth["clientsNotAllowed"]?.intValue ?? 0), evicted idle \(bluetooth["clientsEvicted"]?.intValue ?? 0), cooled down \(bluetooth["clientsCooledDown"]?.intValue ?? 0), rejections dropped \(bluetooth["rejectionsDropped"]?.intValue ?? 0)"
                )
                if let pacing = bluetooth["pacing"]?.stringValue {
                    lines.append(
                        "          notifications paced by \(pacing); bluetoothd's ATT bearers: "
                            + ((bluetooth["attBearers"]?.intValue).map { "\($0)" + ($0 > 1 ? " (EATT: see doctor)" : "") } ?? "unknown"))
                }
                if let answerer = bluetooth["pairingAgent"]?.stringValue {
                    let registered = bluetooth["pairingAgentRegistered"] == true ? "registered, " : ""
                    lines.append(
                        "          pairings answered by the \(answerer) (\(registered)accepted \(bluetooth["pairingsAccepted"]?.intValue ?? 0), refused \(bluetooth["pairingsRefused"]?.intValue ?? 0), unused bonds removed \(bluetooth["agentBondsRemoved"]?.intValue ?? 0)): \(bluetooth["pairingAgentReason"]?.stringValue ?? "")"
                    )
                }
                lines.append(
                    "          requests served \(bluetooth["requestsServed"]?.intValue ?? 0), failed \(bluetooth["requestsFailed"]?.intValue ?? 0), rejected as bad input \(bluetooth["requestsRejected"]?.intValue ?? 0), queued \(bluetooth["queued"]?.intValue ?? 0)"
                )
            }
            if let backend = status["backend"] {
                lines.append(
                    "backend:  \(backend["kind"]?.stringValue ?? "?") \(backend["url"]?.stringValue ?? "?") model \(backend["model"]?.stringValue ?? "?"): \(backend["modelState"]?.stringValue ?? "?") — \(backend["detail"]?.stringValue ?? "")"
                )
                if let from = backend["configuredModel"]?.stringValue {
                    lines.append(
                        "          model switched by the coordinator at \(backend["switchedAt"]?.stringValue ?? "?") (backend.model is \(from))")
                }
                if let change = backend["modelSwitch"], case .object = change {
                    let pct = change["progressPct"]?.doubleValue.map { " \($0) %" } ?? ""
                    lines.append(
                        "          model switch to \(change["model"]?.stringValue ?? "?"): \(change["phase"]?.stringValue ?? "?")\(pct) — \(change["message"]?.stringValue ?? "")"
                    )
                }
            }
            if let power = status["power"] {
                if let decision = power["decision"] {
                    var line =
                        "power:    new work \(decision["allowed"]?.boolValue == true ? "allowed" : "HELD: \(decision["reason"]?.stringValue ?? "?")")"
                    if let waiting = decision["waitingFor"]?.stringValue { line += " (waiting for \(waiting))" }
                    lines.append(line)
                }
                if power["chargeGate"]?.stringValue != "open", let gate = power["chargeGate"]?.stringValue {
                    lines.append("          charge gate \(gate)")
                }
                if let telemetry = power["telemetry"], case .object = telemetry {
                    let age = power["ageMs"]?.intValue.map { " (read \(formatDuration(milliseconds: $0)) ago)" } ?? ""
                    let parts = (telemetry.objectValue?.members ?? []).filter { !["updatedAtMs", "onACPower", "batteryLevelPct"].contains($0.key) }
                        .map { "\($0.key) \($0.value.stringValue ?? $0.value.serialized)" }
                    lines.append("          " + parts.joined(separator: ", ") + age)
                }
                if let held = power["held"]?.objectValue, held.members.contains(where: { ($0.value.intValue ?? 0) > 0 }) {
                    lines.append("          held or refused: " + held.members.map { "\($0.key) \($0.value.serialized)" }.joined(separator: ", "))
                }
            }
            if let notice = status["mode"]?["networkRestoredNotice"]?.stringValue {
                lines.append("NOTICE:   \(notice) (restored at \(status["mode"]?["networkRestoredAt"]?.stringValue ?? "?"))")
            }
            if let daemon = status["daemon"] {
                lines.append(
                    "daemon:   version \(daemon["version"]?.stringValue ?? "?"), pid \(daemon["pid"]?.intValue ?? 0), up \(formatDuration(milliseconds: daemon["uptimeMs"]?.intValue ?? 0))"
                )
                lines.append("          config \(daemon["config"]?.stringValue ?? "?"), state \(daemon["stateDirectory"]?.stringValue ?? "?")")
                if let problem = daemon["persistenceProblem"]?.stringValue { lines.append("          PROBLEM: \(problem)") }
                if let reload = daemon["configReload"], case .object = reload {
                    let outcome = reload["outcome"]?.stringValue ?? "?"
                    let problems = (reload["problems"]?.arrayValue ?? []).compactMap(\.stringValue)
                    let restart = (reload["needsRestart"]?.arrayValue ?? []).compactMap(\.stringValue)
                    lines.append(
                        "          last reload at \(reload["at"]?.stringValue ?? "?"): \(outcome == "refused" ? "REFUSED, the running config is kept: " + problems.joined(separator: "; ") : outcome)"
                    )
                    if !restart.isEmpty { lines.append("          needs a restart to apply: \(restart.joined(separator: ", "))") }
                }
            }
            for file in status["recoveredStateFiles"]?.arrayValue ?? [] {
                lines.append(
                    "recovered: \(file["file"]?.stringValue ?? "?") at \(file["time"]?.stringValue ?? "?"): \(file["problem"]?.stringValue ?? "")"
                        + ((file["movedTo"]?.stringValue).map { $0.isEmpty ? "" : "; kept as \($0)" } ?? ""))
            }
            if let events = status["events"] { lines.append("events:   \(events["count"]?.intValue ?? 0) kept (edgecoder-worker events)") }
            print(lines.joined(separator: "\n"))
            return exit
        }
    }
}

// MARK: - events

struct EventsCommand: Command {
    static let name = "events"
    static let summary = "show the event log (mode changes, refusals, downgrades, …)"
    static let usage = """
        Usage: edgecoder-worker events [--follow] [--json] [--limit N] [--runtime-dir D]

        Prints the event log, oldest first (the newest 1000 are kept). --follow keeps
        printing new events until interrupted. --json prints {"events": [...]}, or with
        --follow one event object per line.
        """
    let follow: Bool
    let json: Bool
    let limit: Int?
    let runtimeDirectory: String

    init(_ arguments: inout Arguments) throws(UsageError) {
        follow = arguments.flag("--follow") || arguments.flag("-f")
        json = arguments.flag("--json")
        limit = try arguments.number("--limit", in: 1...100_000)
        runtimeDirectory = try WorkerCLI.runtimeDirectory(&arguments)
    }

    func run() async -> Int32 {
        withDaemon(runtimeDirectory) { (client) throws(ControlClient.Failure) -> Int32 in
            let result = try client.call(.events(follow: follow, limit: limit))
            let events = result["events"]?.arrayValue ?? []
            if json && !follow {
                Output.printJSON(.object(JSONObject([("events", .array(events))])))
                return ExitCode.ok
            }
            for event in events { show(event) }
            guard follow else { return ExitCode.ok }
            while let line = try client.receive() {
                if let event = line["event"] { show(event) }
            }
            return ExitCode.ok
        }
    }

    func show(_ event: JSONValue) {
        if json {
            Output.printJSON(event)
        } else if let parsed = WorkerEvent.from(json: event) {
            print(parsed.line)
        }
        fflush(nil)
    }
}

// MARK: - tasks

struct TasksCommand: Command {
    static let name = "tasks"
    static let summary = "recent tasks, coordinator and Bluetooth; tasks show ID prints one whole"
    static let usage = """
        Usage: edgecoder-worker tasks [--json] [--limit N] [--runtime-dir D]
               edgecoder-worker tasks show ID [--json] [--runtime-dir D]

        The newest tasks (50 per source are kept across restarts), oldest first: id,
        source, the coordinator's task id or the Bluetooth client, state, start, duration,
        and the prompt's beginning. --json prints {"tasks": [...]}.

        show ID prints one of them whole: its prompt and its answer, each kept up to
        64 KiB (a longer one is cut, with a note of its size). --json prints
        {"task": {...}} with promptBytes, promptCut, outputBytes and outputCut. An id the
        daemon does not keep exits 4.
        """
    let json: Bool
    let limit: Int?
    /// `show ID`: the task to print whole.
    let showID: String?
    let runtimeDirectory: String

    init(_ arguments: inout Arguments) throws(UsageError) {
        json = arguments.flag("--json")
        limit = try arguments.number("--limit", in: 1...1_000)
        runtimeDirectory = try WorkerCLI.runtimeDirectory(&arguments)
        switch arguments.positionals() {
        case []: showID = nil
        case ["show"]: throw UsageError("tasks show needs a task id ('edgecoder-worker tasks' lists them)")
        case let words where words.count == 2 && words[0] == "show":
            guard words[1].utf8.count <= ControlRequest.maxTaskIDBytes else {
                throw UsageError("a task id is at most \(ControlRequest.maxTaskIDBytes) bytes")
            }
            guard limit == nil else { throw UsageError("--limit lists tasks; tasks show prints one") }
            showID = words[1]
        case let words: throw UsageError("unexpected argument '\(printable(words.joined(separator: " ")))'; did you mean 'tasks show ID'?")
        }
    }

    func run() async -> Int32 {
        withDaemon(runtimeDirectory) { (client) throws(ControlClient.Failure) -> Int32 in
            if let showID {
                let result = try client.call(.task(id: showID))
                if json {
                    Output.printJSON(result)
                } else {
                    print(TasksCommand.wholeText(result["task"] ?? .null), terminator: "")
                }
                return ExitCode.ok
            }
            let result = try client.call(.tasks(limit: limit))
            if json {
                Output.printJSON(result)
                return ExitCode.ok
            }
            let tasks = result["tasks"]?.arrayValue ?? []
            if tasks.isEmpty { print("no tasks yet") }
            for task in tasks {
                let duration = task["durationMs"]?.intValue.map { formatDuration(milliseconds: $0) } ?? "-"
                var line =
                    "\(task["started"]?.stringValue ?? "?")  \(task["source"]?.stringValue ?? "?")  \(task["state"]?.stringValue ?? "?")  \(duration)  \(task["id"]?.stringValue ?? "?") (\(task["origin"]?.stringValue ?? "?"))"
                if let error = task["error"]?.stringValue { line += "  error: \(error)" }
                line += "  \"" + printable(task["prompt"]?.stringValue ?? "", limit: 60) + "\""
                print(line)
            }
            return ExitCode.ok
        }
    }

    /// `tasks show`'s text: a header of fields, then the prompt and the answer as they are
    /// (the model's own newlines kept), each under a line that gives its size and any cut.
    static func wholeText(_ task: JSONValue) -> String {
        func field(_ key: String) -> String { task[key]?.stringValue ?? "?" }
        let source = field("source")
        var out = "task \(printable(field("id")))\n"
        out += "source:   \(source) (\(source == "bluetooth" ? "client" : "coordinator task") \(printable(field("origin"))))\n"
        out += "state:    \(field("state"))\n"
        out += "started:  \(field("started"))\n"
        if let ended = task["ended"]?.stringValue { out += "ended:    \(ended)\n" }
        if let duration = task["durationMs"]?.intValue { out += "duration: \(formatDuration(milliseconds: duration))\n" }
        if let error = task["error"]?.stringValue { out += "error:    \(printable(error))\n" }
        if task["wholeText"]?.boolValue != true {
            out += "(the whole text is not kept for this task: the previews follow)\n"
        }
        func section(_ title: String, _ textKey: String, _ bytesKey: String, _ cutKey: String) -> String {
            guard let text = task[textKey]?.stringValue else { return "" }
            var head = "--- \(title)"
            if let bytes = task[bytesKey]?.intValue {
                head += " (\(bytes) bytes" + (task[cutKey]?.boolValue == true ? "; cut: the first \(text.utf8.count) kept" : "") + ")"
            }
            return head + " ---\n" + terminalSafe(text) + (text.hasSuffix("\n") || text.isEmpty ? "" : "\n")
        }
        out += section("prompt", "prompt", "promptBytes", "promptCut")
        out += section("answer", "output", "outputBytes", "outputCut")
        return out
    }

    /// Text for a terminal: newlines and tabs kept, every other control character (an
    /// escape sequence a prompt could carry to repaint the operator's screen) shown as `\u{…}`.
    static func terminalSafe(_ text: String) -> String {
        var out = ""
        for scalar in text.unicodeScalars {
            if scalar == "\n" || scalar == "\t" || !(scalar.value < 0x20 || scalar.value == 0x7F || (0x80...0x9F).contains(scalar.value)) {
                out.unicodeScalars.append(scalar)
            } else {
                out += "\\u{\(String(scalar.value, radix: 16))}"
            }
        }
        return out
    }
}

// MARK: - reload

struct ReloadCommand: Command {
    static let name = "reload"
    static let summary = "re-read the config file and wait until it is applied or refused"
    static let usage = """
        Usage: edgecoder-worker reload [--json] [--runtime-dir D]

        Asks the running daemon to re-read its config file, as SIGHUP does, and returns once
        the file is applied or refused: what the unit's ExecReload= runs, so that `systemctl
        reload edgecoder-worker` returns only then (systemd 252 has no Type=notify-reload).
        Prints what was applied and what waits for a restart. Exit 0 when applied (or
        nothing changed), 2 when the file was refused (the running config is kept; the
        reasons on stderr), 69 without a daemon, 77 without the right to change it.
        """
    let json: Bool
    let runtimeDirectory: String

    init(_ arguments: inout Arguments) throws(UsageError) {
        json = arguments.flag("--json")
        runtimeDirectory = try WorkerCLI.runtimeDirectory(&arguments)
        guard arguments.positionals().isEmpty else { throw UsageError("reload takes no arguments") }
    }

    func run() async -> Int32 {
        withDaemon(runtimeDirectory) { (client) throws(ControlClient.Failure) -> Int32 in
            let result = try client.call(.reload)
            let outcome = result["outcome"]?.stringValue ?? "unknown"
            let problems = result["problems"]?.arrayValue?.compactMap(\.stringValue) ?? []
            if outcome == "refused" {
                // Under --json the same reasons as one error object on stdout.
                let message = "the config file was refused, the running config is kept: " + problems.joined(separator: "; ")
                return Output.fail(
                    ExitCode.invalidConfig, message,
                    text: (["edgecoder-worker: the config file was refused, the running config is kept:"] + problems.map { "  \($0)" }).joined(
                        separator: "\n"))
            }
            if json {
                Output.printJSON(result)
            } else {
                let applied = result["applied"]?.arrayValue?.compactMap(\.stringValue) ?? []
                let waiting = result["needsRestart"]?.arrayValue?.compactMap(\.stringValue) ?? []
                print(applied.isEmpty ? "reloaded: nothing to apply" : "reloaded: applied \(applied.joined(separator: ", "))")
                if !waiting.isEmpty { print("needs a restart to apply: \(waiting.joined(separator: ", "))") }
            }
            return ExitCode.ok
        }
    }
}
