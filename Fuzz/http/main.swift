// libFuzzer target: the proxy's HTTP request reader (HTTPRequestReader), fed the input
// in reads of fuzz-chosen sizes with small limits. Invariants: a complete request has
// exactly its Content-Length of body within the limit; a refusal carries a 4xx/5xx.
import Proxy
import WorkerCore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    var input = FuzzInput(data, size)
    let maxHead = 64 + Int(input.byte()) * 4
    let maxBody = Int(input.byte()) * 8
    let sizes = Array(input.take(Int(input.byte() % 4) + 1))
    var reader = HTTPRequestReader(maxHeadBytes: maxHead, maxBodyBytes: maxBody)
    for chunk in input.chunks(sizes: sizes) {
        switch reader.feed(chunk) {
        case .needMore: continue
        case .complete(let request):
            check(request.body.count <= maxBody, "a body of \(request.body.count) bytes over \(maxBody)")
            check(request.path.hasPrefix("/"), "path \(request.path)")
            let length = request.header("content-length").flatMap { Int($0) } ?? 0
            check(request.body.count == length, "a body of \(request.body.count) bytes for Content-Length \(length)")
            return 0
        case .refused(let refusal):
            check((400...599).contains(refusal.status), "refused with status \(refusal.status)")
            _ = HTTPServerResponse.json(refusal.status, ["error": .string(refusal.message)])
            return 0
        }
    }
    return 0
}
