import Daemon
import Posix
import WorkerCore

// The man page and the shell completions are printed from the command table (`commands`)
// and each command's usage text, the same text `--help` prints, so that neither can
// drift from the binary they ship with. `make deb` and `make install` run
// `edgecoder-worker internal man` and `internal completion bash|zsh|fish` on the built binary.

/// What the man page and the completion need of one command, read from its usage text.
struct CommandSynopsis: Equatable {
    /// One option of a command and the placeholder of its value (nil for a flag).
    struct Option: Equatable {
        var name: String
        var value: String?
    }

    let name: String
    let summary: String
    let usage: String
    /// Every option the usage names, in order of first appearance.
    let options: [Option]
    /// Words that may come first after the command: subcommands (`check`, `show`) or
    /// fixed values (`off`, `on`, `bluetooth`).
    let words: [String]

    init(name: String, summary: String, usage: String) {
        self.name = name
        self.summary = summary
        self.usage = usage
        var options: [Option] = []
        var words: [String] = []
        func addOption(_ name: String, _ value: String?) {
            if let index = options.firstIndex(where: { $0.name == name }) {
                if options[index].value == nil { options[index].value = value }
            } else {
                options.append(Option(name: name, value: value))
            }
        }
        for line in usage.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.drop { $0 == " " }
            // Synopsis lines: "Usage: edgecoder-worker NAME …" and their continuations.
            var synopsis: Substring?
            for prefix in ["Usage: edgecoder-worker \(name)", "edgecoder-worker \(name)"] where trimmed.hasPrefix(prefix) {
                synopsis = trimmed.dropFirst(prefix.count)
                break
            }
            if let synopsis {
                var first = true
                for group in CommandSynopsis.groups(synopsis) {
                    let tokens = group.text.split(separator: " ").map(String.init)
                    guard let head = tokens.first else { continue }
                    if head.hasPrefix("--") {
                        addOption(head, tokens.count > 1 ? tokens[1] : nil)
                        continue
                    }
                    // The first positional: a subcommand or a choice of fixed values.
                    if first {
                        for word in head.split(separator: "|").map(String.init) where CommandSynopsis.isWord(word) && !words.contains(word) {
                            words.append(word)
                        }
                    }
                    first = false
                }
                continue
            }
            // Option lines of the description: "  --name VALUE   what it does".
            if trimmed.hasPrefix("--"), line.count > trimmed.count {
                let tokens = trimmed.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
                let head = String(tokens[0])
                // A value placeholder follows after one space; two spaces start the text.
                let value = tokens.count > 1 && !tokens[1].isEmpty ? String(tokens[1]) : nil
                addOption(head, value)
            }
        }
        self.options = options
        self.words = words
    }

    /// A synopsis split into bracketed groups (`[--config F]`, `[off|on|bluetooth]`) and bare words.
    private static func groups(_ text: Substring) -> [(text: String, bracketed: Bool)] {
        var out: [(text: String, bracketed: Bool)] = []
        var current = ""
        var depth = 0
        func flush(_ bracketed: Bool) {
            let trimmed = current.split(separator: " ").joined(separator: " ")
            if !trimmed.isEmpty { out.append((trimmed, bracketed)) }
            current = ""
        }
        for ch in text {
            switch ch {
            case "[":
                if depth == 0 { flush(false) } else { current.append(ch) }
                depth += 1
            case "]":
                depth = max(0, depth - 1)
                if depth == 0 { flush(true) } else { current.append(ch) }
            case " " where depth == 0:
                flush(false)
            default:
                current.append(ch)
            }
        }
        flush(false)
        return out
    }

    /// A literal word the user types (lower case), not a placeholder such as KEY or F.
    private static func isWord(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.allSatisfy { ($0 >= 97 && $0 <= 122) || $0 == 45 } && !text.hasPrefix("-")
    }

    /// Every command of the table, as the man page and the completion show them.
    static var all: [CommandSynopsis] {
        commands.map { CommandSynopsis(name: $0.name, summary: $0.summary, usage: $0.usage) }
    }
}

