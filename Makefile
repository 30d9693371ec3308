# zmesh build, run and test entry points. `make help` lists them.

GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
BIN      := bin/zmesh
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME ?= 60s

.PHONY: help build run test bench lint fuzz clean

help:
	@echo "make build   build $(BIN)"
	@echo "make run     the quickstart: the most useful thing zmesh can show today"
	@echo "make test    unit and integration tests with the race detector"
	@echo "make bench   benchmarks"
	@echo "make lint    gofmt, go vet, staticcheck"
	@echo "make fuzz    fuzz the parsers: configuration, list filters, API bodies ($(FUZZTIME) each)"

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/zmesh

# The quickstart: a standalone controller in ./zmesh-quickstart on https://127.0.0.1:1280, with
# a generated admin password kept in zmesh-quickstart/admin-password (mode 0600). Running it
# again reuses the directory. Ctrl-C stops it.
QS := zmesh-quickstart
run: build
	@mkdir -p $(QS) && chmod 700 $(QS)
	@test -s $(QS)/admin-password || (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' > $(QS)/admin-password)
	@test -f $(QS)/controller.yml || printf 'v: 1\ndataDir: data\napi:\n  listen: 127.0.0.1:1280\nadmin:\n  username: admin\n  password: $${ZMESH_ADMIN_PASSWORD}\n' > $(QS)/controller.yml
	@echo "log in with: ./$(BIN) edge login https://127.0.0.1:1280 -u admin -p \$$(cat $(QS)/admin-password)"
	ZMESH_ADMIN_PASSWORD=$$(cat $(QS)/admin-password) ./$(BIN) controller run --config $(QS)/controller.yml

test:
	$(GO) test -race -timeout 14m ./...

# Go micro-benchmarks, then a short `zmesh bench` run of every scenario: the Go baselines and
# the zmesh paths (one router; two routers over tls: and quic:), with circuit setup and memory
# per idle circuit (BENCHFLAGS to change it, e.g. BENCHFLAGS='--duration 5s --streams 16';
# '--setup-duration 0 --idle-circuits 0' skips the circuit measurements).
BENCHFLAGS ?= --duration 2s
bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./...
	./$(BIN) bench $(BENCHFLAGS)

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseRouter$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./config
	$(GO) test -run '^$$' -fuzz '^FuzzParseController$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./config
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./controlplane/filter
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeBodies$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./controlplane/api

clean:
	rm -rf bin
