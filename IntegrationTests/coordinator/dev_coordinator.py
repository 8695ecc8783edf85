#!/usr/bin/env python3
"""Development coordinator for edgecoder-worker tests (Python 3 standard library only).

Speaks the worker side of the EdgeCoder coordinator protocol (docs/reference/protocol-coordinator.md):
POST /register, /heartbeat, /pull, /result, validating every body as strictly as the
zod schemas of codyrs82/Edgecoder src/swarm/coordinator.ts (see WIRE.md next to this file):
same required fields, types, enums and bounds; unknown keys are *stripped, not rejected*
(plain z.object), exactly like EdgeCoder, but they are listed in /_dev/state so a test can
assert the worker sends none (or pass --reject-unknown to make them a 400).

Behavioural monitoring is on (--no-monitoring turns it off): like EdgeCoder's
src/security/{behavior-tracker,anomaly-detector,auto-blacklister}.ts, every registration and
every result is checked against rules BHV001-BHV010 over a sliding window; a CRITICAL hit or
three HIGH/WARN strikes blacklist the agent for good (register/result 403 agent_blacklisted,
heartbeat {ok:false, blacklisted:true}, pull {subtask:null, blocked:true}). /_dev/state
lists violations, strikes and blacklisted. --monitor-window-ms and --heartbeat-gap-ms scale
its 1 h window and BHV006's 5 min gap for tests.

Differences from EdgeCoder, on purpose:
- a schema violation answers 400 {"error":"invalid_body","field":...} (EdgeCoder's
  unhandled ZodError gives 500; --invalid-status 500 mimics it);
- a result for a subtask that was never handed out, or with the wrong taskId/agentId,
  answers 400 (EdgeCoder says {ok:true}); --lenient-results accepts it like EdgeCoder;
- the registration token is checked even from loopback (EdgeCoder skips loopback).

Control endpoints (no token; details in README.md):

    POST /_dev/subtasks   {input, timeoutMs?, kind?, language?, taskId?, id?, ...} or a list
    GET  /_dev/subtasks   every subtask and its state
    GET  /_dev/results    results in arrival order, raw counts per subtaskId, duplicates
    GET  /_dev/state      registrations, heartbeats, pulls, requests, switch, token
    GET  /_dev/requests?since=SEQ   every worker request logged after SEQ (last 20000 kept)
    POST /_dev/switch     {mode, paths?, delayMs?, deferMs?, reason?, error?, bytes?,
                           capSeconds?, times?}  or {mode:"offline", seconds:N}
    POST /_dev/orchestration {agentId?, provider?, model?, autoInstall?}: ask an agent to
                          switch model (EdgeCoder's /orchestration/agents/:id/ollama-install);
                          the next heartbeat answers carry it until the agent acks
    POST /_dev/reset      forget everything, back to mode normal
    GET  /_dev/health     {ok:true}
"""

import argparse
import hashlib
import json
import math
import secrets
import select
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WORKER_PATHS = ("/register", "/heartbeat", "/pull", "/result")
# EdgeCoder's agent-side orchestration calls: POST /orchestration/agents/:agentId/{status,ack}.
ORCHESTRATION_CALLS = ("status", "ack")


def orchestration_call(path):
    """(agentId, call) for an orchestration path, else None."""
    parts = path.split("/")
    if len(parts) == 5 and parts[0] == "" and parts[1] == "orchestration" and parts[2] == "agents" \
            and parts[3] and parts[4] in ORCHESTRATION_CALLS:
        return parts[3], parts[4]
    return None
AUTH_PATHS = ("/heartbeat", "/pull", "/result")
TCP_CLOSE, TCP_CLOSE_WAIT = 7, 8  # the first byte of Linux's TCP_INFO (include/net/tcp_states.h)
MODES = (
    "normal",
    "unauthorized-once",
    "forbidden",
    "blacklisted",
    "power-deferred",
    "power-policy",
    "malformed",
    "oversized",
    "slow",
    "hang",
    "down",
    "lost-answer",
)
DEFAULT_PATHS = {
    "unauthorized-once": AUTH_PATHS,
    "power-deferred": ("/pull",),
    "power-policy": ("/pull",),
}
FIXED_POLICY = {
    "cpuCapPercent": 50,
    "memoryLimitMb": 2048,
    "idleOnly": True,
    "maxConcurrentTasks": 1,
    "allowedHours": {"startHourUtc": 22, "endHourUtc": 6},
}
MAX_SAFE_INT = 2 ** 53 - 1


def now_ms():
    return int(time.time() * 1000)


def mono_ms():
    return int(time.monotonic() * 1000)


# --------------------------------------------------------------------------------------
# A small zod-like validator (zod 4 semantics as used by EdgeCoder).

REQ, OPT, DEF = "required", "optional", "default"
UNDEFINED = object()  # a POST without any body: the handler sees `undefined`


def js_type(v):
    if v is UNDEFINED:
        return "undefined"
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return "undefined"


def js_len(s):
    """String length as JavaScript counts it (UTF-16 code units)."""
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


class Str:
    def __init__(self, min_len=None, max_len=None):
        self.min_len, self.max_len = min_len, max_len

    def check(self, v, path, issues, unknown):
        if not isinstance(v, str):
            issues.append((path, "expected string, received %s" % js_type(v)))
            return v
        n = js_len(v)
        if self.min_len is not None and n < self.min_len:
            issues.append((path, "too small: expected string to have >=%d characters" % self.min_len))
        if self.max_len is not None and n > self.max_len:
            issues.append((path, "too big: expected string to have <=%d characters" % self.max_len))
        return v


class Num:
    def __init__(self, integer=False, lo=None, hi=None):
        self.integer, self.lo, self.hi = integer, lo, hi

    def check(self, v, path, issues, unknown):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            issues.append((path, "expected number, received %s" % js_type(v)))
            return v
        try:
            f = float(v)  # JavaScript numbers are doubles
        except OverflowError:
            f = math.inf
        if not math.isfinite(f):
            issues.append((path, "expected number, received Infinity"))
            return v
        if self.integer:
            if not f.is_integer():
                issues.append((path, "expected int, received number"))
                return v
            if abs(f) > MAX_SAFE_INT:
                issues.append((path, "expected int, received unsafe integer"))
                return v
        if self.lo is not None and f < self.lo:
            issues.append((path, "too small: expected number to be >=%s" % self.lo))
        if self.hi is not None and f > self.hi:
            issues.append((path, "too big: expected number to be <=%s" % self.hi))
        return v


class Bool:
    def check(self, v, path, issues, unknown):
        if not isinstance(v, bool):
            issues.append((path, "expected boolean, received %s" % js_type(v)))
        return v


class Enum:
    def __init__(self, *values):
        self.values = values

    def check(self, v, path, issues, unknown):
        if not isinstance(v, str) or v not in self.values:
            issues.append((path, "invalid option: expected one of %s" % "|".join('"%s"' % x for x in self.values)))
        return v


class Obj:
    """z.object({...}): unknown keys are stripped (reported in `unknown`), not rejected."""

    def __init__(self, fields):
        self.fields = fields

    def check(self, v, path, issues, unknown):
        if not isinstance(v, dict):
            issues.append((path, "expected object, received %s" % js_type(v)))
            return v
        out = {}
        for name, (schema, kind, *default) in self.fields.items():
            if name not in v:
                if kind == REQ:
                    issues.append((path + [name], "expected %s, received undefined" % type_name(schema)))
                elif kind == DEF:
                    out[name] = default[0]
                continue
            out[name] = schema.check(v[name], path + [name], issues, unknown)
        for name in v:
            if name not in self.fields:
                unknown.append(".".join(path + [name]))
        return out


def type_name(schema):
    return {Str: "string", Num: "number", Bool: "boolean", Enum: "enum", Obj: "object"}.get(type(schema), "value")


POWER_TELEMETRY = Obj({
    "onExternalPower": (Bool(), OPT),
    "batteryLevelPct": (Num(lo=0, hi=100), OPT),
    "lowPowerMode": (Bool(), OPT),
    "updatedAtMs": (Num(), OPT),
    "onACPower": (Bool(), OPT),
    "batteryPct": (Num(lo=0, hi=100), OPT),
    "thermalState": (Enum("nominal", "fair", "serious", "critical"), OPT),
    "cpuUsagePct": (Num(lo=0, hi=100), OPT),
    "memoryUsagePct": (Num(lo=0, hi=100), OPT),
    "deviceType": (Enum("desktop", "laptop", "phone", "tablet", "server"), OPT),
})

