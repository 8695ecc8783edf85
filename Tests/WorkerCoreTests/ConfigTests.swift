import Testing
@testable import WorkerCore

@Suite struct ConfigValidation {
    func problems(_ text: String) -> [ConfigProblem] {
        do {
            _ = try WorkerConfig.parse(Array(text.utf8))
            return []
        } catch {
            return error.problems
        }
    }

    @Test func emptyObjectGivesTheDocumentedDefaults() throws {
        let config = try WorkerConfig.parse(Array("{}".utf8))
        #expect(config == WorkerConfig())
        #expect(config.coordinator.heartbeatIntervalMs == 15_000)
        #expect(config.coordinator.pullIntervalMs == 5_000)
        #expect(config.coordinator.stopGraceMs == 10_000)
        #expect(config.backend.kind == .ollama)
        #expect(config.network.pathLossGraceMs == 1_500)
        #expect(config.bluetooth.maxRequestBytes == 65_536)
        #expect(config.bluetooth.maxQueuedRequests == 8)
        #expect(config.bluetooth.maxClients == 1)
        #expect(config.bluetooth.maxTokens == nil, "absent: backend.maxTokens applies")
        #expect(config.policy.minBatteryPct == 20 && config.policy.resumeBatteryPct == 30)
        #expect(config.policy.maxThermalState == .fair)
    }

    @Test func acceptsTheExampleOfTheSpec() throws {
        let text = """
            {"agentId": "lab-pi-7",
             "coordinator": {"url": "https://coordinator.example", "registrationToken": "t", "heartbeatIntervalMs": 15000, "pullIntervalMs": 5000, "stopGraceMs": 10000},
             "backend": {"kind": "openai", "url": "http://127.0.0.1:8080", "model": "qwen2.5-coder:1.5b", "timeoutMs": 120000},
             "policy": {"runOnlyWhileCharging": true, "minBatteryPct": 20, "resumeBatteryPct": 30, "holdWhileDraining": true,
                        "pauseOnLowPowerMode": true, "maxThermalState": "serious", "maxCpuUsagePct": 90, "resumeDwellSec": 30},
             "network": {"pathLossGraceMs": 1500},
             "bluetooth": {"adapter": "hci1", "maxRequestBytes": 65536, "maxQueuedRequests": 8, "chunkPacingMs": 10, "maxClients": 2, "maxTokens": 256},
             "hooks": {"networkRestored": "/usr/local/bin/notify-me"}}
            """
        let config = try WorkerConfig.parse(Array(text.utf8))
        #expect(config.agentId == "lab-pi-7")
        #expect(config.backend.kind == .openai)
        #expect(config.policy.runOnlyWhileCharging)
        #expect(config.policy.maxThermalState == .serious)
        #expect(config.bluetooth.adapter == "hci1")
        #expect(config.bluetooth.maxClients == 2)
        #expect(config.bluetooth.maxTokens == 256)
        #expect(config.hooks.networkRestored == "/usr/local/bin/notify-me")
    }

