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
	@echo "make fuzz    fuzz the configuration loaders ($(FUZZTIME) each)"

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/zmesh

# At this stage zmesh checks configuration: run validates the complete example router
# configuration and prints its effective form.
run: build
	ZITI_DATA=/var/lib/zmesh ./$(BIN) router validate config/testdata/router-complete.yml

test:
	$(GO) test -race -timeout 14m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseRouter$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./config
	$(GO) test -run '^$$' -fuzz '^FuzzParseController$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./config

clean:
	rm -rf bin