SCHEMAS = {
    "/register": Obj({
        "agentId": (Str(), REQ),
        "deviceId": (Str(3, 128), OPT),
        "os": (Str(min_len=2), REQ),
        "version": (Str(), REQ),
        "mode": (Enum("swarm-only", "ide-enabled"), REQ),
        "registrationToken": (Str(), OPT),
        "localModelProvider": (Enum("edgecoder-local", "ollama-local"), DEF, "edgecoder-local"),
        "clientType": (Str(1, 64), DEF, "edgecoder-native"),
        "maxConcurrentTasks": (Num(integer=True, lo=1, hi=64), DEF, 1),
        "powerTelemetry": (POWER_TELEMETRY, OPT),
        "publicKeyPem": (Str(), OPT),
        "x25519PublicKey": (Str(), OPT),
        "sandboxMode": (Enum("none", "docker", "vm"), DEF, "none"),
        "binaryIntegrity": (Obj({
            "distHash": (Str(), REQ),
            "releaseVersion": (Str(), REQ),
            "releaseSignature": (Str(), REQ),
            "distributionChannel": (Str(), REQ),
        }), OPT),
    }),
    "/heartbeat": Obj({
        "agentId": (Str(), REQ),
        "powerTelemetry": (POWER_TELEMETRY, OPT),
        "activeModel": (Str(), OPT),
        "activeModelParamSize": (Num(), OPT),
        "modelSwapInProgress": (Bool(), OPT),
        "sandboxMode": (Enum("none", "docker", "vm"), OPT),
    }),
    "/pull": Obj({"agentId": (Str(), REQ)}),
    # coordinator.ts, POST /orchestration/agents/:agentId/status and /ack.
    "/orchestration/status": Obj({
        "phase": (Str(max_len=64), REQ),
        "message": (Str(max_len=512), REQ),
        "progressPct": (Num(lo=0, hi=100), OPT),
    }),
    "/orchestration/ack": Obj({"ok": (Bool(), REQ), "error": (Str(), OPT)}),
    "/result": Obj({
        "subtaskId": (Str(), REQ),
        "taskId": (Str(), REQ),
        "agentId": (Str(), REQ),
        "ok": (Bool(), REQ),
        "output": (Str(), REQ),
        "error": (Str(), OPT),
        "durationMs": (Num(), REQ),
        "reportNonce": (Str(), OPT),
        "reportSignature": (Str(), OPT),
    }),
}

DEV_SUBTASK = Obj({
    "input": (Str(min_len=1), REQ),
    "timeoutMs": (Num(integer=True, lo=1), DEF, 30000),
    "kind": (Enum("micro_loop", "single_step"), DEF, "single_step"),
    "language": (Enum("python", "javascript"), DEF, "python"),
    "taskId": (Str(min_len=1), OPT),
    "id": (Str(min_len=1), OPT),
    "snapshotRef": (Str(min_len=1), DEF, "debug"),
    "requestedModel": (Str(), OPT),
    "projectMeta": (Obj({
        "projectId": (Str(), REQ),
        "tenantId": (Str(), OPT),
        "resourceClass": (Enum("cpu", "gpu"), REQ),
        "priority": (Num(lo=0, hi=100), REQ),
    }), OPT),
})


DEV_ORCHESTRATION = Obj({
    "agentId": (Str(min_len=1), OPT),
    "provider": (Enum("edgecoder-local", "ollama-local"), DEF, "ollama-local"),
    "model": (Str(min_len=1), DEF, "qwen2.5-coder:latest"),
    "autoInstall": (Bool(), DEF, True),
})


def validate(schema, body):
    issues, unknown = [], []
    parsed = schema.check(body, [], issues, unknown)
    return parsed, [{"path": ".".join(p) or "(body)", "message": m} for p, m in issues], unknown


class BadJSON(ValueError):
    pass


def parse_json(raw):
    """JSON.parse through secure-json-parse, as Fastify's default parser does."""
    text = raw.decode("utf-8", errors="replace")
    if text.startswith("\ufeff"):
        text = text[1:]

    def bad_constant(name):
        raise BadJSON("Unexpected token %s in JSON" % name)

    def pairs_hook(pairs):
        d = {}
        for k, v in pairs:
            if k == "__proto__" or (k == "constructor" and isinstance(v, dict) and "prototype" in v):
                raise BadJSON("Object contains forbidden prototype property")
            d[k] = v
        return d

    try:
        return json.loads(text, object_pairs_hook=pairs_hook, parse_constant=bad_constant)
    except BadJSON:
        raise
    except ValueError as e:
        raise BadJSON(str(e))


# --------------------------------------------------------------------------------------
# EdgeCoder's pull-time power policy (power-policy.ts), for mode "power-policy".

def evaluate_power_policy(os_name, t, last_assigned_ms, now):
    t = t or {}
    if os_name == "ios":
        if t.get("lowPowerMode") is True:
            return {"allow": False, "reason": "ios_low_power_mode"}
        if t.get("onExternalPower") is True:
            return {"allow": True, "reason": "ios_external_power"}
        lvl = t.get("batteryLevelPct")
        if isinstance(lvl, (int, float)) and max(0, min(100, lvl)) <= 20:
            return {"allow": False, "reason": "ios_battery_critical"}
        if now - (last_assigned_ms or 0) < 45000:
            return {"allow": False, "reason": "ios_on_battery_throttled"}
        return {"allow": True, "reason": "ios_on_battery_lite_mode"}
    dt = t.get("deviceType")
    if dt == "server":
        return {"allow": True, "reason": "server_unlimited"}
    cpu = t.get("cpuUsagePct")
    if isinstance(cpu, (int, float)) and cpu > 85:
        return {"allow": True, "deferMs": 5000, "reason": "high_cpu_defer"}
    if t.get("thermalState") in ("serious", "critical"):
        return {"allow": False, "reason": "thermal_throttle"}
    on_ac = t.get("onACPower")
    pct = t.get("batteryPct")
    pct = max(0, min(100, pct)) if isinstance(pct, (int, float)) else None
    if dt == "desktop" or on_ac is True or (on_ac is None and pct is None):
        return {"allow": True, "reason": "desktop_ac_power"}
    if pct is not None:
        if pct < 15:
            return {"allow": False, "reason": "laptop_battery_critical"}
        if pct <= 40:
            return {"allow": True, "smallOnly": True, "reason": "laptop_battery_low"}
    return {"allow": True, "reason": "laptop_battery_high"}


# --------------------------------------------------------------------------------------
# Behavioural monitoring, as EdgeCoder's coordinator does it (codyrs82/Edgecoder,
# src/security/behavior-tracker.ts, anomaly-detector.ts, auto-blacklister.ts, wired in
# src/swarm/coordinator.ts). Written from reading those files; nothing is copied.
#
# What upstream records, per agentId (coordinator.ts):
#   - a registration at every /register that passes activation and is not blacklisted;
#   - a heartbeat at every /heartbeat of a registered, not blacklisted agent;
#   - a claim when /pull actually hands a subtask out;
#   - a task at every /result of a not blacklisted agent: ok, output, durationMs, whatever
#     subtask it names (unknown, already completed, duplicate: all count).
# Every record older than the window (1 h) is dropped. The rules run on the whole window
# after each registration and after each result (never on heartbeat or pull).
# A CRITICAL hit blacklists at once; each HIGH/WARN hit of an evaluation adds one strike;
# three strikes within the strike window (1 h) blacklist. The blacklist is permanent.

MONITOR_WINDOW_MS = 60 * 60 * 1000  # behavior-tracker.ts DEFAULT_WINDOW_MS, auto-blacklister.ts DEFAULT_STRIKE_WINDOW_MS
HEARTBEAT_GAP_MS = 5 * 60 * 1000    # anomaly-detector.ts heartbeatGapThresholdMs (BHV006)
STRIKES_TO_BAN = 3                  # auto-blacklister.ts DEFAULT_STRIKE_THRESHOLD
SEVERITY_ORDER = ("CRITICAL", "HIGH", "WARN", "INFO")


def js_round(x):
    """Math.round: halves go up."""
    return int(math.floor(x + 0.5))


