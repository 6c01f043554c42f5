#!/usr/bin/env bash
# `make soak`: the long integrity run. Builds sidecar, stormbench and the suite into bench/out/bin,
# then runs `suite soak`: the echo provider (killed and restarted every 60 s, the kills alternating
# between SO_LINGER 0 resets and closes as at a process's death; reading slowly at random), `sidecar run`, and 10,000 consumers in worker processes sending unique checked bodies
# for 10 minutes. It fails (exit 1) when any request got a body that was not its own, no answer or
# two, when the provider saw a malformed frame, a repeated upstream id or a request twice, or when
# the sidecar's fds, goroutines or heap at the end differ by more than 5% from after warm-up.
#
#   bash bench/soak.sh                     the published run (about 11 minutes); rewrites the soak
#                                          section of docs/benchmarks.md
#   bash bench/soak.sh --duration 60s --conns 1000 --restart-every 20s --warmup 25s
#                                          a short run by hand (no doc unless you add --doc FILE)
#   bench/out/bin/suite soak -h            every knob
#
# Results: bench/out/soak/soak.json, one log per process in bench/out/soak/logs.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${SOAK_OUT:-$ROOT/bench/out/soak}
BIN=${BENCH_BIN:-$ROOT/bench/out/bin}
mkdir -p "$BIN" "$OUT"

echo "soak: building sidecar, stormbench and suite into $BIN"
go build -o "$BIN/sidecar" ./cmd/sidecar
go build -o "$BIN/stormbench" ./cmd/stormbench
go build -o "$BIN/suite" ./bench/suite

# The sidecar holds one fd per consumer; each load worker up to 5,000 (limit 20,000 per process).
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

args=("$@")
if [ ${#args[@]} -eq 0 ]; then
  args=(--doc docs/benchmarks.md --command "make soak")
fi
# Bounded: every child has its own deadline; the whole run gets SIGINT after 60 minutes.
timeout --signal=INT --kill-after=60s 60m \
  "$BIN/suite" soak --bin "$BIN" --out "$OUT" "${args[@]}"
