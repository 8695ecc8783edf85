// libFuzzer target: the Bluetooth request assembler (RequestAssembler over
// JSONObjectFramer), fed the input in writes of fuzz-chosen sizes, with idle time passing
// between some of them. Invariants: nothing buffered beyond the limit, every event is a
// request with a safe id, bounded maxTokens and (protocol-bluetooth §2) a bounded chat, a cancel with a
// safe id, or a rejection with a reason.
import WorkerCore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    var input = FuzzInput(data, size)
    let limit = 16 + Int(input.byte()) * 4
    let idle: Int64 = 100
    let sizes = Array(input.take(Int(input.byte() % 4) + 1))
    var assembler = RequestAssembler(maxRequestBytes: limit, idleDropMs: idle)
    var framer = JSONObjectFramer(maxBytes: limit, idleDropMs: idle)
    var now: Int64 = 0
    for (n, chunk) in input.chunks(sizes: sizes).enumerated() {
        // Every third write comes after an idle gap that drops a partial request.
        now += n % 3 == 2 ? idle : 1
        for event in assembler.tick(nowMs: now) + assembler.feed(chunk, nowMs: now) {
            switch event {
            case .request(let request):
                check(Subtask.isSafeID(request.id), "unsafe id \(request.id)")
                check(!request.prompt.isEmpty || request.messages != nil, "empty prompt accepted without messages")
                check(
                    request.messages.map { (1...BluetoothRequest.maxTurns).contains($0.count) } ?? true,
                    "a chat of \(request.messages?.count ?? 0) turns")
                check(request.messages?.allSatisfy { BluetoothRequest.chatRoles.contains($0.role) } ?? true, "a turn with an unknown role")
                check(request.options.stop.count <= BluetoothRequest.maxStops, "\(request.options.stop.count) stops")
                check((1...BluetoothRequest.maxTokensLimit).contains(request.maxTokens), "maxTokens \(request.maxTokens)")
            case .cancel(let id):
                check(Subtask.isSafeID(id), "unsafe id in a cancel \(id)")
            case .rejected(let id, let error):
                check(!error.isEmpty, "a rejection without a reason")
                if let id { check(Subtask.isSafeID(id), "unsafe id in a rejection") }
            }
        }
        for event in framer.tick(nowMs: now) + framer.feed(chunk, nowMs: now) {
            switch event {
            case .object(let bytes):
                check(bytes.count <= limit, "an object of \(bytes.count) bytes over the limit \(limit)")
                check(bytes.first == UInt8(ascii: "{"), "an object that does not start with '{'")
            case .dropped(let bytes): check(bytes.count <= limit, "a dropped partial of \(bytes.count) bytes over \(limit)")
            case .tooLarge: break
            case .garbage(let bytes): check(bytes.count <= JSONObjectFramer.garbageKeptBytes, "a garbage report of \(bytes.count) bytes")
            }
        }
    }
    return 0
}
