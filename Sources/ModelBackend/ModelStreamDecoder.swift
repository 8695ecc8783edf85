// A streamed answer decoded as it arrives, as a pure value: Ollama's NDJSON (one JSON
// object a line, the last with `done: true`) and OpenAI's server-sent events (`data: {…}`
// lines, `data: [DONE]` at the end). Bytes go in as the connection delivers them (a
// chunk may end inside a line, or inside a character); pieces of text come out.

import WorkerCore

/// Turns the chunks of one streamed answer into pieces of text and, at the end, the
/// whole output. Bounded: a line longer than `lineCap` and text beyond `textCap` are
/// `tooLarge`; text beyond `backend.maxOutputBytes` is cut (`truncated`) and dropped.
public struct ModelStreamDecoder: Sendable {
    public let wire: ModelWire
    /// The answer comes from the chat API (`message.content`, `delta.content`).
    public let chat: Bool
    /// The path asked, for messages.
    public let path: String
    let lineCap: Int
    let textCap: Int
    let outputCap: Int

    var buffer: [UInt8] = []
    var framing = Framing.undecided
    var answer = Answer()

    /// How the body comes: OpenAI servers that ignore `stream: true` answer one JSON
    /// object, kept whole and decoded at the end. The first byte that is not whitespace decides.
    enum Framing: Sendable { case undecided, lines, whole }

    /// What the lines so far said.
    struct Answer: Sendable {
        var text = ""
        /// All the text that came, the part cut at the output cap included.
        var textBytes = 0
        var truncated = false
        var thinkingBytes = 0
        var finishReason: String?
        var promptTokens: Int?
        var outputTokens: Int?
        /// `done: true` or `data: [DONE]` came.
        var finished = false
    }

    /// `streaming` false: the request asked for the whole answer (`stream: false`), which
    /// is decoded as one object at the end.
    public init(wire: ModelWire, request: ModelRequest, streaming: Bool = true) {
        self.wire = wire
        if !streaming { framing = .whole }
        chat = wire.usesChat(request)
        path = wire.path(for: request)
        lineCap = max(wire.responseCap(for: request), 65_536)
        outputCap = Int(clamping: max(0, wire.config.maxOutputBytes))
        // The answer's text may run to three times the output cap before it is refused,
        // the same allowance as a whole answer's (ModelWire.responseCap).
        textCap = 3 * min(outputCap, ModelWire.maxResponseCap) + ModelWire.answerOverheadBytes
    }

    /// The pieces of text in `bytes` (none while a line is incomplete), and the error that
    /// ends the stream, when one came (the pieces before it still count).
    public mutating func feed(_ bytes: [UInt8]) -> (pieces: [String], error: ModelError?) {
        var pieces: [String] = []
        if framing == .undecided, let first = bytes.first(where: { !ModelText.isJSONWhitespace($0) }) {
            framing = wire.config.kind == .openai && first == UInt8(ascii: "{") ? .whole : .lines
        }
        buffer.append(contentsOf: bytes)
        if framing == .whole {
            return ([], buffer.count > lineCap ? tooLarge(whole: true) : nil)
        }
        var start = 0
        while let newline = buffer[start...].firstIndex(of: 0x0A) {
            let line = buffer[start..<newline]
            start = newline + 1
            if let error = take(line, into: &pieces) { return (pieces, error) }
        }
        buffer.removeFirst(start)
        return (pieces, buffer.count > lineCap ? tooLarge() : nil)
    }

    /// The end of the body: the last line, then the whole output, or why there is none.
    public mutating func finish() -> Result<ModelOutput, ModelError> {
        if framing == .whole {
            return wire.decodeGenerate(status: 200, body: buffer, chat: chat)
        }
        var pieces: [String] = []
        if !buffer.allSatisfy(ModelText.isJSONWhitespace) {
            let line = buffer[...]
            buffer = []
            if let error = take(line, into: &pieces) { return .failure(error) }
        }
        if !answer.finished && answer.finishReason == nil {
            let end = wire.config.kind == .ollama ? "a line with \"done\": true" : "data: [DONE]"
            if answer.text.isEmpty && answer.thinkingBytes == 0 {
                return .failure(bad("an empty stream (no \(end))"))
            }
            return .failure(bad("a stream that ended before \(end) (\(answer.textBytes) bytes of text came)"))
        }
        if answer.text.isEmpty && answer.thinkingBytes > 0 {
            return .failure(wire.onlyThoughtError(thinkingBytes: answer.thinkingBytes, finishReason: answer.finishReason))
        }
        return .success(
            ModelOutput(
                text: answer.text, durationMs: 0, truncated: answer.truncated,
                finishReason: answer.finishReason.map { ModelText.printable($0, limit: 40) },
                promptTokens: answer.promptTokens, outputTokens: answer.outputTokens))
    }

    // MARK: - Lines

    /// Reads one line; nil when it was fine.
    mutating func take(_ raw: ArraySlice<UInt8>, into pieces: inout [String]) -> ModelError? {
        var line = raw
        if line.last == 0x0D { line.removeLast() }
        if line.allSatisfy(ModelText.isJSONWhitespace) { return nil }
        switch wire.config.kind {
        case .ollama: return ollamaLine(Array(line), into: &pieces)
        case .openai: return eventLine(line, into: &pieces)
        }
    }

