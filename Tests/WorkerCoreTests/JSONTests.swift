import Testing
@testable import WorkerCore

@Suite struct JSONParsing {
    @Test func parsesEveryKindOfValue() throws {
        let value = try JSON.parse(#"{"a": [1, -2.5, true, false, null, "x\n\u00e9\ud83d\ude00"], "b": {}}"#)
        #expect(value["a"] == [1, -2.5, true, false, nil, "x\né😀"])
        #expect(value["b"] == .object(JSONObject()))
    }

    @Test func keepsIntegersExact() throws {
        #expect(try JSON.parse("9007199254740993") == .int(9_007_199_254_740_993))
        #expect(try JSON.parse("-0") == .int(0))
        #expect(try JSON.parse("1e2") == .double(100))
        #expect(try JSON.parse("99999999999999999999") == .double(1e20))
    }

    @Test(arguments: [
        ("", "no JSON value"),
        ("   ", "no JSON value"),
        ("{", "ends too early"),
        ("{\"a\":1,}", "unexpected character '}'"),
        ("[1,2", "ends too early"),
        ("{\"a\" 1}", "unexpected character '1'"),
        ("{'a':1}", "unexpected character '''"),
        ("01", "more data after"),
        ("1.", "invalid number"),
        ("-", "ends too early"),
        ("1e", "invalid number"),
        ("tru", "ends too early"),
        ("nul1", "unexpected character '1'"),
        ("\"abc", "ends too early"),
        ("\"a\u{01}b\"", "control character"),
        ("\"\\x\"", "invalid escape"),
        ("\"\\ud800\"", "invalid escape"),
        ("\"\\udc00\"", "invalid escape"),
        ("\"\\u12G4\"", "invalid escape"),
        ("{\"a\":1,\"a\":2}", "duplicate key \"a\""),
        ("[1] [2]", "more data after"),
        ("1e400", "invalid number"),
    ])
    func rejectsMalformedInput(text: String, expected: String) {
        do {
            let value = try JSON.parse(text)
            Issue.record("parsed \(value) from \(text.debugDescription)")
        } catch {
            #expect(error.description.contains(expected), "\(error.description)")
        }
    }

    @Test func rejectsInvalidUTF8WithItsOffset() {
        let bytes: [UInt8] = Array("{\"k\": \"ab".utf8) + [0xC3, 0x28] + Array("\"}".utf8)
        #expect(throws: JSONParseError.self) { try JSON.parse(bytes) }
        do { _ = try JSON.parse(bytes) } catch {
            #expect(error.reason == .invalidUTF8)
        }
    }

    @Test(arguments: [
        (#""\n""#, "\n"),
        (#""a\"b\\c\/d""#, "a\"b\\c/d"),
        (#""\u00e9t\u00e9""#, "été"),
        (#""é\n😀\ud83d\ude00x""#, "é\n😀😀x"),
        (#""\b\f\r\t""#, "\u{08}\u{0C}\r\t"),
        (#""plain é 😀""#, "plain é 😀"),
        (#""""#, ""),
    ])
    func decodesEscapesBetweenRunsOfText(text: String, expected: String) throws {
        #expect(try JSON.parse(text) == .string(expected))
    }

    @Test func rejectsInvalidUTF8AfterAnEscapeAtTheRunItStarts() {
        // The run after an escape is checked as the run before one is.
        let bytes: [UInt8] = Array("[\"a\\n".utf8) + [0xC3, 0x28] + Array("\"]".utf8)
        do {
            _ = try JSON.parse(bytes)
            Issue.record("parsed invalid UTF-8")
        } catch {
            #expect(error.reason == .invalidUTF8)
            #expect(error.offset == 5)
        }
    }

    @Test func refusesNestingBeyondTheLimit() {
        let deep = String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)
        do {
            _ = try JSON.parse(deep)
            Issue.record("accepted 10000 levels")
        } catch {
            #expect(error.reason == .tooDeep(limit: JSON.defaultMaxDepth))
        }
        #expect((try? JSON.parse(String(repeating: "[", count: 64) + String(repeating: "]", count: 64))) != nil)
    }

    @Test func reportsLineAndColumn() {
        do { _ = try JSON.parse("{\n  \"a\": 1,\n  \"b\": x\n}") } catch {
            #expect(error.line == 3)
            #expect(error.column == 8)
        }
    }

    @Test func serialisesAndParsesBackTheSameValue() throws {
        let value: JSONValue = [
            "s": "quote \" backslash \\ nl \n tab \t ctl \u{01} ls \u{2028} é 😀", "n": [1, 2.5, -3, 1e300], "o": ["x": nil, "t": true],
        ]
        let text = value.serialized
        #expect(!text.contains("\n"))
        #expect(try JSON.parse(text) == value)
    }

    @Test func writesNonFiniteNumbersAsNull() {
        #expect(JSONValue.array([.double(.nan), .double(.infinity)]).serialized == "[null,null]")
    }

    @Test func keepsMemberOrder() throws {
        #expect(try JSON.parse(#"{"z":1,"a":2,"m":3}"#).objectValue?.keys == ["z", "a", "m"])
    }

    // Hardening #26 row 13: objects past the index threshold keep exactly the small
    // objects' rules (first duplicate refused where its key starts, order kept).
    @Test(arguments: [3, JSONObject.indexThreshold - 1, JSONObject.indexThreshold, 20_000])
    func refusesADuplicateKeyAtAnySizeWhereTheSecondCopyStarts(keys: Int) {
        let members = (0..<keys).map { "\"k\($0)\":\($0)" }
        let text = "{" + members.joined(separator: ",") + ",\"k\(keys / 2)\":0,\"late\":1}"
        let offset = text.utf8.count - ",\"late\":1}".utf8.count - "\"k\(keys / 2)\":0".utf8.count
        do {
            let value = try JSON.parse(text)
            Issue.record("accepted a duplicate key in \(value.objectValue?.members.count ?? 0) members")
        } catch {
            #expect(error.reason == .duplicateKey("k\(keys / 2)"))
            #expect(error.offset == offset)
        }
    }

    @Test func findsEveryKeyOfALargeObjectInWrittenOrder() throws {
        let text = "{" + (0..<20_000).reversed().map { "\"k\($0)\":\($0)" }.joined(separator: ",") + "}"
        let object = try #require(try JSON.parse(text).objectValue)
        #expect(object.keys.first == "k19999")
        #expect(object.keys.last == "k0")
        #expect((0..<20_000).allSatisfy { object["k\($0)"] == .int(Int64($0)) })
        #expect(object["k20000"] == nil)
    }

    @Test func refusesCanonicallyEquivalentKeysAsDuplicatesBelowAndAboveTheIndexThreshold() {
        // Swift compares strings by canonical equivalence: "é" precomposed and decomposed
        // are one key, as they were before the index.
        for filler in [0, 40] {
            let members = (0..<filler).map { "\"f\($0)\":0" } + ["\"\u{E9}\":1", "\"e\u{301}\":2"]
            do {
                _ = try JSON.parse("{" + members.joined(separator: ",") + "}")
                Issue.record("accepted two spellings of one key after \(filler) members")
            } catch {
                #expect(error.reason == .duplicateKey("e\u{301}"))
            }
        }
    }

    @Test func editingALargeObjectKeepsItsLookupsRight() {
        var object = JSONObject((0..<40).map { ("k\($0)", JSONValue.int($0)) })
        object["k3"] = nil
        object["k39"] = "changed"
        object["new"] = true
        #expect(object["k3"] == nil)
        #expect(object["k4"] == .int(4))
        #expect(object["k39"] == "changed")
        #expect(object.keys.last == "new")
        #expect(object.members.count == 40)
        for i in 0..<38 { object["k\(i)"] = nil }
        #expect(object.keys == ["k38", "k39", "new"])
        #expect(object["k38"] == .int(38))
    }

    @Test func comparesObjectsByTheirMembersOnly() {
        var edited = JSONObject((0..<40).map { ("k\($0)", JSONValue.int($0)) })
        for i in 2..<40 { edited["k\(i)"] = nil }
        #expect(edited == JSONObject([("k0", 0), ("k1", 1)]))
    }
}
