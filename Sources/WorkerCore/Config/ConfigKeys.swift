/// Every key of the config file, in the order the reference lists them, each with what it
/// may hold, its default, when a reload takes it and what it does. This one table is the
/// decoder (`WorkerConfig.decode` reads each key through its row), the flattening a reload
/// compares (`WorkerConfig.flattened`), the reload plan (`ConfigReloadPlan`) and
/// `docs/reference/configuration.md` (`edgecoder-worker internal config-reference`): a key is
/// spelled once, here, and in the `WorkerConfig` field its row names.
public struct ConfigKey: Sendable {
    /// When a changed value in the file reaches the running daemon.
    public enum Reload: Sendable, Equatable {
        /// Read once, when the part that uses it starts (the coordinator session, the Bluetooth
        /// peripheral, the model backend, the control socket): a change waits for a restart.
        case restart
        /// Taken by a reload at once.
        case live
        /// Taken by a reload by starting the Bluetooth session again: bluetoothd reads the
        /// characteristics' flags only when the application registers, and a client admitted
        /// at the old level must not keep a link the new one refuses.
        case restartsBluetooth
        /// Read when mode `on`'s runtime starts: a reload takes it while that runtime is
        /// stopped (so that `enroll` can point a running daemon at a coordinator).
        case whenCoordinatorStarts
    }

    /// The key's path in the file, `section.key` (or `key` at the top level).
    public let path: String
    /// What the value may be, in the reference's words (Markdown).
    public let type: String
    /// The default, in the reference's words (Markdown).
    public let defaultValue: String
    /// What the key does (Markdown).
    public let description: String
    public let reload: Reload
    /// Reads the key's JSON value into a config, or records why it cannot.
    let read: @Sendable (inout ConfigReader, JSONValue, String, inout WorkerConfig) -> Void
    /// The value as comparable text (secrets included: never print it).
    let render: @Sendable (WorkerConfig) -> String
    /// Copies the key's value from the file's config into the running one.
    let copy: @Sendable (inout WorkerConfig, WorkerConfig) -> Void

    /// The section a key belongs to (`coordinator` of `coordinator.url`); nil at the top level.
    public var section: String? { path.firstIndex(of: ".").map { String(path[..<$0]) } }

