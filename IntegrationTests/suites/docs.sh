#!/usr/bin/env bash
# The documentation: every citation of docs/reference (`page §N`) names a section that
# exists; the old contract and files outside the repository are cited nowhere; every link
# of README.md, CHANGELOG.md and docs/ resolves and every page is linked from the README;
# docs/reference/configuration.md is what `edgecoder-worker internal config-reference`
# prints today (regenerate it with that command when a key changes); the man page that
# `internal man` prints renders with man(1) and names every command.
set -u
cd "$(dirname "$0")/../.." || exit 1
source IntegrationTests/lib/tap.sh
bin=${EDGECODER_WORKER_BIN:-.build/debug/edgecoder-worker}
git rev-parse --git-dir >/dev/null 2>&1 || tap_skip "not a git checkout (the check reads git ls-files)"
command -v python3 >/dev/null || tap_skip "python3 is not installed"
run_tap "IntegrationTests/docs/check_docs.py" python3 IntegrationTests/docs/check_docs.py

# The configuration reference is generated from the code's key table (ConfigKeys.swift).
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if [ ! -x "$bin" ]; then
  not_ok "no binary at $bin to print the configuration reference (make build)"
elif ! "$bin" internal config-reference > "$tmp/configuration.md" 2> "$tmp/err"; then
  not_ok "edgecoder-worker internal config-reference failed: $(head -c 300 "$tmp/err")"
elif diff -u docs/reference/configuration.md "$tmp/configuration.md" > "$tmp/diff"; then
  ok "docs/reference/configuration.md is what 'edgecoder-worker internal config-reference' prints"
else
  not_ok "docs/reference/configuration.md is stale: run '$bin internal config-reference > docs/reference/configuration.md' ($(grep -c '^[-+][^-+]' "$tmp/diff") lines differ: $(grep '^[-+][^-+]' "$tmp/diff" | head -3 | cut -c1-120 | tr '\n' ' '))"
fi

# The man page as the package installs it (make generated prints it the same way), rendered
# here rather than in the systemd VM, where groff under TCG took 12-34 s of the guest; the
# guest checks that man finds the installed page and that it holds every command's heading.
if [ -x "$bin" ] && "$bin" internal man > "$tmp/edgecoder-worker.1" 2> "$tmp/err" && command -v man >/dev/null; then
  check "the man page renders with man(1) and names every command" bash -c 'p=$(man -l -P cat "$1" 2>/dev/null); for c in run mode status tasks events policy telemetry doctor config proxy version; do grep -q "^   $c\$" <<<"$p" || exit 1; done' _ "$tmp/edgecoder-worker.1"
else
  not_ok "the man page: $bin internal man failed or man(1) is missing ($(head -c 300 "$tmp/err" 2>/dev/null))"
fi
tap_done
