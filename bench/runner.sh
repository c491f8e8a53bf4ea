#!/usr/bin/env bash
# bench/runner.sh - the FastGPT-compatible code runner (POST /sandbox/js and
# /sandbox/python, issue 5) over HTTP on loopback, side by side with a plain
# interpreter process per run, in the same run on the same host.
#
#   sudo bench/runner.sh                         # ~4 min
#   sudo BUILD=/tmp/build-rbench WARM=8 bench/runner.sh
#
# What it does (everything lives under one /var/tmp/agentbox-runner.* dir and
# is removed at the end, also on Ctrl-C: the server, every box `agentbox ls`
# lists in its data dir, the boxes' cgroup parent):
#   0. uses $BUILD/agentbox (builds it only when the binary is missing),
#      compiles bench/http_load.c with cc into the temp dir
#   1. `agentbox serve` on a free loopback port with a temp data dir and config,
#      AGENTBOX_RUNNER_WARM=$WARM warm processes per language, SANDBOX_TOKEN set
#      to a random token (requests carry `Authorization: Bearer ...`, as FastGPT
#      sends them), AGENTBOX_RUNNERS=$ROOT/runners unless already set
#   2. warm-up: the first request of each language makes the system box and
#      installs the runtime in it (waited for, up to 300 s); then WARMUP
#      requests of each, and a pause so the warm processes are all ready again
#   3. latency: JS `function main(v){return v.a+v.b}` and Python
#      `def main(a, b): return a + b` with {"a":1,"b":2}, N_SEQ (300)
#      back-to-back requests each on one keep-alive connection (http_load -c 1,
#      -x '"success":true'), p50/p90/p99; the same with a pause of IDLE_MS
#      (400) between requests, N_IDLE (30) of them, so a warm process is always
#      ready (the server + hand-off part without waiting for an interpreter)
#   4. throughput: CONC (10) connections for SECS (20) seconds each language:
#      requests/s, p50/p99, errors (must be 0)
#      For 3 and 4: CPU per request (ms) of the system box's cgroup (the
#      runner processes: the warm workers of the app, runners/README.md
#      "Worker mode" -- Python's fork of its clean state per run, JS's fresh
#      realm -- and the replacements of recycled ones) and of the server process
#   5. baseline: one plain process per run evaluating the same function with
#      the same variables and printing the same JSON: `python3 -c`, `bun -e`
#      (runners/js/node_modules/@oven/bun-linux-x64/bin/bun) and `node -e`:
#      p50/p90/p99 over N_BASE (50) sequential runs timed from this shell, and
#      runs/s with CONC parallel loops of BASE_PER (20) runs each (every output
#      checked for "success":true)
#   6. a table with the issue's targets (MET/MISSED) and the ratio vs the
#      baseline; issue 29's: CPU per request <= 0.25x a bare interpreter's
#      start, p50 <= 5 ms, requests/s at CONC connections >= 4x the bare
#      interpreter's runs/s (CPU: the runner processes' alone, and with the
#      server's added)
#   7. the server stopped and every box deleted: leftovers of the data dir
#      (bench/lib.sh leak_report; "LEAK" lines for anything found)
#
# Knobs (environment): BUILD (default build), WARM (8), N_SEQ (300),
# N_IDLE (30), IDLE_MS (400), CONC (10), SECS (20), N_BASE (50),
# BASE_PER (20), WARMUP (10), PYTHON (the python3 the box runs: /usr/bin/python3
# when present), KEEP=1 (keep the temp dir).
#
# Server latencies are measured by http_load inside one process on an open
# keep-alive connection (first byte written -> last byte read). Baseline runs
# are timed from this shell around fork + exec + exit (the shell's own fork is
# included, ~1 ms). Percentiles are nearest-rank. The host is shared: the
# load average is printed at the start and the end.
# Exit status: 0 unless the build fails or the server does not start, does not
# become ready, or dies during the run (a failed series is reported and the
# run goes on).
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
WARM=${WARM:-${AGENTBOX_RUNNER_WARM:-8}}
N_SEQ=${N_SEQ:-300}
N_IDLE=${N_IDLE:-30}
IDLE_MS=${IDLE_MS:-400}
CONC=${CONC:-10}
SECS=${SECS:-20}
N_BASE=${N_BASE:-50}
BASE_PER=${BASE_PER:-20}
WARMUP=${WARMUP:-10}
if [ -z "${PYTHON:-}" ]; then
        if [ -x /usr/bin/python3 ]; then PYTHON=/usr/bin/python3; else PYTHON=$(command -v python3); fi
