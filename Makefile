# zmesh build, run and test entry points. `make help` lists them.

GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
BIN      := bin/zmesh
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME ?= 60s

# Where `make install` puts things. DESTDIR is prepended to every path, for staging or for
# trying the target out without root: make install DESTDIR=/tmp/stage
PREFIX      ?= /usr/local
BINDIR      ?= $(PREFIX)/bin
SYSCONFDIR  ?= /etc
UNITDIR     ?= $(SYSCONFDIR)/systemd/system
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR  ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d
MAN1DIR     ?= $(PREFIX)/share/man/man1
DATADIR     ?= $(PREFIX)/share/zmesh
UNITS       := zmesh-router.service zmesh-controller.service
# The units' User=zmesh and StateDirectory=zmesh (systemd's fixed place): not settings.
ZMESH_USER  := zmesh
STATEDIR    := /var/lib/zmesh
# The man pages' date and the package's file times: the last commit's, so that a build of a
# commit gives the same package.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)

# The Debian package (`make deb`, docs/packaging.md): nfpm, run as a pinned build tool like
# staticcheck; the version made from VERSION by deploy/deb/version.sh.
NFPM        := github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.48.0
DEB_VERSION  = $(shell deploy/deb/version.sh '$(VERSION)')
DEB_ARCH     = $(shell $(GO) env GOARCH)
DEB          = bin/zmesh_$(DEB_VERSION)_$(DEB_ARCH).deb
DEBROOT     := bin/deb-root

.PHONY: help build run test test-load interop bench bench-controller bench-cluster lint fuzz clean stage install uninstall deb test-deb

help:
	@echo "make build      build $(BIN)"
	@echo "make run        the quickstart: a controller, an edge router and a demo service on 127.0.0.1"
	@echo "make test       unit and integration tests with the race detector, then the allocation-counting tests without it"
	@echo "make test-load  make test with $(BURNERS) busy loops beside it, as on a loaded CI machine"
	@echo "make interop    the real OpenZiti clients (ziti CLI $(ZITI_VERSION), sdk-golang) against a fresh quickstart"
	@echo "make bench      benchmarks"
	@echo "make bench-controller  one controller with 100,000 identities, 10,000 services, 1,000 policies"
	@echo "                and 100 simulated routers (SCALE=0.1 for a tenth; docs/performance.md)"
	@echo "make bench-cluster     logins, identity creations and circuit setup (10 simulated routers"
	@echo "                connected to every member): a cluster of three against one controller"
	@echo "make lint       gofmt, go vet, staticcheck"
	@echo "make fuzz       fuzz the parsers: configuration, list filters, API bodies, e2ee hellos, write sets ($(FUZZTIME) each)"
	@echo "make install    install $(BIN) to $(BINDIR), the systemd units to $(UNITDIR), shell"
	@echo "                completions, man pages, and create $(SYSCONFDIR)/zmesh (0750) and the $(ZMESH_USER) user"
	@echo "                (PREFIX=$(PREFIX); DESTDIR=DIR stages everything under DIR, without root)"
	@echo "make uninstall  remove what make install installed; keeps $(SYSCONFDIR)/zmesh, $(STATEDIR) and the user"
	@echo "make deb        build the Debian package bin/zmesh_VERSION_ARCH.deb (docs/packaging.md)"
	@echo "make test-deb   as root on a machine without zmesh: build the package, install, check, remove"
	@echo "                and purge it with dpkg, and check what each leaves"

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/zmesh

# `make install` installs $(BIN), rebuilt only when a Go source is newer than it, so that
# `make build && sudo make install` needs no Go toolchain in root's PATH (sudo's usually lacks
# it) and does not build as root.
GOSOURCES := $(shell find . \( -path ./.git -o -path ./zmesh-quickstart -o -path ./bin -o -path ./interop \) -prune -o -name '*.go' -print 2>/dev/null) go.mod go.sum
$(BIN): $(GOSOURCES)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/zmesh

