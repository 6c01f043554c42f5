# Stormgate. `make test` is what CI runs (via .ci/run); `make bench` regenerates docs/benchmarks.md.
GO        ?= go
PKGS      ?= ./...
# The version stamped into the binaries and the image tags: VERSION at a release, git describe's
# X.Y.Z-N-gHASH between releases (build/version.sh; no git tag needed). `make version` prints it.
VERSION   ?= $(shell build/version.sh)
# The one build command: the Dockerfile's build stage runs the same line.
GOBUILD    = CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)"

# make image: the images and the archives it writes. stormgate/sidecar holds the data-plane build
# (-tags dataplane: run, iptables, upgrade, validate, version, demo), the one every injected pod runs;
# stormgate/control holds the full binary, for the control plane and the injection webhook.
IMAGE             ?= stormgate/sidecar
IMAGE_OCI         ?= bin/stormgate-sidecar-$(VERSION).oci.tar
CONTROL_IMAGE     ?= stormgate/control
CONTROL_IMAGE_OCI ?= bin/stormgate-control-$(VERSION).oci.tar

.PHONY: all version release licenses build image test unit race storm timing fuzz interop demo-smoke vet fmt-check alerts bench fleet soak upgrade-bench proto clean k8s-test deploy-manifests

all: build

version:
	@echo $(VERSION)

build:
	$(GOBUILD) -o bin/sidecar ./cmd/sidecar
	$(GOBUILD) -tags dataplane -o bin/sidecar-dataplane ./cmd/sidecar
	$(GOBUILD) -o bin/stormbench ./cmd/stormbench

## image: the container images without a Docker daemon, registry or base image: a static binary,
## user 1337, nothing else, as OCI archives ($(IMAGE_OCI), $(CONTROL_IMAGE_OCI)), loaded into podman
## when it is installed and started once there (it prints the `podman run` command that worked).
## Stamped with the last commit's time: same commit, same digest. The Dockerfile builds the same
## images for Docker users.
image: build
	$(GO) run ./build/mkimage --binary bin/sidecar-dataplane --version $(VERSION) --name $(IMAGE):$(VERSION) \
	  --out $(IMAGE_OCI) --created $$(git log -1 --format=%ct 2>/dev/null || echo 0) --load
	$(GO) run ./build/mkimage --binary bin/sidecar --version $(VERSION) --name $(CONTROL_IMAGE):$(VERSION) \
	  --out $(CONTROL_IMAGE_OCI) --created $$(git log -1 --format=%ct 2>/dev/null || echo 0) --load

## release: everything a release publishes, in dist/ (emptied first): for linux amd64 and arm64 the
## binaries (sidecar: the full build; sidecar-dataplane: the sidecar image's), the two images as OCI
## archives (build/mkimage, as make image), then the license texts, LICENSE, NOTICE, the release's
## section of CHANGELOG.md, and SHA256SUMS of every file. Run it on the release commit (the one that
## set VERSION, tagged vX.Y.Z; docs/operations.md, "Releases"); elsewhere it builds a snapshot with
## the X.Y.Z-N-gHASH version and says so.
RELEASE_ARCHES ?= amd64 arm64
release:
	build/release.sh check $(VERSION)
	rm -rf dist && mkdir -p dist
	set -e; created=$$(git log -1 --format=%ct 2>/dev/null || echo 0); for arch in $(RELEASE_ARCHES); do \
	  GOOS=linux GOARCH=$$arch $(GOBUILD) -o dist/sidecar-$(VERSION)-linux-$$arch ./cmd/sidecar; \
	  GOOS=linux GOARCH=$$arch $(GOBUILD) -tags dataplane -o dist/sidecar-dataplane-$(VERSION)-linux-$$arch ./cmd/sidecar; \
	  $(GO) run ./build/mkimage --binary dist/sidecar-dataplane-$(VERSION)-linux-$$arch --version $(VERSION) \
	    --name $(IMAGE):$(VERSION) --out dist/stormgate-sidecar-$(VERSION)-linux-$$arch.oci.tar --created $$created; \
	  $(GO) run ./build/mkimage --binary dist/sidecar-$(VERSION)-linux-$$arch --version $(VERSION) \
	    --name $(CONTROL_IMAGE):$(VERSION) --out dist/stormgate-control-$(VERSION)-linux-$$arch.oci.tar --created $$created; \
	done
	$(GO) run ./build/mklicenses --out dist/THIRD_PARTY_LICENSES.txt
	cp LICENSE NOTICE dist/
	build/release.sh notes $(VERSION) > dist/RELEASE_NOTES.md
	cd dist && sha256sum -- * > SHA256SUMS
	@echo "release $(VERSION): dist/"; cat dist/SHA256SUMS

# The dependency license check alone (make test runs it with the rest of ./build).
licenses:
	$(GO) test -count=1 -run 'TestLicenses' ./build/

