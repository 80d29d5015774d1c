# nctk: the binaries an engine or runc starts on a container create, each
# linking only its own path (bin/nvidia-container-runtime,
# bin/nvidia-container-runtime-hook with nvidia-container-cli,
# bin/nvidia-cdi-hook), one multi-call binary (bin/nctk) behind the other
# tool names, all static (no cgo: they start faster), and the driver probe
# helper (bin/nctk-driverprobe, cgo: it dlopens libcuda/NVML).
# scripts/build.sh is the one definition of the build.
PREFIX  ?= /usr/local
DESTDIR ?=
BINDIR  := $(DESTDIR)$(PREFIX)/bin
GO      ?= go
# The binaries and the tool names installed as links NAME:BINARY:
# scripts/build.sh's lists.
BINS    := $(shell sed -n 's/^bins="\(.*\)"$$/\1/p' scripts/build.sh)
LINKS   := $(shell sed -n 's/^links="\(.*\)"$$/\1/p' scripts/build.sh)
GOTEST_FLAGS ?= -count=1 -timeout 40m

.PHONY: all build install uninstall deb rpm setup test unit fixtures lint bench demo clean fuzz load

all: build

build:
	GO=$(GO) scripts/build.sh bin

install: build
	install -d $(BINDIR)
	@for b in $(BINS); do install -m 0755 bin/$$b $(BINDIR)/$$b; echo "$(BINDIR)/$$b"; done
	@for l in $(LINKS); do ln -sf $${l#*:} $(BINDIR)/$${l%%:*}; echo "$(BINDIR)/$${l%%:*} -> $${l#*:}"; done

uninstall:
	@for b in $(BINS); do rm -f $(BINDIR)/$$b; done
	@for l in $(LINKS); do rm -f $(BINDIR)/$${l%%:*}; done

# The Debian package (bin/nctk_<version>_<arch>.deb): the binaries at
# NVIDIA's paths, config.toml as a conffile, the nvidia-cdi-refresh units
# and udev rule, docs (packaging/build-deb.sh, docs/packaging.md).
deb: build
	GO=$(GO) packaging/build-deb.sh bin bin

# The rpm (bin/nctk-<version>-<release>.<arch>.rpm): the same files, built
# with rpmbuild (Debian: apt-get install rpm; packaging/build-rpm.sh).
rpm: build
	GO=$(GO) packaging/build-rpm.sh bin bin

# What tests and the demo need on a Debian 12 machine: runc, docker.io,
# containerd, podman, busybox-static, gcc, staticcheck (idempotent; root).
setup:
	bash .ci/setup

# Driver packages for the fixture driver roots (cached; needs root and apt).
fixtures:
	scripts/fetch-driver-debs.sh

# Every test: unit, fixture, and end-to-end tests against runc, dockerd,
# containerd and podman (as root). Run .ci/setup once on a fresh machine.
test: setup build fixtures lint
	$(GO) test $(GOTEST_FLAGS) ./...

# Tests that need neither root nor engines still run everywhere.
unit:
	$(GO) test -short ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@if command -v staticcheck >/dev/null; then staticcheck ./...; \
	 elif [ -x "$$($(GO) env GOPATH)/bin/staticcheck" ]; then "$$($(GO) env GOPATH)/bin/staticcheck" ./...; \
	 else echo "staticcheck not installed (run .ci/setup)"; exit 1; fi

# Every go test -fuzz target for FUZZTIME each (default 10m); crashers land
# in the packages' testdata/fuzz as seeds. FUZZTIME=30s make fuzz for a quick pass.
fuzz: fixtures
	scripts/fuzz.sh

bench: build fixtures
	$(GO) test -run '^$$' -bench . -benchtime 20x ./...

# Issue 13's operator load (as root, minutes): 100 creates through the
# runtime, 15 at a time, all identical and nothing leaked, and 50 concurrent
# docker runs per path (runtime, --gpus all, --gpus device=0), all correct.
# make test runs the same tests with a small load.
load: build fixtures
	NCTK_LOAD=1 $(GO) test -count=1 -timeout 60m -run '^TestLoad' -v ./test/e2e/ >bin/load.log 2>&1; rc=$$?; \
	grep -E '^(--- |    --- [A-Z]+: TestLoad[A-Za-z]+/[^/ ]+ |    load_test|ok|FAIL)' bin/load.log; \
	echo "full log: bin/load.log"; exit $$rc

# Run a GPU container: the real driver when one is present, else a fixture driver.
# It installs nothing: on a GPU host it needs runc, busybox-static and gcc
# (scripts/demo.sh says what is missing); without a driver it fetches the
# fixture driver first (make fixtures, needs apt).
demo: build
	scripts/demo.sh

clean:
	rm -rf bin
