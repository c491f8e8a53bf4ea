#!/usr/bin/env bash
# bench/flood.sh - `agentbox serve` under a connection flood (issue 16's
# target): with N_SLOW slow-header connections and N_SSE idle event streams
# open from one address (127.0.0.2), /health and an exec from another address
# (127.0.0.1) answer within 2x their unloaded p50; the slow connections are
# closed at the head deadline.
#
#   sudo bench/flood.sh                     # ~3 min
#   sudo N_SLOW=3000 HOLD=5 BUILD=/tmp/b bench/flood.sh
#
# What it does (all under one /var/tmp/agentbox-flood.* dir, removed at the
# end, also on Ctrl-C):
#   0. builds agentbox in $BUILD if needed; compiles bench/http_load.c and
#      bench/flood_load.c with cc
#   1. starts `agentbox serve` on a free loopback port (default head_timeout
#      10s; max_connections 10000; per-address caps raised so one address may
#      hold the whole flood, with room for the connections the server has shut
#      down at the deadline but not yet seen closed) and makes one box
#   2. ROUNDS times:
#      - unloaded: N_HEALTH GET /health and N_EXEC execs of `true` from
#        127.0.0.1, sequential on one keep-alive connection each (http_load -c 1)
#      - starts flood_load from 127.0.0.2: N_SLOW connections that send a
#        request line and then one header line every 2 s, never ending the head
#        (each one the server closes is opened again, so N_SLOW stay open), and
#        N_SSE idle GET /v1/events streams; waits until all are open and the
#        server counts them, then HOLD more seconds (past the head deadline, so
#        closes and reconnects are part of the load)
#      - loaded: the same two series, while the flood stays open; then the
#        flood stops
#   3. prints each round's p50s, the median loaded / median unloaded ratios
#      against the 2x target, and what the flood saw: how long slow
#      connections lived (= the head deadline) and the server's /metrics counts
#
# Knobs (environment): BUILD (default build-bench), N_SLOW (5000), N_SSE (500),
# N_HEALTH (1000), N_EXEC (200), HOLD (12), HEAD_TIMEOUT (10s), ROUNDS (3), KEEP=1 (keep
# the temp dir). Exit status: 0 unless the build or the server fails.
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-bench}
N_SLOW=${N_SLOW:-5000}
N_SSE=${N_SSE:-500}
N_HEALTH=${N_HEALTH:-1000}
N_EXEC=${N_EXEC:-200}
HOLD=${HOLD:-12}
HEAD_TIMEOUT=${HEAD_TIMEOUT:-10s}
ROUNDS=${ROUNDS:-3}

if [ "$(id -u)" -ne 0 ]; then
        echo "bench/flood.sh: needs root (boxes are namespaces, cgroups and loop disks): sudo $0" >&2
        exit 2
fi

WORK=$(mktemp -d /var/tmp/agentbox-flood.XXXXXX)
chmod 700 "$WORK"
AB=$BUILD/agentbox
HL=$WORK/http_load
FL=$WORK/flood_load
SERVER_PID=
FLOOD_PID=
DATA=$WORK/data
URL=
NOTES=$WORK/notes
: >"$NOTES"

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

log() { printf '\n== %s\n' "$*"; }
note() { printf '%s\n' "$*" | tee -a "$NOTES"; }