## test: everything CI checks, on a clean clone (about 10-15 minutes on 2 cores).
test: fmt-check vet alerts race timing fuzz demo-smoke interop

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)
	cd internal/childproc && $(GO) vet .
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
# race detector on; then the tests of Stormgate's patches to netpoll (third_party/netpoll, a module
# of its own that ./... does not reach) and of the process harness (internal/childproc, likewise).
race:
	$(GO) test -race -count=1 -timeout 15m $(PKGS)
	cd third_party/netpoll && $(GO) test -race -count=1 -run 'TestReadPause|TestMaxReadSize|TestReadGrowsWithSender|TestQuietAfterBurstHoldsNoLargeNode|TestIdleConnectionHoldsNoBarrier|TestReadableEventAllocatesNothing|TestOneReadPerMessage|TestCloseDuringReleaseQuietFinishes' .
	cd third_party/netpoll && $(GO) test -count=1 -run '^TestConnectionUntil$$' . # parked pollers: without -race
	cd internal/childproc && $(GO) test -race -count=1 .
	$(GO) test -race -count=1 -tags dataplane ./cmd/sidecar

# The tests whose bounds are time, without the race detector (under -race they skip:
# internal/racebuild) and one package at a time, so that nothing but the machine's own load
# runs beside them: the accept storm (root only: it creates network namespaces), the
# greedy neighbours' latency bounds, `sidecar upgrade`'s longest gap in answers, and HTTP/2
# consumers that never read beside a load (its provider builds 500 MB of answers).
timing: storm
	$(GO) test -count=1 -run '^TestGreedyNeighboursCostOnlyThemselves$$' -v ./proxy/
	$(GO) test -count=1 -timeout 10m -run '^(TestUpgradeUnderLoad|TestH2NonReadersFailNoCall)$$' -v ./e2e/

storm:
	$(GO) test -count=1 -run 'TestAcceptanceStorm' -v ./admission/

unit:
	$(GO) test -count=1 -timeout 15m $(PKGS)

# The frame decoders' fuzz targets (Dubbo 2, HTTP/2), briefly (the corpus in testdata/fuzz seeds them).
# Budgets are counts of inputs (-fuzztime=Nx), about 5-10 s each on 2 loaded cores, not durations: a
# duration races Go 1.26's fuzzing coordinator at its deadline (golang/go#75804, fixed in Go 1.27), and
# on a loaded machine a worker that misses it fails the target with a bare "context deadline exceeded"
# and no failing input (FuzzSplitCheckFrame did, beside a CPU hog). A count has no deadline to race.
fuzz:
	$(GO) test -run=NONE -fuzz=FuzzSplit -fuzztime=300000x ./proxy/dubbo/
	$(GO) test -run=NONE -fuzz=FuzzParseHeader -fuzztime=200000x ./proxy/dubbo/
	$(GO) test -run=NONE -fuzz=FuzzConnServer -fuzztime=50000x ./proxy/h2/
	$(GO) test -run=NONE -fuzz=FuzzSplitCheckFrame -fuzztime=25000x ./proxy/h2/
	$(GO) test -run=NONE -fuzz=FuzzHeaderForward -fuzztime=5000x ./proxy/h2/
	$(GO) test -run=NONE -fuzz=FuzzRestoreConn -fuzztime=30000x ./proxy/h2/

# The newcomer's first command must keep working: a short demo that exits 0 on its own.
demo-smoke:
	$(GO) run ./cmd/sidecar demo --conns 500 --rate 500 --duration 3s
	$(GO) run ./cmd/sidecar demo --protocol triple --conns 500 --rate 500 --duration 3s

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

## upgrade-bench: issues 14 and 27's acceptance at full size: 10,000 consumer connections, half of
## them Triple (5,000 Dubbo at 2,500 req/s and 5,000 h2c at 2,500 calls/s, one load process each,
## through upstream.protocol both to `stormbench echo-provider --protocol both`), heartbeats and
## PINGs every second, ten `sidecar upgrade`s in a row between two builds; the figures go into
## docs/benchmarks.md ("Upgrading Stormgate itself") and bin/upgrade-figures.md. make test runs the
## same test at 1,000 Dubbo and 1,000 Triple connections, 1,000 calls/s each.
upgrade-bench:
	mkdir -p bin
	STORMGATE_UPGRADE_CONNS=5000 STORMGATE_UPGRADE_TRIPLE_CONNS=5000 STORMGATE_UPGRADE_RATE=2500 STORMGATE_UPGRADE_COUNT=10 \
	  STORMGATE_UPGRADE_HEARTBEAT=1s STORMGATE_UPGRADE_FIGURES=$(CURDIR)/bin/upgrade-figures.md \
	  STORMGATE_UPGRADE_DOC=$(CURDIR)/docs/benchmarks.md \
	  $(GO) test -count=1 -timeout 20m -run 'TestUpgradeUnderLoad$$' -v ./e2e/

proto:
	bash settings/gen.sh

clean:
	rm -rf bin dist
