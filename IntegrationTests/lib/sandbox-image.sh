# shellcheck shell=bash
# Sourced by the suites that need the sandbox image (sandbox.sh, systemd-deb.sh): builds it
# into the engine's local store once (`edgecoder-worker sandbox build`, about 70 s here),
# under .cache/sandbox/.lock so two suites never build it at once.
#
#   sandbox_image_ensure BIN ENGINE IMAGE LOG [ENGINE-ARGS...]
#
# sandbox_runtime_args ENGINE: prints --engine-arg=--runtime=runc where podman's crun cannot
# run (cgroups a v1/v2 hybrid, as on the project's test machines), nothing elsewhere.
#
# Returns 0 when the image is there (built now or before: $SANDBOX_IMAGE_BUILT says which,
# 1 or 0), 1 when the build failed (its output in LOG), 2 when the lock was not free within
# 15 minutes.
sandbox_image_ensure() {
  local bin=$1 engine=$2 image=$3 log=$4 rc=0
  shift 4
  SANDBOX_IMAGE_BUILT=0
  mkdir -p .cache/sandbox
  exec 9>.cache/sandbox/.lock
  flock -w 900 9 || { exec 9>&-; return 2; }
  if ! "$engine" image exists "$image" 2>/dev/null && ! "$engine" image inspect "$image" >/dev/null 2>&1; then
    if "$bin" sandbox build --engine "$engine" "$@" --tag "$image" >"$log" 2>&1; then
      # shellcheck disable=SC2034  # the sourcing suite reads it
      SANDBOX_IMAGE_BUILT=1
    else
      rc=1
    fi
  fi
  exec 9>&-
  return $rc
}

sandbox_runtime_args() {
  [[ $1 == podman && $(stat -fc %T /sys/fs/cgroup) != cgroup2fs ]] && echo --engine-arg=--runtime=runc
  return 0
}
