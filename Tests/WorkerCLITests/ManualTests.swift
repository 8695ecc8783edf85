import Testing
@testable import WorkerCLI

/// Every `--option` token of a usage text, found without the generator's parser.
private func optionTokens(_ usage: String) -> Set<String> {
    var found: Set<String> = []
    var current = ""
    for ch in usage + " " {
        if ch.isLetter || ch.isNumber || ch == "-" {
            current.append(ch)
            continue
        }
        if current.hasPrefix("--"), current.count > 2, current.dropFirst(2).first?.isLetter == true {
            found.insert(current)
        }
        current = ""
    }
    return found
}

/// The roff spelling of a plain word (dashes as `\-`).
private func roffed(_ text: String) -> String { text.replacingOccurrences("-", "\\-") }

private extension String {
    func replacingOccurrences(_ target: String, _ replacement: String) -> String {
        split(separator: Character(target), omittingEmptySubsequences: false).joined(separator: replacement)
    }
}

/// The lines of a generated script's `case` branch for one command: after the line
/// `NAME)` at `indent` spaces, up to its `;;` four spaces further in.
private func caseBranch(_ script: String, _ name: String, indent: Int) -> String {
    let label = String(repeating: " ", count: indent) + "\(name))"
    let end = String(repeating: " ", count: indent + 4) + ";;"
    var lines: [Substring] = []
    var inside = false
    for line in script.split(separator: "\n") {
        if line == label { inside = true; continue }
        if inside && line.hasPrefix(end) { break }
        if inside { lines.append(line) }
    }
    return lines.joined(separator: "\n")
}

/// The bash completion's `case` branch for one command.
private func completionBranch(_ script: String, _ name: String) -> String { caseBranch(script, name, indent: 8) }

@Suite struct ManualGeneration {
    @Test func everyCommandAndEveryOptionOfTheTableIsInTheManPageAndTheCompletion() {
        let man = Manual.manPage()
        let completion = Manual.bashCompletion()
        #expect(!commands.isEmpty)
        for command in commands {
            #expect(man.contains(".SS \(roffed(command.name))\n"), "man page lacks command \(command.name)")
            let branch = completionBranch(completion, command.name)
            #expect(!branch.isEmpty, "completion lacks command \(command.name)")
            #expect(
                completion.contains(" \(command.name) ") || completion.contains("\"\(command.name) "), "completion's first word lacks \(command.name)"
            )
            let options = optionTokens(command.usage)
            for option in options {
                #expect(man.contains(".B \(roffed(option))"), "man page lacks \(command.name) \(option)")
                #expect(branch.contains(option), "completion lacks \(command.name) \(option)")
            }
        }
    }

    @Test func theParserReadsOptionsValuesAndFirstWordsFromAUsageText() {
        let synopsis = CommandSynopsis(
            name: "demo", summary: "s",
            usage: """
                Usage: edgecoder-worker demo [on|off] [--json] [--config F] [--port 11435]
                       edgecoder-worker demo set KEY VALUE [--runtime-dir D]

                  --config F        the file
                  --extra N         only in the description
                  --json            a flag
                """)
        #expect(synopsis.words == ["on", "off", "set"])
        #expect(
            synopsis.options == [
                .init(name: "--json", value: nil), .init(name: "--config", value: "F"), .init(name: "--port", value: "11435"),
                .init(name: "--runtime-dir", value: "D"), .init(name: "--extra", value: "N"),
            ])
    }

    @Test func theCompletionOffersFilesAfterAFileOptionAndTheModesAsFirstWord() {
        let completion = Manual.bashCompletion()
        let run = completionBranch(completion, "run")
        #expect(run.contains("--config) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f"))
        #expect(run.contains("compgen -d"))
        #expect(completionBranch(completion, "proxy").contains("--state-dir) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -d"))
        #expect(completionBranch(completion, "mode").contains("words=\"off on bluetooth\""))
        #expect(completionBranch(completion, "policy").contains("words=\"show set unset\""))
        #expect(completionBranch(completion, "config").contains("words=\"check\""))
    }

    @Test func theHiddenCommandIsNeitherListedNorDocumented() {
        #expect(!CLI.topUsage.contains("internal"))
        #expect(!Manual.manPage().contains(".SS internal"))
        #expect(completionBranch(Manual.bashCompletion(), "internal").isEmpty)
    }

    @Test func theInternalCommandAcceptsOnlyManTheThreeCompletionsAndConfigReference() {
        var man = Arguments(["man"])
        #expect((try? InternalCommand(&man))?.output == .man)
        var bash = Arguments(["completion", "bash"])
        #expect((try? InternalCommand(&bash))?.output == .bash)
        var reference = Arguments(["config-reference"])
        #expect((try? InternalCommand(&reference))?.output == .configReference)
        var zsh = Arguments(["completion", "zsh"])
        #expect((try? InternalCommand(&zsh))?.output == .zsh)
        var fish = Arguments(["completion", "fish"])
        #expect((try? InternalCommand(&fish))?.output == .fish)
        for words in [
            [], ["completion"], ["completion", "tcsh"], ["completion", "zsh", "extra"], ["man", "extra"], ["config-reference", "extra"],
        ] {
            var arguments = Arguments(words)
            #expect(throws: UsageError.self) { try InternalCommand(&arguments) }
        }
    }

    @Test func roffEscapesBackslashesDashesAndLeadingDots() {
        #expect(Manual.roff("a\\b --x") == "a\\eb \\-\\-x")
        #expect(Manual.roffLine(".hidden") == "\\&.hidden")
        #expect(Manual.roffLine("'quote") == "\\&'quote")
        #expect(Manual.roffLine("  plain") == "  plain")
    }

    @Test func theManPageTakesTheOptionsDescriptionFromItsUsageLine() {
        let usage = "Usage: x\n\n  --port N        TCP port on 127.0.0.1\n  --json          a flag\n"
        #expect(Manual.optionText("--port", in: usage) == "TCP port on 127.0.0.1")
        #expect(Manual.optionText("--json", in: usage) == "a flag")
        #expect(Manual.optionText("--missing", in: usage) == "see the synopsis above")
        #expect(Manual.optionText("--limit", in: usage, command: "tasks").hasPrefix("show at most the newest N tasks"))
        #expect(Manual.optionText("--limit", in: usage, command: "other") == "show at most the newest N entries")
    }

    @Test func everyOptionOfTheManPageHasALineOfItsOwn() {
        #expect(!Manual.manPage().contains("see the synopsis above"))
    }
}

