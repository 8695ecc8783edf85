import Testing
import WorkerCore
@testable import ModelBackend

@Suite struct OllamaPullTests {
    static func line(_ text: String) -> OllamaPullLine { OllamaPullLine.parse(ArraySlice(text.utf8)) }

    @Test func readsEachKindOfLineOllamaDocuments() {
        #expect(Self.line(#"{"status":"pulling manifest"}"#) == .progress(status: "pulling manifest", digest: nil, total: nil, completed: nil))
        #expect(
            Self.line(#"{"status":"pulling abc","digest":"abc","total":2142590208,"completed":241970}"#)
                == .progress(status: "pulling abc", digest: "abc", total: 2_142_590_208, completed: 241_970))
        #expect(Self.line(#"{"status":"success"}"#) == .success)
        #expect(Self.line(#"{"error":"pull model manifest: file does not exist"}"#) == .failed("pull model manifest: file does not exist"))
    }

    @Test(arguments: ["", "not json", "[1]", #"{"total":5}"#, #"{"status":5}"#, "{\"status\":\"x\"", String(repeating: "[", count: 100)])
    func garbageIsUnreadableNotFatal(text: String) {
        #expect(Self.line(text) == .unreadable)
    }

    @Test func progressSumsEveryLayerAndNeverGoesPastTheTotal() {
        var progress = PullProgress()
        #expect(progress.percent == nil)
        progress.apply(Self.line(#"{"status":"pulling a","digest":"a","total":1000,"completed":500}"#))
        #expect(progress.percent == 50)
        progress.apply(Self.line(#"{"status":"pulling b","digest":"b","total":1000}"#))
        #expect(progress.percent == 25)
        progress.apply(Self.line(#"{"status":"pulling b","digest":"b","total":1000,"completed":99999}"#))
        #expect(progress.percent == 75)
        progress.apply(Self.line(#"{"status":"pulling a","digest":"a","total":1000,"completed":-5}"#))
        #expect(progress.percent == 50, "a negative count is not a count")
        progress.apply(Self.line(#"{"status":"verifying sha256 digest"}"#))
        #expect(progress.status == "verifying sha256 digest")
        #expect(progress.message(model: "m") == "pulling m: verifying sha256 digest (1.0 kB of 2.0 kB)")
    }

    @Test func linesAreSplitHoweverTheBytesArriveAndBounded() {
        var splitter = LineSplitter()
        #expect(splitter.feed(Array("{\"a\":".utf8)).isEmpty)
        let lines = splitter.feed(Array("1}\n\n{\"b\":2}\n{\"c\"".utf8))
        #expect(lines.map { String(decoding: $0, as: UTF8.self) } == ["{\"a\":1}", "", "{\"b\":2}"])
        #expect(splitter.finish().map { String(decoding: $0, as: UTF8.self) } == "{\"c\"")
        var long = LineSplitter()
        let cut = long.feed([UInt8](repeating: 0x61, count: LineSplitter.maxLineBytes * 3) + [0x0A])
        #expect(cut.first?.count == LineSplitter.maxLineBytes)
    }

    @Test func progressIsForwardedAtMostEveryIntervalButANewPhaseAtOnce() {
        var throttle = ProgressThrottle(intervalMs: 2_000)
        let sends = [
            throttle.shouldSend(phase: "pulling", message: "1", nowMs: 0),
            throttle.shouldSend(phase: "pulling", message: "2", nowMs: 1_999),
            throttle.shouldSend(phase: "pulling", message: "2", nowMs: 2_000),
            throttle.shouldSend(phase: "pulling", message: "2", nowMs: 9_000),  // nothing changed
            throttle.shouldSend(phase: "done", message: "2", nowMs: 9_001),
        ]
        #expect(sends == [true, false, true, false, true])
    }
}