fi
BUN=$ROOT/runners/js/node_modules/@oven/bun-linux-x64/bin/bun
NODE=$(command -v node || true)

if [ "$(id -u)" -ne 0 ]; then
        echo "bench/runner.sh: needs root (boxes are namespaces, cgroups and loop disks): sudo $0" >&2
        exit 2
fi

WORK=$(mktemp -d /var/tmp/agentbox-runner.XXXXXX)
chmod 700 "$WORK"
RES=$WORK/results # "key value" lines for the table
NOTES=$WORK/notes
: >"$RES"
: >"$NOTES"
AB=$BUILD/agentbox
HL=$WORK/http_load
DATA=$WORK/data
SERVER_PID=
BASE_PIDS=() # the parallel baseline loops running now
URL=
TOKEN=bench-$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
AUTH="Authorization: Bearer $TOKEN"

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

log() { printf '\n== %s\n' "$*"; }
note() { printf '%s\n' "$*" | tee -a "$NOTES"; }
put() { echo "$1 $2" >>"$RES"; }
get() { awk -v k="$1" '$1 == k {v = $2} END {print v}' "$RES"; }



rm_boxes() { # every box the CLI lists in $DATA, then the cgroup parent
        local ids cg
        [ -d "$DATA" ] || return 0
        ids=$("$AB" --data "$DATA" ls 2>/dev/null | awk 'NR > 1 {print $1}')
        # shellcheck disable=SC2086 # one word per id
        [ -z "$ids" ] || "$AB" --data "$DATA" rm $ids >/dev/null 2>&1
        cg=$(cg_parent "$DATA")
        for c in /sys/fs/cgroup/*/"$cg" /sys/fs/cgroup/"$cg"; do
                [ -d "$c" ] && rmdir "$c" 2>/dev/null
        done
        return 0
}

cleanup() {
        local rc=$?
        trap - EXIT INT TERM
        set +e
        # the parallel baseline loops, if interrupted while they run
        for j in "${BASE_PIDS[@]}"; do kill "$j" 2>/dev/null; done
        [ -z "$SERVER_PID" ] || stop_server "$SERVER_PID"
        rm_boxes
        # what a server stopped before its boxes were deleted keeps mounted
        [ -d "$DATA" ] && "$AB" --data "$DATA" cleanup >/dev/null 2>&1
        if [ -d "$WORK" ]; then
                awk -v w="$WORK" 'index($2, w) == 1 {print $2}' /proc/self/mounts | sort -r |
                        while read -r m; do umount -l "$m" 2>/dev/null; done
        fi
        if [ "${KEEP:-0}" = 1 ]; then
                echo "bench/runner.sh: kept $WORK"
        else
                rm -rf "$WORK"
        fi
        exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- helpers ----------------------------------------------------------------


# record KEY LABEL FILE: prints a line and records KEY_p50, KEY_p90, KEY_p99, KEY_n.
record() {
        local key=$1 label=$2 n p50 p90 p99 mx
        read -r n p50 p90 p99 mx < <(pstats "$3")
        printf '  %-44s n=%-4s p50 %8s  p90 %8s  p99 %8s  max %8s ms\n' "$label" "$n" "$p50" "$p90" "$p99" "$mx"
        put "${key}_n" "$n"
        put "${key}_p50" "$p50"
        put "${key}_p90" "$p90"
        put "${key}_p99" "$p99"
}

# rfield NAME < RESULT-line output of http_load
rfield() { sed -n "s/^RESULT.* $1=\([^ ]*\).*/\1/p" | tail -1; }

# hl ARGS...: http_load with the auth header, its output shown indented; its status.
hl() {
        local out rc
        out=$("$HL" -H "$AUTH" "$@" 2>&1)
        rc=$?
        printf '%s\n' "$out" | sed 's/^/    /'
        HL_OUT=$out
        return $rc
}

server_alive() {
        kill -0 "$SERVER_PID" 2>/dev/null && return 0
        note "  !! the server (pid $SERVER_PID) is gone; last lines of its log:"
        tail -20 "$WORK/server.log" | sed 's/^/     /' | tee -a "$NOTES"
        return 1
}

# cpu_snap: "box_ns server_ticks": CPU used so far by the boxes of this data
# dir (their cgroup parent: the system box, i.e. the runner processes) and by
# the server process.
cpu_snap() {
        local box srv
        box=$(cat "/sys/fs/cgroup/cpuacct/$CG/cpuacct.usage" 2>/dev/null ||
                awk '$1 == "usage_usec" {print $2 * 1000}' "/sys/fs/cgroup/$CG/cpu.stat" 2>/dev/null)
        srv=$(awk '{sub(/^.*\) /, ""); print $12 + $13}' "/proc/$SERVER_PID/stat" 2>/dev/null)
        echo "${box:-0} ${srv:-0}"
}

# cpu_report KEY "SNAP0" "SNAP1" REQUESTS: CPU per request in ms of the runner
# processes (box cgroup) and of the server; recorded as KEY_cpu_box, KEY_cpu_srv.
cpu_report() {
        local key=$1 n=$4 b0 s0 b1 s1 hz cb cs
        read -r b0 s0 <<<"$2"
        read -r b1 s1 <<<"$3"
        hz=$(getconf CLK_TCK)
        [ "${n:-0}" -gt 0 ] || return 0
        read -r cb cs < <(awk -v b="$((b1 - b0))" -v s="$((s1 - s0))" -v hz="$hz" -v n="$n" \
                'BEGIN {printf "%.2f %.2f\n", b / 1e6 / n, s * 1000 / hz / n}')
        put "${key}_cpu_box" "$cb"
        put "${key}_cpu_srv" "$cs"
        echo "  CPU per request (ms): runner processes (system box cgroup) $cb, server $cs"
}

# a run of http_load against LANG (js|python) with BODY: KEY LABEL LANG ARGS...
# (latency samples in $WORK/s.KEY; rps, errors, p50/p99 and CPU recorded)
series() {
        local key=$1 label=$2 lang=$3 body c0 c1 n
        shift 3
        if [ "$lang" = js ]; then body=$JS_BODY; else body=$PY_BODY; fi
        : >"$WORK/s.$key"
        echo "  http_load -c ... $* -x '\"success\":true' -d '$body' $URL/sandbox/$lang"
        c0=$(cpu_snap)
        hl -q "$@" -x '"success":true' -e 5 -o "$WORK/s.$key" -d "$body" "$URL/sandbox/$lang" ||
                note "  !! $label: errors (see above)"
        c1=$(cpu_snap)
        record "$key" "$label" "$WORK/s.$key"
        n=$(printf '%s\n' "$HL_OUT" | rfield requests)
        put "${key}_rps" "$(printf '%s\n' "$HL_OUT" | rfield rps)"
        put "${key}_errors" "$(printf '%s\n' "$HL_OUT" | rfield errors)"
        put "${key}_requests" "$n"
        put "${key}_min" "$(printf '%s\n' "$HL_OUT" | rfield min)"
        cpu_report "$key" "$c0" "$c1" "${n:-0}"
        server_alive
}

# ---- 0. machine, build ------------------------------------------------------

log "machine"
echo "  date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "  kernel:  $(uname -r)"
echo "  cpus:    $(nproc) ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo))"
echo "  memory:  $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
echo "  load:    $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  work:    $WORK"
put load_start "$(cut -d' ' -f1 /proc/loadavg)"

log "build"
if [ ! -x "$AB" ] || [ ! -x "$BUILD/agentbox-init" ]; then
        echo "  $AB missing: building it in $BUILD"
        if [ ! -f "$BUILD/build.ninja" ]; then
                (cd "$ROOT" && meson setup "$BUILD" >"$WORK/meson.log" 2>&1) ||
                        { tail -20 "$WORK/meson.log"; echo "bench/runner.sh: meson setup failed" >&2; exit 1; }
        fi
        ninja -C "$BUILD" agentbox agentbox-full agentbox-init >"$WORK/ninja.log" 2>&1 ||
                { tail -20 "$WORK/ninja.log"; echo "bench/runner.sh: build failed" >&2; exit 1; }
fi
echo "  agentbox: $AB ($(stat -c %y "$AB" | cut -d. -f1))"
cc -O2 -pthread -o "$HL" "$ROOT/bench/http_load.c" -lm ||
        { echo "bench/runner.sh: cannot compile bench/http_load.c" >&2; exit 1; }
echo "  python:   $PYTHON ($("$PYTHON" -V 2>&1))"
if [ -x "$BUN" ]; then echo "  bun:      $BUN ($("$BUN" --version 2>&1))"; else note "  note: no bun at $BUN: bun baseline skipped"; BUN=; fi
if [ -n "$NODE" ]; then echo "  node:     $NODE ($("$NODE" --version 2>&1))"; fi

# ---- 1. the server ------------------------------------------------------------

log "server"
mkdir -p "$DATA"
CG=$(cg_parent "$DATA")
cat >"$WORK/config.yaml" <<EOF
# written by bench/runner.sh
idle_stop: 0
pool_size: 0
sample_interval: 0
max_connections: 1024
EOF
for _ in 1 2 3 4 5; do
        port=$((20000 + RANDOM % 40000))
        ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && continue
        env -u AGENTBOX_TOKEN SANDBOX_TOKEN="$TOKEN" AGENTBOX_RUNNER_WARM="$WARM" \
                AGENTBOX_RUNNERS="${AGENTBOX_RUNNERS:-$ROOT/runners}" \
                AGENTBOX_INIT="$BUILD/agentbox-init" \
                "$AB" serve --listen "127.0.0.1:$port" --data "$DATA" \
                --config "$WORK/config.yaml" >"$WORK/server.log" 2>&1 &
        SERVER_PID=$!
        for _ in $(seq 1 200); do
                if curl -s -m 1 -o /dev/null "http://127.0.0.1:$port/health"; then
                        URL=http://127.0.0.1:$port
                        break 2
                fi
                kill -0 "$SERVER_PID" 2>/dev/null || break
                sleep 0.1
        done
        stop_server "$SERVER_PID"
        SERVER_PID=
        echo "  server did not come up on port $port; its log:"
        tail -5 "$WORK/server.log" | sed 's/^/    /'
done
[ -n "$URL" ] || { echo "bench/runner.sh: agentbox serve does not start" >&2; exit 1; }
echo "  agentbox serve pid $SERVER_PID on $URL (AGENTBOX_RUNNER_WARM=$WARM, SANDBOX_TOKEN set, log $WORK/server.log)"

JS_CODE='function main(v){return v.a+v.b}'
PY_CODE='def main(a, b):\n    return a + b' # \n: the JSON escape
VARS='{"a":1,"b":2}'
JS_BODY="{\"code\":\"$JS_CODE\",\"variables\":$VARS}"
PY_BODY="{\"code\":\"$PY_CODE\",\"variables\":$VARS}"

# ---- 2. warm-up -----------------------------------------------------------------

log "warm-up (the first request makes the system box and installs the runtime)"
for lang in js python; do
        if [ "$lang" = js ]; then body=$JS_BODY; else body=$PY_BODY; fi
        a=${EPOCHREALTIME/./}
        r=$(curl -sS -m 300 -X POST "$URL/sandbox/$lang" -H "$AUTH" -H 'Content-Type: application/json' -d "$body")
        b=${EPOCHREALTIME/./}
        printf '  first %-6s request: %6.0f ms  %s\n' "$lang" "$(awk -v d=$((b - a)) 'BEGIN {print d / 1000}')" "$r"
        put "first_$lang" "$(awk -v d=$((b - a)) 'BEGIN {printf "%.0f", d / 1000}')"
        case $r in
        *'"success":true'*'"codeReturn":3'* | *'"codeReturn":3'*'"success":true'*) ;;
        *)
                echo "bench/runner.sh: the $lang runner does not answer as expected; server log:" >&2
                tail -20 "$WORK/server.log" >&2
                exit 1
                ;;
        esac