    /// The table. Durations are in milliseconds unless the key says `Sec`.
    public static let all: [ConfigKey] = [
        .optionalString(
            "agentId", \.agentId, #"string, 1–128 of `A-Z a-z 0-9 - _ .`"#, #"derived"#, maxLength: 256, check: AgentID.validationProblem,
            #"the worker's id at the coordinator; when absent, derived once as `<hostname>-<12 hex>` (an HMAC of `/etc/machine-id` by libsystemd, so the machine id never leaves the host) and persisted in the state directory"#
        ),
        .optionalURL(
            "coordinator.url", \.coordinator.url, #"http(s) URL"#, #"none"#, reload: .whenCoordinatorStarts,
            #"the coordinator's base URL (needed for mode `on`); no `user@` credentials; `http://` only to a loopback address (`127.0.0.0/8`, `[::1]`, `localhost`) unless `coordinator.allowInsecureHttp`"#
        ),
        .bool(
            "coordinator.allowInsecureHttp", \.coordinator.allowInsecureHttp, reload: .whenCoordinatorStarts,
            #"accept an `http://` coordinator URL to any host: the registration token and the mesh token then cross the network unencrypted (`config check` refuses such a URL without it, saying so)"#
        ),
        .optionalString(
            "coordinator.registrationToken", \.coordinator.registrationToken, #"string"#, #"none"#, maxLength: 4_096, nonEmpty: true,
            reload: .whenCoordinatorStarts,
            #"sent at registration; or the systemd credential `registration-token`"#),
        .int(
            "coordinator.heartbeatIntervalMs", \.coordinator.heartbeatIntervalMs, 1_000...3_600_000, reload: .live,
            #"heartbeat period"#),
        .int(
            "coordinator.pullIntervalMs", \.coordinator.pullIntervalMs, 500...3_600_000, reload: .live,
            #"pull period while idle"#),
        .int(
            "coordinator.stopGraceMs", \.coordinator.stopGraceMs, 0...600_000,
            #"on SIGTERM, how long a running subtask may finish"#),
        .int(
            "coordinator.connectTimeoutMs", \.coordinator.connectTimeoutMs, 100...120_000,
            #"TCP/TLS connect timeout"#),
        .int(
            "coordinator.requestTimeoutMs", \.coordinator.requestTimeoutMs, 100...600_000,
            #"total time of one coordinator call"#),
        .int(
            "coordinator.maxResponseBytes", \.coordinator.maxResponseBytes, 1_024...67_108_864,
            #"larger coordinator answers are refused (the journal keeps only what a rerun needs: id, taskId, kind, input ≤ 1 MiB, timeoutMs)"#),
        .bool(
            "coordinator.gapGuard", \.coordinator.gapGuard, reload: .live,
            #"hold pulls after a heartbeat gap over 4 min until the gap leaves the coordinator's one-hour window, so its behaviour monitor never counts the gap more than once (docs/operating/coordinator.md); `false` for a coordinator that does not monitor"#
        ),
        .choice(
            "backend.kind", \.backend.kind,
            #"the local model server's API"#),
        .url(
            "backend.url", \.backend.url, #"http(s) URL"#, #"`http://127.0.0.1:11434`"#,
            #"the model server"#),
        .string(
            "backend.model", \.backend.model, #"string"#, #"`qwen2.5-coder:1.5b`"#, maxLength: 256, nonEmpty: true,
            #"model name passed to the server"#),
        .int(
            "backend.timeoutMs", \.backend.timeoutMs, 1_000...3_600_000,
            #"longest a generation may take"#),
        .choice(
            "backend.openaiEndpoint", \.backend.openaiEndpoint,
            #"for `openai`: `/v1/completions` or `/v1/chat/completions`"#),
        .int(
            "backend.maxOutputBytes", \.backend.maxOutputBytes, 1_024...16_777_216,
            #"longer model output is cut (a coordinator result is further cut to fit its 1 MiB body; the outbox keeps the result as posted)"#),
        .int(
            "backend.maxTokens", \.backend.maxTokens, 1...32_768,
            #"tokens generated for a coordinator subtask"#),
        .bool(
            "backend.think", \.backend.think,
            #"Ollama's `think`, sent with every request (thinking models otherwise think by default and can spend `maxTokens` on it)"#),
        .custom(
            "backend.keepAlive", \.backend.keepAlive, #"Go duration string (`"30m"`, `"1h"`, `"0"`) or seconds (−1: for good)"#, #"`"30m"`"#,
            render: \.serialized, read: { $0.keepAlive($1, path: $2) },
            #"Ollama's `keep_alive`, sent with every request and with the load when a working mode starts"#),
        .optionalString(
            "backend.apiKey", \.backend.apiKey, #"printable ASCII, no spaces"#, #"none"#, maxLength: 4_096, nonEmpty: true,
            check: ConfigKey.apiKeyProblem,
            #"sent as `Authorization: Bearer`; or the systemd credential `backend-api-key`; never logged or shown; refused with an `http://` `backend.url` to a host that is not loopback unless `backend.allowInsecureHttp`"#
        ),
        .bool(
            "backend.allowInsecureHttp", \.backend.allowInsecureHttp,
            #"accept `backend.apiKey` with an `http://` `backend.url` to a host that is not loopback: the key then crosses the network unencrypted (only on a network you trust)"#
        ),
        .allowRemoteModelSwitch(
            "backend.allowRemoteModelSwitch",
            #"whether the coordinator may make this worker pull and switch models (Ollama only); per host: `policy set allowRemoteModelSwitch`"#),
        .custom(
            "backend.allowedModelRegistries", \.backend.allowedModelRegistries, #"list of registry hosts (`"host"` or `"host:port"`)"#, #"`[]`"#,
            render: { $0.joined(separator: ",") }, read: { $0.registries($1, path: $2) },
            #"registries a coordinator's model switch may name; by default a model name that carries a registry host (`10.0.0.5:5000/m`, `hf.co/user/m`, `localhost/m`, any `host/namespace/model`) is refused and only the model server's default registry is used"#
        ),
        .policy(
            "policy.runOnlyWhileCharging", #"bool"#, #"false"#,
            #"the charge gate: `on`/`bluetooth` only on external power"#),
        .policy(
            "policy.minBatteryPct", #"0–100"#, #"20"#,
            #"at or below: hold new work"#),
        .policy(
            "policy.resumeBatteryPct", #"0–100, ≥ `minBatteryPct`"#, #"30"#,
            #"after a battery hold, resume only at or above"#),
        .policy(
            "policy.holdWhileDraining", #"bool"#, #"true"#,
            #"hold while on external power but a battery still discharges"#),
        .policy(
            "policy.pauseOnLowPowerMode", #"bool"#, #"true"#,
            #"hold while the platform profile is `low-power`"#),
        .policy(
            "policy.maxThermalState", #"`nominal`/`fair`/`serious`/`critical`"#, #"`fair`"#,
            #"hold above it"#),
        .policy(
            "policy.maxCpuUsagePct", #"1–100"#, #"90"#,
            #"defer a pull while other load (not the worker's, not its model server's) is above it"#),
        .policy(
            "policy.resumeDwellSec", #"0–3600"#, #"30"#,
            #"after a hold, resume only once the reason has been clear this long"#),
        .int(
            "network.pathLossGraceMs", \.network.pathLossGraceMs, 0...600_000,
            #"how long the network path must stay lost before `on` downgrades to `bluetooth`"#),
        .choice(
            "network.onMetered", \.network.onMetered, reload: .live,
            #"on a metered connection (NetworkManager's `Metered` is yes or guess-yes): `hold` pulls no work (drop reason `metered`), `allow` pulls as on any network (see [host](../operating/host.md))"#
        ),
        .optionalChoice(
            "telemetry.deviceType", \.telemetry.deviceType, #"detected"#, reload: .live,
            #"overrides the detected `deviceType` (the chassis type; see modes-and-power §3.1) in the heartbeat's telemetry"#),
        .optionalString(
            "bluetooth.adapter", \.bluetooth.adapter, #"`"hciN"`"#, #"first powered"#, maxLength: 256, check: ConfigKey.adapterProblem,
            #"the adapter to use"#),
        .int(
            "bluetooth.maxRequestBytes", \.bluetooth.maxRequestBytes, 1_024...1_048_576,
            #"largest request a client may write"#),
        .int(
            "bluetooth.maxQueuedRequests", \.bluetooth.maxQueuedRequests, 1...1_024,
            #"requests waiting for the model; more are answered `busy`"#),
        .chunkPacing(
            "bluetooth.chunkPacingMs", \.bluetooth.chunkPacingMs, 1...1_000,
            #"the pause notifications are paced with (0 refused: see [Pacing](../operating/bluetooth.md))"#),
        .choice(
            "bluetooth.pacing", \.bluetooth.pacing,
            #"`chunks`: the pause after every chunk; `bytes`: one pause per 512 bytes (fast at small MTUs, safe only with one ATT bearer); `auto`: `bytes` when bluetoothd's main.conf says `[GATT] Channels = 1`, else `chunks` (see [Pacing](../operating/bluetooth.md))"#
        ),
        .int(
            "bluetooth.maxClients", \.bluetooth.maxClients, 1...16,
            #"clients served at once (devices that use the service); more are told `busy` and disconnected (see [bluetooth](../operating/bluetooth.md))"#
        ),
        .optionalInt(
            "bluetooth.maxTokens", \.bluetooth.maxTokens, 1...32_768, #"`backend.maxTokens`"#,
            #"the most tokens a Bluetooth request runs with; a request asking for more (`maxTokens`) gets this many"#),
        .choice(
            "bluetooth.security", \.bluetooth.security, reload: .restartsBluetooth,
            #"the link the characteristics require: BlueZ's plain flags, `encrypt-*` (any LE pairing, Just Works included) or `encrypt-authenticated-*` (MITM-protected pairing); `authenticated` (and `allowedClients: "bonded"`) pairs clients with `edgecoder-worker bluetooth pair` — see [bluetooth-pairing](../operating/bluetooth-pairing.md). Applies at a reload (the Bluetooth session starts again)"#
        ),
        .choice(
            "bluetooth.pairingAgent", \.bluetooth.pairingAgent, reload: .restartsBluetooth,
            #"who answers the Just Works pairings `encrypted` needs: `worker`: the daemon registers its own BlueZ agent while it serves `encrypted` (never for `authenticated` or `allowedClients: "bonded"`); `host`: the host's own agent (a desktop's), or nobody; `auto`: `worker` unless the host boots to a desktop (`default.target` is `graphical.target` and a display manager is enabled). Applies at a reload — see [bluetooth-pairing](../operating/bluetooth-pairing.md)"#
        ),
        .custom(
            "bluetooth.allowedClients", \.bluetooth.allowedClients, #"`"any"`, `"bonded"` or a list of addresses"#, #"`"any"`"#,
            render: \.description, read: { $0.allowedClients($1, path: $2) },
            #"devices that may become clients; others are told `not_allowed`, disconnected and counted (`clientsNotAllowed`)"#),
        .int(
            "bluetooth.clientIdleSec", \.bluetooth.clientIdleSec, 5...86_400,
            #"a client without a request for this long loses its slot to a device that wants it (`clientsEvicted`); a device the worker's pairing agent paired that has not used the service after this long has its bond removed (`agentBondsRemoved`)"#
        ),
        .choice(
            "execution.mode", \.execution.mode,
            #"how code subtasks (those with a `language`) are answered: `auto`: their program runs in a container when the engine and image are usable, otherwise the model's text is posted; `container`: only in a container, and pulls wait (`sandbox-unavailable`) while it is not usable; `text`: the model's text, never a program. The coordinator hears `sandboxMode: "docker"` only while programs run in a container — see [sandbox](../operating/sandbox.md)"#
        ),
        .string(
            "execution.engine", \.execution.engine, #"command name or absolute path"#, #"`"podman"`"#, maxLength: 256, nonEmpty: true,
            check: ConfigKey.engineProblem,
            #"the OCI container engine's command line: `podman` (rootless as the worker's user) or `docker`"#),
        .custom(
            "execution.engineArguments", \.execution.engineArguments, #"list of strings"#, #"`[]`"#, render: { $0.joined(separator: " ") },
            read: { $0.words($1, path: $2, max: 32) },
            #"arguments given to the engine before `run`, e.g. `["--runtime", "runc"]` on a host with cgroup v1"#),
        .string(
            "execution.image", \.execution.image, #"image name"#, #"`"localhost/edgecoder-sandbox:1"`"#, maxLength: 256, nonEmpty: true,
            check: ConfigKey.imageProblem,
            #"the image programs run in: python3 and node on `PATH`; `edgecoder-worker sandbox build` makes the default one from Debian's packages"#),
        .int(
            "execution.timeoutMs", \.execution.timeoutMs, 500...600_000,
            #"a program still running after this long is killed with its whole container"#),
        .optionalString(
            "hooks.networkRestored", \.hooks.networkRestored, #"string"#, #"none"#, maxLength: 4_096, nonEmpty: true,
            #"command run when the network returns after a downgrade"#),
        .int(
            "hooks.timeoutMs", \.hooks.timeoutMs, 100...600_000,
            #"a hook running longer is killed"#),
        .string(
            "control.readGroup", \.control.readGroup, #"group name"#, #"`edgecoder`"#, maxLength: 32, nonEmpty: true, check: ConfigKey.groupProblem,
            #"members may read status and events over the control socket"#),
        .choice(
            "log.level", \.log.level, reload: .live,
            #"least severe level logged"#),

    ]

    /// The rows by path, for the decoder.
    static let byPath = Dictionary(uniqueKeysWithValues: all.map { ($0.path, $0) })
    /// The names of the file's sections (objects at the top level).
    public static let sections = Set(all.compactMap(\.section))
}
