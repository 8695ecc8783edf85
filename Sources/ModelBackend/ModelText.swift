// Text from a model server, made safe to show: bounded, printable, cut on UTF-8
// boundaries. Servers are not trusted to send short, clean or valid text.

import WorkerCore

/// Helpers that turn untrusted server bytes into text for the operator.
public enum ModelText {
    /// Longest server text (an error message, a page title) quoted in a ModelError.
    public static let serverTextLimit = 300
    /// Bytes of a non-JSON body that are looked at to describe it.
    static let snippetBytes = 4_096

    /// `text` cut to at most `maxBytes` bytes of UTF-8, never inside a character's
    /// encoding (a scalar boundary); `truncated` says whether anything was cut.
    public static func cutUTF8(_ text: String, maxBytes: Int) -> (text: String, truncated: Bool) {
        let utf8 = text.utf8
        guard utf8.count > maxBytes else { return (text, false) }
        guard maxBytes > 0 else { return ("", true) }
        var end = utf8.index(utf8.startIndex, offsetBy: maxBytes)
        // A continuation byte (10xxxxxx) at the cut means the cut is inside a character.
        while end > utf8.startIndex && utf8[end] & 0xC0 == 0x80 {
            end = utf8.index(before: end)
        }
        return (String(decoding: utf8[..<end], as: UTF8.self), true)
    }

    /// One line of at most `limit` characters: whitespace runs become one space,
    /// control characters and bidirectional overrides (which can disguise a terminal
    /// line) become "?", and "…" marks a cut.
    public static func printable(_ text: some StringProtocol, limit: Int = serverTextLimit) -> String {
        var out = ""
        var count = 0
        var pendingSpace = false
        for scalar in text.unicodeScalars {
            let value = scalar.value
            if value == 0x20 || value == 0x09 || value == 0x0A || value == 0x0D {
                pendingSpace = count > 0
                continue
            }
            if count + (pendingSpace ? 1 : 0) >= limit {
                out += "…"
                return out
            }
            if pendingSpace {
                out += " "
                count += 1
                pendingSpace = false
            }
            if value < 0x20 || (0x7F...0x9F).contains(value) || isBidiControl(value) {
                out += "?"
            } else {
                out.unicodeScalars.append(scalar)
            }
            count += 1
        }
        return out
    }

    static func isBidiControl(_ value: UInt32) -> Bool {
        value == 0x061C || value == 0x200E || value == 0x200F || (0x202A...0x202E).contains(value)
            || (0x2066...0x2069).contains(value)
    }

    /// The error text a server put in a body, in the forms servers use:
    /// `{"error": "…"}` (Ollama), `{"error": {"message": …}}` (OpenAI, llama.cpp, vLLM),
    /// `{"detail": …}` (FastAPI), `{"message": …}`; else the body itself, described.
    /// Nil for an empty body.
    public static func serverError(in body: [UInt8]) -> String? {
        if body.allSatisfy(isJSONWhitespace) { return nil }
        if let value = try? JSON.parse(body) {
            if case .object(let object) = value, let text = errorText(in: object) { return printable(text) }
            return printable(value.serialized)
        }
        return describeNonJSON(body)
    }

    /// The message of an error object, when the object is one.
    static func errorText(in object: JSONObject) -> String? {
        switch object["error"] {
        case .string(let text)?: return text
        case .object(let error)?:
            if let message = error["message"]?.stringValue { return message }
            return JSONValue.object(error).serialized
        default: break
        }
        switch object["detail"] {
        case .string(let text)?: return text
        case .array(let items)?:
            if let message = items.first?["msg"]?.stringValue { return message }
        default: break
        }
        if let message = object["message"]?.stringValue { return message }
        return nil
    }

    /// A body that is not JSON, described for a person: empty, an HTML page (with its
    /// title), or its first characters.
    static func describeNonJSON(_ body: [UInt8]) -> String {
        if body.allSatisfy(isJSONWhitespace) { return "an empty body" }
        let head = Array(body.prefix(snippetBytes))
        if looksLikeHTML(head) {
            if let title = htmlTitle(head), !title.isEmpty { return "an HTML page titled \"\(title)\"" }
            return "an HTML page starting \"\(printable(stripTags(head), limit: 120))\""
        }
        return "\"\(printable(String(decoding: head, as: UTF8.self), limit: 120))\""
    }

    static func isJSONWhitespace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09
    }

    static func looksLikeHTML(_ bytes: [UInt8]) -> Bool {
        bytes.first(where: { !isJSONWhitespace($0) }) == UInt8(ascii: "<")
    }

    /// The text of the first `<title>` element, printable, when there is one.
    static func htmlTitle(_ bytes: [UInt8]) -> String? {
        guard let open = find("<title", in: bytes, from: 0),
            let close = bytes[open...].firstIndex(of: UInt8(ascii: ">"))
        else { return nil }
        let end = find("</title", in: bytes, from: close + 1) ?? bytes.count
        return printable(String(decoding: bytes[(close + 1)..<end], as: UTF8.self), limit: 120)
    }

    /// The text of some HTML with its tags left out.
    static func stripTags(_ bytes: [UInt8]) -> String {
        var kept: [UInt8] = []
        var inTag = false
        for byte in bytes {
            if byte == UInt8(ascii: "<") { inTag = true; kept.append(0x20); continue }
            if byte == UInt8(ascii: ">") { inTag = false; continue }
            if !inTag { kept.append(byte) }
        }
        return String(decoding: kept, as: UTF8.self)
    }

    /// Where `needle` (ASCII, lowercase) starts in `bytes` at or after `from`, ignoring
    /// ASCII case.
    static func find(_ needle: String, in bytes: [UInt8], from: Int) -> Int? {
        let pattern = Array(needle.utf8)
        guard !pattern.isEmpty, bytes.count >= pattern.count, from <= bytes.count - pattern.count else { return nil }
        outer: for start in from...(bytes.count - pattern.count) {
            for (offset, expected) in pattern.enumerated() {
                var byte = bytes[start + offset]
                if byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") { byte += 0x20 }
                if byte != expected { continue outer }
            }
            return start
        }
        return nil
    }
}