/// Generates `edgecoder-worker(1)` and the bash completion from the command table.
enum Manual {
    /// The man page, in roff (man macros).
    static func manPage(_ synopses: [CommandSynopsis] = CommandSynopsis.all, version: String = workerVersion) -> String {
        var out: [String] = [
            ".\\\" Generated by `edgecoder-worker internal man` from the CLI's command table; do not edit.",
            ".TH EDGECODER\\-WORKER 1 \"\" \"edgecoder\\-worker \(roff(version))\" \"User Commands\"",
            ".SH NAME",
            "edgecoder\\-worker \\- contribute this host's compute to an EdgeCoder swarm",
            ".SH SYNOPSIS",
            ".B edgecoder\\-worker",
            ".I command",
            ".RI [ options ]",
            ".br",
            ".B edgecoder\\-worker",
            ".B \\-\\-help",
            ".RI [ command ]",
            ".br",
            ".B edgecoder\\-worker \\-\\-version",
            ".SH DESCRIPTION",
            "A daemon that contributes this host's compute to an EdgeCoder swarm: in mode",
            ".B on",
            "it pulls subtasks from a coordinator and runs them on a local model server; in mode",
            ".B bluetooth",
            "it serves nearby devices over Bluetooth Low Energy; in mode",
            ".B off",
            "it does neither.",
            "It runs as the systemd service",
            ".BR edgecoder\\-worker.service ;",
            "the other commands talk to it over its control socket or read the host directly.",
            "A fresh install starts in mode",
            ".BR off .",
            ".SH COMMANDS",
        ]
        for synopsis in synopses {
            out.append(".SS \(roff(synopsis.name))")
            out.append(roff(synopsis.summary))
            out.append(".PP")
            out.append(".nf")
            for line in synopsis.usage.split(separator: "\n", omittingEmptySubsequences: false) {
                out.append(line.isEmpty ? "" : roffLine(String(line)))
            }
            out.append(".fi")
            if !synopsis.options.isEmpty {
                out.append(".PP")
                out.append("Options:")
                for option in synopsis.options {
                    out.append(".TP")
                    out.append(".B \(roff(option.name))" + (option.value.map { " \\fI\(roff($0))\\fR" } ?? ""))
                    out.append(roff(optionText(option.name, in: synopsis.usage, command: synopsis.name)))
                }
            }
        }
        out += [
            ".SH FILES",
            ".TP",
            ".I \(roff(Defaults.config))",
            "The configuration (JSON); check it with",
            ".BR \"edgecoder\\-worker config check\" .",
            ".TP",
            ".I \(roff(Defaults.stateDirectory))",
            "State: mode, host policy, agent id, event log, outbox.",
            ".TP",
            ".I \(roff(Defaults.runtimeDirectory))/control.sock",
            "The control socket: reading needs root, the daemon's user or the group",
            ".BR edgecoder ;",
            "changing needs root or the daemon's user.",
            ".SH ENVIRONMENT",
            ".TP",
            ".B EDGECODER_WORKER_CONFIG",
            "The config file when",
            ".B \\-\\-config",
            "is not given.",
            ".TP",
            ".B EDGECODER_WORKER_STATE_DIR",
            "The state directory when",
            ".B \\-\\-state\\-dir",
            "is not given.",
            ".TP",
            ".B EDGECODER_WORKER_RUNTIME_DIR",
            "The runtime directory when",
            ".B \\-\\-runtime\\-dir",
            "is not given.",
            ".SH EXIT STATUS",
            ".TP",
            ".B \(ExitCode.ok)",
            "success",
            ".TP",
            ".B \(ExitCode.failure)",
            "failure",
            ".TP",
            ".B \(ExitCode.invalidConfig)",
            "invalid config, or a refused policy key or value",
            ".TP",
            ".B \(ExitCode.refused)",
            "the daemon refused the change (for example the charge gate)",
            ".TP",
            ".B \(ExitCode.notFound)",
            "no such task (tasks show)",
            ".TP",
            ".B \(ExitCode.usage)",
            "usage error",
            ".TP",
            ".B \(ExitCode.daemonUnavailable)",
            "the daemon is not running or cannot be reached",
            ".TP",
            ".B \(ExitCode.permission)",
            "permission denied on the control socket",
            ".SH SEE ALSO",
            ".BR systemctl (1),",
            ".BR journalctl (1),",
            ".BR systemd.exec (5);",
            "the README, CHANGELOG.md and docs/ in",
            ".IR /usr/share/doc/edgecoder\\-worker/ .",
        ]
        return out.joined(separator: "\n") + "\n"
    }

