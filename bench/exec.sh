#!/usr/bin/env bash
# bench/exec.sh - the cost of one exec in a running box, against the host's
# own floors measured in the same run (issue 11's exec targets).
#
#   sudo bench/exec.sh
#   sudo BUILD=build N=500 ROUNDS=5 bench/exec.sh
#
# What it does (everything under one /var/tmp/agentbox-exec.* dir, removed at
# the end, also on Ctrl-C):
#   0. builds agentbox in $BUILD if needed; compiles bench/http_load.c and
#      bench/spawn.c into the temp dir
#   1. starts `agentbox serve` (pool 0, idle stop and resource sampling off)
#      on a free loopback port and creates one box
#   2. ROUNDS rounds, each of:
#      - host floor: spawn -n N /bin/true (posix_spawn + waitpid from one
#        process: what "start a program" costs on this host)
#      - HTTP exec of {"argv":["true"]}: N requests on one keep-alive
#        connection (http_load -c 1), p50/p90
#      - HTTP exec of {"command":"true"} (the shell-string path) the same way
#      - GET /health the same way (the HTTP floor)
#      and the median over the rounds of each p50 and p90
#   3. the CLI: `agentbox exec ID -- true` (one word: a shell string),
#      `agentbox exec ID -- true x` (two words: argv, no shell), against the
#      floor `nsenter -a -t INIT /bin/true` (join the box's namespaces and
#      start a program), N_CLI runs each timed by spawn, ROUNDS rounds
#   4. the targets: argv exec p50 <= 1.0 ms and <= 2x the host spawn;
#      CLI exec <= 2x the nsenter floor
#
# Knobs: BUILD (default build-bench), N (300), N_CLI (100), ROUNDS (3),
# WARM (30: untimed requests before each series), KEEP=1 (keep the temp dir).
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-bench}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
N=${N:-300}
N_CLI=${N_CLI:-100}
ROUNDS=${ROUNDS:-3}
WARM=${WARM:-30}

if [ "$(id -u)" -ne 0 ]; then
        echo "bench/exec.sh: needs root (boxes are namespaces, cgroups and loop disks): sudo $0" >&2
        exit 2
fi

WORK=$(mktemp -d /var/tmp/agentbox-exec.XXXXXX)
chmod 700 "$WORK"
AB=$BUILD/agentbox
HL=$WORK/http_load
SP=$WORK/spawn
D=$WORK/data
RES=$WORK/results
: >"$RES"
SERVER_PID=
BOX=

put() { echo "$1 $2" >>"$RES"; }
get() { awk -v k="$1" '$1 == k {v = $2} END {print v}' "$RES"; }
rfield() { sed -n "s/^RESULT.* $1=\([^ ]*\).*/\1/p" | tail -1; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : ""}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "-"}'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN {exit !(a != "" && a <= b)}'; }

cleanup() {
        local rc=$?
        trap - EXIT INT TERM
        set +e
        if [ -n "$SERVER_PID" ]; then
                kill "$SERVER_PID" 2>/dev/null
                wait "$SERVER_PID" 2>/dev/null
        fi
        if [ -n "$BOX" ] && [ -x "$AB" ]; then
                "$AB" --data "$D" rm "$BOX" >/dev/null 2>&1
        fi
        if [ "${KEEP:-0}" = 1 ]; then
                echo "bench/exec.sh: kept $WORK"
        else
                rm -rf "$WORK"
        fi
        exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== machine"
echo "  date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "  kernel:  $(uname -r)"
echo "  cpus:    $(nproc) ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo))"
echo "  load:    $(cut -d' ' -f1-3 /proc/loadavg)"

echo "== build"
if [ ! -f "$BUILD/build.ninja" ]; then
        (cd "$ROOT" && meson setup "$BUILD" >/dev/null) || { echo "meson setup failed" >&2; exit 1; }
fi
ninja -C "$BUILD" agentbox agentbox-init >"$WORK/ninja.log" 2>&1 ||
        { tail -20 "$WORK/ninja.log" >&2; exit 1; }
SRCSTATE=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null)
(cd "$ROOT" && git diff --quiet HEAD -- src 2>/dev/null) || SRCSTATE="$SRCSTATE + uncommitted src changes"
echo "  agentbox: $AB ($SRCSTATE)"
cc -std=gnu11 -O2 -Wall -Wextra -pthread "$ROOT/bench/http_load.c" -lm -o "$HL" || exit 1
cc -std=gnu11 -O2 -Wall -Wextra "$ROOT/bench/spawn.c" -o "$SP" || exit 1

echo "== server"
cat >"$WORK/serve.yaml" <<EOF
# written by bench/exec.sh
limits:
  disk: 256M
  memory: 256M
  timeout: 60s
