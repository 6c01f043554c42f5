# Stormgate. `make test` is what CI runs (via .ci/run); `make bench` regenerates docs/benchmarks.md.
GO        ?= go
PKGS      ?= ./...
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# The one build command: the Dockerfile's build stage runs the same line.
GOBUILD    = CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)"

# make image: the images and the archives it writes. stormgate/sidecar holds the data-plane build
# (-tags dataplane: run, iptables, upgrade, validate, version, demo), the one every injected pod runs;
# stormgate/control holds the full binary, for the control plane and the injection webhook.
IMAGE             ?= stormgate/sidecar
IMAGE_OCI         ?= bin/stormgate-sidecar-$(VERSION).oci.tar
CONTROL_IMAGE     ?= stormgate/control
CONTROL_IMAGE_OCI ?= bin/stormgate-control-$(VERSION).oci.tar

.PHONY: all build image test unit race storm fuzz interop demo-smoke vet fmt-check alerts bench fleet soak upgrade-bench proto clean k8s-test deploy-manifests

all: build

build:
	$(GOBUILD) -o bin/sidecar ./cmd/sidecar
	$(GOBUILD) -tags dataplane -o bin/sidecar-dataplane ./cmd/sidecar
	$(GOBUILD) -o bin/stormbench ./cmd/stormbench

## image: the container images without a Docker daemon, registry or base image: a static binary,
## user 1337, nothing else, as OCI archives ($(IMAGE_OCI), $(CONTROL_IMAGE_OCI)), loaded into podman
## when it is installed (podman run --rm $(IMAGE):$(VERSION) version). Stamped with the last commit's
## time: same commit, same digest. The Dockerfile builds the same images for Docker users.
image: build
	$(GO) run ./build/mkimage --binary bin/sidecar-dataplane --version $(VERSION) --name $(IMAGE):$(VERSION) \
	  --out $(IMAGE_OCI) --created $$(git log -1 --format=%ct 2>/dev/null || echo 0) --load
	$(GO) run ./build/mkimage --binary bin/sidecar --version $(VERSION) --name $(CONTROL_IMAGE):$(VERSION) \
	  --out $(CONTROL_IMAGE_OCI) --created $$(git log -1 --format=%ct 2>/dev/null || echo 0) --load

## test: everything CI checks, on a clean clone (about 10-15 minutes on 2 cores).
test: fmt-check vet alerts race storm fuzz demo-smoke interop

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)
	$(GO) vet -tags dataplane ./cmd/sidecar

# The Prometheus rules parse, and their unit tests (deploy/prometheus/stormgate-alerts.test.yaml) pass:
# every alert fires when it should and stays quiet when it should not. promtool ships in the Debian
# package prometheus (.ci/run installs it); without it this target says so and skips.
alerts:
	@if ! command -v promtool >/dev/null 2>&1; then \
	  echo "alerts: SKIPPED: promtool not found (Debian: apt-get install prometheus); the alert rules are untested"; \
	  exit 0; \
	fi; \
	set -e; \
	promtool check rules deploy/prometheus/stormgate-alerts.yaml; \
	cd deploy/prometheus && promtool test rules stormgate-alerts.test.yaml

# Unit, integration (real sockets, 1,000+ connections), root-only namespace tests and the pod test
# (e2e/pod: real containers with podman; skipped with a message where podman is not installed),
# race detector on.
race:
	$(GO) test -race -count=1 -timeout 15m $(PKGS)
	$(GO) test -race -count=1 -tags dataplane ./cmd/sidecar

# The accept-storm acceptance test measures timing, so it runs without the race
# detector (under -race it skips). Root only: it creates network namespaces.
storm:
	$(GO) test -count=1 -run 'TestAcceptanceStorm' -v ./admission/

unit:
	$(GO) test -count=1 -timeout 15m $(PKGS)

# The frame decoder's fuzz targets, briefly (the corpus in testdata/fuzz seeds them).
fuzz:
	$(GO) test -run=NONE -fuzz=FuzzSplit -fuzztime=10s ./proxy/dubbo/
	$(GO) test -run=NONE -fuzz=FuzzParseHeader -fuzztime=5s ./proxy/dubbo/

# The newcomer's first command must keep working: a short demo that exits 0 on its own.
demo-smoke:
	$(GO) run ./cmd/sidecar demo --conns 500 --rate 500 --duration 3s

# Real dubbo-go v3.3.0 provider and consumer through Stormgate (separate Go module).
interop:
	bash interop/run.sh

# Stormgate against a real kube-apiserver and etcd (separate Go module k8s/, which builds them into
# bin/k8s/ on the first run: kube-apiserver takes about 6 minutes on 2 idle cores, much longer on a
# busy machine; later runs reuse it and take 2-4 minutes): the injection webhook as the
# API server calls it, Pod Security levels, the Helm chart (lint, template, applied). .ci/run runs it
# after make test.
k8s-test:
	bash k8s/run.sh

# deploy/control-plane.yaml, inject-webhook.yaml and cert-manager.yaml are charts/stormgate rendered
# with its ci/deploy-values.yaml: edit the chart, then run this (k8s-test checks they match).
deploy-manifests:
	cd k8s && GOWORK=off $(GO) run ./cmd/render-deploy -root ..

# Hot-path benchmarks (0 allocs/op) and the load scenarios; writes docs/benchmarks.md.
bench:
	bash bench/run.sh

# The integrity invariant over 10 minutes (not part of make test): 10,000 consumers with unique
# checked bodies, the provider restarted every 60 s and reading slowly at random, the sidecar's
# fds, goroutines and heap checked for leaks; writes the soak section of docs/benchmarks.md.
# A short run by hand: bash bench/soak.sh --duration 60s --conns 1000 --restart-every 20s --warmup 25s
soak:
	bash bench/soak.sh

# The control plane at fleet scale alone (5,000 xDS nodes; two replicas, one killed): rewrites
# section 6 of docs/benchmarks.md. `make bench` runs it too.
fleet:
	bash bench/fleet.sh

## upgrade-bench: issue 14's acceptance at full size: 10,000 consumer connections (two load
## processes) at 5,000 req/s, heartbeats every second, ten `sidecar upgrade`s in a row between two
## builds; the figures go into docs/benchmarks.md ("Upgrading Stormgate itself") and
## bin/upgrade-figures.md. make test runs the same test at 2,000 connections.
upgrade-bench:
	mkdir -p bin
	STORMGATE_UPGRADE_CONNS=10000 STORMGATE_UPGRADE_RATE=5000 STORMGATE_UPGRADE_COUNT=10 \
	  STORMGATE_UPGRADE_HEARTBEAT=1s STORMGATE_UPGRADE_FIGURES=$(CURDIR)/bin/upgrade-figures.md \
	  STORMGATE_UPGRADE_DOC=$(CURDIR)/docs/benchmarks.md \
	  $(GO) test -count=1 -timeout 20m -run 'TestUpgradeUnderLoad$$' -v ./e2e/

proto:
	bash xds/gen.sh

clean:
	rm -rf bin
