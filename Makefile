# edgecoder-worker: build, run, test, bench, install.
# `make run` and `make test` work from a fresh clone; `make test` installs what the
# tests need from Debian's packages when run as root.

SWIFT       ?= swift
PREFIX      ?= /usr/local
DESTDIR     ?=
BIN         := .build/debug/edgecoder-worker
RELEASE_BIN := .build/release/edgecoder-worker
export PATH := /opt/swift/usr/bin:$(PATH)
# Where `make install` puts systemd's and the shell's files: under PREFIX, so that a local
# prefix never writes /lib or /usr/lib, which belong to packages (systemd, man and
# bash-completion all search /usr/local too). PREFIX=/usr gives /usr/lib/systemd/system.
SYSTEMD_UNIT_DIR ?= $(PREFIX)/lib/systemd/system
SYSTEMD_USER_UNIT_DIR ?= $(PREFIX)/lib/systemd/user
SYSUSERS_DIR     ?= $(PREFIX)/lib/sysusers.d
TMPFILES_DIR     ?= $(PREFIX)/lib/tmpfiles.d
MAN1_DIR         ?= $(PREFIX)/share/man/man1
COMPLETION_DIR   ?= $(PREFIX)/share/bash-completion/completions
# zsh reads $(PREFIX)/share/zsh/site-functions for /usr/local; Debian's package uses
# /usr/share/zsh/vendor-completions (debian/rules). fish reads /usr/share's
# vendor_completions.d, and /usr/local/share's when XDG_DATA_DIRS names it.
ZSH_COMPLETION_DIR  ?= $(PREFIX)/share/zsh/site-functions
FISH_COMPLETION_DIR ?= $(PREFIX)/share/fish/vendor_completions.d
# The man page and the shell completions, printed by the release binary from its command table.
GEN              ?= .build/gen

# Debian packages: the C libraries we link, and the tools the tests drive.
APT_PACKAGES := pkg-config libcurl4-openssl-dev libbluetooth-dev libsystemd-dev \
                util-linux systemd iproute2 python3 python3-venv curl openssl dbus-daemon \
                zsh fish podman runc uidmap mmdebstrap shellcheck python3-pyflakes
# Installed without their recommendations: docker.io's (apparmor, needrestart, git…) are
# what a desktop wants, not the sandbox suite's dockerd.
APT_PACKAGES_BARE := docker.io fuse-overlayfs
# What `make deb` needs on top (the systemd-deb suite runs `make deb` itself).
DEB_TOOLS    := debhelper dpkg-dev lintian

.PHONY: all build release hot-text run test test-build test-prepare lanes check unit suites bench fuzz demo docs install install-files generated deb deb-deps deps clean format lint

all: build

