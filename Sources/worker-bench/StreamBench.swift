// Streaming figures (docs/reference/model-backends.md): time to the first streamed piece against time to the whole
// answer for a 500-token generation on a real llama.cpp server, and what each streamed
// piece costs the worker itself.
#if canImport(Glibc)
import Glibc
#endif
import ModelBackend
import Posix
import WorkerCore

/// CPU time (user + system) of this process so far, in microseconds.
func processCPUMicroseconds() -> Int64 {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    return Int64(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1_000_000 + Int64(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec)
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    return sorted.isEmpty ? 0 : sorted[sorted.count / 2]
}

func streamBench(url: String) async {
    var config = WorkerConfig.Backend()
    config.kind = .openai
    config.url = url
    config.model = "tiny"
    config.timeoutMs = 300_000
    let backend = ModelBackend(config: config)
    // 500 tokens after a one-token prompt fit the test bed's 512-token context.
    let request = ModelRequest(prompt: "x", maxTokens: 500, timeoutMs: 300_000)
    _ = try? await backend.generate(ModelRequest(prompt: "x", maxTokens: 4, timeoutMs: 60_000))  // warm-up

    var firstPiece: [Double] = []
    var streamedWhole: [Double] = []
    var whole: [Double] = []
    var pieces = 0
    var cpu: Int64 = 0
    for _ in 0..<5 {
        do {
            let cpuBefore = processCPUMicroseconds()
            var count = 0
            var output: ModelOutput?
            for try await event in backend.stream(request) {
                switch event {
                case .text: count += 1
                case .done(let done): output = done
                }
            }
            cpu += processCPUMicroseconds() - cpuBefore
            pieces += count
            if let output {
                firstPiece.append(Double(output.firstPieceMs))
                streamedWhole.append(Double(output.durationMs))
            }
            whole.append(Double(try await backend.generate(request).durationMs))
        } catch {
            print("   stream bench failed: \(error)")
            return
        }
    }
    let first = median(firstPiece)
    let answer = median(whole)
    print("== streaming from llama.cpp (test bed, tiny model), 500-token generations, medians of 5")
    print("   time to the first streamed piece:  \(format(first)) ms")
    print("   time to the whole answer (stream: false): \(format(answer)) ms; the same stream to its end: \(format(median(streamedWhole))) ms")
    print("   ratio first piece / whole answer: \(format(first / max(answer, 1)))  (a client sees text \(format(answer / max(first, 1)))x sooner)")
    print(
        "   worker CPU per streamed piece (libcurl thread, decoding, the iterator): \(format(Double(cpu) / Double(max(pieces, 1)))) µs over \(pieces) pieces"
    )

    // The decoding alone, on a recorded 500-piece answer in memory, against parsing each
    // event's JSON as the baseline.
    var body: [UInt8] = []
    for i in 0..<500 {
        body +=
            Array(
                #"data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"tiny","choices":[{"text":" word\#(i)","index":0,"logprobs":null,"finish_reason":null}]}"#
                    .utf8) + [10, 10]
    }
    body += Array("data: [DONE]\n\n".utf8)
    let wire = ModelWire(config: config)
    let decode = measure("decode", iterations: 20, batches: 9) {
        var decoder = ModelStreamDecoder(wire: wire, request: request)
        var start = 0
        while start < body.count {
            _ = decoder.feed(Array(body[start..<min(body.count, start + 1_400)]))
            start += 1_400
        }
        _ = decoder.finish()
    }
    let lines = body.split(separator: 10).filter { !$0.isEmpty }.map { Array($0.dropFirst(6)) }
    let parse = measure("parse", iterations: 20, batches: 9) {
        for line in lines { _ = try? JSON.parse(line) }
    }
    print("   decoding alone: \(format(decode / 500)) µs a piece; baseline, only parsing each event's JSON: \(format(parse / 500)) µs")
}
