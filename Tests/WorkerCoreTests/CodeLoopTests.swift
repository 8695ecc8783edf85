import Testing
@testable import WorkerCore

@Suite struct CodeLoopTests {
    /// Drives the loop with scripted model answers and runs; returns the steps seen.
    static func drive(_ loop: inout CodeLoop, answers: [String], runs: [ProgramRun]) -> (steps: [CodeLoop.Step], outcome: CodeLoop.Outcome?) {
        var answers = answers[...], runs = runs[...]
        var steps: [CodeLoop.Step] = []
        var step = loop.start()
        while true {
            steps.append(step)
            switch step {
            case .ask:
                guard let answer = answers.popFirst() else { return (steps, nil) }
                step = loop.modelAnswered(answer)
            case .run:
                guard let run = runs.popFirst() else { return (steps, nil) }
                step = loop.ran(run)
            case .finished(let outcome):
                return (steps, outcome)
            }
        }
    }

    static let program = "```python\nprint(6 * 7)\n```"

    @Test func aProgramThatWorksFirstTimeIsPostedAsItsOutput() {
        var loop = CodeLoop(task: "print 6 times 7", language: .python)
        let (steps, outcome) = Self.drive(
            &loop, answers: ["1. multiply\n2. print", Self.program],
            runs: [ProgramRun(ending: .exited(0), stdout: "42\n")])
        #expect(outcome == .answered(ok: true, output: "42\n", error: nil, runs: 1))
        guard case .ask(let plan) = steps[0], case .ask(let code) = steps[1], case .run(let ran) = steps[2] else {
            Issue.record("steps: \(steps)"); return
        }
        #expect(plan.purpose == .plan && plan.text.contains("print 6 times 7"))
        #expect(code.purpose == .code && code.text.contains("1. multiply\n2. print") && code.text.contains("```python"))
        #expect(ran == "print(6 * 7)")
    }

    @Test func aFailureIsReflectedOnOnceAndTheSecondRunIsPosted() {
        var loop = CodeLoop(task: "t", language: .python)
        let (steps, outcome) = Self.drive(
            &loop, answers: ["plan", "```python\nprint(x)\n```", "```python\nx = 1\nprint(x)\n```"],
            runs: [
                ProgramRun(ending: .exited(1), stderr: "NameError: name 'x' is not defined\n"),
                ProgramRun(ending: .exited(0), stdout: "1\n"),
            ])
        #expect(outcome == .answered(ok: true, output: "1\n", error: nil, runs: 2))
        guard case .ask(let reflect) = steps[3] else { Issue.record("steps: \(steps)"); return }
        #expect(reflect.purpose == .reflect)
        #expect(reflect.text.contains("print(x)") && reflect.text.contains("NameError: name 'x' is not defined"))
    }

    @Test func twoFailuresPostTheSecondWithItsStderr() {
        var loop = CodeLoop(task: "t", language: .javascript)
        let (steps, outcome) = Self.drive(
            &loop, answers: ["plan", "```js\nthrow 1\n```", "```javascript\nthrow 2\n```"],
            runs: [
                ProgramRun(ending: .exited(1), stderr: "first"),
                ProgramRun(ending: .exited(1), stdout: "partial", stderr: "Uncaught 2\n"),
            ])
        #expect(outcome == .answered(ok: false, output: "partial", error: "Uncaught 2", runs: 2))
        #expect(steps.filter { if case .run = $0 { return true } else { return false } }.count == CodeLoop.maxRuns)
    }

    @Test func aKillSaysHowTheProgramEnded() {
        var loop = CodeLoop(task: "t", language: .python)
        let (_, outcome) = Self.drive(
            &loop, answers: ["plan", Self.program, Self.program],
            runs: [ProgramRun(ending: .timedOut(limitMs: 4_000)), ProgramRun(ending: .killed(signal: 9), stderr: "out of memory?")])
        #expect(outcome == .answered(ok: false, output: "", error: "out of memory?\nkilled by signal 9", runs: 2))
    }

    @Test func theReflectionHearsOfATimeoutEvenWithNothingOnStderr() {
        var loop = CodeLoop(task: "t", language: .python)
        let (steps, _) = Self.drive(&loop, answers: ["plan", Self.program], runs: [ProgramRun(ending: .timedOut(limitMs: 4_000))])
        guard case .ask(let reflect) = steps.last else { Issue.record("steps: \(steps)"); return }
        #expect(reflect.text.contains("killed at the 4000 ms limit"))
    }

    @Test func theEngineFailingEndsTheLoopAsTheHostsFault() {
        var loop = CodeLoop(task: "t", language: .python)
        let (_, outcome) = Self.drive(&loop, answers: ["plan", Self.program], runs: [ProgramRun(ending: .engineFailed("image not found"))])
        #expect(outcome == .engineFailed("image not found"))
    }

    @Test func noProgramTwiceIsNoProgram() {
        var loop = CodeLoop(task: "t", language: .python)
        let (steps, outcome) = Self.drive(&loop, answers: ["plan", "   ", "```bash\necho hi\n```"], runs: [])
        #expect(outcome == .noProgram("the model's answer held no python program"))
        guard case .ask(let reflect) = steps[2] else { Issue.record("steps: \(steps)"); return }
        #expect(reflect.purpose == .reflect && reflect.text.contains("(none was written)"))
    }

    @Test func noProgramThenAGoodOneRuns() {
        var loop = CodeLoop(task: "t", language: .python)
        let (_, outcome) = Self.drive(&loop, answers: ["plan", "", Self.program], runs: [ProgramRun(ending: .exited(0), stdout: "42")])
        #expect(outcome == .answered(ok: true, output: "42", error: nil, runs: 2))
    }

