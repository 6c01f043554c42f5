#!/usr/bin/env bash
# Interop tests: a real dubbo-go v3.3.0 provider and consumer (this module's cmd/dgprovider, cmd/dgconsumer)
# around the Stormgate sidecar built from the main module (..). Usage, from anywhere:
#   bash interop/run.sh            # the full run, about 2 min plus builds
#   bash interop/run.sh -short     # skip the ~32 s wait for dubbo-go's 16 connections
#   bash interop/run.sh -run 'TestInterop/restart'
# Extra arguments go to `go test`. Set STORMGATE_SIDECAR=/path/to/sidecar to test a prebuilt binary, GO to pick
# the go command. Modules come from the Go proxy on the first run (~70 modules; go.sum pins them).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
# This module stands alone: a go.work above it must not pull it into the main module's build, or vice versa.
export GOWORK=off
# -parallel 4: the three top-level scenarios run side by side (GOMAXPROCS on a 2-core machine would allow 2).
exec "${GO:-go}" test -count=1 -v -parallel 4 -timeout 10m "$@" ./...