done
hl -q -c "$CONC" -n "$((WARMUP * CONC))" -x '"success":true' -d "$JS_BODY" "$URL/sandbox/js" >/dev/null
hl -q -c "$CONC" -n "$((WARMUP * CONC))" -x '"success":true' -d "$PY_BODY" "$URL/sandbox/python" >/dev/null
sleep 3 # every warm process ready again
echo "  /health: $(curl -s -m 5 "$URL/health" | sed -n 's/.*"concurrency":\({.*}\)}.*/\1/p')"
server_alive || exit 1

# ---- 3. latency -------------------------------------------------------------------

log "latency: $N_SEQ back-to-back requests on one connection"
series js_seq "JS, back-to-back (-c 1)" js -c 1 -n "$N_SEQ"
sleep 3
series py_seq "Python, back-to-back (-c 1)" python -c 1 -n "$N_SEQ"
sleep 3

log "latency: $N_IDLE requests $IDLE_MS ms apart (a warm process is always ready)"
series js_idle "JS, ${IDLE_MS} ms apart (-c 1 -i $IDLE_MS)" js -c 1 -n "$N_IDLE" -i "$IDLE_MS"
series py_idle "Python, ${IDLE_MS} ms apart (-c 1 -i $IDLE_MS)" python -c 1 -n "$N_IDLE" -i "$IDLE_MS"
sleep 3