    /// The bash completion script (for /usr/share/bash-completion/completions/edgecoder-worker).
    static func bashCompletion(_ synopses: [CommandSynopsis] = CommandSynopsis.all) -> String {
        let names = synopses.map(\.name)
        var out = """
            # bash completion for edgecoder-worker(1).
            # Generated by `edgecoder-worker internal completion bash` from the CLI's command table; do not edit.
            _edgecoder_worker() {
                local cur prev opts="" valued="" words="" i positional=0
                COMPREPLY=()
                cur="${COMP_WORDS[COMP_CWORD]}"
                prev="${COMP_WORDS[COMP_CWORD-1]}"
                if [[ $COMP_CWORD -eq 1 ]]; then
                    COMPREPLY=($(compgen -W "\(names.joined(separator: " ")) help --help --version" -- "$cur"))
                    return 0
                fi
                case "${COMP_WORDS[1]}" in

            """
        for synopsis in synopses {
            let valued = synopsis.options.filter { $0.value != nil }
            out += "        \(synopsis.name))\n"
            out += "            opts=\"\(synopsis.options.map(\.name).joined(separator: " "))\"\n"
            out += "            valued=\"\(valued.map(\.name).joined(separator: " "))\"\n"
            out += "            words=\"\(synopsis.words.joined(separator: " "))\"\n"
            let files = valued.filter { OptionValueKind(placeholder: $0.value ?? "") == .file }.map(\.name)
            let directories = valued.filter { OptionValueKind(placeholder: $0.value ?? "") == .directory }.map(\.name)
            if !files.isEmpty || !directories.isEmpty {
                out += "            case \"$prev\" in\n"
                if !files.isEmpty {
                    out +=
                        "                \(files.joined(separator: "|"))) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- \"$cur\")); return 0 ;;\n"
                }
                if !directories.isEmpty {
                    out +=
                        "                \(directories.joined(separator: "|"))) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -d -- \"$cur\")); return 0 ;;\n"
                }
                out += "            esac\n"
            }
            out += "            ;;\n"
        }
        out += """
                    help|--help|-h)
                        [[ $COMP_CWORD -eq 2 ]] && COMPREPLY=($(compgen -W "\(names.joined(separator: " "))" -- "$cur"))
                        return 0 ;;
                    *) return 0 ;;
                esac
                # An option that takes a value: nothing to offer but the user's own text.
                if [[ " $valued " == *" $prev "* ]]; then
                    return 0
                fi
                if [[ "$cur" == -* ]]; then
                    COMPREPLY=($(compgen -W "$opts --help" -- "$cur"))
                    return 0
                fi
                # Fixed words only in the first positional place (after options and their values).
                for ((i = 2; i < COMP_CWORD; i++)); do
                    if [[ " $valued " == *" ${COMP_WORDS[i]} "* ]]; then
                        ((i++))
                    elif [[ "${COMP_WORDS[i]}" != -* ]]; then
                        positional=1
                    fi
                done
                if [[ $positional -eq 0 && -n "$words" ]]; then
                    COMPREPLY=($(compgen -W "$words" -- "$cur"))
                fi
                return 0
            }
            complete -F _edgecoder_worker edgecoder-worker

            """
        return out
    }

    /// Lines for the options that usage texts name only in their synopsis: such an option
    /// means the same in every command, so one line serves all of them. A key
    /// "COMMAND --option" is that command's own line.
    static let sharedOptionText: [String: String] = [
        "--json": "print one JSON object instead of text; its keys are stable (docs/reference/json-output.md)",
        "--runtime-dir":
            "the daemon's runtime directory, where its control socket control.sock is (default \(Defaults.runtimeDirectory), or $EDGECODER_WORKER_RUNTIME_DIR)",
        "--sysfs-root": "read sysfs and procfs below D instead of / (tests point it at fake trees)",
        "--config": "the config file (default \(Defaults.config), or $EDGECODER_WORKER_CONFIG)",
        "--limit": "show at most the newest N entries",
        "events --json": "print {\"events\": [...]}; with --follow, one event object per line (docs/reference/json-output.md)",
        "events --limit": "show at most the newest N events (1-100000)",
        "tasks --limit": "show at most the newest N tasks (1-1000; the daemon keeps 50)",
        "doctor --config":
            "the config file read for the policy when the daemon is not running (default \(Defaults.config), or $EDGECODER_WORKER_CONFIG)",
        "doctor --runtime-dir":
            "where to ask the daemon for its policy and state (default \(Defaults.runtimeDirectory), or $EDGECODER_WORKER_RUNTIME_DIR)",
    ]

