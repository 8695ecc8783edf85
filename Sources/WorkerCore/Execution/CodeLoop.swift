/// A code subtask worked the way EdgeCoder's desktop swarm workers work one: the model
/// plans, writes a program in the subtask's language, the program runs in the sandbox, and
/// when it fails the model sees the error and writes it again, once. What is posted is the
/// program's, not the model's: `output` its stdout, `ok` its exit status, `error` its stderr.
///
/// Pure: the driver asks `start()` for the first step, performs each step (a prompt to the
/// model, a program to run) and feeds the outcome back; the loop answers with the next step
/// until it is `.finished`.
public struct CodeLoop: Sendable {
    /// What the driver does next.
    public enum Step: Sendable, Equatable {
        /// Send this prompt to the model; answer with `modelAnswered(_:)`.
        case ask(Prompt)
        /// Run this program in the sandbox; answer with `ran(_:)`.
        case run(code: String)
        /// The loop is over.
        case finished(Outcome)
    }

    public struct Prompt: Sendable, Equatable {
        public enum Purpose: String, Sendable, Equatable { case plan, code, reflect }
        public var purpose: Purpose
        public var text: String
    }

    public enum Outcome: Sendable, Equatable {
        /// The last program's run: posted as the subtask's result.
        case answered(ok: Bool, output: String, error: String?, runs: Int)
        /// The model wrote no program in the subtask's language, twice: the model is part of
        /// this host, so the subtask goes back to the queue for another agent.
        case noProgram(String)
        /// The container engine failed: the host's fault, the subtask is released.
        case engineFailed(String)
    }

    /// Runs of a program: the first, and one more after a reflection (as upstream's swarm
    /// worker, two iterations).
    public static let maxRuns = 2

    public let task: String
    public let language: CodeLanguage
    private var plan = ""
    private var code = ""
    private var runs = 0
    private var phase: Phase = .idle

    private enum Phase: Equatable { case idle, planning, coding, reflecting, running, done }

    public init(task: String, language: CodeLanguage) {
        self.task = task
        self.language = language
    }

    /// The first step: ask for a plan.
    public mutating func start() -> Step {
        precondition(phase == .idle, "start() once")
        phase = .planning
        return .ask(Prompt(purpose: .plan, text: CodePrompts.plan(task: task, language: language)))
    }

    /// The model's answer to the last `.ask`.
    public mutating func modelAnswered(_ text: String) -> Step {
        switch phase {
        case .planning:
            plan = text.trimmingWhitespace()
            phase = .coding
            return .ask(Prompt(purpose: .code, text: CodePrompts.code(task: task, plan: plan, language: language)))
        case .coding, .reflecting:
            guard let program = CodeExtraction.program(in: text, language: language) else {
                // No program is a failed attempt like a program that fails: the model is
                // told so and gets its second chance; after that the host gives up.
                let why = "the model's answer held no \(language.rawValue) program"
                runs += 1
                if runs >= CodeLoop.maxRuns { return finish(.noProgram(why)) }
                return reflect(error: why)
            }
            code = program
            phase = .running
            return .run(code: program)
        case .idle, .running, .done:
            preconditionFailure("modelAnswered(_:) in phase \(phase)")
        }
    }

    /// The run of the program from the last `.run`.
    public mutating func ran(_ run: ProgramRun) -> Step {
        precondition(phase == .running, "ran(_:) in phase \(phase)")
        runs += 1
        if case .engineFailed(let why) = run.ending { return finish(.engineFailed(why)) }
        if run.succeeded || runs >= CodeLoop.maxRuns {
            return finish(.answered(ok: run.succeeded, output: run.stdout, error: CodeLoop.errorText(run), runs: runs))
        }
        return reflect(error: CodeLoop.errorText(run) ?? run.ending.description)
    }

    /// What `error` says of a run: its stderr, and how it ended when that was not a plain
    /// exit (a kill leaves stderr empty); nil for a success with nothing on stderr.
    public static func errorText(_ run: ProgramRun) -> String? {
        let stderr = run.stderr.trimmingWhitespace()
        switch run.ending {
        case .exited(0): return stderr.isEmpty ? nil : stderr
        case .exited: return stderr.isEmpty ? run.ending.description : stderr
        case .timedOut, .killed, .engineFailed:
            return stderr.isEmpty ? run.ending.description : "\(stderr)\n\(run.ending.description)"
        }
    }