# stage copies the files of an install under DESTDIR, the same for `make install` and for the
# Debian package (`make deb`): the binary, the units with their paths set to BINDIR and
# SYSCONFDIR (the drop-in that co-locates the controller with the router goes to $(DATADIR),
# for the administrator to copy: installed in the unit's .d directory it would take effect at
# once), the completions and the man pages (zmesh gen-man, gzipped) that $(BIN) produces.
stage: $(BIN)
	install -d -m 0755 $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR) $(DESTDIR)$(MAN1DIR)
	install -m 0755 $(BIN) $(DESTDIR)$(BINDIR)/zmesh
	install -d -m 0755 $(DESTDIR)$(DATADIR)
	for u in $(UNITS) zmesh-router.service.d/controller.conf; do \
		case $$u in *.conf) dst=$(DESTDIR)$(DATADIR)/zmesh-router-controller.conf;; *) dst=$(DESTDIR)$(UNITDIR)/$$u;; esac; \
		sed -e 's|/usr/local/bin/zmesh|$(BINDIR)/zmesh|g' -e 's|/usr/local/share/zmesh|$(DATADIR)|g' -e 's|/etc/zmesh|$(SYSCONFDIR)/zmesh|g' deploy/systemd/$$u > $$dst.tmp && \
		chmod 0644 $$dst.tmp && mv $$dst.tmp $$dst || exit 1; \
	done
	$(abspath $(BIN)) completion bash > $(DESTDIR)$(BASHCOMPDIR)/zmesh
	$(abspath $(BIN)) completion zsh > $(DESTDIR)$(ZSHCOMPDIR)/_zmesh
	$(abspath $(BIN)) completion fish > $(DESTDIR)$(FISHCOMPDIR)/zmesh.fish
	chmod 0644 $(DESTDIR)$(BASHCOMPDIR)/zmesh $(DESTDIR)$(ZSHCOMPDIR)/_zmesh $(DESTDIR)$(FISHCOMPDIR)/zmesh.fish
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(abspath $(BIN)) gen-man $(DESTDIR)$(MAN1DIR)
	gzip -9nf $(DESTDIR)$(MAN1DIR)/zmesh.1 $(DESTDIR)$(MAN1DIR)/zmesh-*.1
	chmod 0644 $(DESTDIR)$(MAN1DIR)/zmesh.1.gz $(DESTDIR)$(MAN1DIR)/zmesh-*.1.gz

# install stages the files (under DESTDIR if set) and creates $(SYSCONFDIR)/zmesh; only a
# real install (no DESTDIR) run as root also creates the system user the units run as, gives
# it $(SYSCONFDIR)/zmesh (root:$(ZMESH_USER) 0750, so the service reads but cannot change its
# configuration) and $(STATEDIR) ($(ZMESH_USER) 0750, where enrollment writes the router's
# keys before systemd first starts the unit), and tells systemd about the units. The units
# name $(BINDIR)/zmesh. deploy/deb/postinst does the same for the package.
install: stage
	install -d -m 0750 $(DESTDIR)$(SYSCONFDIR)/zmesh
	@if [ -n "$(DESTDIR)" ]; then \
		echo "staged under $(DESTDIR): no user created, no ownership changed, systemd not told"; \
	elif [ "$$(id -u)" != 0 ]; then \
		echo "not root: no user created, no ownership changed, systemd not told"; \
	else \
		set -e; \
		if ! getent passwd $(ZMESH_USER) >/dev/null; then \
			echo "creating system user $(ZMESH_USER)"; \
			useradd --system --user-group --home-dir $(STATEDIR) --no-create-home --shell /usr/sbin/nologin $(ZMESH_USER); \
		fi; \
		chown root:$(ZMESH_USER) $(SYSCONFDIR)/zmesh; \
		install -d -o $(ZMESH_USER) -g $(ZMESH_USER) -m 0750 $(STATEDIR); \
		if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi; \
		echo "installed $(BINDIR)/zmesh; units $(UNITS) in $(UNITDIR) (not enabled)"; \
	fi

# The quickstart (zmesh quickstart): a controller, an edge router and a demo service on
# 127.0.0.1, everything in ./zmesh-quickstart (reused by the next run; the administrator's
# generated password in zmesh-quickstart/admin-password). It prints how to log in and try the
# demo, and runs until Ctrl-C. README.md continues with a 5-minute tour.
run: build
	./$(BIN) quickstart

# The race detector's sync.Pool drops a share of what is put back, so the tests that count
# the forwarding path's allocations skip under it and run again without it; its shadow memory
# inflates RSS, so the login flood's RSS bound is checked again without it too.
test:
	$(GO) test -race -timeout 14m ./...
	$(GO) test -count=1 -run 'Allocates?Nothing' ./xgress
	$(GO) test -count=1 -run '^TestLoginFlood$$' ./controlplane

# The suite on a loaded machine: tests wait for conditions, never for times, so they must pass
# with every core also busy elsewhere. The busy loops end with the recipe's shell.
BURNERS ?= 2
test-load:
	@pids=; for i in $$(seq $(BURNERS)); do (while :; do :; done) & pids="$$pids $$!"; done; \
	trap 'kill $$pids' EXIT; $(MAKE) --no-print-directory test

# The interop suite (interop/, a Go module of its own so that zmesh's go.mod does not depend
# on OpenZiti): the ziti CLI $(ZITI_VERSION), built once and cached outside the tree by
# interop/build-ziti.sh, runs a scripted admin session against a fresh quickstart network,
# then OpenZiti's Go SDK authenticates and uses the client API. interop/gaps.txt lists the
# steps known to fail; the run fails on any other failure and on a listed step that passes.
ZITI_VERSION ?= v1.7.2
interop: $(BIN)
	@ziti=$$(GO=$(GO) ZITI_VERSION=$(ZITI_VERSION) interop/build-ziti.sh) && \
	cd interop && ZITI_BIN=$$ziti ZMESH_BIN=$(abspath $(BIN)) $(GO) test -count=1 -v -timeout 25m .

