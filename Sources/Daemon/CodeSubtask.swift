import ModelBackend
import Sandbox
import WorkerCore

/// Runs one program in isolation and says whether it can: the container sandbox
/// (`ContainerSandbox`), seen from the daemon.
public protocol ProgramSandbox: Sendable {
    func run(_ language: CodeLanguage, code: String) async -> ProgramRun
    func check() async -> SandboxAvailability
}

extension ContainerSandbox: ProgramSandbox {}

/// Drives `CodeLoop` with the model backend and the sandbox: the model's prompts go to
/// the backend, its programs to the sandbox, until the loop is over.
struct CodeSubtaskRunner: Sendable {
    let backend: ModelBackend
    let sandbox: any ProgramSandbox
    let maxTokens: Int
    let timeoutMs: Int64

    /// A model error ends the loop: the caller classifies it as for a text subtask.
    func run(task: String, language: CodeLanguage) async -> Result<CodeLoop.Outcome, ModelError> {
        var loop = CodeLoop(task: task, language: language)
        var step = loop.start()
        while true {
            switch step {
            case .ask(let prompt):
                let request = ModelRequest(prompt: prompt.text, maxTokens: maxTokens, timeoutMs: timeoutMs)
                do throws(ModelError) {
                    step = loop.modelAnswered(try await backend.generate(request).text)
                } catch {
                    return .failure(error)
                }
            case .run(let code):
                step = loop.ran(await sandbox.run(language, code: code))
            case .finished(let outcome):
                return .success(outcome)
            }
        }
    }
}
