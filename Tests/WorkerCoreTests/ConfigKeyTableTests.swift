import Foundation
import Testing
@testable import WorkerCore

/// The key table (`ConfigKey.all`, the source of docs/reference/configuration.md) and the
/// decoder (`WorkerConfig.decode`) agree: every row is a key the decoder knows, and every key
/// the decoder knows has a row. A key added to one without the other fails here.
@Suite struct ConfigKeyTable {
    /// The problems the decoder reports for `path` set to null: a known key gets a type
    /// problem ("must be …"), an unknown one "unknown key".
    func unknown(_ path: String) -> Bool {
        let parts = path.split(separator: ".").map(String.init)
        let text = parts.count == 1 ? "{\"\(parts[0])\": null}" : "{\"\(parts[0])\": {\"\(parts[1])\": null}}"
        do {
            _ = try WorkerConfig.parse(Array(text.utf8))
            return false
        } catch {
            return error.problems.contains { ($0.path == path || $0.path == parts[0]) && $0.message.hasPrefix("unknown key") }
        }
    }

    /// Every key the decoder's source handles: `case "key":` lines of `decode`, the top-level
    /// ones (the least indented) naming sections, and the policy keys it hands to PowerPolicy.
    static func decoderKeys() throws -> Set<String> {
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources/WorkerCore/Config/Config.swift")
        let text = try String(contentsOf: source, encoding: .utf8)
        guard let start = text.range(of: "public static func decode("),
            let end = text.range(of: "\n    }\n", range: start.upperBound..<text.endIndex)
        else {
            Issue.record("WorkerConfig.decode not found in \(source.path)")
            return []
        }
        var cases: [(indent: Int, name: String)] = []
        for line in text[start.upperBound..<end.lowerBound].split(separator: "\n") {
            let indent = line.prefix { $0 == " " }.count
            let rest = line.dropFirst(indent)
            guard rest.hasPrefix("case \""), let close = rest.dropFirst(6).firstIndex(of: "\"") else { continue }
            cases.append((indent, String(rest[rest.index(rest.startIndex, offsetBy: 6)..<close])))
        }
        let top = cases.map(\.indent).min() ?? 0
        var keys: Set<String> = []
        var section: String?
        var sectionHasKeys = false
        for (indent, name) in cases {
            if indent == top {
                if let section, !sectionHasKeys { keys.insert(section) }
                section = name
                sectionHasKeys = false
            } else if let section {
                keys.insert("\(section).\(name)")
                sectionHasKeys = true
            }
        }
        if let section, !sectionHasKeys { keys.insert(section) }
        // The policy section's keys are PowerPolicy's, except the one it refuses by name.
        if keys.contains("policy") {
            keys.remove("policy")
            for key in PowerPolicy.keys where key != "allowRemoteModelSwitch" { keys.insert("policy.\(key)") }
        }
        return keys
    }

    @Test func everyRowIsAKeyTheDecoderAccepts() {
        for key in ConfigKey.all {
            #expect(!unknown(key.path), "\(key.path) is in the table but the decoder calls it unknown")
        }
    }

    @Test func everyKeyOfTheDecoderHasARow() throws {
        let table = Set(ConfigKey.all.map(\.path))
        let decoder = try Self.decoderKeys()
        #expect(decoder.count >= 40, "the scan of Config.swift found too few keys: \(decoder.sorted())")
        for key in decoder.sorted() {
            #expect(
                table.contains(key),
                "the decoder accepts \(key) but ConfigKeys.swift has no row for it (and so docs/reference/configuration.md does not list it)")
            #expect(!unknown(key), "the scan found \(key), which the decoder calls unknown")
        }
    }

    @Test func rowsAreUniqueAndComplete() {
        let paths = ConfigKey.all.map(\.path)
        #expect(Set(paths).count == paths.count)
        for key in ConfigKey.all {
            #expect(!key.type.isEmpty && !key.defaultValue.isEmpty && !key.description.isEmpty, "\(key.path)")
            #expect(!key.description.contains("|") || key.description.contains("`"), "\(key.path): a bare | breaks the Markdown table")
        }
    }

    @Test func theReferencePageListsEveryRowOnce() {
        let page = ConfigReference.markdown()
        #expect(page.hasPrefix("# Configuration\n"))
        for key in ConfigKey.all {
            #expect(page.split(separator: "\n").filter { $0.hasPrefix("| `\(key.path)` |") }.count == 1, "\(key.path)")
        }
        #expect(page.contains("## 1. Keys") && page.contains("## 2. Reload"))
    }
}