    private mutating func reflect(error: String) -> Step {
        phase = .reflecting
        return .ask(Prompt(purpose: .reflect, text: CodePrompts.reflect(task: task, code: code, error: error, language: language)))
    }

    private mutating func finish(_ outcome: Outcome) -> Step {
        phase = .done
        return .finished(outcome)
    }
}

/// The prompts, in the project's own words. Each asks for one fenced block so that the
/// program can be told from the prose around it.
public enum CodePrompts {
    /// Longest error text quoted back to the model: the end of a traceback says the most.
    public static let maxQuotedErrorBytes = 2_048

    public static func plan(task: String, language: CodeLanguage) -> String {
        """
        Plan a short \(language.rawValue) program for the task below. Reply with a numbered list of steps only: no code.

        Task:
        \(task)
        """
    }

    public static func code(task: String, plan: String, language: CodeLanguage) -> String {
        """
        Write a complete \(language.rawValue) program for the task below, following the plan. It runs with no network and no input, and what it prints to standard output is the answer. Reply with the program in one ```\(language.rawValue) fenced block and nothing else.

        Task:
        \(task)

        Plan:
        \(plan)
        """
    }

    public static func reflect(task: String, code: String, error: String, language: CodeLanguage) -> String {
        """
        This \(language.rawValue) program was written for the task below and failed. Find the cause and write the whole program again, corrected. It runs with no network and no input, and what it prints to standard output is the answer. Reply with the program in one ```\(language.rawValue) fenced block and nothing else.

        Task:
        \(task)

        Program:
        \(code.isEmpty ? "(none was written)" : code)

        What went wrong:
        \(lastBytes(of: error, CodePrompts.maxQuotedErrorBytes))
        """
    }

    static func lastBytes(of text: String, _ limit: Int) -> String {
        let utf8 = Array(text.utf8)
        guard utf8.count > limit else { return text }
        var start = utf8.count - limit
        // Not inside a character: continuation bytes are 10xxxxxx.
        while start < utf8.count && utf8[start] & 0xC0 == 0x80 { start += 1 }
        return "…" + String(decoding: utf8[start...], as: UTF8.self)
    }
}

/// Finds the program in a model's answer.
public enum CodeExtraction {
    /// The program for `language` in `answer`: the first fenced block tagged with the
    /// language (`python`, `py`, `js`, …), else the first untagged one; an answer with no
    /// fence at all is taken whole (small models often drop the fence). A fence tagged with
    /// another language only, or an empty program, is no program (nil).
    public static func program(in answer: String, language: CodeLanguage) -> String? {
        let blocks = fencedBlocks(answer)
        if blocks.isEmpty {
            let whole = answer.trimmingWhitespace()
            return whole.isEmpty ? nil : whole
        }
        let chosen = blocks.first { language.fenceTags.contains($0.tag) } ?? blocks.first { $0.tag.isEmpty }
        guard let body = chosen?.body.trimmingWhitespace(), !body.isEmpty else { return nil }
        return body
    }

    /// Blocks opened by a line starting with ``` (its tag: the first word after it,
    /// lowercased) and closed by a line starting with ```; an unclosed block runs to the end.
    static func fencedBlocks(_ text: String) -> [(tag: String, body: String)] {
        var blocks: [(tag: String, body: String)] = []
        var open: (tag: String, lines: [Substring])?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.drop { $0 == " " || $0 == "\t" }
            if trimmed.hasPrefix("```") {
                if let block = open {
                    blocks.append((block.tag, block.lines.joined(separator: "\n")))
                    open = nil
                } else {
                    let info = trimmed.dropFirst(3).drop { $0 == " " }
                    let tag = info.prefix { !$0.isWhitespace && $0 != "{" }.lowercased()
                    open = (tag, [])
                }
            } else {
                open?.lines.append(line)
            }
        }
        if let block = open { blocks.append((block.tag, block.lines.joined(separator: "\n"))) }
        return blocks
    }
}

extension StringProtocol {
    func trimmingWhitespace() -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }),
            let last = scalars.lastIndex(where: { !$0.properties.isWhitespace })
        else { return "" }
        var out = String.UnicodeScalarView()
        out.append(contentsOf: scalars[first...last])
        return String(out)
    }
}
