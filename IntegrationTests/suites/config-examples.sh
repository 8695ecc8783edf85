#!/usr/bin/env bash
# Every example config in Config/ must pass `config check`, and a broken copy must not.
set -u
cd "$(dirname "$0")/../.." || exit 1
source IntegrationTests/lib/tap.sh
bin=${EDGECODER_WORKER_BIN:-.build/debug/edgecoder-worker}
for f in Config/*.json Config/hosts/*.json; do
  if out=$("$bin" config check --config "$f" 2>&1); then ok "$f is valid"; else not_ok "$f: $out"; fi
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
sed 's/"minBatteryPct": 40/"minBatteryPct": 400/' Config/hosts/laptop.json > "$tmp/broken.json"
out=$("$bin" config check --config "$tmp/broken.json" 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -q 'policy.minBatteryPct: must be in 0…100, got 400' <<<"$out"; then
  ok "a broken example is refused with exit 2 and the key's path"
else
  not_ok "broken example: rc=$rc: $out"
fi
sed 's#"url": "https://coordinator.example"#"url": "http://coordinator.example"#' Config/edgecoder-worker.json > "$tmp/cleartext.json"
out=$("$bin" config check --config "$tmp/cleartext.json" 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -q 'coordinator.url: http:// to coordinator.example would send the registration and mesh tokens unencrypted' <<<"$out"; then
  ok "an http:// coordinator that is not loopback is refused, saying why"
else
  not_ok "cleartext coordinator: rc=$rc: $out"
fi
sed 's#"allowInsecureHttp": false#"allowInsecureHttp": true#' "$tmp/cleartext.json" > "$tmp/allowed.json"
if out=$("$bin" config check --config "$tmp/allowed.json" 2>&1); then ok "coordinator.allowInsecureHttp true accepts it"; else not_ok "allowInsecureHttp: $out"; fi
# Issue #26 row 9: an address list under security open is valid (exit 0) but warned about.
printf '{"bluetooth": {"security": "open", "allowedClients": ["AA:BB:CC:DD:EE:FF"]}}\n' > "$tmp/open-list.json"
out=$("$bin" config check --config "$tmp/open-list.json" 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q 'warning: bluetooth.allowedClients lists addresses, but security is open' <<<"$out"; then
  ok "allowedClients as a list under security open: valid, with a warning"
else
  not_ok "open with a list: rc=$rc: $out"
fi
out=$("$bin" config check --json --config "$tmp/open-list.json" 2>/dev/null); rc=$?
if [ $rc -eq 0 ] && grep -q '"path":"bluetooth.allowedClients"' <<<"${out// /}"; then
  ok "config check --json lists the warning with its path"
else
  not_ok "open with a list, --json: rc=$rc: $out"
fi
tap_done