class BehaviorTracker:
    """behavior-tracker.ts: the per-agent event log, kept to a sliding window, and the
    statistics the rules read. Times are monotonic milliseconds."""

    def __init__(self, window_ms):
        self.window_ms = window_ms
        self.agents = {}

    def _entry(self, agent_id):
        return self.agents.setdefault(agent_id, {"tasks": [], "registrations": [], "claims": [], "heartbeats": []})

    def _prune(self, e, now):
        cutoff = now - self.window_ms
        for k in ("registrations", "claims", "heartbeats"):
            e[k] = [t for t in e[k] if t >= cutoff]
        e["tasks"] = [t for t in e["tasks"] if t["t"] >= cutoff]

    def record_result(self, agent_id, ok, output, duration_ms, now):
        e = self._entry(agent_id)
        self._prune(e, now)
        # upstream keeps the first 16 hex digits of the output's SHA-256 and its JS length
        e["tasks"].append({"t": now, "ok": ok, "hash": hashlib.sha256(output.encode("utf-8", "surrogatepass")).hexdigest()[:16],
                           "length": js_len(output), "durationMs": float(duration_ms)})

    def record(self, kind, agent_id, now):
        """kind: registrations, claims or heartbeats."""
        e = self._entry(agent_id)
        self._prune(e, now)
        e[kind].append(now)

    def stats(self, agent_id, now):
        e = self.agents.get(agent_id)
        if e is None:
            return None
        self._prune(e, now)
        tasks = e["tasks"]
        n = len(tasks)
        durations = [t["durationMs"] for t in tasks]
        avg = sum(durations) / n if n else 0.0
        # the longest run of consecutive results (arrival order) with the same output hash;
        # stays 0 unless some run reaches 2
        longest, run = 0, 1
        for prev, cur in zip(tasks, tasks[1:]):
            run = run + 1 if cur["hash"] == prev["hash"] else 1
            if run > 1:
                longest = max(longest, run)
        # population standard deviation (divides by n); 0 below two values
        std = math.sqrt(sum((d - avg) ** 2 for d in durations) / n) if n >= 2 else 0.0
        hb = sorted(e["heartbeats"])
        gap = max((b - a for a, b in zip(hb, hb[1:])), default=0)
        ok_count = sum(1 for t in tasks if t["ok"])
        return {
            "totalTasks": n,
            "successCount": ok_count,
            "successRate": ok_count / n if n else 1.0,
            "emptyOutputCount": sum(1 for t in tasks if t["length"] == 0),
            "identicalOutputCount": longest,
            "avgOutputLength": sum(t["length"] for t in tasks) / n if n else 0.0,
            "avgDurationMs": avg,
            "durationStdDev": std,
            "suspiciouslyFastCount": sum(1 for d in durations if d < 500),
            "registrationCount": len(e["registrations"]),
            "taskClaimCount": len(e["claims"]),
            "heartbeatCount": len(hb),
            "heartbeatGapMaxMs": gap,
        }


class AnomalyRules:
    """anomaly-detector.ts: each rule reads the window's statistics and may report one
    hit. Upstream also has BHV005 (signature/replay failures of signed requests: the dev
    coordinator verifies no signatures and the worker signs nothing) and BHV007 (task
    hoarding: its inputs, recordRequeue and setConcurrentClaimCount, are never called by
    coordinator.ts, so it can never fire); neither is implemented here."""

    def __init__(self, heartbeat_gap_ms):
        self.heartbeat_gap_ms = heartbeat_gap_ms

    @staticmethod
    def _hit(rule, name, severity, code, description, **numbers):
        return {"rule": rule, "name": name, "severity": severity, "reasonCode": code,
                "description": description, "stats": numbers}

    def evaluate(self, s):
        hits = []
        n = s["totalTasks"]
        # BHV001 (anomaly-detector.ts), CRITICAL: at least 3 results under 500 ms while the
        # window's average duration is under 1000 ms. Failures count too.
        if s["suspiciouslyFastCount"] >= 3 and s["avgDurationMs"] < 1000:
            hits.append(self._hit("BHV001", "Suspiciously fast", "CRITICAL", "forged_results",
                                  "%d tasks completed in <500ms with avg %dms" % (s["suspiciouslyFastCount"], js_round(s["avgDurationMs"])),
                                  suspiciouslyFastCount=s["suspiciouslyFastCount"], avgDurationMs=s["avgDurationMs"]))
        # BHV002 (anomaly-detector.ts), HIGH: at least 5 empty outputs and more than 60 % of
        # the window's results empty.
        if n and s["emptyOutputCount"] >= 5 and s["emptyOutputCount"] / n > 0.6:
            ratio = s["emptyOutputCount"] / n
            hits.append(self._hit("BHV002", "Mass empty outputs", "HIGH", "forged_results",
                                  "%d/%d tasks returned empty output (%.0f%%)" % (s["emptyOutputCount"], n, ratio * 100),
                                  emptyOutputCount=s["emptyOutputCount"], totalTasks=n, emptyRatio=ratio))
        # BHV003 (anomaly-detector.ts), CRITICAL: 3 or more consecutive results with the same
        # output (hash), ok or not; "" three times in a row counts.
        if s["identicalOutputCount"] >= 3:
            hits.append(self._hit("BHV003", "Duplicate forgery", "CRITICAL", "forged_results",
                                  "%d consecutive identical output hashes" % s["identicalOutputCount"],
                                  identicalOutputCount=s["identicalOutputCount"]))
        # BHV004 (anomaly-detector.ts), HIGH: at least 10 results and fewer than 15 % ok.
        if n >= 10 and s["successRate"] < 0.15:
            hits.append(self._hit("BHV004", "Success collapse", "HIGH", "policy_violation",
                                  "Success rate %.0f%% over %d tasks" % (s["successRate"] * 100, n),
                                  successRate=s["successRate"], totalTasks=n))
        # BHV006 (anomaly-detector.ts, gap from behavior-tracker.ts), HIGH: two consecutive
        # heartbeats of the window more than 5 min apart, and at least one claim in the
        # window. The time since the last heartbeat is not a gap until the next one arrives.
        if s["heartbeatGapMaxMs"] > self.heartbeat_gap_ms and s["taskClaimCount"] > 0:
            hits.append(self._hit("BHV006", "Heartbeat manipulation", "HIGH", "dos_behavior",
                                  "Max heartbeat gap %ds while still claiming tasks" % js_round(s["heartbeatGapMaxMs"] / 1000),
                                  heartbeatGapMaxMs=s["heartbeatGapMaxMs"], taskClaimCount=s["taskClaimCount"]))
        # BHV008 (anomaly-detector.ts), HIGH: 10 or more registrations in the window (the
        # tracker's 1 h window; upstream's registrationStormWindowMs of 10 min is never read).
        if s["registrationCount"] >= 10:
            hits.append(self._hit("BHV008", "Registration storm", "HIGH", "dos_behavior",
                                  "%d registrations in window" % s["registrationCount"],
                                  registrationCount=s["registrationCount"]))
        # BHV009 (anomaly-detector.ts), WARN: at least 10 results whose durations have a
        # population standard deviation under 50 ms.
        if n >= 10 and s["durationStdDev"] < 50:
            hits.append(self._hit("BHV009", "Robot precision", "WARN", "forged_results",
                                  "Duration stddev %.1fms over %d tasks (unnaturally consistent)" % (s["durationStdDev"], n),
                                  durationStdDev=s["durationStdDev"], totalTasks=n))
        # BHV010 (anomaly-detector.ts), WARN: at least 5 results, average output length
        # (UTF-16 units, failures included) under 10, and more than 80 % ok.
        if n >= 5 and s["avgOutputLength"] < 10 and s["successRate"] > 0.8:
            hits.append(self._hit("BHV010", "Tiny outputs", "WARN", "forged_results",
                                  'Avg output length %.1f over %d "successful" tasks' % (s["avgOutputLength"], n),
                                  avgOutputLength=s["avgOutputLength"], totalTasks=n, successRate=s["successRate"]))
        return hits


class AutoBlacklister:
    """auto-blacklister.ts: CRITICAL bans at once (with every hit of that evaluation);
    otherwise every hit adds a strike (so one evaluation with three HIGH/WARN hits bans, and
    a condition that keeps holding strikes again at every evaluation); strikes older than
    the strike window are dropped; at three the agent is banned with all its strikes and
    they are cleared."""

    def __init__(self, window_ms, threshold=STRIKES_TO_BAN):
        self.window_ms = window_ms
        self.threshold = threshold
        self.strikes = {}  # agentId -> [(mono ms, hit, wall ms)]

    def process(self, agent_id, hits, now, wall):
        if not hits:
            return None
        if any(h["severity"] == "CRITICAL" for h in hits):
            return self._ban(hits)
        current = [s for s in self.strikes.get(agent_id, []) if s[0] >= now - self.window_ms]
        current += [(now, h, wall) for h in hits]
        self.strikes[agent_id] = current
        if len(current) >= self.threshold:
            del self.strikes[agent_id]
            return self._ban([s[1] for s in current])
        return None

    def current(self, now):
        return {a: [{"rule": h["rule"], "severity": h["severity"], "atMs": w}
                    for (t, h, w) in v if t >= now - self.window_ms]
                for a, v in self.strikes.items()}

    @staticmethod
    def _ban(hits):
        # the most severe hit (the first of its severity) names the reason
        primary = sorted(hits, key=lambda h: SEVERITY_ORDER.index(h["severity"]))[0]
        rules = [h["rule"] for h in hits]
        return {"rules": rules, "reasonCode": primary["reasonCode"],
                "reason": "Auto-blacklisted by behavioral monitoring: %s \u2014 %s" % (", ".join(rules), primary["description"])}