deps:
	@installed() { dpkg-query -W -f='$${Status}\n' $$1 2>/dev/null | grep -q '^install ok installed'; }; \
	missing=$$(for p in $(APT_PACKAGES); do installed $$p || echo $$p; done); \
	bare=$$(for p in $(APT_PACKAGES_BARE); do installed $$p || echo $$p; done); \
	if [ -n "$$missing$$bare" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing: $$missing $$bare"; \
	    apt-get update -qq || exit 1; \
	    [ -z "$$missing" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null || exit 1; \
	    [ -z "$$bare" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$bare >/dev/null || exit 1; \
	  else \
	    echo "missing Debian packages: $$missing $$bare"; \
	    echo "install them as root:  sudo apt-get install $$missing $$bare"; exit 1; \
	  fi; \
	fi

build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build -c release --static-swift-stdlib

# The daemon in the foreground with the example config and state under ./.run (no root).
run: build
	@mkdir -p .run/state .run/run
	@echo "control socket: .run/run/control.sock — try: $(BIN) status --runtime-dir .run/run"
	exec $(BIN) run --config Config/edgecoder-worker.json --state-dir .run/state --runtime-dir .run/run

# Everything: swift test (a failure stops here), then every suite in IntegrationTests/suites, ending
# with one line "N passed, N failed, N skipped" for those suites.
test: deps
	@$(MAKE) --no-print-directory -j2 test-build test-prepare
	@$(MAKE) --no-print-directory lanes

# The build and the preparation side by side: one compiles, the other mostly downloads and
# checks caches (llama.cpp compiles the first time only). The unit tests run in the lanes
# (IntegrationTests/suites/unit.sh, first in the third).
test-build:
	$(SWIFT) build --build-tests

# What the suites share, prepared once before they start side by side: the BlueZ VM (kernel,
# initramfs, bleak), llama.cpp (compiled the first time) and the proxy's real clients.
test-prepare:
	IntegrationTests/bluez/vm/prepare.sh
	IntegrationTests/model-server/prepare.sh >/dev/null
	IntegrationTests/proxy/prepare-clients.sh >/dev/null || [ $$? -eq 77 ]

# The suites in lanes, side by side (IntegrationTests/run lanes: which suite in which lane,
# and why; IntegrationTests/lib/run-suites.sh runs them). Same result lines and summary as
# `suites`, and each suite's CPU time, and how busy the host was while the lanes ran.
lanes:
	@bash IntegrationTests/run lanes $(CURDIR)/$(BIN)

# The fast loop (about 3 min): every unit and integration test, and the suites that need
# no VM, model server or network namespace (IntegrationTests/run check: lint, docs, config
# examples, the dev coordinator, metrics against a real daemon, the shell completions).
check: deps
	$(SWIFT) build --build-tests
	@$(MAKE) --no-print-directory unit
	@bash IntegrationTests/run check $(CURDIR)/$(BIN)

# The Swift sources as swift-format prints them (.swift-format: 150 columns, 4 spaces; the
# toolchain's `swift format`). `make lint` checks that, and the shell and Python scripts
# (IntegrationTests/suites/lint.sh, also a suite of `make test` and `make check`).
format:
	$(SWIFT) format format --in-place --parallel $$(git ls-files '*.swift')

lint: deps
	@bash IntegrationTests/suites/lint.sh

# One test at a time: many tests drive real servers, child processes and sockets with
# time bounds, and on 2 cores a parallel run starves them (seen: 9 of 564 failing in
# parallel, none serially; the serial run takes about 90 s).
unit:
	$(SWIFT) test --skip-build --no-parallel

# The suites one after another (IntegrationTests/run suites; a suite exits 0, 77 for
# skipped or anything else for failed: see that script). SUITES picks some:
# make suites SUITES="IntegrationTests/suites/config-examples.sh".
SUITES ?=
suites:
	@bash IntegrationTests/run suites $(CURDIR)/$(BIN) $(SUITES)

# Figures, not assertions: start-up latency and idle cost against baselines run in the same command.
bench: release
	python3 Benchmarks/daemon_bench.py $(RELEASE_BIN)
	python3 Benchmarks/path_bench.py $(RELEASE_BIN)
	python3 Benchmarks/coordinator_bench.py $(RELEASE_BIN)
	python3 Benchmarks/full_disk_bench.py $(RELEASE_BIN)
	python3 Benchmarks/control_bench.py $(RELEASE_BIN)
	.build/release/worker-bench
	bash Benchmarks/stream_bench.sh
	bash Benchmarks/bluetooth_bench.sh $(RELEASE_BIN)
	bash Benchmarks/sandbox_bench.sh $(RELEASE_BIN)

# The release link's order of the code the daemon runs at start and idle in mode on
# (Benchmarks/hot_text.py, under valgrind), after a change that renames much of that path;
# then the release binary is linked again (SwiftPM does not know the file is an input).
hot-text: release
	python3 Benchmarks/hot_text.py $(RELEASE_BIN)
	rm -f $$(readlink -f $(RELEASE_BIN))
	$(SWIFT) build -c release --static-swift-stdlib

# libFuzzer targets (Fuzz), each run for FUZZ_SECONDS from its seed corpus; what they
# find stays in .build/fuzz/run, a crash is kept in Fuzz/<target>/regressions/.
FUZZ_SECONDS ?= 60
fuzz:
	bash Fuzz/run.sh $(FUZZ_SECONDS)

# A whole coordinator round trip on loopback: dev coordinator, worker, llama.cpp.
demo: build
	bash IntegrationTests/coordinator/demo.sh

# The generated page of docs/: the configuration reference, printed from the config's key
# table (Sources/WorkerCore/Config/ConfigKeys.swift); IntegrationTests/suites/docs.sh fails when it is stale.
docs: build
	$(BIN) internal config-reference > docs/reference/configuration.md

install: release
	@$(MAKE) --no-print-directory generated install-files

generated:
	@mkdir -p $(GEN)
	$(RELEASE_BIN) internal man > $(GEN)/edgecoder-worker.1
	$(RELEASE_BIN) internal completion bash > $(GEN)/edgecoder-worker.bash
	$(RELEASE_BIN) internal completion zsh > $(GEN)/_edgecoder-worker
	$(RELEASE_BIN) internal completion fish > $(GEN)/edgecoder-worker.fish

# What `install` copies, without building (debian/rules calls it after its own build).
install-files:
	install -D -m0755 $(RELEASE_BIN) $(DESTDIR)$(PREFIX)/bin/edgecoder-worker
	install -d $(DESTDIR)$(SYSTEMD_UNIT_DIR) $(DESTDIR)$(SYSTEMD_USER_UNIT_DIR) $(DESTDIR)$(SYSUSERS_DIR) $(DESTDIR)$(TMPFILES_DIR) \
	  $(DESTDIR)$(PREFIX)/libexec/edgecoder-worker
	sed 's|/usr/local|$(PREFIX)|g' systemd/edgecoder-worker.service > $(DESTDIR)$(SYSTEMD_UNIT_DIR)/edgecoder-worker.service
	chmod 0644 $(DESTDIR)$(SYSTEMD_UNIT_DIR)/edgecoder-worker.service
# Opt-in units (not enabled): systemctl enable --now edgecoder-worker-metrics.timer
	for unit in edgecoder-worker-metrics.service edgecoder-worker-metrics.timer edgecoder-sandbox.socket edgecoder-sandbox.service; do \
	  sed 's|/usr/local|$(PREFIX)|g' systemd/$$unit > $(DESTDIR)$(SYSTEMD_UNIT_DIR)/$$unit && chmod 0644 $(DESTDIR)$(SYSTEMD_UNIT_DIR)/$$unit || exit 1; \
	done
	sed 's|/usr/local|$(PREFIX)|g' systemd/edgecoder-worker-proxy.service > $(DESTDIR)$(SYSTEMD_USER_UNIT_DIR)/edgecoder-worker-proxy.service
	chmod 0644 $(DESTDIR)$(SYSTEMD_USER_UNIT_DIR)/edgecoder-worker-proxy.service
	sed 's|/usr/local|$(PREFIX)|g' systemd/sandbox-engine-prepare > $(DESTDIR)$(PREFIX)/libexec/edgecoder-worker/sandbox-engine-prepare
	chmod 0755 $(DESTDIR)$(PREFIX)/libexec/edgecoder-worker/sandbox-engine-prepare
	install -m0644 systemd/sysusers.d/edgecoder-worker.conf $(DESTDIR)$(SYSUSERS_DIR)/edgecoder-worker.conf
	install -m0644 systemd/tmpfiles.d/edgecoder-worker.conf $(DESTDIR)$(TMPFILES_DIR)/edgecoder-worker.conf
	install -D -m0644 $(GEN)/edgecoder-worker.1 $(DESTDIR)$(MAN1_DIR)/edgecoder-worker.1
	install -D -m0644 $(GEN)/edgecoder-worker.bash $(DESTDIR)$(COMPLETION_DIR)/edgecoder-worker
	install -D -m0644 $(GEN)/_edgecoder-worker $(DESTDIR)$(ZSH_COMPLETION_DIR)/_edgecoder-worker
	install -D -m0644 $(GEN)/edgecoder-worker.fish $(DESTDIR)$(FISH_COMPLETION_DIR)/edgecoder-worker.fish
	install -D -m0644 README.md $(DESTDIR)$(PREFIX)/share/doc/edgecoder-worker/README.md
	install -D -m0644 CHANGELOG.md $(DESTDIR)$(PREFIX)/share/doc/edgecoder-worker/CHANGELOG.md
	for f in $$(cd docs && find . -name '*.md' | sort); do \
	  install -D -m0644 docs/$$f $(DESTDIR)$(PREFIX)/share/doc/edgecoder-worker/docs/$$f || exit 1; \
	done
	install -D -m0644 Config/edgecoder-worker.json $(DESTDIR)$(PREFIX)/share/doc/edgecoder-worker/config.example.json
	@echo "next: systemd-sysusers edgecoder-worker.conf && systemd-tmpfiles --create edgecoder-worker.conf"
	@echo "      copy $(PREFIX)/share/doc/edgecoder-worker/config.example.json to /etc/edgecoder-worker/config.json and edit it"
	@echo "      systemctl daemon-reload && systemctl enable --now edgecoder-worker"
	@echo "metrics for node_exporter's textfile collector (opt-in):  systemctl enable --now edgecoder-worker-metrics.timer"
	@echo "code subtasks in containers (opt-in, needs podman and uidmap):  systemctl enable --now edgecoder-sandbox.socket (docs/operating/sandbox.md)"
	@echo "the proxy, per user (a user unit):  systemctl --user daemon-reload && systemctl --user enable --now edgecoder-worker-proxy"

# The Debian package, in .build/deb (debian/rules by hand rather than dpkg-buildpackage,
# which can only write next to the clone), then lintian: an error fails the target.
# DEB_LINTIAN=0 leaves lintian out (the systemd-deb suite runs it beside its VM).
DEB_LINTIAN ?= 1
deb: deps deb-deps
	dpkg-checkbuilddeps
	@v=$$(sed -n 's/^public let workerVersion = "\(.*\)"$$/\1/p' Sources/WorkerCore/Support/Version.swift); \
	  test "$$(dpkg-parsechangelog -S Version)" = "$$v" || \
	  { echo "debian/changelog's version is not workerVersion ($$v): add a changelog entry (dch -v $$v)"; exit 1; }
	rm -rf .build/deb
	debian/rules clean
	debian/rules build
	debian/rules binary
	@if [ "$(DEB_LINTIAN)" != 0 ]; then echo "lintian --fail-on error --info .build/deb/edgecoder-worker_*.deb"; \
	  lintian --fail-on error --info .build/deb/edgecoder-worker_*.deb || exit 1; fi
	@ls -l .build/deb/*.deb

# What `make deb` needs on top of `deps` (the systemd-deb suite installs them before it starts
# `make deb` beside its other preparations, which install with apt-get too).
deb-deps: deps
	@$(MAKE) --no-print-directory deps APT_PACKAGES="$(DEB_TOOLS)"

clean:
	rm -rf .build .run
