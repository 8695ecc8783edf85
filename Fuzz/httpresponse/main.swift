// libFuzzer target: the worker's own HTTP/1.1 client's response reader
// (HTTPResponseReader), fed the input in reads of fuzz-chosen sizes with a small body
// limit, and again whole. Invariants: the head comes before any body, nothing after the
// end, the body within the limit, a failure only of kind transfer or response-too-large
// and repeated by every later feed, the connection's end settles every answer, and the
// split does not change the outcome. The first byte's low bit sends the rest to the URL
// parser instead (PlainHTTPURL: a request target that cannot split a request).
import HTTP

struct Outcome: Equatable {
    var status: Int?
    var body: [UInt8] = []
    var isComplete = false
    var failure: HTTPError.Kind?
}

func read(_ pieces: [ArraySlice<UInt8>], maxBody: Int, isHead: Bool) -> Outcome {
    var reader = HTTPResponseReader(maxBodyBytes: maxBody, isHeadRequest: isHead)
    var outcome = Outcome()
    func take(_ progress: HTTPResponseReader.Progress) {
        if let failure = outcome.failure {
            check(progress.failure?.kind == failure, "a failure was not repeated")
            check(progress.head == nil && progress.body.isEmpty && !progress.isComplete, "progress after a failure")
            return
        }
        if let head = progress.head {
            check(outcome.status == nil, "a second head")
            check((200...599).contains(head.status), "a final status of \(head.status)")
            outcome.status = head.status
        }
        check(progress.body.isEmpty || outcome.status != nil, "body before the head")
        check(progress.body.isEmpty || !outcome.isComplete, "body after the end")
        outcome.body += progress.body
        check(outcome.body.count <= maxBody, "a body of \(outcome.body.count) bytes over \(maxBody)")
        check(!(progress.isComplete && progress.failure != nil), "complete and failed at once")
        if progress.isComplete { outcome.isComplete = true }
        if let failure = progress.failure {
            check(failure.kind == .transfer || failure.kind == .responseTooLarge, "a failure of kind \(failure.kind)")
            check(!failure.message.isEmpty, "a failure without words")
            outcome.failure = failure.kind
        }
    }
    for piece in pieces { take(reader.feed(piece)) }
    take(reader.finish())
    check(outcome.isComplete != (outcome.failure != nil), "the end settled nothing")
    return outcome
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    var input = FuzzInput(data, size)
    let flags = input.byte()
    if flags & 1 == 1 {
        let text = String(decoding: input.rest(), as: UTF8.self)
        if let url = try? PlainHTTPURL(text) {
            check(url.target.hasPrefix("/"), "target \(url.target)")
            check(!url.target.utf8.contains { $0 <= 0x20 || $0 >= 0x7F }, "a target with a space, control or non-ASCII byte")
            check(!url.authority.utf8.contains { $0 <= 0x20 || $0 == 0x40 }, "authority \(url.authority)")
            check(url.port > 0 && !url.host.isEmpty, "port \(url.port), host \(url.host)")
        }
        return 0
    }
    let isHead = flags & 2 == 2
    let maxBody = Int(input.byte()) * 16
    let sizes = Array(input.take(Int(input.byte() % 4) + 1))
    let wire = input.rest()
    var pieces: [ArraySlice<UInt8>] = []
    var at = 0
    while at < wire.count {
        let size = max(1, Int(sizes[pieces.count % sizes.count]))
        pieces.append(wire[at..<min(wire.count, at + size)])
        at += size
    }
    let inPieces = read(pieces, maxBody: maxBody, isHead: isHead)
    let whole = read([wire[...]], maxBody: maxBody, isHead: isHead)
    let failures = "\(String(describing: inPieces.failure)) / \(String(describing: whole.failure))"
    check(inPieces.failure == whole.failure, "the split changed the failure: \(failures)")
    if whole.failure == nil {
        check(inPieces == whole, "the split changed the answer")
    } else {
        check(inPieces.status == whole.status, "the split changed the status")
    }
    return 0
}