class Monitor:
    """Ties the three together, like coordinator.ts's evaluateAndEnforce; keeps what a test
    reads in /_dev/state: every hit (violations), the bans (blacklisted), the strikes."""

    def __init__(self, enabled, window_ms, heartbeat_gap_ms, clock=None):
        self.enabled = enabled
        self.window_ms = window_ms
        self.clock = clock or mono_ms
        self.tracker = BehaviorTracker(window_ms)
        self.rules = AnomalyRules(heartbeat_gap_ms)
        self.blacklister = AutoBlacklister(window_ms)
        self.blacklisted = {}  # agentId -> {rules, reason, reasonCode, atMs, at}
        self.violations = []
        self.version = 0       # upstream's blacklistVersion: +1 per ban

    def ban_of(self, agent_id):
        return self.blacklisted.get(agent_id) if self.enabled else None

    def record(self, kind, agent_id):
        if self.enabled:
            self.tracker.record(kind, agent_id, self.clock())

    def registered(self, agent_id):
        """coordinator.ts /register: record, then evaluate."""
        if self.enabled:
            self.tracker.record("registrations", agent_id, self.clock())
            self.evaluate(agent_id, "register")

    def result(self, agent_id, ok, output, duration_ms):
        """coordinator.ts /result: record, then evaluate."""
        if self.enabled:
            self.tracker.record_result(agent_id, ok, output, duration_ms, self.clock())
            self.evaluate(agent_id, "result")

    def evaluate(self, agent_id, at):
        now, wall = self.clock(), now_ms()
        stats = self.tracker.stats(agent_id, now)
        if stats is None:
            return None
        hits = self.rules.evaluate(stats)
        for h in hits:
            self.violations.append(dict(h, agentId=agent_id, at=at, atMs=wall))
        ban = self.blacklister.process(agent_id, hits, now, wall)
        if ban is not None and agent_id not in self.blacklisted:
            self.blacklisted[agent_id] = dict(ban, atMs=wall, at=at)
            self.version += 1
            log("blacklisted %s: %s" % (agent_id, ban["reason"]))
        return ban

    def view(self):
        now = self.clock()
        return {
            "blacklisted": {a: dict(b) for a, b in self.blacklisted.items()},
            "violations": list(self.violations),
            "strikes": self.blacklister.current(now),
            "behavior": {a: self.tracker.stats(a, now) for a in list(self.tracker.agents)},
        }


# --------------------------------------------------------------------------------------


class Switch:
    def __init__(self, mode="normal", **params):
        if mode not in MODES:
            raise ValueError("unknown mode %r" % mode)
        d = params.get("deferMs", 5000)
        if d is not None and (isinstance(d, bool) or not isinstance(d, int) or d < 0):
            raise ValueError("deferMs must be a non-negative integer or null")
        self.mode = mode
        self.paths = tuple(params.get("paths") or DEFAULT_PATHS.get(mode, WORKER_PATHS))
        self.delay_ms = int(params.get("delayMs", 2000))
        self.defer_ms = params.get("deferMs", 5000)  # None: omit deferMs from the answer
        self.reason = params.get("reason")
        self.error = params.get("error") or "agent_blacklisted"
        self.bytes = int(params.get("bytes", 5 * 1024 * 1024))
        self.cap_s = float(params.get("capSeconds", 120))
        self.times = int(params.get("times", 1))

    def applies(self, path):
        return self.mode != "normal" and path in self.paths

    def describe(self):
        return {
            "mode": self.mode, "paths": list(self.paths), "delayMs": self.delay_ms,
            "deferMs": self.defer_ms, "reason": self.reason, "error": self.error,
            "bytes": self.bytes, "capSeconds": self.cap_s, "times": self.times,
        }


class Coordinator:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Condition()
        self.stopping = False
        self.offline_until = None
        self.reset()
        self.switch = self.make_switch(args.mode, {"paths": args.paths})

    def make_switch(self, mode, params):
        """A switch whose unspecified parameters come from the command line."""
        a = self.args
        merged = {"delayMs": a.delay_ms, "deferMs": a.defer_ms, "reason": a.reason, "error": a.forbidden_error,
                  "bytes": a.oversized_bytes, "capSeconds": a.hang_cap_s}
        merged.update({k: v for k, v in params.items() if k != "mode"})
        return Switch(mode, **merged)

    def reset(self):
        self.switch = Switch()
        self.mesh_token = self.args.mesh_token  # a fixed token is required from the start
        self.tokens_issued = 0
        self.token_rotations = 0
        self.agents = {}  # agentId -> registration record
        self.registrations = []
        self.heartbeats = []
        self.pulls = 0
        self.pull_answers = {}
        self.subtasks = {}  # id -> record
        self.order = []  # subtask ids, FIFO
        self.results = []
        self.rejected_results = []
        self.counts = {}
        self.requests = []
        self.seq = 0
        self.unknown_keys = []
        self.hung = 0
        self.orchestration = {}  # agentId -> EdgeCoder's record
        self.orchestration_statuses = []
        self.orchestration_acks = []
        a = self.args
        self.monitor = Monitor(not a.no_monitoring, a.monitor_window_ms, a.heartbeat_gap_ms)

    # ---- bookkeeping -------------------------------------------------------------

    def log_request(self, entry):
        with self.lock:
            self.seq += 1
            entry["seq"] = self.seq
            self.requests.append(entry)
            if len(self.requests) > 20000:
                del self.requests[: len(self.requests) - 20000]
            return entry

    def set_switch(self, sw):
        with self.lock:
            self.switch = sw
            self.lock.notify_all()

    # ---- subtasks ---------------------------------------------------------------

    def enqueue(self, spec):
        with self.lock:
            sid = spec.get("id") or str(uuid.uuid4())
            if sid in self.subtasks:
                raise ValueError("duplicate subtask id %s" % sid)
            sub = {
                "id": sid,
                "taskId": spec.get("taskId") or str(uuid.uuid4()),
                "kind": spec["kind"],
                "language": spec["language"],
                "input": spec["input"],
                "timeoutMs": spec["timeoutMs"],
                "snapshotRef": spec["snapshotRef"],
                "projectMeta": spec.get("projectMeta") or {"projectId": "dev", "resourceClass": "cpu", "priority": 50},
            }
            if "requestedModel" in spec:
                sub["requestedModel"] = spec["requestedModel"]
            self.subtasks[sid] = {"subtask": sub, "state": "queued", "handedTo": [], "handedAtMs": [],
                                  "handOuts": 0, "enqueuedAtMs": now_ms(), "lastHandedMono": None}
            self.order.append(sid)
            return sub

    def claim(self, agent_id, small_only=False):
        for sid in self.order:
            rec = self.subtasks[sid]
            if rec["state"] != "queued":
                continue
            if small_only and rec["subtask"]["timeoutMs"] > 10000:
                return "small_only_deferred"
            rec["state"] = "handed-out"
            rec["handedTo"].append(agent_id)
            rec["handedAtMs"].append(now_ms())
            rec["handOuts"] += 1
            rec["lastHandedMono"] = time.monotonic()
            return rec["subtask"]
        return None

    def requeue(self, sid):
        """queue.requeue: the subtask is queued again as if never handed out to this agent."""
        rec = self.subtasks[sid]
        rec["state"] = "queued"
        rec["handOuts"] -= 1
        rec["handedTo"].pop()
        rec["handedAtMs"].pop()

    def requeue_stale(self):
        n = self.args.requeue_stale_ms
        if n <= 0:
            return 0
        count = 0
        for rec in self.subtasks.values():
            if rec["state"] == "handed-out" and (time.monotonic() - rec["lastHandedMono"]) * 1000 > n:
                rec["state"] = "queued"
                count += 1
        return count

    # ---- snapshots for /_dev -----------------------------------------------------

    def results_view(self):
        with self.lock:
            delivered = []
            for r in self.results:
                if r["subtaskId"] not in delivered:
                    delivered.append(r["subtaskId"])
            return {
                "total": len(self.results),
                "results": list(self.results),
                "counts": dict(self.counts),
                "delivered": delivered,
                "duplicates": [k for k, v in self.counts.items() if v > 1],
                "rejected": list(self.rejected_results),
            }

    def state_view(self):
        with self.lock:
            by_path = {}
            for r in self.requests:
                k = r["path"]
                by_path.setdefault(k, {})
                by_path[k][str(r.get("status"))] = by_path[k].get(str(r.get("status")), 0) + 1
            return dict({
                "config": {"monitoring": self.monitor.enabled, "monitorWindowMs": self.args.monitor_window_ms,
                           "heartbeatGapMs": self.args.heartbeat_gap_ms, "requeueStaleMs": self.args.requeue_stale_ms},
                "switch": self.switch.describe(),
                "offline": self.offline_until is not None,
                "meshTokenEnabled": not self.args.no_mesh_token,
                "meshToken": self.mesh_token,
                "tokensIssued": self.tokens_issued,
                "tokenRotations": self.token_rotations,
                "registrationTokenRequired": self.args.registration_token is not None,
                "agents": dict(self.agents),
                "registrations": list(self.registrations),
                "heartbeats": list(self.heartbeats),
                "heartbeatCount": len(self.heartbeats),
                "pulls": self.pulls,
                "pullAnswers": dict(self.pull_answers),
                "unknownKeys": list(self.unknown_keys),
                "hungNow": self.hung,
                "orchestration": dict(self.orchestration),
                "orchestrationStatuses": list(self.orchestration_statuses),
                "orchestrationAcks": list(self.orchestration_acks),
                "subtasks": {"queued": sum(1 for r in self.subtasks.values() if r["state"] == "queued"),
                             "handedOut": sum(1 for r in self.subtasks.values() if r["state"] == "handed-out"),
                             "done": sum(1 for r in self.subtasks.values() if r["state"] == "done")},
                "requestsByPathStatus": by_path,
                "requests": list(self.requests[-1000:]),
            }, **self.monitor.view())

    def subtasks_view(self):
        with self.lock:
            out = []
            for sid in self.order:
                rec = self.subtasks[sid]
                out.append({k: v for k, v in rec.items() if k != "lastHandedMono"})
            return {"subtasks": out}


