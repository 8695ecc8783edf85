// libFuzzer target: the model-server answer decoders (ModelWire.decodeGenerate,
// decodeProbe, statusError). The first byte picks the backend kind and endpoint, the
// status and a small maxOutputBytes; the rest is the server's body.
import ModelBackend
import WorkerCore

let statuses = [200, 400, 401, 404, 413, 422, 429, 500, 503, 302]

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    var input = FuzzInput(data, size)
    let pick = Int(input.byte())
    var config = WorkerConfig.Backend()
    config.kind = pick & 1 == 0 ? .ollama : .openai
    config.openaiEndpoint = pick & 2 == 0 ? .completions : .chat
    config.maxOutputBytes = Int64(input.byte())
    let status = statuses[(pick >> 2) % statuses.count]
    let body = input.rest()
    let wire = ModelWire(config: config)
    switch wire.decodeGenerate(status: status, body: body) {
    case .success(let output):
        check(output.text.utf8.count <= Int(config.maxOutputBytes), "output of \(output.text.utf8.count) bytes over \(config.maxOutputBytes)")
    case .failure(let error):
        check(!error.message.isEmpty, "an error without a message")
        _ = error.description
    }
    _ = wire.decodeProbe(status: status, body: body)
    _ = wire.statusError(status: status, body: body)
    return 0
}