# Go micro-benchmarks, then a short `zmesh bench` run of every scenario: the Go baselines and
# the zmesh paths (one router; two routers over tls: and quic:), with circuit setup and memory
# per idle circuit (BENCHFLAGS to change it, e.g. BENCHFLAGS='--duration 5s --streams 16';
# '--setup-duration 0 --idle-circuits 0' skips the circuit measurements).
BENCHFLAGS ?= --duration 2s
bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./...
	./$(BIN) bench $(BENCHFLAGS)

# One controller at scale (controlplane TestScaleController): 100,000 identities, 10,000
# services, 1,000 service policies and 100 simulated routers; SCALE=0.1 builds a tenth of it.
# It prints the time to build the data set, each router's session state snapshot, memory,
# the client's service list and the circuit setup rate. CTRLBENCHFLAGS go to go test, e.g.
# CTRLBENCHFLAGS='-cpuprofile /tmp/ctrl.cpu.pprof'; the ZMESH_SCALE_* variables of the test
# set each size.
SCALE ?= 1
CTRLBENCHFLAGS ?=
bench-controller:
	ZMESH_SCALE=$(SCALE) $(GO) test -count=1 -run '^TestScaleController$$' -v -timeout 30m $(CTRLBENCHFLAGS) ./controlplane

bench-cluster:
	ZMESH_CLUSTER_BENCH=1 $(GO) test -count=1 -run '^TestClusterThroughput$$' -v -timeout 10m ./controlplane

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseRouter$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./config
	$(GO) test -run '^$$' -fuzz '^FuzzParseController$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./config
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./controlplane/filter
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeBodies$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./controlplane/api
	$(GO) test -run '^$$' -fuzz '^FuzzHellos$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./internal/e2ee
	$(GO) test -run '^$$' -fuzz '^FuzzWriteSet$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./controlplane/store

# uninstall leaves the configuration ($(SYSCONFDIR)/zmesh), the state ($(STATEDIR): the
# controller's store and CA, the router's keys) and the user: removing those is a decision
# (docs/deploy-edge-router.md, "Uninstall"). A running unit is stopped first.
uninstall:
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then \
		for u in $(UNITS); do \
			if [ -f $(UNITDIR)/$$u ]; then systemctl disable --now $$u || exit 1; fi; \
		done; \
	fi
	rm -f $(DESTDIR)$(BINDIR)/zmesh
	for u in $(UNITS); do rm -f $(DESTDIR)$(UNITDIR)/$$u; done
	rm -f $(DESTDIR)$(DATADIR)/zmesh-router-controller.conf
	if [ -d $(DESTDIR)$(DATADIR) ]; then rmdir $(DESTDIR)$(DATADIR); fi
	rm -f $(DESTDIR)$(BASHCOMPDIR)/zmesh $(DESTDIR)$(ZSHCOMPDIR)/_zmesh $(DESTDIR)$(FISHCOMPDIR)/zmesh.fish
	rm -f $(DESTDIR)$(MAN1DIR)/zmesh.1.gz $(DESTDIR)$(MAN1DIR)/zmesh-*.1.gz
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
	@echo "kept $(DESTDIR)$(SYSCONFDIR)/zmesh, $(DESTDIR)$(STATEDIR) and the user $(ZMESH_USER); docs/deploy-edge-router.md says how to remove them"

# deb builds $(BIN) afresh (its version is the package's), stages it under $(DEBROOT) as
# installed in /usr (units in /usr/lib/systemd/system, zsh's Debian completion directory) and
# packs that with deploy/deb/nfpm.yaml and its maintainer scripts.
deb: build
	@debver='$(DEB_VERSION)'; [ -n "$$debver" ] || { echo "no Debian version for VERSION=$(VERSION)" >&2; exit 1; }
	rm -rf $(DEBROOT)
	$(MAKE) --no-print-directory stage VERSION='$(VERSION)' DESTDIR=$(abspath $(DEBROOT)) PREFIX=/usr \
		UNITDIR=/usr/lib/systemd/system ZSHCOMPDIR=/usr/share/zsh/vendor-completions
	if [ -n "$(SOURCE_DATE_EPOCH)" ]; then find $(DEBROOT) -exec touch -h -d @$(SOURCE_DATE_EPOCH) {} +; fi
	rm -f $(DEB)
	ZMESH_DEB_ROOT=$(DEBROOT) ZMESH_DEB_VERSION='$(DEB_VERSION)' ZMESH_DEB_ARCH=$(DEB_ARCH) SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) \
		$(GO) run $(NFPM) package --config deploy/deb/nfpm.yaml --packager deb --target $(DEB)
	@echo "built $(DEB)"

# test-deb installs the package with dpkg on this machine, checks it, removes and purges it,
# and leaves the machine as it found it (deploy/deb/test-deb.sh); root only, and it refuses a
# machine that has zmesh already. First the version mapping's own table test.
test-deb:
	@if [ "$$(id -u)" != 0 ]; then echo "make test-deb installs a package with dpkg: run it as root (on a machine without zmesh)" >&2; exit 1; fi
	deploy/deb/version_test.sh
	deploy/deb/test-deb.sh --check-machine
	$(MAKE) --no-print-directory deb
	deploy/deb/test-deb.sh $(DEB) '$(VERSION)'

clean:
	rm -rf bin
