#!/usr/bin/env bash
# The code's form: the Swift sources as swift-format prints them (.swift-format, the
# toolchain's `swift format lint --strict`), the shell scripts clean under shellcheck
# (warnings and errors; its style notes are not enforced), the Python scripts clean under
# pyflakes. `make format` rewrites the Swift sources; `make lint` runs this suite.
set -u
cd "$(dirname "$0")/../.." || exit 1
source IntegrationTests/lib/tap.sh
git rev-parse --git-dir >/dev/null 2>&1 || tap_skip "not a git checkout (the check reads git ls-files)"

lint_one() { # NAME TOOL-OUTPUT-FILE: ok when the tool printed nothing and exited 0
  local name=$1 rc=$2 out=$3
  if [[ $rc == 0 && ! -s $out ]]; then
    ok "$name: clean"
  else
    not_ok "$name: $(grep -c '' "$out") lines (exit $rc), first: $(head -n 3 "$out" | cut -c1-200 | tr '\n' ' ')"
    head -n 40 "$out" | sed 's/^/# /'
  fi
}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

mapfile -t swift_files < <(git ls-files '*.swift')
if swift format --version >/dev/null 2>&1; then
  swift format lint --strict --parallel "${swift_files[@]}" >"$tmp/swift" 2>&1; lint_one "swift format lint (${#swift_files[@]} files; make format fixes)" $? "$tmp/swift"
else
  not_ok "swift format is not in the toolchain (PATH: $PATH)"
fi

# Every shell script: *.sh and the extensionless ones whose first line names a shell.
mapfile -t shell_files < <({ git ls-files '*.sh'; git ls-files | while read -r f; do
  [[ ${f##*/} != *.* && -f $f ]] && head -n 1 "$f" | grep -qE '^#!.*\b(ba|da)?sh\b' && echo "$f"; done; } | sort -u)
if command -v shellcheck >/dev/null; then
  shellcheck --severity=warning --format=gcc "${shell_files[@]}" >"$tmp/sh" 2>&1; lint_one "shellcheck --severity=warning (${#shell_files[@]} scripts)" $? "$tmp/sh"
else
  not_ok "shellcheck is not installed (Debian: shellcheck; make deps installs it)"
fi

mapfile -t python_files < <(git ls-files '*.py')
if command -v pyflakes3 >/dev/null; then
  pyflakes3 "${python_files[@]}" >"$tmp/py" 2>&1; lint_one "pyflakes (${#python_files[@]} files)" $? "$tmp/py"
else
  not_ok "pyflakes is not installed (Debian: python3-pyflakes; make deps installs it)"
fi
tap_done
