/// Every key of the config file, in the order the reference lists them: the source of
/// `docs/reference/configuration.md` (`edgecoder-worker internal config-reference`). A key the
/// decoder (`WorkerConfig.decode`) accepts must have a row here, and a row here must be a key
/// the decoder accepts: `ConfigKeyTableTests` checks both ways.
public struct ConfigKey: Sendable, Equatable {
    /// The key's path in the file, `section.key` (or `key` at the top level).
    public let path: String
    /// What the value may be, in the reference's words (Markdown).
    public let type: String
    /// The default, in the reference's words (Markdown).
    public let defaultValue: String
    /// What the key does (Markdown).
    public let description: String

    public init(_ path: String, _ type: String, _ defaultValue: String, _ description: String) {
        self.path = path
        self.type = type
        self.defaultValue = defaultValue
        self.description = description
    }

    /// The table. Durations are in milliseconds unless the key says `Sec`.
    public static let all: [ConfigKey] = [
        ConfigKey(
            "agentId", #"string, 1–128 of `A-Z a-z 0-9 - _ .`"#, #"derived"#,
            #"the worker's id at the coordinator; when absent, derived once as `<hostname>-<12 hex>` (an HMAC of `/etc/machine-id` by libsystemd, so the machine id never leaves the host) and persisted in the state directory"#
        ),
        ConfigKey(
            "coordinator.url", #"http(s) URL"#, #"none"#,
            #"the coordinator's base URL (needed for mode `on`); no `user@` credentials; `http://` only to a loopback address (`127.0.0.0/8`, `[::1]`, `localhost`) unless `coordinator.allowInsecureHttp`"#
        ),
        ConfigKey(
            "coordinator.allowInsecureHttp", #"bool"#, #"false"#,
            #"accept an `http://` coordinator URL to any host: the registration token and the mesh token then cross the network unencrypted (`config check` refuses such a URL without it, saying so)"#
        ),
        ConfigKey(
            "coordinator.registrationToken", #"string"#, #"none"#,
            #"sent at registration; or the systemd credential `registration-token`"#),
        ConfigKey(
            "coordinator.heartbeatIntervalMs", #"1000–3600000"#, #"15000"#,
            #"heartbeat period"#),
        ConfigKey(
            "coordinator.pullIntervalMs", #"500–3600000"#, #"5000"#,
            #"pull period while idle"#),
        ConfigKey(
            "coordinator.stopGraceMs", #"0–600000"#, #"10000"#,
            #"on SIGTERM, how long a running subtask may finish"#),
        ConfigKey(
            "coordinator.connectTimeoutMs", #"100–120000"#, #"5000"#,
            #"TCP/TLS connect timeout"#),
        ConfigKey(
            "coordinator.requestTimeoutMs", #"100–600000"#, #"30000"#,
            #"total time of one coordinator call"#),
        ConfigKey(
            "coordinator.maxResponseBytes", #"1024–67108864"#, #"1048576"#,
            #"larger coordinator answers are refused (the journal keeps only what a rerun needs: id, taskId, kind, input ≤ 1 MiB, timeoutMs)"#),
        ConfigKey(
            "coordinator.gapGuard", #"bool"#, #"true"#,
            #"hold pulls after a heartbeat gap over 4 min until the gap leaves the coordinator's one-hour window, so its behaviour monitor never counts the gap more than once (docs/operating/coordinator.md); `false` for a coordinator that does not monitor"#
        ),
        ConfigKey(
            "backend.kind", #"`"ollama"` or `"openai"`"#, #"`"ollama"`"#,
            #"the local model server's API"#),
        ConfigKey(
            "backend.url", #"http(s) URL"#, #"`http://127.0.0.1:11434`"#,
            #"the model server"#),
        ConfigKey(
            "backend.model", #"string"#, #"`qwen2.5-coder:1.5b`"#,
            #"model name passed to the server"#),
        ConfigKey(
            "backend.timeoutMs", #"1000–3600000"#, #"120000"#,
            #"longest a generation may take"#),
        ConfigKey(
            "backend.openaiEndpoint", #"`"completions"` or `"chat"`"#, #"`"completions"`"#,
            #"for `openai`: `/v1/completions` or `/v1/chat/completions`"#),
        ConfigKey(
            "backend.maxOutputBytes", #"1024–16777216"#, #"262144"#,
            #"longer model output is cut (a coordinator result is further cut to fit its 1 MiB body; the outbox keeps the result as posted)"#),
        ConfigKey(
            "backend.maxTokens", #"1–32768"#, #"512"#,
            #"tokens generated for a coordinator subtask"#),
        ConfigKey(
            "backend.think", #"bool"#, #"false"#,
            #"Ollama's `think`, sent with every request (thinking models otherwise think by default and can spend `maxTokens` on it)"#),
        ConfigKey(
            "backend.keepAlive", #"Go duration string (`"30m"`, `"1h"`, `"0"`) or seconds (−1: for good)"#, #"`"30m"`"#,
            #"Ollama's `keep_alive`, sent with every request and with the load when a working mode starts"#),
        ConfigKey(
            "backend.apiKey", #"printable ASCII, no spaces"#, #"none"#,
            #"sent as `Authorization: Bearer`; or the systemd credential `backend-api-key`; never logged or shown; refused with an `http://` `backend.url` to a host that is not loopback unless `backend.allowInsecureHttp`"#
        ),
        ConfigKey(
            "backend.allowInsecureHttp", #"bool"#, #"false"#,
            #"accept `backend.apiKey` with an `http://` `backend.url` to a host that is not loopback: the key then crosses the network unencrypted (only on a network you trust)"#
        ),
        ConfigKey(
            "backend.allowRemoteModelSwitch", #"bool"#, #"false"#,
            #"whether the coordinator may make this worker pull and switch models (Ollama only); per host: `policy set allowRemoteModelSwitch`"#),
        ConfigKey(
            "backend.allowedModelRegistries", #"list of registry hosts (`"host"` or `"host:port"`)"#, #"`[]`"#,
            #"registries a coordinator's model switch may name; by default a model name that carries a registry host (`10.0.0.5:5000/m`, `hf.co/user/m`, `localhost/m`, any `host/namespace/model`) is refused and only the model server's default registry is used"#
        ),
        ConfigKey(
            "policy.runOnlyWhileCharging", #"bool"#, #"false"#,
            #"the charge gate: `on`/`bluetooth` only on external power"#),
        ConfigKey(
            "policy.minBatteryPct", #"0–100"#, #"20"#,
            #"at or below: hold new work"#),
        ConfigKey(
            "policy.resumeBatteryPct", #"0–100, ≥ `minBatteryPct`"#, #"30"#,
            #"after a battery hold, resume only at or above"#),
        ConfigKey(
            "policy.holdWhileDraining", #"bool"#, #"true"#,
            #"hold while on external power but a battery still discharges"#),
        ConfigKey(
            "policy.pauseOnLowPowerMode", #"bool"#, #"true"#,
            #"hold while the platform profile is `low-power`"#),
        ConfigKey(
            "policy.maxThermalState", #"`nominal`/`fair`/`serious`/`critical`"#, #"`fair`"#,
            #"hold above it"#),
        ConfigKey(
            "policy.maxCpuUsagePct", #"1–100"#, #"90"#,
            #"defer a pull while other load (not the worker's, not its model server's) is above it"#),
        ConfigKey(
            "policy.resumeDwellSec", #"0–3600"#, #"30"#,
            #"after a hold, resume only once the reason has been clear this long"#),
        ConfigKey(
            "network.pathLossGraceMs", #"0–600000"#, #"1500"#,
            #"how long the network path must stay lost before `on` downgrades to `bluetooth`"#),
        ConfigKey(
            "network.onMetered", #"`"hold"` or `"allow"`"#, #"`"hold"`"#,
            #"on a metered connection (NetworkManager's `Metered` is yes or guess-yes): `hold` pulls no work (drop reason `metered`), `allow` pulls as on any network (see [host](../operating/host.md))"#
        ),
        ConfigKey(
            "telemetry.deviceType", #"`"desktop"`, `"laptop"` or `"server"`"#, #"detected"#,
            #"overrides the detected `deviceType` (the chassis type; see modes-and-power §3.1) in the heartbeat's telemetry"#),
        ConfigKey(
            "bluetooth.adapter", #"`"hciN"`"#, #"first powered"#,
            #"the adapter to use"#),
        ConfigKey(
            "bluetooth.maxRequestBytes", #"1024–1048576"#, #"65536"#,
            #"largest request a client may write"#),
        ConfigKey(
            "bluetooth.maxQueuedRequests", #"1–1024"#, #"8"#,
            #"requests waiting for the model; more are answered `busy`"#),
        ConfigKey(
            "bluetooth.chunkPacingMs", #"1–1000"#, #"10"#,
            #"the pause notifications are paced with (0 refused: see [Pacing](../operating/bluetooth.md))"#),
        ConfigKey(
            "bluetooth.pacing", #"`"auto"`, `"bytes"` or `"chunks"`"#, #"`"auto"`"#,
            #"`chunks`: the pause after every chunk; `bytes`: one pause per 512 bytes (fast at small MTUs, safe only with one ATT bearer); `auto`: `bytes` when bluetoothd's main.conf says `[GATT] Channels = 1`, else `chunks` (see [Pacing](../operating/bluetooth.md))"#
        ),
        ConfigKey(
            "bluetooth.maxClients", #"1–16"#, #"1"#,
            #"clients served at once (devices that use the service); more are told `busy` and disconnected (see [bluetooth](../operating/bluetooth.md))"#
        ),
        ConfigKey(
            "bluetooth.maxTokens", #"1–32768"#, #"`backend.maxTokens`"#,
            #"the most tokens a Bluetooth request runs with; a request asking for more (`maxTokens`) gets this many"#),
        ConfigKey(
            "bluetooth.security", #"`"open"`/`"encrypted"`/`"authenticated"`"#, #"`"open"`"#,
            #"the link the characteristics require: BlueZ's plain flags, `encrypt-*` (any LE pairing, Just Works included) or `encrypt-authenticated-*` (MITM-protected pairing); `authenticated` (and `allowedClients: "bonded"`) pairs clients with `edgecoder-worker bluetooth pair` — see [bluetooth-pairing](../operating/bluetooth-pairing.md). Applies at a reload (the Bluetooth session starts again)"#
        ),
        ConfigKey(
            "bluetooth.pairingAgent", #"`"auto"`, `"worker"` or `"host"`"#, #"`"auto"`"#,
            #"who answers the Just Works pairings `encrypted` needs: `worker`: the daemon registers its own BlueZ agent while it serves `encrypted` (never for `authenticated` or `allowedClients: "bonded"`); `host`: the host's own agent (a desktop's), or nobody; `auto`: `worker` unless the host boots to a desktop (`default.target` is `graphical.target` and a display manager is enabled). Applies at a reload — see [bluetooth-pairing](../operating/bluetooth-pairing.md)"#
        ),
        ConfigKey(
            "bluetooth.allowedClients", #"`"any"`, `"bonded"` or a list of addresses"#, #"`"any"`"#,
            #"devices that may become clients; others are told `not_allowed`, disconnected and counted (`clientsNotAllowed`)"#),
        ConfigKey(
            "bluetooth.clientIdleSec", #"5–86400"#, #"120"#,
            #"a client without a request for this long loses its slot to a device that wants it (`clientsEvicted`); a device the worker's pairing agent paired that has not used the service after this long has its bond removed (`agentBondsRemoved`)"#
        ),
        ConfigKey(
            "execution.mode", #"`"auto"`, `"container"` or `"text"`"#, #"`"auto"`"#,
            #"how code subtasks (those with a `language`) are answered: `auto`: their program runs in a container when the engine and image are usable, otherwise the model's text is posted; `container`: only in a container, and pulls wait (`sandbox-unavailable`) while it is not usable; `text`: the model's text, never a program. The coordinator hears `sandboxMode: "docker"` only while programs run in a container — see [sandbox](../operating/sandbox.md)"#
        ),
        ConfigKey(
            "execution.engine", #"command name or absolute path"#, #"`"podman"`"#,
            #"the OCI container engine's command line: `podman` (rootless as the worker's user) or `docker`"#),
        ConfigKey(
            "execution.engineArguments", #"list of strings"#, #"`[]`"#,
            #"arguments given to the engine before `run`, e.g. `["--runtime", "runc"]` on a host with cgroup v1"#),
        ConfigKey(
            "execution.image", #"image name"#, #"`"localhost/edgecoder-sandbox:1"`"#,
            #"the image programs run in: python3 and node on `PATH`; `edgecoder-worker sandbox build` makes the default one from Debian's packages"#),
        ConfigKey(
            "execution.timeoutMs", #"500–600000"#, #"4000"#,
            #"a program still running after this long is killed with its whole container"#),
        ConfigKey(
            "hooks.networkRestored", #"string"#, #"none"#,
            #"command run when the network returns after a downgrade"#),
        ConfigKey(
            "hooks.timeoutMs", #"100–600000"#, #"10000"#,
            #"a hook running longer is killed"#),
        ConfigKey(
            "control.readGroup", #"group name"#, #"`edgecoder`"#,
            #"members may read status and events over the control socket"#),
        ConfigKey(
            "log.level", #"`debug`/`info`/`notice`/`warning`/`error`"#, #"`info`"#,
            #"least severe level logged"#),
    ]
}