    @Test(arguments: [
        (#"{"coordinatr": {}}"#, "coordinatr", "unknown key"),
        (#"{"coordinator": {"urll": "https://x"}}"#, "coordinator.urll", "unknown key"),
        (#"{"policy": {"minBatteryPercent": 5}}"#, "policy.minBatteryPercent", "unknown key"),
        (#"{"coordinator": {"url": "ftp://x"}}"#, "coordinator.url", "http:// or https://"),
        (#"{"coordinator": {"url": "https://"}}"#, "coordinator.url", "no host"),
        (#"{"coordinator": {"url": "https://user:pw@x"}}"#, "coordinator.url", "credentials"),
        (#"{"coordinator": {"url": "https://a b"}}"#, "coordinator.url", "spaces"),
        (#"{"backend": {"url": "file:///etc/passwd"}}"#, "backend.url", "http:// or https://"),
        (#"{"coordinator": {"heartbeatIntervalMs": "15000"}}"#, "coordinator.heartbeatIntervalMs", "must be an integer, got a string"),
        (#"{"coordinator": {"heartbeatIntervalMs": 10}}"#, "coordinator.heartbeatIntervalMs", "must be in 1000…3600000, got 10"),
        (#"{"coordinator": {"pullIntervalMs": 1.5}}"#, "coordinator.pullIntervalMs", "whole number"),
        (#"{"coordinator": {"stopGraceMs": 1e300}}"#, "coordinator.stopGraceMs", "whole number"),
        (#"{"coordinator": {"stopGraceMs": -1}}"#, "coordinator.stopGraceMs", "must be in 0…600000"),
        (#"{"policy": {"minBatteryPct": 101}}"#, "policy.minBatteryPct", "must be in 0…100, got 101"),
        (#"{"policy": {"minBatteryPct": 50, "resumeBatteryPct": 40}}"#, "policy.resumeBatteryPct", "at least policy.minBatteryPct"),
        (#"{"policy": {"runOnlyWhileCharging": "yes"}}"#, "policy.runOnlyWhileCharging", "true or false"),
        (#"{"policy": {"maxThermalState": "hot"}}"#, "policy.maxThermalState", "must be one of"),
        (#"{"policy": {"maxCpuUsagePct": 0}}"#, "policy.maxCpuUsagePct", "1…100"),
        (#"{"policy": {"resumeDwellSec": 3601}}"#, "policy.resumeDwellSec", "0…3600"),
        (#"{"backend": {"kind": "llama"}}"#, "backend.kind", "\"ollama\", \"openai\""),
        (#"{"backend": {"model": ""}}"#, "backend.model", "must not be empty"),
        (#"{"bluetooth": {"adapter": "wlan0"}}"#, "bluetooth.adapter", "like \"hci0\""),
        (#"{"bluetooth": {"maxClients": 0}}"#, "bluetooth.maxClients", "1…16"),
        (#"{"bluetooth": {"maxTokens": 40000}}"#, "bluetooth.maxTokens", "1…32768"),
        (#"{"bluetooth": {"maxRequestBytes": 99999999}}"#, "bluetooth.maxRequestBytes", "must be in"),
        (#"{"network": {"pathLossGraceMs": null}}"#, "network.pathLossGraceMs", "got null"),
        (#"{"network": []}"#, "network", "must be an object, got an array"),
        (#"{"agentId": "has space"}"#, "agentId", "letters, digits"),
        (#"{"agentId": ""}"#, "agentId", "must not be empty"),
        (#"{"hooks": {"networkRestored": 5}}"#, "hooks.networkRestored", "must be a string"),
        (#"{"control": {"readGroup": "a;b"}}"#, "control.readGroup", "group name"),
        (#"{"log": {"level": "loud"}}"#, "log.level", "must be one of"),
        (#"{"backend": {"think": "no"}}"#, "backend.think", "must be true or false"),
        (#"{"backend": {"keepAlive": "30 minutes"}}"#, "backend.keepAlive", "duration like \"30m\""),
        (#"{"backend": {"keepAlive": "30"}}"#, "backend.keepAlive", "or a number of seconds"),
        (#"{"backend": {"keepAlive": 1.5}}"#, "backend.keepAlive", "must be a string"),
        (#"{"backend": {"apiKey": ""}}"#, "backend.apiKey", "must not be empty"),
        (#"{"backend": {"apiKey": "two words"}}"#, "backend.apiKey", "printable ASCII without spaces"),
    ])
    func refusesABadKeyNamingItsPath(text: String, path: String, message: String) {
        let found = problems(text)
        #expect(found.count == 1, "\(found)")
        #expect(found.first?.path == path)
        #expect(found.first?.message.contains(message) == true, "\(found.first?.message ?? "none")")
    }

    @Test func backendKeysForThinkingKeepAliveAndTheKey() throws {
        let defaults = WorkerConfig().backend
        #expect(defaults.think == false && defaults.keepAlive == "30m" && defaults.apiKey == nil)
        let config = try WorkerConfig.parse(Array(#"{"backend": {"think": true, "keepAlive": "1h30m", "apiKey": "sk-abc_123"}}"#.utf8))
        #expect(config.backend.think)
        #expect(config.backend.keepAlive == "1h30m")
        #expect(config.backend.apiKey == "sk-abc_123")
        for forever in [#"-1"#, #""-1m""#, #""0""#, #"3600"#] {
            #expect(throws: Never.self) { try WorkerConfig.parse(Array(#"{"backend": {"keepAlive": \#(forever)}}"#.utf8)) }
        }
    }

    @Test func aRefusedKeyIsNeverQuotedInTheProblem() {
        let found = problems(#"{"backend": {"apiKey": "secret value"}}"#)
        #expect(found.count == 1)
        #expect(!found.description.contains("secret"))
    }

    @Test(arguments: [
        ("30m", true), ("1h30m", true), ("0", true), ("-1m", true), ("1.5h", true), ("250ms", true),
        ("", false), ("30", false), ("m", false), ("1d", false), ("1..5h", false), ("-", false),
    ])
    func readsGoDurationsAsOllamaDoes(text: String, valid: Bool) {
        #expect(WorkerConfig.isGoDuration(text) == valid)
    }

    @Test(arguments: [
        "http://coordinator.example", "http://10.0.0.5:8080/", "HTTP://Coord.Example/api", "http://[2001:db8::1]:80",
        "http://127.example", "http://128.0.0.1", "http://localhost.evil.example",
    ])
    func refusesPlainHttpToAHostThatIsNotLoopbackSayingWhy(url: String) {
        let found = problems(#"{"coordinator": {"url": "\#(url)"}}"#)
        #expect(found.map(\.path) == ["coordinator.url"])
        let message = found.first?.message ?? ""
        #expect(message.contains("unencrypted") && message.contains("coordinator.allowInsecureHttp") && message.contains("https://"), "\(message)")
    }

    @Test(arguments: [
        "http://127.0.0.1:4000", "http://127.1.2.3/", "http://localhost:8080", "http://LOCALHOST", "http://[::1]:9000/x",
        "https://coordinator.example", "https://10.0.0.5",
    ])
    func acceptsPlainHttpOnlyToLoopbackAndHttpsAnywhere(url: String) throws {
        let config = try WorkerConfig.parse(Array(#"{"coordinator": {"url": "\#(url)"}}"#.utf8))
        #expect(config.coordinator.url == url)
        #expect(config.coordinator.allowInsecureHttp == false)
    }

    @Test func allowInsecureHttpAcceptsPlainHttpToAnyHostWhateverTheKeyOrder() throws {
        for text in [
            #"{"coordinator": {"url": "http://coordinator.lan", "allowInsecureHttp": true}}"#,
            #"{"coordinator": {"allowInsecureHttp": true, "url": "http://coordinator.lan"}}"#,
        ] {
            let config = try WorkerConfig.parse(Array(text.utf8))
            #expect(config.coordinator.url == "http://coordinator.lan")
            #expect(config.coordinator.allowInsecureHttp)
        }
        let explicitFalse = problems(#"{"coordinator": {"url": "http://coordinator.lan", "allowInsecureHttp": false}}"#)
        #expect(explicitFalse.map(\.path) == ["coordinator.url"])
        let notABool = problems(#"{"coordinator": {"allowInsecureHttp": "yes"}}"#)
        #expect(notABool.map(\.path) == ["coordinator.allowInsecureHttp"])
        #expect(notABool.first?.message.contains("true or false") == true)
    }

    @Test func theBackendMayStayOnPlainHttp() throws {
        // The model server is local and carries no worker token: only the coordinator is refused.
        let config = try WorkerConfig.parse(Array(#"{"backend": {"url": "http://gpu-box.lan:11434"}}"#.utf8))
        #expect(config.backend.url == "http://gpu-box.lan:11434")
    }

    @Test func chunkPacingZeroIsRefusedWithTheReasonAndOneToAThousandAccepted() throws {
        let zero = problems(#"{"bluetooth": {"chunkPacingMs": 0}}"#)
        #expect(zero.map(\.path) == ["bluetooth.chunkPacingMs"])
        #expect(zero.first?.message.contains("out of order") == true, "says why: \(zero)")
        #expect(zero.first?.message.contains("EATT") == true)
        #expect(problems(#"{"bluetooth": {"chunkPacingMs": 1001}}"#).map(\.path) == ["bluetooth.chunkPacingMs"])
        #expect(problems(#"{"bluetooth": {"chunkPacingMs": -1}}"#).map(\.path) == ["bluetooth.chunkPacingMs"])
        #expect(problems(#"{"bluetooth": {"chunkPacingMs": "fast"}}"#).map(\.path) == ["bluetooth.chunkPacingMs"])
        #expect(problems(#"{"bluetooth": {"chunkPacingMs": 0.5}}"#).map(\.path) == ["bluetooth.chunkPacingMs"])
        #expect(try WorkerConfig.parse(Array(#"{"bluetooth": {"chunkPacingMs": 1}}"#.utf8)).bluetooth.chunkPacingMs == 1)
        #expect(try WorkerConfig.parse(Array(#"{"bluetooth": {"chunkPacingMs": 1000}}"#.utf8)).bluetooth.chunkPacingMs == 1_000)
        #expect(try WorkerConfig.parse(Array("{}".utf8)).bluetooth.chunkPacingMs == 10)
    }

    @Test func pairingAgentTakesAutoWorkerOrHostAndNamesTheChoicesOtherwise() throws {
        #expect(try WorkerConfig.parse(Array("{}".utf8)).bluetooth.pairingAgent == .auto)
        for setting in BluetoothPairingAgentSetting.allCases {
            #expect(try WorkerConfig.parse(Array(#"{"bluetooth": {"pairingAgent": "\#(setting.rawValue)"}}"#.utf8)).bluetooth.pairingAgent == setting)
        }
        for bad in [#""desktop""#, #""Worker""#, #""""#, "true", "1", "null", #"["worker"]"#] {
            let found = problems(#"{"bluetooth": {"pairingAgent": \#(bad)}}"#)
            #expect(found.map(\.path) == ["bluetooth.pairingAgent"], "\(bad)")
        }
        #expect(problems(#"{"bluetooth": {"pairingAgent": "desktop"}}"#).first?.message == #"must be one of "auto", "worker", "host", got "desktop""#)
    }

    @Test func executionKeysHaveTheirDefaultsAndAreRead() throws {
        #expect(WorkerConfig().execution.mode == .auto && WorkerConfig().execution.engine == "podman" && WorkerConfig().execution.timeoutMs == 4_000)
        let config = try WorkerConfig.parse(
            Array(
                #"{"execution": {"mode": "container", "engine": "/usr/bin/docker", "engineArguments": ["--runtime", "runc"], "image": "registry.example/sbx:2", "timeoutMs": 10000}}"#
                    .utf8))
        #expect(config.execution.mode == .container && config.execution.engine == "/usr/bin/docker")
        #expect(
            config.execution.engineArguments == ["--runtime", "runc"] && config.execution.image == "registry.example/sbx:2"
                && config.execution.timeoutMs == 10_000)
    }

    @Test(arguments: [
        (#"{"execution": {"mode": "docker"}}"#, "execution.mode", "must be one of"),
        (#"{"execution": {"engine": "podman --remote"}}"#, "execution.engine", "without spaces"),
        (#"{"execution": {"engine": ""}}"#, "execution.engine", "must not be empty"),
        (#"{"execution": {"engineArguments": "--runtime runc"}}"#, "execution.engineArguments", "must be a list"),
        (#"{"execution": {"engineArguments": ["a b"]}}"#, "execution.engineArguments[0]", "without spaces"),
        (#"{"execution": {"engineArguments": [1]}}"#, "execution.engineArguments[0]", "must be a string"),
        (
            #"{"execution": {"engineArguments": [\#(Array(repeating: "\"x\"", count: 33).joined(separator: ","))]}}"#, "execution.engineArguments",
            "at most 32"
        ),
        (#"{"execution": {"image": "--privileged"}}"#, "execution.image", "image name"),
        (#"{"execution": {"image": "a\nb"}}"#, "execution.image", "image name"),
        (#"{"execution": {"timeoutMs": 100}}"#, "execution.timeoutMs", "500…600000"),
        (#"{"execution": {"network": true}}"#, "execution.network", "unknown key"),
        (#"{"execution": []}"#, "execution", "must be an object"),
    ])
    func refusesABadExecutionKey(text: String, path: String, message: String) {
        let found = problems(text)
        #expect(found.contains { $0.path == path && $0.message.contains(message) }, "\(found)")
    }

    @Test func reportsEveryProblemAtOnce() {
        let found = problems(#"{"x": 1, "coordinator": {"url": "gopher://a", "pullIntervalMs": true}, "policy": {"minBatteryPct": -5}}"#)
        #expect(found.map(\.path) == ["x", "coordinator.url", "coordinator.pullIntervalMs", "policy.minBatteryPct"])
    }

    @Test(arguments: ["", "   \n", "[]", "42", "\"config\"", "null", "{", "{\"a\":1,\"a\":2}"])
    func refusesDocumentsThatAreNotAConfigObject(text: String) {
        let found = problems(text)
        #expect(found.count == 1)
        #expect(found.first?.path == "")
    }

    @Test func refusesHugeFilesBeforeParsing() {
        let huge = [UInt8](repeating: 0x20, count: WorkerConfig.maxFileBytes + 1)
        var found: [ConfigProblem] = []
        do { _ = try WorkerConfig.parse(huge) } catch { found = error.problems }
        #expect(found.first?.message.contains("at most \(WorkerConfig.maxFileBytes) bytes") == true)
    }

    @Test func acceptsALargeButLegalFile() throws {
        // A long token is fine as long as the file stays under the size bound.
        let token = String(repeating: "t", count: 4_000)
        let config = try WorkerConfig.parse(Array(#"{"coordinator": {"registrationToken": "\#(token)"}}"#.utf8))
        #expect(config.coordinator.registrationToken?.count == 4_000)
    }

    @Test func refusesInvalidUTF8() {
        let bytes: [UInt8] = Array(#"{"agentId": ""#.utf8) + [0xFF] + Array(#""}"#.utf8)
        #expect(problems(String(decoding: bytes, as: UTF8.self)).isEmpty == false)
        do { _ = try WorkerConfig.parse(bytes); Issue.record("accepted invalid UTF-8") } catch {
            #expect(error.problems.first?.message.contains("invalid UTF-8") == true)
        }
    }

    @Test func errorMessagesDoNotEchoControlCharacters() {
        let found = problems("{\"backend\": {\"kind\": \"\\u001b[31mred\"}}")
        #expect(found.first?.message.contains("\u{1b}") == false)
    }
}

/// Hardening #26 row 7: the backend's API key never travels in clear unless allowed.
@Suite struct BackendKeyInClearTests {
    func problems(_ text: String) -> [ConfigProblem] {
        do { _ = try WorkerConfig.parse(Array(text.utf8)); return [] } catch { return error.problems }
    }

    @Test(arguments: ["http://203.0.113.7:8080", "http://gpu-box.lan:11434", "HTTP://Model.Example/v1"])
    func anApiKeyWithPlainHttpToAHostThatIsNotLoopbackIsRefusedWhateverTheKeyOrder(url: String) {
        for text in [#"{"backend": {"url": "\#(url)", "apiKey": "k-1"}}"#, #"{"backend": {"apiKey": "k-1", "url": "\#(url)"}}"#] {
            let found = problems(text)
            #expect(found.map(\.path) == ["backend.apiKey"], "\(text)")
            let message = found.first?.message ?? ""
            #expect(message.contains("unencrypted") && message.contains("backend.allowInsecureHttp") && !message.contains("k-1"), "\(message)")
        }
    }

    @Test(arguments: ["http://127.0.0.1:11434", "http://localhost:8080/v1", "https://203.0.113.7:8443"])
    func anApiKeyToLoopbackOrOverHttpsIsAccepted(url: String) throws {
        let config = try WorkerConfig.parse(Array(#"{"backend": {"url": "\#(url)", "apiKey": "k-1"}}"#.utf8))
        #expect(config.backend.apiKey == "k-1")
    }

    @Test func allowInsecureHttpAcceptsTheKeyInClearAndPlainHttpWithoutAKeyNeedsNothing() throws {
        let config = try WorkerConfig.parse(
            Array(#"{"backend": {"allowInsecureHttp": true, "url": "http://203.0.113.7:8080", "apiKey": "k-1"}}"#.utf8))
        #expect(config.backend.allowInsecureHttp && config.backend.apiKey == "k-1")
        #expect(problems(#"{"backend": {"url": "http://203.0.113.7:8080"}}"#).isEmpty)
        #expect(problems(#"{"backend": {"allowInsecureHttp": "yes"}}"#).map(\.path) == ["backend.allowInsecureHttp"])
    }
}

/// `backend.allowedModelRegistries` (hardening #26 row 3), with hostile input.
@Suite struct AllowedModelRegistriesConfigTests {
    func problems(_ text: String) -> [ConfigProblem] {
        do { _ = try WorkerConfig.parse(Array(text.utf8)); return [] } catch { return error.problems }
    }

    @Test func readsAListOfHostsLowercasedWithoutRepeats() throws {
        let config = try WorkerConfig.parse(
            Array(#"{"backend": {"allowedModelRegistries": ["Registry.Example.com:5000", "hf.co", "registry.example.com:5000", "[::1]:5000"]}}"#.utf8)
        )
        #expect(config.backend.allowedModelRegistries == ["registry.example.com:5000", "hf.co", "[::1]:5000"])
        #expect(WorkerConfig().backend.allowedModelRegistries.isEmpty)
    }

    @Test(arguments: [
        (#""hf.co""#, "backend.allowedModelRegistries"),
        (#"{}"#, "backend.allowedModelRegistries"),
        (#"[1]"#, "backend.allowedModelRegistries[0]"),
        (#"[""]"#, "backend.allowedModelRegistries[0]"),
        (#"["https://hf.co"]"#, "backend.allowedModelRegistries[0]"),
        (#"["hf.co/ns"]"#, "backend.allowedModelRegistries[0]"),
        (#"["a b"]"#, "backend.allowedModelRegistries[0]"),
        (#"["hf.co:"]"#, "backend.allowedModelRegistries[0]"),
        (#"["h\u00e9.example"]"#, "backend.allowedModelRegistries[0]"),
        (#"["h\u0000"]"#, "backend.allowedModelRegistries[0]"),
        ("[" + String(repeating: #""a","#, count: 65) + #""a"]"#, "backend.allowedModelRegistries"),
        (#"[""# + String(repeating: "a", count: 300) + #""]"#, "backend.allowedModelRegistries[0]"),
    ])
    func refusesWhatIsNotAListOfRegistryHosts(value: String, path: String) {
        #expect(problems(#"{"backend": {"allowedModelRegistries": \#(value)}}"#).map(\.path) == [path])
    }
}