# ---- 4. throughput ------------------------------------------------------------------

log "throughput: $CONC connections for $SECS s"
series js_conc "JS, $CONC connections" js -c "$CONC" -t "$SECS"
echo "  requests/s $(get js_conc_rps), errors $(get js_conc_errors)"
sleep 3
series py_conc "Python, $CONC connections" python -c "$CONC" -t "$SECS"
echo "  requests/s $(get py_conc_rps), errors $(get py_conc_errors)"
server_alive || exit 1

# ---- 5. baseline: a plain process per run -------------------------------------------

log "baseline: a plain interpreter process per run"
PY_SRC="import json
v = json.loads('$VARS')
def main(a, b):
    return a + b
print(json.dumps({'success': True, 'data': {'codeReturn': main(**v), 'log': ''}}, separators=(',', ':')))"
JS_SRC="const v = JSON.parse('$VARS');
$JS_CODE
console.log(JSON.stringify({success: true, data: {codeReturn: main(v), log: ''}}));"

# child_ticks: CPU ticks of this shell's waited-for children so far
child_ticks() { awk '{sub(/^.*\) /, ""); print $14 + $15}' "/proc/$$/stat"; }

# base KEY LABEL CMD...: N_BASE sequential runs timed from this shell, then
# CONC loops of BASE_PER runs each in parallel; every output checked.
base() {
        local key=$1 label=$2 a b t0 t1 i ok n bad c0 c1
        shift 2
        out=$("$@" 2>&1)
        case $out in
        *'"success":true'*'"codeReturn":3'*) ;;
        *) note "  !! $label: unexpected output: $out"; return 1 ;;
        esac
        : >"$WORK/s.$key"
        c0=$(child_ticks)
        for ((i = 0; i < N_BASE; i++)); do
                a=${EPOCHREALTIME/./}
                "$@" >/dev/null 2>&1
                b=${EPOCHREALTIME/./}
                echo $((b - a)) >>"$WORK/s.$key"
        done
        c1=$(child_ticks)
        record "$key" "$label, sequential" "$WORK/s.$key"
        put "${key}_cpu" "$(awk -v t=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" -v n="$N_BASE" 'BEGIN {printf "%.2f", t * 1000 / hz / n}')"
        echo "  CPU per run (ms, user + system of the process): $(get "${key}_cpu")"
        t0=${EPOCHREALTIME/./}
        for ((i = 0; i < CONC; i++)); do
                (for ((j = 0; j < BASE_PER; j++)); do "$@" 2>&1; done) >"$WORK/par.$key.$i" &
                BASE_PIDS+=($!)
        done
        wait "${BASE_PIDS[@]}"
        BASE_PIDS=()
        t1=${EPOCHREALTIME/./}
        n=$((CONC * BASE_PER))
        ok=$(cat "$WORK"/par."$key".* | grep -c '"success":true')
        bad=$((n - ok))
        put "${key}_rps" "$(awk -v n="$n" -v d=$((t1 - t0)) 'BEGIN {printf "%.1f", n / (d / 1e6)}')"
        put "${key}_errors" "$bad"
        printf '  %-44s %d runs in %.2f s: %s runs/s, %d bad outputs\n' "$label, $CONC in parallel" \
                "$n" "$(awk -v d=$((t1 - t0)) 'BEGIN {print d / 1e6}')" "$(get "${key}_rps")" "$bad"
}
base b_py "python3 -c" "$PYTHON" -c "$PY_SRC"
[ -z "$BUN" ] || base b_bun "bun -e" "$BUN" -e "$JS_SRC"
[ -z "$NODE" ] || base b_node "node -e" "$NODE" -e "$JS_SRC"
server_alive || exit 1
put load_end "$(cut -d' ' -f1 /proc/loadavg)"

