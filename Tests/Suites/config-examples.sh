#!/usr/bin/env bash
# Every example config in Config/ must pass `config check`, and a broken copy must not.
set -u
bin=${EDGECODER_WORKER_BIN:-.build/debug/edgecoder-worker}
fail=0
for f in Config/*.json Config/hosts/*.json; do
  if out=$("$bin" config check --config "$f" 2>&1); then echo "ok - $f is valid"; else echo "not ok - $f: $out"; fail=1; fi
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
sed 's/"minBatteryPct": 40/"minBatteryPct": 400/' Config/hosts/laptop.json > "$tmp/broken.json"
out=$("$bin" config check --config "$tmp/broken.json" 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -q 'policy.minBatteryPct: must be in 0…100, got 400' <<<"$out"; then
  echo "ok - a broken example is refused with exit 2 and the key's path"
else
  echo "not ok - broken example: rc=$rc: $out"; fail=1
fi
sed 's#"url": "https://coordinator.example"#"url": "http://coordinator.example"#' Config/edgecoder-worker.json > "$tmp/cleartext.json"
out=$("$bin" config check --config "$tmp/cleartext.json" 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -q 'coordinator.url: http:// to coordinator.example would send the registration and mesh tokens unencrypted' <<<"$out"; then
  echo "ok - an http:// coordinator that is not loopback is refused, saying why"
else
  echo "not ok - cleartext coordinator: rc=$rc: $out"; fail=1
fi
sed 's#"allowInsecureHttp": false#"allowInsecureHttp": true#' "$tmp/cleartext.json" > "$tmp/allowed.json"
if out=$("$bin" config check --config "$tmp/allowed.json" 2>&1); then echo "ok - coordinator.allowInsecureHttp true accepts it"; else echo "not ok - allowInsecureHttp: $out"; fail=1; fi
exit $fail