    mutating func ollamaLine(_ line: [UInt8], into pieces: inout [String]) -> ModelError? {
        let object: JSONObject
        switch ModelWire.parseObject(line) {
        case .success(let parsed): object = parsed
        case .failure(let what): return bad(what.replacingFirst("a body", with: "a line"))
        }
        if let error = serverError(in: object) { return error }
        let content: JSONValue?
        let thinking: JSONValue?
        if chat {
            content = object["message"]?["content"]
            thinking = object["message"]?["thinking"]
        } else {
            content = object["response"]
            thinking = object["thinking"]
        }
        switch content {
        case .string(let piece)?: if let error = add(piece, into: &pieces) { return error }
        case nil, .null?: break
        case let other?: return bad("\(chat ? "\"message.content\"" : "\"response\"") as \(other.typeDescription), not a string")
        }
        answer.thinkingBytes += thinking?.stringValue?.utf8.count ?? 0
        switch object["done"] {
        case .bool(true)?:
            answer.finished = true
            answer.finishReason = object["done_reason"]?.stringValue ?? answer.finishReason
            answer.promptTokens = object["prompt_eval_count"]?.intValue.map { Int($0) } ?? answer.promptTokens
            answer.outputTokens = object["eval_count"]?.intValue.map { Int($0) } ?? answer.outputTokens
        case .bool(false)?, nil: break
        case let other?: return bad("\"done\" as \(other.typeDescription), not a boolean")
        }
        return nil
    }

    static let dataField = Array("data:".utf8)
    static let otherFields = [Array("event:".utf8), Array("id:".utf8), Array("retry:".utf8)]
    static let doneData = Array("[DONE]".utf8)

    mutating func eventLine(_ line: ArraySlice<UInt8>, into pieces: inout [String]) -> ModelError? {
        // Comments (": ping"), and the event's other fields, carry no text.
        if line.first == UInt8(ascii: ":") { return nil }
        guard line.starts(with: ModelStreamDecoder.dataField) else {
            if ModelStreamDecoder.otherFields.contains(where: { line.starts(with: $0) }) { return nil }
            return bad("a line that is not a server-sent event: \(ModelText.describeNonJSON(Array(line)))")
        }
        var payload = line.dropFirst(ModelStreamDecoder.dataField.count)
        if payload.first == 0x20 { payload.removeFirst() }
        if payload.elementsEqual(ModelStreamDecoder.doneData) {
            answer.finished = true
            return nil
        }
        let object: JSONObject
        switch ModelWire.parseObject(Array(payload)) {
        case .success(let parsed): object = parsed
        case .failure(let what): return bad("an event whose data is \(what.replacingFirst("a body", with: "a value"))")
        }
        if let error = serverError(in: object) { return error }
        if case .object(let usage)? = object["usage"] {
            answer.promptTokens = usage["prompt_tokens"]?.intValue.map { Int($0) } ?? answer.promptTokens
            answer.outputTokens = usage["completion_tokens"]?.intValue.map { Int($0) } ?? answer.outputTokens
        }
        // The last chunk with the counts has no choices.
        guard case .array(let choices)? = object["choices"], let first = choices.first else { return nil }
        guard case .object(let choice) = first else { return bad("\"choices[0]\" as \(first.typeDescription), not an object") }
        if case .string(let reason)? = choice["finish_reason"] { answer.finishReason = reason }
        let content: JSONValue?
        if chat {
            guard let delta = choice["delta"] ?? choice["message"] else { return nil }
            content = delta["content"]
            answer.thinkingBytes += (delta["reasoning_content"] ?? delta["reasoning"])?.stringValue?.utf8.count ?? 0
        } else {
            content = choice["text"]
        }
        switch content {
        case .string(let piece)?: return add(piece, into: &pieces)
        case nil, .null?: return nil
        case let other?: return bad("\(chat ? "\"delta.content\"" : "\"text\"") as \(other.typeDescription), not a string")
        }
    }

    /// Keeps a piece of text, cut at the output cap.
    mutating func add(_ piece: String, into pieces: inout [String]) -> ModelError? {
        guard !piece.isEmpty else { return nil }
        answer.textBytes += piece.utf8.count
        if answer.textBytes > textCap { return tooLarge() }
        if answer.truncated { return nil }
        let room = outputCap - answer.text.utf8.count
        let cut = ModelText.cutUTF8(piece, maxBytes: room)
        if cut.truncated { answer.truncated = true }
        if !cut.text.isEmpty {
            answer.text += cut.text
            pieces.append(cut.text)
        }
        return nil
    }

    /// An error a server reports inside a stream (Ollama `{"error": "…"}`, OpenAI
    /// `{"error": {"message": …}}`).
    func serverError(in object: JSONObject) -> ModelError? {
        guard let error = object["error"], error != .null else { return nil }
        let text = ModelText.errorText(in: object).map { ModelText.printable($0) } ?? error.typeDescription
        return ModelError(.badAnswer, "\(wire.serverName) reported an error in its answer to \(path): \(text)")
    }

    func bad(_ what: String) -> ModelError {
        ModelError(.badAnswer, "\(wire.serverName) answered \(path) with \(what); \(wire.kindHint)")
    }

    func tooLarge(whole: Bool = false) -> ModelError {
        let what = whole ? "\(lineCap) bytes" : "\(textCap) bytes of text"
        return ModelError(
            .tooLarge,
            "\(wire.serverName)'s answer to \(path) is larger than \(what) (backend.maxOutputBytes \(wire.config.maxOutputBytes) plus room); lower maxTokens or raise backend.maxOutputBytes"
        )
    }
}

extension String {
    func replacingFirst(_ target: String, with replacement: String) -> String {
        guard let range = firstRange(of: target) else { return self }
        var copy = self
        copy.replaceSubrange(range, with: replacement)
        return copy
    }
}