idle_stop: 0
pool_size: 0
sample_interval: 0
EOF
URL=
for _ in 1 2 3 4 5; do
        port=$((20000 + RANDOM % 40000))
        ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && continue
        env -u AGENTBOX_TOKEN AGENTBOX_INIT="$BUILD/agentbox-init" "$AB" serve --listen "127.0.0.1:$port" \
                --data "$D" --config "$WORK/serve.yaml" >"$WORK/serve.log" 2>&1 &
        SERVER_PID=$!
        for _ in $(seq 1 100); do
                curl -s -m 1 -o /dev/null "http://127.0.0.1:$port/health" && { URL=http://127.0.0.1:$port; break 2; }
                kill -0 "$SERVER_PID" 2>/dev/null || break
                sleep 0.1
        done
        kill "$SERVER_PID" 2>/dev/null
        wait "$SERVER_PID" 2>/dev/null
        SERVER_PID=
done
[ -n "$URL" ] || { echo "bench/exec.sh: the server did not start:"; tail -5 "$WORK/serve.log"; exit 1; }
BOX=$(curl -sS -m 60 -X POST "$URL/v1/sandboxes" -H 'Content-Type: application/json' \
        -d '{"id":"bench-exec"}' | sed -n 's/.*"id":"\([^"]*\)".*/\1/p' | head -1)
[ -n "$BOX" ] || { echo "bench/exec.sh: cannot create a box"; exit 1; }
INIT_PID=$("$AB" --data "$D" inspect "$BOX" | awk -F'[:,]' '/"init_pid"/ {gsub(/ /, "", $2); print $2}')
echo "  agentbox serve pid $SERVER_PID on $URL, box $BOX (init pid ${INIT_PID:-?})"
EXEC_URL=$URL/v1/sandboxes/$BOX/exec

# series KEY ARGS...: one http_load series, its p50/p90 appended to KEY_p50s/KEY_p90s.
series() {
        local key=$1 out
        shift
        out=$("$HL" -q -c 1 -n "$N" -W "$WARM" "$@" 2>&1) || { echo "  $key failed: $out"; return 1; }
        eval "${key}_p50s+=\" \$(printf '%s\n' \"\$out\" | rfield p50)\""
        eval "${key}_p90s+=\" \$(printf '%s\n' \"\$out\" | rfield p90)\""
}
# spawns KEY ARGS...: one spawn series (n N_CLI or N), likewise.
spawns() {
        local key=$1 n=$2 out
        shift 2
        out=$("$SP" -n "$n" -W 5 "$@" 2>&1) || { echo "  $key failed: $out"; return 1; }
        printf '%s\n' "$out" | grep -q 'fails=0 ' || echo "  $key: some runs failed: $out"
        eval "${key}_p50s+=\" \$(printf '%s\n' \"\$out\" | rfield p50)\""
        eval "${key}_p90s+=\" \$(printf '%s\n' \"\$out\" | rfield p90)\""
}
summary() { # KEY LABEL
        local p50 p90
        p50=$(eval "echo \$${1}_p50s" | median)
        p90=$(eval "echo \$${1}_p90s" | median)
        put "${1}_p50" "$p50"
        put "${1}_p90" "$p90"
        printf '  %-46s p50 %7s  p90 %7s ms   (p50 per round:%s)\n' "$2" "$p50" "$p90" "$(eval "echo \$${1}_p50s")"
}

echo "== exec over HTTP (keep-alive, one connection, $N requests a series, $ROUNDS rounds)"
host_p50s= host_p90s= argv_p50s= argv_p90s= cmd_p50s= cmd_p90s= health_p50s= health_p90s=
for r in $(seq 1 "$ROUNDS"); do
        spawns host "$N" /bin/true || exit 1
        series argv -d '{"argv":["true"]}' -x '"exit_code":0' "$EXEC_URL" || exit 1
        series cmd -d '{"command":"true"}' -x '"exit_code":0' "$EXEC_URL" || exit 1
        series health "$URL/health" || exit 1
done
summary host "host: posix_spawn /bin/true + wait"
summary argv 'HTTP exec {"argv":["true"]}'
summary cmd 'HTTP exec {"command":"true"}'
summary health "HTTP GET /health (the HTTP floor)"

echo "== CLI exec ($N_CLI runs a series, $ROUNDS rounds)"
nse_p50s= nse_p90s= cli1_p50s= cli1_p90s= cli2_p50s= cli2_p90s=
for r in $(seq 1 "$ROUNDS"); do
        if [ -n "$INIT_PID" ] && command -v nsenter >/dev/null; then
                spawns nse "$N_CLI" nsenter -a -t "$INIT_PID" /bin/true || exit 1
        fi
        spawns cli1 "$N_CLI" "$AB" --data "$D" exec "$BOX" -- true || exit 1
        spawns cli2 "$N_CLI" "$AB" --data "$D" exec "$BOX" -- true x || exit 1
done
[ -n "$nse_p50s" ] && summary nse "floor: nsenter -a -t INIT /bin/true"
summary cli1 "agentbox exec ID -- true  (shell string)"
summary cli2 "agentbox exec ID -- true x  (argv, no shell)"

echo "== targets"
A=$(get argv_p50) H=$(get host_p50) C=$(get cli1_p50) F=$(get nse_p50)
check() { # LABEL VALUE LIMIT
        if le "$2" "$3"; then s=met; else s=MISSED; fi
        printf '  %-58s %8s  <= %-8s %s\n' "$1" "$2" "$3" "$s"
}
check "argv exec over HTTP, p50 ms" "$A" 1.0
R=$(ratio "$A" "$H")
check "argv exec over HTTP / host spawn of /bin/true (p50)" "$R" 2
echo "  shell-string exec over HTTP / argv exec (p50): $(ratio "$(get cmd_p50)" "$A")"
if [ -n "$F" ]; then
        check "CLI exec ID -- true / nsenter floor (p50)" "$(ratio "$C" "$F")" 2
        check "CLI exec ID -- true x (argv) / nsenter floor (p50)" "$(ratio "$(get cli2_p50)" "$F")" 2
fi