# ---- 6. the table ---------------------------------------------------------------------

verdict() { # value op limit -> MET | MISSED | n/a
        awk -v v="$1" -v op="$2" -v m="$3" 'BEGIN {
                if (v == "" || v == "-") { print "n/a"; exit }
                ok = (op == "<=") ? (v + 0 <= m + 0) : (op == ">=") ? (v + 0 >= m + 0) : (v + 0 == m + 0)
                print ok ? "MET" : "MISSED" }'
}
ratio() { # a / b as "N.Nx"
        [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2fx", a / b}'
}
JSB=b_bun
[ -n "$(get b_bun_p50)" ] || JSB=b_node

log "results (ms unless noted; agentbox over HTTP on loopback with http_load; baseline from this shell)"
printf '| %-46s | %9s | %9s | %9s | %7s |\n' "series" p50 p90 p99 req/s
printf '|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..48})" -----------  -----------  ----------- ---------
for k in js_seq py_seq js_idle py_idle js_conc py_conc b_bun b_node b_py; do
        [ -n "$(get "${k}_n")" ] || continue
        case $k in
        js_seq) l="JS, $N_SEQ back-to-back, 1 conn" ;;
        py_seq) l="Python, $N_SEQ back-to-back, 1 conn" ;;
        js_idle) l="JS, 1 conn, $IDLE_MS ms apart (warm ready)" ;;
        py_idle) l="Python, 1 conn, $IDLE_MS ms apart (warm ready)" ;;
        js_conc) l="JS, $CONC conns, ${SECS} s ($(get js_conc_errors) errors)" ;;
        py_conc) l="Python, $CONC conns, ${SECS} s ($(get py_conc_errors) errors)" ;;
        b_bun) l="baseline bun -e per run ($CONC parallel)" ;;
        b_node) l="baseline node -e per run ($CONC parallel)" ;;
        b_py) l="baseline python3 -c per run ($CONC parallel)" ;;
        esac
        rps=$(get "${k}_rps")
        case $k in *_seq | *_idle) rps=- ;; esac
        printf '| %-46s | %9s | %9s | %9s | %7s |\n' "$l" "$(get "${k}_p50")" "$(get "${k}_p90")" "$(get "${k}_p99")" "$rps"