    @Test func aLongErrorIsQuotedByItsEnd() {
        let error = String(repeating: "é", count: 3_000) + "TAIL"
        let prompt = CodePrompts.reflect(task: "t", code: "c", error: error, language: .python)
        #expect(prompt.hasSuffix("TAIL"))
        #expect(prompt.utf8.count < 3_000)
        #expect(!prompt.contains("\u{FFFD}"), "cut between characters, never inside one")
    }
}

@Suite struct CodeExtractionTests {
    @Test(arguments: [
        ("```python\nprint(1)\n```", "print(1)"),
        ("Here:\n```py\nprint(1)\n```\nDone.", "print(1)"),
        ("```\nprint(1)\n```", "print(1)"),
        ("print(1)", "print(1)"),
        ("  \nprint(1)\n\n", "print(1)"),
        ("```js\nconsole.log(1)\n```\n```python\nprint(1)\n```", "print(1)"),
        ("```python\nprint(1)", "print(1)"),
        ("```python {.numberLines}\nprint(1)\n```", "print(1)"),
        ("   ```python\n  x = 1\n  ```", "x = 1"),
    ])
    func findsThePythonProgram(answer: String, program: String) {
        #expect(CodeExtraction.program(in: answer, language: .python) == program)
    }

    @Test(arguments: ["", "   \n", "```python\n\n```", "```bash\necho 1\n```", "```js\nconsole.log(1)\n```"])
    func noPythonProgram(answer: String) {
        #expect(CodeExtraction.program(in: answer, language: .python) == nil)
    }

    @Test func javascriptTakesItsOwnTags() {
        for tag in ["javascript", "js", "JS", "node"] {
            #expect(CodeExtraction.program(in: "```\(tag)\nconsole.log(1)\n```", language: .javascript) == "console.log(1)")
        }
    }

    @Test func hostileAnswersAreHandled() {
        // 20 000 fences: 10 000 empty blocks, found in one pass, and no program among them.
        let huge = String(repeating: "```\n", count: 20_000)
        #expect(CodeExtraction.fencedBlocks(huge).count == 10_000)
        #expect(CodeExtraction.program(in: huge, language: .python) == nil)
        #expect(CodeExtraction.program(in: "```python\nprint('\u{0}')\n```", language: .python) == "print('\u{0}')")
        #expect(CodeExtraction.program(in: "```", language: .python) == nil)
    }
}

@Suite struct ExecutionDecisionTests {
    @Test func theModeAndTheEngineDecide() {
        let ok = SandboxAvailability.usable("podman, localhost/edgecoder-sandbox:1")
        let bad = SandboxAvailability.unusable("podman: not found")
        #expect(ExecutionDecision.decide(mode: .auto, sandbox: ok).answering == .container)
        #expect(ExecutionDecision.decide(mode: .auto, sandbox: bad).answering == .text)
        #expect(ExecutionDecision.decide(mode: .auto, sandbox: .unknown).answering == .text)
        #expect(ExecutionDecision.decide(mode: .container, sandbox: ok).answering == .container)
        #expect(ExecutionDecision.decide(mode: .container, sandbox: bad).answering == .held)
        #expect(ExecutionDecision.decide(mode: .container, sandbox: .unknown).answering == .held)
        for sandbox in [ok, bad, .unknown] {
            #expect(ExecutionDecision.decide(mode: .text, sandbox: sandbox).answering == .text)
        }
        #expect(ExecutionDecision.decide(mode: .auto, sandbox: bad).why.contains("podman: not found"))
        #expect(ExecutionDecision.decide(mode: .container, sandbox: bad).why.contains("podman: not found"))
    }

    @Test func theCoordinatorHearsDockerOnlyWhileProgramsRunInAContainer() {
        #expect(ExecutionDecision.decide(mode: .auto, sandbox: .usable("e")).sandboxMode == "docker")
        #expect(ExecutionDecision.decide(mode: .auto, sandbox: .unusable("e")).sandboxMode == "none")
        #expect(ExecutionDecision.decide(mode: .container, sandbox: .unusable("e")).sandboxMode == "none")
        #expect(ExecutionDecision.decide(mode: .text, sandbox: .usable("e")).sandboxMode == "none")
    }
}

@Suite struct SubtaskLanguageTests {
    static func parse(_ text: String) throws -> Result<Subtask, Subtask.Problem> { Subtask.parse(try JSON.parse(text)) }

    @Test func aKnownLanguageIsKeptAndJournaled() throws {
        guard case .success(let subtask) = try Self.parse(#"{"id":"s","taskId":"t","input":"x","language":"javascript"}"#) else {
            Issue.record("refused"); return
        }
        #expect(subtask.language == .javascript)
        let entry = RecoveryPlan.JournalEntry(subtask: subtask, pulledAtMs: 1)
        #expect(RecoveryPlan.JournalEntry.from(json: entry.json)?.subtask.language == .javascript)
    }

    @Test func noLanguageIsATextSubtask() throws {
        for text in [#"{"id":"s","taskId":"t","input":"x"}"#, #"{"id":"s","taskId":"t","input":"x","language":null}"#] {
            guard case .success(let subtask) = try Self.parse(text) else { Issue.record("refused \(text)"); return }
            #expect(subtask.language == nil)
        }
    }

    @Test(arguments: [#""rust""#, #""Python""#, "1", "[]", #""""#, #""\u0000python""#])
    func anUnknownLanguageIsTheSubtasksOwnFault(language: String) throws {
        let result = try Self.parse(#"{"id":"s","taskId":"t","input":"x","language":"# + language + "}")
        guard case .failure(.unrunnable(let id, _, let reason)) = result else { Issue.record("\(result)"); return }
        #expect(id == "s" && reason.hasPrefix("malformed_subtask: language"))
    }
}