cleanup() {
        local rc=$?
        trap - EXIT INT TERM
        set +e
        [ -n "$FLOOD_PID" ] && kill "$FLOOD_PID" 2>/dev/null && wait "$FLOOD_PID" 2>/dev/null
        [ -n "$SERVER_PID" ] && stop_server "$SERVER_PID"
        rm_all_boxes "$DATA"
        if [ -d "$WORK" ]; then
                awk -v w="$WORK" 'index($2, w) == 1 {print $2}' /proc/self/mounts | sort -r |
                        while read -r m; do umount -l "$m" 2>/dev/null; done
        fi
        if [ "${KEEP:-0}" = 1 ]; then echo "bench/flood.sh: kept $WORK"; else rm -rf "$WORK"; fi
        exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# series NAME FILE [http_load args...]: one sequential series; prints its
# RESULT line; the latencies (us) go to FILE.
series() {
        local name=$1 f=$2 out
        shift 2
        : >"$f"
        out=$("$HL" -q -c 1 -W 20 -o "$f" "$@" 2>&1)
        printf '  %-22s %s\n' "$name" "$out"
}

p50_of() { pstats "$1" | awk '{print $2}'; }

metric() { # NAME[{labels}]: its value from /metrics
        curl -s -m 30 "$URL/metrics" | awk -v k="$1" '$1 == k {print $2}' | tail -1
}

echo "bench/flood.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  kernel:  $(uname -r)"
echo "  work:    $WORK"

log "build"
if [ ! -f "$BUILD/build.ninja" ]; then
        (cd "$ROOT" && meson setup "$BUILD" >/dev/null) || { echo "meson setup failed" >&2; exit 1; }
fi
if ! ninja -C "$BUILD" agentbox agentbox-full agentbox-init >"$WORK/ninja.log" 2>&1; then
        echo "bench/flood.sh: build failed:" >&2
        tail -20 "$WORK/ninja.log" >&2
        exit 1
fi
echo "  source:  $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null)"
cc -std=gnu11 -O2 -Wall -Wextra -pthread "$ROOT/bench/http_load.c" -lm -o "$HL" || exit 1
cc -std=gnu11 -O2 -Wall -Wextra "$ROOT/bench/flood_load.c" -o "$FL" || exit 1

log "server"
cat >"$WORK/serve.yaml" <<EOF
# written by bench/flood.sh
limits:
  disk: 256M
  memory: 256M
  timeout: 60s
idle_stop: 0
idle_pause: 0
sample_interval: 0
head_timeout: $HEAD_TIMEOUT
max_connections: 10000
max_connections_per_address: $((N_SLOW + N_SSE + 1000))
max_streams: $((N_SSE + 100))
max_streams_per_address: $((N_SSE + 100))
EOF
for _ in 1 2 3 4 5; do
        port=$((20000 + RANDOM % 40000))
        ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && continue
        env -u AGENTBOX_TOKEN AGENTBOX_INIT="$BUILD/agentbox-init" \
                "$AB" serve --listen "127.0.0.1:$port" --data "$DATA" \
                --config "$WORK/serve.yaml" >"$WORK/serve.log" 2>&1 &
        SERVER_PID=$!
        for _ in $(seq 1 200); do
                curl -s -m 1 -o /dev/null "http://127.0.0.1:$port/health" && { URL=http://127.0.0.1:$port; break; }
                kill -0 "$SERVER_PID" 2>/dev/null || break
                sleep 0.1
        done
        [ -n "$URL" ] && break
        stop_server "$SERVER_PID"
        SERVER_PID=
done
[ -n "$URL" ] || { echo "bench/flood.sh: the server did not come up:" >&2; tail -5 "$WORK/serve.log" >&2; exit 1; }
echo "  agentbox serve pid $SERVER_PID on $URL (log $WORK/serve.log)"
curl -sS -m 60 -X POST "$URL/v1/sandboxes" -H 'Content-Type: application/json' -d '{"id":"flood"}' |
        grep -q '"status":"running"' || { echo "bench/flood.sh: cannot make a box" >&2; exit 1; }
EXEC=(-m POST -d '{"command":"true"}' -x '"exit_code":0' "$URL/v1/sandboxes/flood/exec")

# flood_on: starts flood_load from 127.0.0.2; waits until it holds everything
# and the server counts it, then HOLD more seconds.
flood_on() {
        "$FL" -a 127.0.0.2 -p "${URL##*:}" -s "$N_SLOW" -e "$N_SSE" >"$WORK/flood.out" 2>&1 &
        FLOOD_PID=$!
        local full=0 st so eo
        for _ in $(seq 1 120); do
                sleep 0.5
                st=$(grep '^STATUS' "$WORK/flood.out" | tail -1)
                so=$(sed -n 's/.*slow_open=\([0-9]*\).*/\1/p' <<<"$st")
                eo=$(sed -n 's/.*sse_open=\([0-9]*\).*/\1/p' <<<"$st")
                if [ "${so:-0}" -ge "$N_SLOW" ] && [ "${eo:-0}" -ge "$N_SSE" ]; then full=1; break; fi
        done
        echo "  flood_load: $st"
        [ $full = 1 ] || note "  note: the flood did not reach $N_SLOW + $N_SSE open connections"
        echo "  server: connections $(metric agentbox_http_connections), streams $(metric agentbox_http_streams); holding ${HOLD}s (past the ${HEAD_TIMEOUT} head deadline)"
        sleep "$HOLD"
}

flood_off() {
        FSTAT=$(grep '^STATUS' "$WORK/flood.out" | tail -1)
        CONNS=$(metric agentbox_http_connections)
        STREAMS=$(metric agentbox_http_streams)
        echo "  server: connections $CONNS, streams $STREAMS, closed at the head deadline so far $(metric agentbox_http_head_deadline_closed_total), refused at accept so far $(metric 'agentbox_http_refused_total{reason="connections_per_address"}')"
        echo "  flood_load: $FSTAT"
        kill "$FLOOD_PID" 2>/dev/null
        wait "$FLOOD_PID" 2>/dev/null
        FLOOD_PID=
        kill -0 "$SERVER_PID" 2>/dev/null || { echo "bench/flood.sh: the server died; its log:" >&2; tail -20 "$WORK/serve.log" >&2; exit 1; }
        sleep 2 # the server notices the hang-ups
}

# Rounds of unloaded, then loaded, series: a drift of the host's load (other
# work on it) shows as a spread between rounds rather than as a false ratio.
for round in $(seq 1 "$ROUNDS"); do
        log "round $round: unloaded (from 127.0.0.1)"
        series "GET /health" "$WORK/h0.$round" -n "$N_HEALTH" "$URL/health"
        series "exec true" "$WORK/e0.$round" -n "$N_EXEC" "${EXEC[@]}"
        log "round $round: flood of $N_SLOW slow heads + $N_SSE idle event streams from 127.0.0.2"
        flood_on
        log "round $round: loaded (from 127.0.0.1, the flood open)"
        series "GET /health" "$WORK/h1.$round" -n "$N_HEALTH" "$URL/health"
        series "exec true" "$WORK/e1.$round" -n "$N_EXEC" "${EXEC[@]}"
        flood_off
done

log "result"
p50s() { local f; for f in "$WORK/$1".*; do p50_of "$f"; done | tr '\n' ' '; }
median() { tr ' ' '\n' | awk 'NF' | sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
verdict() { awk -v a="$1" -v b="$2" 'BEGIN {r = a / b; printf "%.2fx  %s", r, (r <= 2.0 ? "met (<= 2x)" : "MISSED (> 2x)")}'; }
printf '  %-12s %-26s %-26s %s\n' "p50 ms" "unloaded (each round)" "loaded (each round)" "median loaded / median unloaded"
for k in h:"GET /health" e:"exec true"; do
        f=${k%%:*}
        u=$(p50s "${f}0"); l=$(p50s "${f}1")
        um=$(median <<<"$u"); lm=$(median <<<"$l")
        printf '  %-12s %-26s %-26s %s / %s = %s\n' "${k#*:}" "$u" "$l" "$lm" "$um" "$(verdict "$lm" "$um")"
done
life=$(sed -n 's/.*life_p50=\([0-9.]*\) life_min=\([0-9.]*\) life_max=\([0-9.]*\).*/p50 \1 s, min \2 s, max \3 s/p' <<<"$FSTAT")
echo "  slow connections the server closed in the last round: $(sed -n 's/.*slow_closed=\([0-9]*\).*/\1/p' <<<"$FSTAT") (lifetime $life; head_timeout $HEAD_TIMEOUT)"
echo "  the flood: $N_SLOW slow + $N_SSE streams from 127.0.0.2; the server counted $CONNS connections, $STREAMS streams"
[ -s "$NOTES" ] && { echo "  notes:"; sed 's/^/  /' "$NOTES"; }
exit 0