done
echo
echo "where the time goes: CPU per request (ms) of the runner processes (system box cgroup: the"
echo "app's warm worker, a fork (Python) or a fresh realm (JS) per run, + the run) / of the server process:"
for k in js_seq py_seq js_idle py_idle js_conc py_conc; do
        printf '  %-8s %7s / %s\n' "$k" "$(get "${k}_cpu_box")" "$(get "${k}_cpu_srv")"
done
echo "  baseline CPU per run (ms): python3 -c $(get b_py_cpu), bun -e $(get b_bun_cpu), node -e $(get b_node_cpu)"
echo "  -> at most $(nproc) CPUs x 1000 / CPU per request: JS $(awk -v c="$(get js_conc_cpu_box)" -v n="$(nproc)" 'BEGIN {if (c > 0) printf "%.0f", n * 1000 / c}'),"\
        "Python $(awk -v c="$(get py_conc_cpu_box)" -v n="$(nproc)" 'BEGIN {if (c > 0) printf "%.0f", n * 1000 / c}') requests/s on an idle host"
echo "  min latency (a warm process ready, nothing queued): JS $(get js_seq_min) ms, Python $(get py_seq_min) ms"
echo "load average: $(get load_start) at the start, $(get load_end) at the end ($(nproc) CPUs)"
echo
echo "targets (issue 5; seed 003 in brackets):"
printf '  %-40s %10s  %-10s %-8s  %s\n' "" measured target result "vs baseline"
tline() { # label value op limit seed ratio
        printf '  %-40s %10s  %-10s %-8s  %s\n' "$1" "${2:--}" "$3 $4" "$(verdict "$2" "$3" "$4")" "$6  [seed 003: $5]"
}
tline "JS p50 (ms), back-to-back" "$(get js_seq_p50)" "<=" 5 "48 ms" \
        "baseline ${JSB#b_} $(get ${JSB}_p50) ms; baseline/agentbox $(ratio "$(get ${JSB}_p50)" "$(get js_seq_p50)")"
