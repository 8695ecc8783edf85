// libFuzzer target: the coordinator answer decoders. The first byte picks the call
// (register, heartbeat, pull, result) and the HTTP status; the rest is the body, read by
// CoordinatorAnswer.classify. Bodies that are JSON also go through Subtask.parse and the
// journal and outbox readers (SubtaskResult.from, JournalEntry.from), which read back
// what the coordinator sent.
import WorkerCore

let statuses = [200, 201, 204, 400, 401, 403, 404, 413, 429, 500, 503]
let calls: [CoordinatorAnswer.Call] = [.register, .heartbeat, .pull, .result]

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    var input = FuzzInput(data, size)
    let pick = Int(input.byte())
    let call = calls[pick % calls.count]
    let status = statuses[(pick / calls.count) % statuses.count]
    let body = input.rest()
    switch CoordinatorAnswer.classify(call, status: status, body: body) {
    case .work(let subtask):
        check(Subtask.isSafeID(subtask.id) && Subtask.isSafeID(subtask.taskID), "unsafe ids accepted")
        check(subtask.timeoutMs >= 1 && subtask.timeoutMs <= 86_400_000, "timeout \(subtask.timeoutMs)")
        check(subtask.input.utf8.count <= Subtask.maxInputBytes, "input over the limit")
        // What is journaled must come back as the same subtask.
        let entry = RecoveryPlan.JournalEntry(subtask: subtask, pulledAtMs: 1)
        check(RecoveryPlan.JournalEntry.from(json: entry.json) == entry, "journal round trip")
    case .unrunnable(let id, let taskID, let reason):
        check(Subtask.isSafeID(id) && Subtask.isSafeID(taskID) && !reason.isEmpty, "unrunnable without ids or reason")
    case .registered(let token?):
        check(!token.isEmpty && token.utf8.count <= 4096, "mesh token accepted")
    case .deferred(_, let deferMs?):
        check(deferMs >= 0 && deferMs <= 3_600_000, "deferMs \(deferMs)")
    default: break
    }
    if let value = try? JSON.parse(body) {
        _ = Subtask.parse(value)
        if let result = SubtaskResult.from(json: value) {
            _ = CoordinatorWire.result(result, agentID: "fuzz").serialized
        }
        _ = RecoveryPlan.JournalEntry.from(json: value)
    }
    return 0
}