    /// The text after an option on its description line, else the shared line for it, else
    /// a pointer to the synopsis.
    static func optionText(_ name: String, in usage: String, command: String = "") -> String {
        for line in usage.split(separator: "\n") {
            let trimmed = line.drop { $0 == " " }
            guard trimmed.hasPrefix(name + " ") || trimmed == name[...] else { continue }
            // The description starts after the first run of two or more spaces.
            var rest = trimmed.dropFirst(name.count)
            if let value = rest.first, value == " ", rest.dropFirst().first != " " {
                rest = rest.dropFirst().drop { $0 != " " }
            }
            let text = rest.drop { $0 == " " }
            if !text.isEmpty { return String(text) }
        }
        if let text = sharedOptionText["\(command) \(name)"] ?? sharedOptionText[name] { return text }
        return "see the synopsis above"
    }

    /// Text escaped for roff: backslashes, and dashes as real minus signs (options).
    static func roff(_ text: String) -> String {
        var out = ""
        for ch in text {
            switch ch {
            case "\\": out += "\\e"
            case "-": out += "\\-"
            default: out.append(ch)
            }
        }
        return out
    }

    /// A line of a no-fill block: escaped, and never read as a request (leading `.` or `'`).
    static func roffLine(_ line: String) -> String {
        let escaped = roff(line)
        return escaped.hasPrefix(".") || escaped.hasPrefix("'") ? "\\&" + escaped : escaped
    }
}

// MARK: - internal

/// `edgecoder-worker internal man|completion bash|zsh|fish|config-reference`: build-time output,
/// not in `--help`.
struct InternalCommand: Command {
    static let name = "internal"
    static let summary = "build-time output: the man page, the shell completions, the configuration reference"
    static let usage = """
        Usage: edgecoder-worker internal man
               edgecoder-worker internal completion bash|zsh|fish
               edgecoder-worker internal config-reference
               edgecoder-worker internal metrics-from-status < STATUS.json

        Prints edgecoder-worker(1) in roff or the bash, zsh or fish completion, all generated
        from the command table (used by `make install` and `make deb`), or
        docs/reference/configuration.md, generated from the config's key table
        (`edgecoder-worker internal config-reference > docs/reference/configuration.md`).
        metrics-from-status renders `metrics` from a `status --json` object on stdin, without
        a daemon: the metrics suite feeds it hostile values for Prometheus' own parser.
        """
    enum Output { case man, bash, zsh, fish, configReference, metricsFromStatus }
    let output: Output

    init(_ arguments: inout Arguments) throws(UsageError) {
        switch arguments.positionals() {
        case ["man"]: output = .man
        case ["completion", "bash"]: output = .bash
        case ["completion", "zsh"]: output = .zsh
        case ["completion", "fish"]: output = .fish
        case ["config-reference"]: output = .configReference
        case ["metrics-from-status"]: output = .metricsFromStatus
        default: throw UsageError("expected 'man', 'completion bash|zsh|fish', 'config-reference' or 'metrics-from-status'")
        }
    }

    func run() async -> Int32 {
        switch output {
        case .man: print(Manual.manPage(), terminator: "")
        case .bash: print(Manual.bashCompletion(), terminator: "")
        case .zsh: print(Manual.zshCompletion(), terminator: "")
        case .fish: print(Manual.fishCompletion(), terminator: "")
        case .configReference: print(ConfigReference.markdown(), terminator: "")
        case .metricsFromStatus:
            let status: JSONValue
            do {
                status = try JSON.parse(try readFile("/dev/stdin", limit: 16 * 1_048_576))
            } catch {
                printErr("edgecoder-worker internal metrics-from-status: stdin is not a status object: \(error)")
                return ExitCode.failure
            }
            print(PrometheusText.render(WorkerMetrics.families(status: status, process: nil)), terminator: "")
        }
        return ExitCode.ok
    }
}