# --------------------------------------------------------------------------------------


class Drop(Exception):
    """Close the connection without answering."""


class Handler(BaseHTTPRequestHandler):
    # Headers and body go out in separate writes; with Nagle on, the body waits for the
    # client's delayed ACK (40 ms). Real servers (Node, Go, Ollama) set TCP_NODELAY too.
    disable_nagle_algorithm = True
    protocol_version = "HTTP/1.1"
    server_version = "edgecoder-dev-coordinator/1"

    # -- plumbing ----------------------------------------------------------------------

    def setup(self):
        super().setup()
        self.server.manager.track(self.connection, True)

    def finish(self):
        try:
            super().finish()
        finally:
            self.server.manager.track(self.connection, False)

    def log_message(self, fmt, *a):
        if self.server.coord.args.verbose:
            sys.stderr.write("dev-coordinator: %s\n" % (fmt % a))

    def parse_request(self):
        self.expect_continue = False
        self.sent_continue = False
        self.held_body = None
        return super().parse_request()

    def handle_expect_100(self):
        # Defer "100 Continue" until we decide to read the body (so a 413 can be sent first).
        self.expect_continue = True
        return True

    def send_continue(self):
        if self.expect_continue and not self.sent_continue:
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.wfile.flush()
            self.sent_continue = True

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def drop(self):
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def client_gone(self, wait_s=0.0):
        # The kernel's TCP state first: a request's unread body can sit in the socket ahead
        # of the client's FIN, and a peek then sees data, not the end.
        try:
            state = self.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]
            if state in (TCP_CLOSE, TCP_CLOSE_WAIT):
                return True
        except (OSError, AttributeError):
            pass
        try:
            r, _, _ = select.select([self.connection], [], [], wait_s)
            if not r:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def send_json(self, status, obj, extra_headers=None):
        body = json.dumps(obj, separators=(",", ":")).encode()
        self.send_raw(status, body, extra_headers)

    def send_raw(self, status, body, extra_headers=None, content_type="application/json; charset=utf-8"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra_headers or {}).items():
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        view = memoryview(body)
        for i in range(0, len(body), 1 << 16):
            self.wfile.write(view[i:i + (1 << 16)])
        self.wfile.flush()

    def read_body(self, limit):
        """Returns bytes, or None when over the limit (connection will be closed)."""
        if self.held_body is not None:
            data, self.held_body = self.held_body, None
            return data
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            self.send_continue()
            data = bytearray()
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    raise Drop()
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while True:
                        t = self.rfile.readline(65537)
                        if t in (b"\r\n", b"\n", b""):
                            break
                    return bytes(data)
                if len(data) + size > limit:
                    self.close_connection = True
                    return None
                data += self.rfile.read(size)
                self.rfile.readline(3)
        cl = self.headers.get("Content-Length")
        if cl is None:
            return b""
        try:
            n = int(cl)
            if n < 0:
                raise ValueError
        except ValueError:
            self.close_connection = True
            raise BadLength()
        if n > limit:
            self.close_connection = True
            if not self.expect_continue and n <= 8 * limit:
                remaining = n
                while remaining > 0:
                    chunk = self.rfile.read(min(remaining, 1 << 16))
                    if not chunk:
                        break
                    remaining -= len(chunk)
            return None
        self.send_continue()
        data = self.rfile.read(n)
        if len(data) != n:
            raise Drop()
        return data

    # -- routing -----------------------------------------------------------------------

    def dispatch(self, method):
        coord = self.server.coord
        raw_path = self.path
        path = raw_path.split("?", 1)[0]
        entry = {"method": method, "path": path, "receivedAtMs": now_ms(), "monoMs": mono_ms()}
        try:
            if path.startswith("/_dev/"):
                self.dev(method, path, coord, raw_path)
                return
            self.worker(method, raw_path, path, coord, entry)
        except Drop:
            entry.setdefault("outcome", "closed")
            self.drop()
        except BadLength:
            self.send_json(400, {"statusCode": 400, "error": "Bad Request", "message": "invalid Content-Length"})
        except (BrokenPipeError, ConnectionResetError):
            entry.setdefault("outcome", "client-gone")
            self.close_connection = True
        except Exception as e:  # a bug here must be visible, not a silent hang-up
            entry["outcome"] = "dev-coordinator-error: %r" % e
            traceback.print_exc()
            self.close_connection = True
            try:
                self.send_json(500, {"error": "dev_coordinator_error", "message": repr(e)})
            except OSError:
                pass
        finally:
            if not path.startswith("/_dev/"):
                coord.log_request(entry)

    # -- the four worker calls ---------------------------------------------------------

    def worker(self, method, raw_path, path, coord, entry):
        args = coord.args
        with coord.lock:
            sw = coord.switch
        active = sw.applies(path)
        if active:
            entry["switch"] = sw.mode
        if active and sw.mode == "down":
            entry["outcome"] = "down"
            raise Drop()
        if active and sw.mode == "hang":
            self.hang(coord, path, entry)
            with coord.lock:
                sw = coord.switch
            active = sw.applies(path)
        if active and sw.mode == "slow":
            time.sleep(sw.delay_ms / 1000.0)
            if self.client_gone():
                entry["outcome"] = "dropped-client-gone"
                raise Drop()

        orch = orchestration_call(path)
        schema_key = "/orchestration/" + orch[1] if orch else path
        if (path not in WORKER_PATHS and orch is None) or method != "POST":
            self.read_body_quietly(args.body_limit)
            self.answer(entry, 404, {"message": "Route %s:%s not found" % (method, path),
                                     "error": "Not Found", "statusCode": 404}, None)
            return

        # onRequest hook: the mesh token (everything but exactly "/register").
        with coord.lock:
            token = coord.mesh_token
        if raw_path != "/register" and token is not None:
            got = self.headers.get("x-mesh-token")
            if got is None or not secrets.compare_digest(got.encode(), token.encode()):
                entry["auth"] = "missing" if got is None else "wrong"
                self.read_body_quietly(args.body_limit)
                self.answer(entry, 401, {"error": "mesh_unauthorized"}, sw)
                return

        # Fastify's JSON content-type parser.
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        has_body = self.headers.get("Content-Length") not in (None, "0") or "chunked" in (
            self.headers.get("Transfer-Encoding") or "").lower()
        raw = self.read_body(args.body_limit)
        if raw is None:
            self.answer(entry, 413, {"statusCode": 413, "code": "FST_ERR_CTP_BODY_TOO_LARGE",
                                     "error": "Payload Too Large", "message": "Request body is too large"}, sw)
            return
        if ctype == "" and not has_body:
            body = UNDEFINED  # no body at all: the handler sees `undefined`
        elif ctype != "application/json":
            self.answer(entry, 415, {"statusCode": 415, "code": "FST_ERR_CTP_INVALID_MEDIA_TYPE",
                                     "error": "Unsupported Media Type",
                                     "message": "Unsupported Media Type: %s" % (ctype or "(none)")}, sw)
            return
        elif len(raw) == 0:
            self.answer(entry, 400, {"statusCode": 400, "code": "FST_ERR_CTP_EMPTY_JSON_BODY", "error": "Bad Request",
                                     "message": "Body cannot be empty when content-type is set to 'application/json'"}, sw)
            return
        else:
            try:
                body = parse_json(raw)
            except BadJSON as e:
                self.answer(entry, 400, {"statusCode": 400, "error": "Bad Request", "code": "invalid_json",
                                         "message": "Body is not valid JSON: %s" % e}, sw)
                return
        entry["body"] = None if body is UNDEFINED else body if len(raw) <= 65536 else "(%d bytes)" % len(raw)
        if isinstance(body, dict) and isinstance(body.get("agentId"), str):
            entry["agentId"] = body["agentId"]

        parsed, issues, unknown = validate(SCHEMAS[schema_key], body)
        if unknown:
            entry["unknownKeys"] = unknown
            with coord.lock:
                coord.unknown_keys.append({"path": path, "keys": unknown, "receivedAtMs": entry["receivedAtMs"]})
            if args.reject_unknown:
                issues += [{"path": k, "message": "unrecognized key (stripped by EdgeCoder; rejected by --reject-unknown)"}
                           for k in unknown]
        if issues:
            entry["issues"] = issues
            self.answer(entry, args.invalid_status, {
                "error": "invalid_body", "field": issues[0]["path"], "message": issues[0]["message"],
                "issues": issues}, sw)
            return

        # unauthorized-once: the next authenticated call answers 401 and the token is
        # forgotten (rotated) together with the registrations, forcing a re-registration.
        if active and sw.mode == "unauthorized-once":
            with coord.lock:
                if coord.switch is sw:
                    sw.times -= 1
                    if sw.times <= 0:
                        coord.switch = Switch()
                    if not args.no_mesh_token:
                        coord.mesh_token = secrets.token_hex(24)
                        coord.token_rotations += 1
                    coord.agents.clear()
            entry["forced"] = "unauthorized-once"
            self.answer(entry, 401, {"error": "mesh_unauthorized"}, None)
            return

        if orch is not None:
            status, obj = self.h_orchestration(coord, orch[0], orch[1], parsed, entry)
            self.answer(entry, status, obj, None)
            return
        handler = {"/register": self.h_register, "/heartbeat": self.h_heartbeat,
                   "/pull": self.h_pull, "/result": self.h_result}[path]
        status, obj = handler(coord, parsed, body, sw if active else None, entry)
        self.answer(entry, status, obj, sw if active else None)

    def read_body_quietly(self, limit):
        try:
            if self.read_body(limit) is None:
                self.close_connection = True
        except (BadLength, Drop):
            self.close_connection = True

    def answer(self, entry, status, obj, sw):
        entry["status"] = status
        if sw is not None and sw.mode == "lost-answer":
            entry["outcome"] = "processed-no-answer"
            raise Drop()
        if sw is not None and sw.mode == "malformed":
            entry["outcome"] = "malformed"
            entry["status"] = 200
            self.send_raw(200, b'{"subtask": {"id": "x", "input": tru')
            return
        if sw is not None and sw.mode == "oversized":
            entry["outcome"] = "oversized"
            entry["status"] = 200
            base = json.dumps(obj, separators=(",", ":"))
            pad = max(0, sw.bytes - len(base) - len(',"padding":""'))
            body = (base[:-1] + (',' if len(base) > 2 else '') + '"padding":"' + "x" * pad + '"}').encode()
            self.send_raw(200, body)
            return
        entry.setdefault("outcome", "answered")
        entry["answer"] = obj
        self.send_json(status, obj)

    def hang(self, coord, path, entry):
        entry["outcome"] = "hung"
        deadline = time.monotonic()
        with coord.lock:
            cap = coord.switch.cap_s
            deadline += cap
            coord.hung += 1
            try:
                while True:
                    if coord.stopping:
                        raise Drop()
                    if not coord.switch.applies(path) or coord.switch.mode != "hang":
                        break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        entry["outcome"] = "hang-cap"
                        raise Drop()
                    coord.lock.wait(min(left, 0.25))
            finally:
                coord.hung -= 1
        if not self.read_held_body(coord.args.body_limit) or self.client_gone(wait_s=0.05):
            entry["outcome"] = "dropped-client-gone"
            raise Drop()
        entry["outcome"] = "released"

    def read_held_body(self, limit):
        """A gone client's FIN sits behind whatever of its body is still unread (and is not
        even sent while the body fills the window), so the body is read before asking
        whether the client is there. False when the body stops short: the client went."""
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if self.expect_continue or "chunked" in te:
            return True
        try:
            n = int(self.headers.get("Content-Length") or "0")
        except ValueError:
            return True
        if 0 < n <= limit:
            data = self.rfile.read(n)
            if len(data) != n:
                return False
            self.held_body = data
        return True

    # -- handlers: return (status, body) ----------------------------------------------

    def h_register(self, coord, p, raw, sw, entry):
        args = coord.args
        if args.registration_token is not None:
            tok = p.get("registrationToken")
            if tok is None:
                return 403, {"error": "node_not_activated", "reason": "registration_token_required"}
            if not secrets.compare_digest(tok.encode(), args.registration_token.encode()):
                return 403, {"error": "node_not_activated", "reason": "registration_token_invalid"}
        if sw is not None and sw.mode == "forbidden":
            return 403, {"error": sw.error, "reason": sw.reason or "dev_coordinator_forbidden"}
        if sw is not None and sw.mode == "blacklisted":
            return 403, {"error": "agent_blacklisted", "reason": sw.reason or "dev_coordinator_blacklisted"}
        with coord.lock:
            ban = coord.monitor.ban_of(p["agentId"])
            if ban is not None:
                entry["blacklisted"] = True
                return 403, {"error": "agent_blacklisted", "reason": ban["reason"]}
            if not args.no_mesh_token and coord.mesh_token is None:
                coord.mesh_token = secrets.token_hex(24)
            if not args.no_mesh_token:
                coord.tokens_issued += 1
            rec = {"agentId": p["agentId"], "body": raw, "parsed": p, "receivedAtMs": entry["receivedAtMs"],
                   "monoMs": entry["monoMs"], "powerTelemetry": p.get("powerTelemetry"),
                   "os": p["os"], "lastAssignedMs": None, "sandboxMode": p.get("sandboxMode", "none")}
            coord.agents[p["agentId"]] = rec
            coord.registrations.append({k: v for k, v in rec.items() if k != "lastAssignedMs"})
            # coordinator.ts: recorded and evaluated after the agent is registered; the
            # registration that trips a ban is still answered accepted:true
            coord.monitor.registered(p["agentId"])
            ans = {"accepted": True, "policy": FIXED_POLICY, "mode": p["mode"]}
            if not args.no_mesh_token:
                ans["meshToken"] = coord.mesh_token
            return 200, ans

    def h_heartbeat(self, coord, p, raw, sw, entry):
        with coord.lock:
            if p["agentId"] not in coord.agents:
                return 401, {"error": "mesh_unauthorized", "reason": "agent_not_registered"}
            if sw is not None and sw.mode == "forbidden":
                return 403, {"error": sw.error, "reason": sw.reason or "dev_coordinator_forbidden"}
            coord.heartbeats.append({"agentId": p["agentId"], "body": raw, "receivedAtMs": entry["receivedAtMs"],
                                     "monoMs": entry["monoMs"], "switch": sw.mode if sw else "normal"})
            if len(coord.heartbeats) > 20000:
                del coord.heartbeats[:1000]
            if sw is not None and sw.mode == "blacklisted":
                return 200, {"ok": False, "blacklisted": True, "reason": sw.reason or "dev_coordinator_blacklisted",
                             "blacklistVersion": 1}
            ban = coord.monitor.ban_of(p["agentId"])
            if ban is not None:
                entry["blacklisted"] = True
                return 200, {"ok": False, "blacklisted": True, "reason": ban["reason"],
                             "blacklistVersion": coord.monitor.version}
            coord.monitor.record("heartbeats", p["agentId"])
            if "powerTelemetry" in p:
                coord.agents[p["agentId"]]["powerTelemetry"] = p["powerTelemetry"]
            requeued = coord.requeue_stale()
            if "sandboxMode" in p:
                coord.agents[p["agentId"]]["sandboxMode"] = p["sandboxMode"]
            if "activeModel" in p:
                coord.agents[p["agentId"]]["activeModel"] = p["activeModel"]
                coord.agents[p["agentId"]]["modelSwapInProgress"] = p.get("modelSwapInProgress", False)
            return 200, {"ok": True, "requeued": requeued, "policy": FIXED_POLICY,
                         "orchestration": coord.orchestration.get(p["agentId"]),
                         "tunnelInvites": [], "tunnelCloseNotices": [], "directWorkOffers": [],
                         "blacklist": {"version": coord.monitor.version, "agents": list(coord.monitor.blacklisted)}}

    def h_orchestration(self, coord, agent_id, call, p, entry):
        """coordinator.ts l.4120-4193: 404 without a request; status records progress; ack
        ends it (pending false) and echoes ok."""
        with coord.lock:
            current = coord.orchestration.get(agent_id)
            if current is None:
                return 404, {"error": "orchestration_not_found"}
            item = dict(p, agentId=agent_id, receivedAtMs=entry["receivedAtMs"], rolloutId=current["rolloutId"])
            if call == "status":
                current["status"] = {"phase": p["phase"], "message": p["message"], "updatedAtMs": now_ms()}
                if "progressPct" in p:
                    current["status"]["progressPct"] = p["progressPct"]
                coord.orchestration_statuses.append(item)
                return 200, {"ok": True}
            current["pending"] = False
            coord.orchestration_acks.append(item)
            ans = {"ok": p["ok"], "pending": False}
            if "error" in p:
                ans["error"] = p["error"]
            return 200, ans

    def h_pull(self, coord, p, raw, sw, entry):
        with coord.lock:
            agent = coord.agents.get(p["agentId"])
            if agent is None:
                return 401, {"error": "mesh_unauthorized", "reason": "agent_not_registered"}
            if sw is not None and sw.mode == "forbidden":
                return 403, {"error": sw.error, "reason": sw.reason or "dev_coordinator_forbidden"}
            coord.pulls += 1

            def tally(kind, status_body):
                coord.pull_answers[kind] = coord.pull_answers.get(kind, 0) + 1
                entry["pullAnswer"] = kind
                return 200, status_body

            if sw is not None and sw.mode == "blacklisted":
                return tally("blocked", {"subtask": None, "blocked": True,
                                         "reason": sw.reason or "dev_coordinator_blacklisted"})
            ban = coord.monitor.ban_of(p["agentId"])
            if ban is not None:
                entry["blacklisted"] = True
                return tally("blocked", {"subtask": None, "blocked": True, "reason": ban["reason"]})
            if sw is not None and sw.mode == "power-deferred":
                ans = {"subtask": None, "powerDeferred": True, "reason": sw.reason or "dev_power_deferred"}
                if sw.defer_ms is not None:
                    ans["deferMs"] = sw.defer_ms
                return tally("powerDeferred", ans)
            small_only = False
            if sw is not None and sw.mode == "power-policy":
                d = evaluate_power_policy(agent["os"], agent.get("powerTelemetry"), agent.get("lastAssignedMs"), now_ms())
                if not d["allow"]:
                    return tally("powerDeferred", {"subtask": None, "powerDeferred": True, "reason": d["reason"]})
                if d.get("deferMs"):
                    return tally("powerDeferred", {"subtask": None, "powerDeferred": True,
                                                   "deferMs": d["deferMs"], "reason": d["reason"]})
                small_only = bool(d.get("smallOnly"))
                entry["powerReason"] = d["reason"]
            sub = coord.claim(p["agentId"], small_only)
            if sub == "small_only_deferred":
                return tally("powerDeferred", {"subtask": None, "powerDeferred": True, "reason": "laptop_battery_low"})
            if sub is None:
                return tally("empty", {"subtask": None})
            # coordinator.ts l.2046-2057: a tenant's subtask (projectMeta.tenantId) needs an
            # agent with a sandbox; to one without, it goes back to the queue and the answer
            # says so. Not a claim for the behaviour monitor (recorded after this check).
            tenant = (sub.get("projectMeta") or {}).get("tenantId")
            if tenant and agent.get("sandboxMode", "none") == "none":
                coord.requeue(sub["id"])
                return tally("sandboxRequired", {"subtask": None, "sandboxRequired": True, "reason": "agent_lacks_sandbox_capability"})
            agent["lastAssignedMs"] = now_ms()
            entry["subtaskId"] = sub["id"]
            coord.monitor.record("claims", p["agentId"])  # a claim = a pull that handed out a subtask
            return tally("subtask", {"subtask": sub})

    def h_result(self, coord, p, raw, sw, entry):
        args = coord.args
        if sw is not None and sw.mode == "forbidden":
            return 403, {"error": sw.error, "reason": sw.reason or "dev_coordinator_forbidden"}
        if sw is not None and sw.mode == "blacklisted":
            return 403, {"error": "agent_blacklisted", "reason": sw.reason or "dev_coordinator_blacklisted"}
        with coord.lock:
            ban = coord.monitor.ban_of(p["agentId"])
            if ban is not None:
                entry["blacklisted"] = True
                return 403, {"error": "agent_blacklisted", "reason": ban["reason"]}
            sid = p["subtaskId"]
            rec = coord.subtasks.get(sid)
            problem = None
            if rec is None or rec["handOuts"] == 0:
                problem = ("subtaskId", "unknown_subtask", "subtask %r was never handed out" % sid)
            elif p["taskId"] != rec["subtask"]["taskId"]:
                problem = ("taskId", "task_mismatch", "subtask %r belongs to task %r" % (sid, rec["subtask"]["taskId"]))
            elif p["agentId"] not in rec["handedTo"]:
                problem = ("agentId", "agent_mismatch", "subtask %r was handed to %r" % (sid, rec["handedTo"]))
            if problem is not None:
                coord.rejected_results.append({"body": raw, "receivedAtMs": entry["receivedAtMs"],
                                               "field": problem[0], "reason": problem[1]})
                if not args.lenient_results:
                    return 400, {"error": problem[1], "field": problem[0], "message": problem[2]}
            coord.counts[sid] = coord.counts.get(sid, 0) + 1
            item = dict(p)
            item.update({"receivedAtMs": entry["receivedAtMs"], "monoMs": entry["monoMs"],
                         "count": coord.counts[sid], "duplicate": coord.counts[sid] > 1})
            if problem is not None:
                item["flag"] = problem[1]
            coord.results.append(item)
            if rec is not None:
                rec["state"] = "done"  # queue.ts complete(): any result, ok or not, ends the subtask
            entry["subtaskId"] = sid
            entry["duplicate"] = item["duplicate"]
            # coordinator.ts: every accepted result is recorded (duplicates and late ones too),
            # then the rules run; the result that trips a ban is still answered {ok:true}
            coord.monitor.result(p["agentId"], p["ok"], p["output"], p["durationMs"])
            return 200, {"ok": True}

    # -- /_dev -------------------------------------------------------------------------

    def dev(self, method, path, coord, raw_path):
        raw = b""
        if method == "POST":
            raw = self.read_body(64 * 1024 * 1024) or b""
        body = None
        if raw.strip():
            try:
                body = parse_json(raw)
            except BadJSON as e:
                return self.send_json(400, {"error": "invalid_json", "message": str(e)})
        if path == "/_dev/health" and method == "GET":
            return self.send_json(200, {"ok": True})
        if path == "/_dev/state" and method == "GET":
            return self.send_json(200, coord.state_view())
        if path == "/_dev/requests" and method == "GET":
            q = dict(kv.split("=", 1) for kv in raw_path.partition("?")[2].split("&") if "=" in kv)
            try:
                since = int(q.get("since", "0"))
            except ValueError:
                return self.send_json(400, {"error": "invalid_query", "field": "since"})
            with coord.lock:
                reqs = [r for r in coord.requests if r["seq"] > since]
                return self.send_json(200, {"requests": reqs, "lastSeq": coord.seq})
        if path == "/_dev/results" and method == "GET":
            return self.send_json(200, coord.results_view())
        if path == "/_dev/subtasks" and method == "GET":
            return self.send_json(200, coord.subtasks_view())
        if path == "/_dev/subtasks" and method == "POST":
            specs = body if isinstance(body, list) else [body]
            parsed_specs = []
            for i, spec in enumerate(specs):
                parsed, issues, unknown = validate(DEV_SUBTASK, spec)
                if issues or unknown:
                    issues += [{"path": k, "message": "unrecognized key"} for k in unknown]
                    return self.send_json(400, {"error": "invalid_body", "index": i, "field": issues[0]["path"],
                                                "message": issues[0]["message"], "issues": issues})
                parsed_specs.append(parsed)
            try:
                subs = [coord.enqueue(s) for s in parsed_specs]
            except ValueError as e:
                return self.send_json(400, {"error": "invalid_body", "field": "id", "message": str(e)})
            return self.send_json(200, {"ids": [s["id"] for s in subs], "taskIds": [s["taskId"] for s in subs],
                                        "subtasks": subs})
        if path == "/_dev/switch" and method == "POST":
            if not isinstance(body, dict) or not isinstance(body.get("mode"), str):
                return self.send_json(400, {"error": "invalid_body", "field": "mode", "message": "expected {mode: string}"})
            mode = body["mode"]
            if mode == "offline":
                secs = body.get("seconds")
                if isinstance(secs, bool) or not isinstance(secs, (int, float)) or secs <= 0 or secs > 3600:
                    return self.send_json(400, {"error": "invalid_body", "field": "seconds",
                                                "message": "offline needs seconds in (0, 3600]"})
                self.close_connection = True
                self.send_json(200, {"ok": True, "offlineSeconds": secs})
                self.server.manager.go_offline(float(secs))
                return None
            if mode not in MODES:
                return self.send_json(400, {"error": "invalid_body", "field": "mode",
                                            "message": "unknown mode; one of %s, offline" % ", ".join(MODES)})
            paths = body.get("paths")
            if paths is not None and (not isinstance(paths, list) or not all(x in WORKER_PATHS for x in paths)):
                return self.send_json(400, {"error": "invalid_body", "field": "paths",
                                            "message": "paths must be a list of %s" % ", ".join(WORKER_PATHS)})
            try:
                sw = coord.make_switch(mode, body)
            except (TypeError, ValueError) as e:
                return self.send_json(400, {"error": "invalid_body", "message": str(e)})
            coord.set_switch(sw)
            return self.send_json(200, {"ok": True, "switch": sw.describe()})
        if path == "/_dev/orchestration" and method == "POST":
            spec, issues, unknown = validate(DEV_ORCHESTRATION, body if body is not None else {})
            if issues or unknown:
                issues += [{"path": k, "message": "unrecognized key"} for k in unknown]
                return self.send_json(400, {"error": "invalid_body", "field": issues[0]["path"], "issues": issues})
            with coord.lock:
                agent_id = spec.get("agentId")
                if agent_id is None:
                    if len(coord.agents) != 1:
                        return self.send_json(409, {"error": "agent_not_connected",
                                                    "message": "name agentId: %d agents registered" % len(coord.agents)})
                    agent_id = next(iter(coord.agents))
                record = {"rolloutId": str(uuid.uuid4()), "provider": spec["provider"], "model": spec["model"],
                          "autoInstall": spec["autoInstall"], "pending": True, "requestedAtMs": now_ms()}
                coord.orchestration[agent_id] = record
            return self.send_json(200, {"ok": True, "agentId": agent_id, "rolloutId": record["rolloutId"]})
        if path == "/_dev/reset" and method == "POST":
            with coord.lock:
                coord.reset()
                coord.lock.notify_all()
            return self.send_json(200, {"ok": True})
        return self.send_json(404, {"error": "not_found", "path": path})


