#!/usr/bin/env bash
# The same-run measurements PATCHES.md quotes: system calls (perf's syscalls tracepoints, steady on a
# shared machine) and CPU ticks of one process over a window, under stormbench load. Build the binaries
# of two patch levels (say into /tmp/a and /tmp/b: go build -o DIR ./cmd/stormbench ./cmd/sidecar
# ./bench/floor/npfloor ./bench/floor/npfwd) and alternate the runs:
#
#   measure.sh idle DIR npfloor|sidecar CONNS HEARTBEAT WINDOW_S   # heartbeats only
#   measure.sh fwd  DIR npfwd|sidecar   CONNS RATE WINDOW_S        # stormbench provider behind it
#
# idle prints calls per answered write (one write per readable consumer); fwd prints calls per request.
# Ports are taken below 32768, away from the load tool's ephemeral ports. Every process it starts is
# stopped before it returns.
set -euo pipefail
mode=$1 dir=$2 kind=$3 conns=$4 arg=$5 win=${6:-10}
port=$((20000 + RANDOM % 8000))
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
start_proxy() { # $1: upstream address (fwd) or none
  case $kind in
    npfloor) exec "$dir/npfloor" --listen 127.0.0.1:$port ;;
    npfwd) exec "$dir/npfwd" --listen 127.0.0.1:$port --upstream "$1" --upstream-conns 4 ;;
    sidecar) exec "$dir/sidecar" run --listen 127.0.0.1:$port --upstream "${1:-127.0.0.1:9}" --upstream-conns 4 \
      --metrics '' --admin '' --log-level error ;;
  esac
}
if [ "$mode" = fwd ]; then
  "$dir/stormbench" provider --listen 127.0.0.1:$((port + 1)) >/dev/null 2>&1 & pids+=($!)
  sleep 0.5
  start_proxy 127.0.0.1:$((port + 1)) >/dev/null 2>&1 & px=$!; pids+=($px)
  sleep 1
  "$dir/stormbench" load --target 127.0.0.1:$port --conns "$conns" --rate "$arg" --heartbeat 30s \
    --duration $((win + 5))s >/dev/null 2>&1 & ld=$!
  reqs=$((arg * win))
else
  start_proxy >/dev/null 2>&1 & px=$!; pids+=($px)
  sleep 0.5
  "$dir/stormbench" load --target 127.0.0.1:$port --conns "$conns" --heartbeat "$arg" \
    --duration $((win + 8))s >/dev/null 2>&1 & ld=$!
fi
pids+=($ld)
sleep $((conns / 2000 + 3))
out=$(mktemp)
t0=$(awk '{print $14+$15}' /proc/$px/stat)
perf stat -x, -e 'syscalls:sys_enter_*' -p "$px" -o "$out" -- sleep "$win" 2>/dev/null
t1=$(awk '{print $14+$15}' /proc/$px/stat)
wait "$ld" || true
tot=$(awk -F, '$1 ~ /^[0-9]+$/ {s+=$1} END{print s}' "$out")
per=${reqs:-$(awk -F, '$3 ~ /sys_enter_write$/ {print $1}' "$out")}
top=$(awk -F, '$1 ~ /^[0-9]+$/ && $1 > 0 {sub("syscalls:sys_enter_","",$3); print $3 "=" $1}' "$out" |
  sort -t= -k2 -nr | head -7 | tr '\n' ' ')
rm -f "$out"
echo "$mode $kind $dir conns=$conns $arg window=${win}s cpu_ticks=$((t1 - t0)) calls=$tot calls_per_unit=$(echo "scale=2; $tot / $per" | bc) | $top"