tline "Python p50 (ms), back-to-back" "$(get py_seq_p50)" "<=" 5 "78 ms" \
        "baseline python3 $(get b_py_p50) ms; baseline/agentbox $(ratio "$(get b_py_p50)" "$(get py_seq_p50)")"
tline "JS requests/s at $CONC connections" "$(get js_conc_rps)" ">=" 150 "27/s" \
        "baseline ${JSB#b_} $(get ${JSB}_rps)/s; agentbox/baseline $(ratio "$(get js_conc_rps)" "$(get ${JSB}_rps)")"
tline "Python requests/s at $CONC connections" "$(get py_conc_rps)" ">=" 200 "18/s" \
        "baseline python3 $(get b_py_rps)/s; agentbox/baseline $(ratio "$(get py_conc_rps)" "$(get b_py_rps)")"
tline "errors at $CONC connections (JS + Python)" \
        "$(( $(get js_conc_errors | grep . || echo 0) + $(get py_conc_errors | grep . || echo 0) ))" "==" 0 "-" ""
echo "  (JS baseline: ${JSB#b_}; also for reference: p50 at a pause of $IDLE_MS ms, JS $(get js_idle_p50) / Python $(get py_idle_p50) ms)"
echo
echo "targets (issue 29: against a bare interpreter start per run, measured above in this run):"
printf '  %-52s %10s  %-10s %s\n' "" measured target result
rline() { # label value op limit
        printf '  %-52s %10s  %-10s %s\n' "$1" "${2:--}" "$3 $4" "$(verdict "$2" "$3" "$4")"
}
q() { awk -v a="$1" -v b="$2" 'BEGIN {if (a != "" && b > 0) printf "%.2f", a / b}'; }
rline "JS CPU per request / ${JSB#b_} -e CPU per run" "$(q "$(get js_conc_cpu_box)" "$(get ${JSB}_cpu)")" "<=" 0.25
rline "Python CPU per request / python3 -c CPU per run" "$(q "$(get py_conc_cpu_box)" "$(get b_py_cpu)")" "<=" 0.25
addf() { awk -v a="$1" -v b="$2" 'BEGIN {if (a != "" && b != "") printf "%.2f", a + b}'; }
rline "  the same with the server's CPU added: JS" \
        "$(q "$(addf "$(get js_conc_cpu_box)" "$(get js_conc_cpu_srv)")" "$(get ${JSB}_cpu)")" "<=" 0.25
rline "  the same with the server's CPU added: Python" \
        "$(q "$(addf "$(get py_conc_cpu_box)" "$(get py_conc_cpu_srv)")" "$(get b_py_cpu)")" "<=" 0.25
rline "JS p50 (ms), back-to-back" "$(get js_seq_p50)" "<=" 5
rline "Python p50 (ms), back-to-back" "$(get py_seq_p50)" "<=" 5
rline "JS requests/s at $CONC conns / ${JSB#b_} -e runs/s" "$(q "$(get js_conc_rps)" "$(get ${JSB}_rps)")" ">=" 4
rline "Python requests/s at $CONC conns / python3 -c runs/s" "$(q "$(get py_conc_rps)" "$(get b_py_rps)")" ">=" 4

# ---- 7. leftovers: every box deleted, the server stopped (it stops its system
# box and unmounts the skills disk) -------------------------------------------------
stop_server "$SERVER_PID"
SERVER_PID=
rm_boxes
echo
echo "leftovers once the server has stopped and every box is deleted:"
leak_report "$DATA"
if [ -s "$NOTES" ]; then
        echo
        echo "notes:"
        cat "$NOTES"
fi
exit 0