/// The zsh completion's `_arguments` block for one command.
private func zshBranch(_ script: String, _ name: String) -> String { caseBranch(script, name, indent: 16) }

/// The fish completion's lines whose condition is the command `name`.
private func fishLines(_ script: String, _ name: String) -> String {
    script.split(separator: "\n").filter { $0.contains("-n '__edgecoder_worker_command_is \(name)") }.joined(separator: "\n")
}

@Suite struct ZshAndFishCompletion {
    @Test func everyCommandAndEveryOptionOfTheTableIsInBothCompletions() {
        let zsh = Manual.zshCompletion()
        let fish = Manual.fishCompletion()
        #expect(zsh.hasPrefix("#compdef edgecoder-worker\n"), "zsh's compinit finds a function by its first line")
        for command in commands {
            #expect(zsh.contains("\n        '\(command.name):"), "zsh's command list lacks \(command.name)")
            #expect(fish.contains("-n __edgecoder_worker_command_is -a \(command.name) -d '"), "fish's command list lacks \(command.name)")
            let zshOptions = zshBranch(zsh, command.name)
            let fishOptions = fishLines(fish, command.name)
            #expect(!zshOptions.isEmpty && !fishOptions.isEmpty, "\(command.name) has no options block")
            for option in optionTokens(command.usage) {
                #expect(zshOptions.contains("'\(option)["), "zsh lacks \(command.name) \(option)")
                #expect(fishOptions.contains(" -l \(option.dropFirst(2)) "), "fish lacks \(command.name) \(option)")
            }
        }
    }

    @Test func theHiddenCommandIsInNeither() {
        #expect(!Manual.zshCompletion().contains("'internal:") && zshBranch(Manual.zshCompletion(), "internal").isEmpty)
        #expect(!Manual.fishCompletion().contains("-a internal ") && fishLines(Manual.fishCompletion(), "internal").isEmpty)
    }

    @Test func valuesAreFilesDirectoriesOrFreeTextByTheirPlaceholder() {
        #expect(OptionValueKind(placeholder: "F") == .file)
        #expect(OptionValueKind(placeholder: "PATH") == .file)
        #expect(OptionValueKind(placeholder: "D") == .directory)
        #expect(OptionValueKind(placeholder: "N") == .other)
        #expect(OptionValueKind(placeholder: "") == .other)
        let zsh = zshBranch(Manual.zshCompletion(), "run")
        #expect(zsh.contains(":F:_files'"))
        #expect(zsh.contains(":D:_files -/'"))
        #expect(zshBranch(Manual.zshCompletion(), "tasks").contains("--limit[") && zshBranch(Manual.zshCompletion(), "tasks").contains(":N: '"))
        let fish = fishLines(Manual.fishCompletion(), "run")
        #expect(fish.contains(" -l config -r -F -d "))
        #expect(fishLines(Manual.fishCompletion(), "tasks").contains(" -l limit -x -d "))
    }

    @Test func theFirstWordsAreOfferedOnlyInTheFirstPlace() {
        #expect(zshBranch(Manual.zshCompletion(), "mode").contains("'1: :(off on bluetooth)'"))
        #expect(
            Manual.fishCompletion().contains(
                "-n '__edgecoder_worker_command_is mode; and not __fish_seen_subcommand_from off on bluetooth' -a 'off on bluetooth'"))
    }

    @Test func hostileTextIsQuotedForEachShell() {
        #expect(Manual.zshQuote("it's") == "'it'\\''s'")
        #expect(Manual.zshQuote("") == "''")
        #expect(Manual.zshSpecEscape("a [b]: c\\") == "a \\[b\\]\\: c\\\\")
        #expect(Manual.zshDescribeEscape("a:b") == "a\\:b")
        #expect(Manual.fishQuote("it's \\ $(x)") == "'it\\'s \\\\ $(x)'")
        // A usage text with quotes, brackets and colons in its option lines still makes one
        // quoted word per spec: no quote is left open.
        let synopsis = CommandSynopsis(
            name: "demo", summary: "it's: [x]",
            usage: """
                Usage: edgecoder-worker demo [--name N]

                  --name N   Bob's [value]: quoted 'here' \\ too
                """)
        let zsh = Manual.zshCompletion([synopsis])
        let fish = Manual.fishCompletion([synopsis])
        #expect(zsh.contains("'--name[Bob'\\''s \\[value\\]\\: quoted '\\''here'\\'' \\\\ too]:N: '"))
        #expect(fish.contains("-l name -x -d 'Bob\\'s [value]: quoted \\'here\\' \\\\ too'"))
        #expect(zsh.contains("'demo:it'\\''s: [x]'"))
    }
}
