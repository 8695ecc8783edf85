import Testing
@testable import WorkerCore

/// The key table (`ConfigKey.all`) is the decoder, the reload's comparison and plan, and
/// docs/reference/configuration.md: every row is a key the decoder reads, a key without a row
/// is refused, and what the reference says of a key (range, cases, default) is what the
/// decoder does.
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

    @Test func everyRowIsAKeyTheDecoderAccepts() {
        for key in ConfigKey.all {
            #expect(!unknown(key.path), "\(key.path) is in the table but the decoder calls it unknown")
        }
    }

    @Test func aKeyWithoutARowIsUnknownWhereverItIsWritten() throws {
        for section in ConfigKey.sections.sorted() {
            #expect(unknown("\(section).notAKey"), "\(section).notAKey")
        }
        #expect(unknown("notAKey"))
        // A row's dotted path is not a top-level key.
        let dotted = #"{"coordinator.url": "https://c.example"}"#
        #expect(throws: ConfigError.self) { try WorkerConfig.parse(Array(dotted.utf8)) }
        // The policy key a file sets under backend is refused under policy, saying where it goes.
        do {
            _ = try WorkerConfig.parse(Array(#"{"policy": {"allowRemoteModelSwitch": true}}"#.utf8))
            Issue.record("policy.allowRemoteModelSwitch was accepted")
        } catch {
            #expect(
                error.problems.map(\.message) == [
                    "set backend.allowRemoteModelSwitch in the config (policy set allowRemoteModelSwitch overrides it per host)"
                ])
        }
    }

    /// The reference's ranges, cases and defaults are the decoder's: the ends of each range
    /// are accepted and one past them refused, each listed case is accepted, and a config
    /// without the key holds the listed default.
    @Test func theReferenceSaysWhatTheDecoderDoes() throws {
        func problems(_ path: String, _ value: String) -> [ConfigProblem] {
            let parts = path.split(separator: ".").map(String.init)
            let text = parts.count == 1 ? "{\"\(path)\": \(value)}" : "{\"\(parts[0])\": {\"\(parts[1])\": \(value)}}"
            do {
                _ = try WorkerConfig.parse(Array(text.utf8))
                return []
            } catch {
                return error.problems
            }
        }
        let defaults = Dictionary(uniqueKeysWithValues: WorkerConfig().flattened.map { ($0.key, $0.value) })
        var ranges = 0, choices = 0
        for key in ConfigKey.all where !key.path.hasPrefix("policy.") {
            let bounds = key.type.split(separator: "–")
            if bounds.count == 2, let low = Int64(bounds[0]), let high = Int64(bounds[1]) {
                ranges += 1
                #expect(problems(key.path, "\(low)").isEmpty && problems(key.path, "\(high)").isEmpty, "\(key.path): \(key.type)")
                #expect(!problems(key.path, "\(low - 1)").isEmpty && !problems(key.path, "\(high + 1)").isEmpty, "\(key.path): \(key.type)")
                if let number = Int64(key.defaultValue) { #expect(defaults[key.path] == "\(number)", "\(key.path)") }
            } else if key.type.hasPrefix("`\""), key.type.contains(" or ") {
                choices += 1
                let names = key.type.split(separator: "`").filter { $0.hasPrefix("\"") }
                #expect(names.count >= 2, "\(key.path): \(key.type)")
                for name in names { #expect(problems(key.path, String(name)).isEmpty, "\(key.path): \(name)") }
                #expect(!problems(key.path, "\"not-one-of-them\"").isEmpty, "\(key.path)")
                if key.defaultValue.hasPrefix("`\"") {
                    #expect("`\"\(defaults[key.path] ?? "")\"`" == key.defaultValue, "\(key.path)")
                }
            } else if key.type == "bool" {
                #expect(defaults[key.path] == key.defaultValue, "\(key.path)")
            }
        }
        #expect(ranges >= 15 && choices >= 8, "the scan of the table found \(ranges) ranges and \(choices) choices")
    }

    /// A reload's comparison and plan are made from the table: the flattening lists its rows
    /// in order, and which keys are live is pinned here (a row changed by mistake fails).
    @Test func theReloadClassesOfTheKeys() {
        #expect(WorkerConfig().flattened.map(\.key) == ConfigKey.all.map(\.path))
        #expect(
            ConfigReloadPlan.liveKeys.filter { !$0.hasPrefix("policy.") }.sorted() == [
                "backend.allowRemoteModelSwitch", "bluetooth.pairingAgent", "bluetooth.security", "coordinator.gapGuard",
                "coordinator.heartbeatIntervalMs", "coordinator.pullIntervalMs", "log.level", "network.onMetered", "telemetry.deviceType",
            ])
        #expect(ConfigKey.all.filter { $0.path.hasPrefix("policy.") }.allSatisfy { $0.reload == .live })
        #expect(ConfigReloadPlan.restartingBluetooth == ["bluetooth.security", "bluetooth.pairingAgent"])
        #expect(
            ConfigKey.all.filter { $0.reload == .whenCoordinatorStarts }.map(\.path) == [
                "coordinator.url", "coordinator.allowInsecureHttp", "coordinator.registrationToken",
            ])
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
