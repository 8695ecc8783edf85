#!/usr/bin/env bash
# The documentation: every citation of docs/reference (`page §N`) names a section that
# exists; the old contract and files outside the repository are cited nowhere; every link
# of README.md, CHANGELOG.md and docs/ resolves and every page is linked from the README;
# docs/reference/configuration.md is what `edgecoder-worker internal config-reference`
# prints today (regenerate it with that command when a key changes).
set -u
cd "$(dirname "$0")/../.."
source Tests/Suites/lib/tap.sh
bin=${EDGECODER_WORKER_BIN:-.build/debug/edgecoder-worker}
git rev-parse --git-dir >/dev/null 2>&1 || tap_skip "not a git checkout (the check reads git ls-files)"
command -v python3 >/dev/null || tap_skip "python3 is not installed"
run_tap "Tests/Docs/check_docs.py" python3 Tests/Docs/check_docs.py
tap_done