class BadLength(Exception):
    pass


class DevHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


class Manager:
    """Owns the listening socket, so that it can go away and come back on the same port."""

    def __init__(self, coord, port):
        self.coord = coord
        self.port = port
        self.server = None
        self.thread = None
        self.conns = set()
        self.conns_lock = threading.Lock()
        self.state_lock = threading.Lock()
        self.stop_event = threading.Event()

    def track(self, conn, add):
        with self.conns_lock:
            (self.conns.add if add else self.conns.discard)(conn)

    def start(self):
        last = None
        for _ in range(100):
            try:
                srv = DevHTTPServer(("127.0.0.1", self.port), Handler)
                break
            except OSError as e:
                last = e
                if self.port == 0 or self.stop_event.wait(0.1):
                    raise
        else:
            raise last
        srv.coord = self.coord
        srv.manager = self
        self.port = srv.server_address[1]
        self.server = srv
        self.thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    def close_listener(self):
        srv, self.server = self.server, None
        if srv is not None:
            srv.shutdown()
            srv.server_close()
        with self.conns_lock:
            conns = list(self.conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def go_offline(self, seconds):
        def run():
            time.sleep(0.05)  # let the /_dev/switch answer leave
            with self.state_lock:
                if self.stop_event.is_set() or self.server is None:
                    return
                self.coord.offline_until = time.time() + seconds
                self.close_listener()
            if self.stop_event.wait(seconds):
                return
            with self.state_lock:
                if not self.stop_event.is_set():
                    self.start()
                    self.coord.offline_until = None
                    log("back online on port %d" % self.port)

        threading.Thread(target=run, daemon=True).start()

    def stop(self):
        self.stop_event.set()
        with self.coord.lock:
            self.coord.stopping = True
            self.coord.lock.notify_all()
        with self.state_lock:
            self.close_listener()


def log(msg):
    sys.stderr.write("dev-coordinator: %s\n" % msg)
    sys.stderr.flush()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0 = pick a free one)")
    ap.add_argument("--registration-token", help="require registrationToken == this at /register (else 403 node_not_activated)")
    ap.add_argument("--no-mesh-token", action="store_true", help="never issue a meshToken; no x-mesh-token required")
    ap.add_argument("--mesh-token", help="a fixed mesh token, required from the start (like EdgeCoder's MESH_AUTH_TOKEN)")
    ap.add_argument("--mode", choices=MODES, default="normal", help="initial switch")
    for m in MODES[1:]:
        ap.add_argument("--" + m, dest="mode", action="store_const", const=m, help="same as --mode " + m)
    ap.add_argument("--paths", type=lambda s: [x for x in s.split(",") if x], default=None,
                    help="comma list of worker paths the initial switch applies to")
    ap.add_argument("--delay-ms", type=int, default=2000, help="delay of mode slow")
    ap.add_argument("--defer-ms", type=int, default=5000, help="deferMs of mode power-deferred (-1 = omit)")
    ap.add_argument("--reason", default=None, help="reason text for forbidden/blacklisted/power-deferred")
    ap.add_argument("--forbidden-error", default="agent_blacklisted", help="error code of mode forbidden")
    ap.add_argument("--oversized-bytes", type=int, default=5 * 1024 * 1024, help="answer size of mode oversized")
    ap.add_argument("--hang-cap-s", type=float, default=120.0, help="mode hang closes the connection after this")
    ap.add_argument("--invalid-status", type=int, default=400, help="status for a schema violation (EdgeCoder: 500)")
    ap.add_argument("--body-limit", type=int, default=1048576, help="request body limit (Fastify default 1 MiB)")
    ap.add_argument("--requeue-stale-ms", type=int, default=30000,
                    help="a heartbeat re-queues every subtask handed out more than this ago without a result "
                         "(EdgeCoder: 30000, queue.requeueStale(30_000) on every heartbeat); 0 = never")
    ap.add_argument("--no-monitoring", action="store_true",
                    help="turn off EdgeCoder's behavioural monitoring (BHV rules, strikes, permanent blacklist)")
    ap.add_argument("--monitor-window-ms", type=int, default=MONITOR_WINDOW_MS,
                    help="the monitoring window and the strike window (EdgeCoder: 3600000); scale it in tests")
    ap.add_argument("--heartbeat-gap-ms", type=int, default=HEARTBEAT_GAP_MS,
                    help="BHV006's heartbeat gap threshold (EdgeCoder: 300000); scale it in tests")
    ap.add_argument("--lenient-results", action="store_true", help="accept results for unknown subtasks (like EdgeCoder)")
    ap.add_argument("--reject-unknown", action="store_true", help="400 on unknown keys (EdgeCoder strips them)")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    if args.defer_ms is not None and args.defer_ms < 0:
        args.defer_ms = None
    if args.no_mesh_token and args.mesh_token:
        ap.error("--no-mesh-token and --mesh-token exclude each other")
    if args.monitor_window_ms <= 0 or args.heartbeat_gap_ms < 0 or args.requeue_stale_ms < 0:
        ap.error("--monitor-window-ms must be > 0, --heartbeat-gap-ms and --requeue-stale-ms >= 0")
    if args.paths and not all(p in WORKER_PATHS for p in args.paths):
        ap.error("--paths takes a comma list of " + ",".join(WORKER_PATHS))

    coord = Coordinator(args)
    mgr = Manager(coord, args.port)
    mgr.start()
    sys.stdout.write("listening on http://127.0.0.1:%d\n" % mgr.port)
    sys.stdout.flush()

    done = threading.Event()

    def on_signal(signum, frame):
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not done.wait(0.5):
        pass
    mgr.stop()
    log("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
