#!/usr/bin/env bash
# `make fleet`: the control plane at fleet scale (issue 15) on its own. Builds sidecar, stormbench and
# the suite, then runs `stormbench xds-fleet` twice: 5,000 nodes against one `sidecar control-plane`
# (all-node and one-selector changes, control-plane RSS and CPU per node), and 2,000 nodes against two
# replicas, one of them SIGKILLed. Rewrites only section 6 of docs/benchmarks.md (`make bench` runs the
# same scenario with the others). About a minute on 2 cores; no root needed.
#
#   bash bench/fleet.sh                          the published sizes
#   bash bench/fleet.sh --fleet-nodes 10000      other sizes (see: bench/out/bin/suite run -h)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${BENCH_OUT:-$PWD/bench/out}
BIN=$OUT/bin
mkdir -p "$BIN"

echo "fleet: building sidecar, stormbench and suite into $BIN"
go build -o "$BIN/sidecar" ./cmd/sidecar
go build -o "$BIN/stormbench" ./cmd/stormbench
go build -o "$BIN/suite" ./bench/suite

# 5,000 gRPC connections into one control plane process, and as many out of the workers.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

timeout --signal=INT --kill-after=60s 10m \
  "$BIN/suite" run --bin "$BIN" --out "$OUT" --scenarios fleet --update-section \
    --results "$OUT/fleet-results.json" --command "make fleet" --doc docs/benchmarks.md --img docs/img "$@"
