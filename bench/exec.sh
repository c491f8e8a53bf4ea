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
#   2. ROUNDS rounds of bench/exec_pair.c: N steps, each one host floor
#      (posix_spawn /bin/true + waitpid: what "start a program" costs on
#      this host), one host spawn of `bash --noprofile -lc true` with the
#      LANG and PATH of the box's login environment (bash's own start: the
#      floor under the shell-string target, which runs the command in that
#      bash), then one HTTP exec of {"argv":["true"]}, one of
#      {"command":"true"} and one of {"argv":["bash","--noprofile","-lc",
#      "true"]} (the same bash with no work of ours around it: the command's
#      p50 minus this one is what the shell-string path adds) on one
#      keep-alive connection. Taking turns puts the floors and the execs
#      under the same load (this host is shared); then GET /health N times
#      (the HTTP floor). Medians over the rounds.
#   3. the CLI, ROUNDS rounds of bench/spawn.c taking turns between the
#      floor `nsenter -a -t INIT /bin/true` (join the box's namespaces and
#      start a program), `agentbox exec ID -- true` (one word: a shell
#      string) and `agentbox exec ID -- true x` (two words: argv, no shell),
#      N_CLI steps
#   4. the targets: argv exec p50 <= 1.0 ms and <= 1.5x the host spawn,
#      shell string <= 2x; CLI exec <= 1.5x the nsenter floor (issue 29)
#   5. the box deleted and the server stopped: leftovers of the data dir
#      (bench/lib.sh leak_report; "LEAK" lines for anything found)
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
EP=$WORK/exec_pair
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
        # what a server stopped before its box was deleted keeps mounted
        [ -x "$AB" ] && [ -d "$D" ] && "$AB" --data "$D" cleanup >/dev/null 2>&1
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
ninja -C "$BUILD" agentbox agentbox-full agentbox-init >"$WORK/ninja.log" 2>&1 ||
        { tail -20 "$WORK/ninja.log" >&2; exit 1; }
SRCSTATE=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null)
(cd "$ROOT" && git diff --quiet HEAD -- src 2>/dev/null) || SRCSTATE="$SRCSTATE + uncommitted src changes"
echo "  agentbox: $AB ($SRCSTATE)"
cc -std=gnu11 -O2 -Wall -Wextra -pthread "$ROOT/bench/http_load.c" -lm -o "$HL" || exit 1
cc -std=gnu11 -O2 -Wall -Wextra "$ROOT/bench/spawn.c" -o "$SP" || exit 1
cc -std=gnu11 -O2 -Wall -Wextra "$ROOT/bench/exec_pair.c" -o "$EP" || exit 1

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
# LANG and PATH of the box's login environment (what a shell-string command
# sees), for the host's bash floor.
login_var() {
        curl -sS -m 30 -X POST "$EXEC_URL" -H 'Content-Type: application/json' \
                -d "{\"command\":\"printf %s \\\"\$$1\\\"\"}" |
                python3 -c 'import json, sys; print(json.load(sys.stdin)["stdout"])'
}
BOX_LANG=$(login_var LANG)
BOX_PATH=$(login_var PATH)
[ -n "$BOX_PATH" ] || { echo "bench/exec.sh: cannot read the box's login PATH"; exit 1; }
echo "  the box's login environment: LANG=$BOX_LANG PATH=$BOX_PATH"

PORT=${URL##*:}
EXEC_PATH=/v1/sandboxes/$BOX/exec

# val LINE-PREFIX FIELD < output: FIELD of the RESULT line starting with the prefix.
val() { grep "^RESULT $1" | sed -n "s/.* $2=\([^ ]*\).*/\1/p" | head -1; }
add() { eval "$1+=\" $2\""; } # add LIST VALUE
med() { eval "echo \$$1" | median; }
row() { printf '  %-56s p50 %7s  p90 %7s ms   (p50 per round:%s)\n' "$1" "$(med "$2_p50")" "$(med "$2_p90")" "$(eval "echo \$$2_p50")"; }

echo "== exec over HTTP: one keep-alive connection; each of $N steps spawns /bin/true and"
echo "   bash --noprofile -lc true on the host, then execs {\"argv\":[\"true\"]}, {\"command\":\"true\"}"
echo "   and {\"argv\":[\"bash\",\"--noprofile\",\"-lc\",\"true\"]} ($ROUNDS rounds; bench/exec_pair.c)"
BASH_ENV_ARGS=(-E "PATH=$BOX_PATH")
[ -n "$BOX_LANG" ] && BASH_ENV_ARGS+=(-E "LANG=$BOX_LANG")
for r in $(seq 1 "$ROUNDS"); do
        out=$("$EP" -n "$N" -W "$WARM" -S "bash --noprofile -lc true" "${BASH_ENV_ARGS[@]}" 127.0.0.1 "$PORT" \
                "$EXEC_PATH" '{"argv":["true"]}' '{"command":"true"}' '{"argv":["bash","--noprofile","-lc","true"]}') ||
                { echo "  exec_pair failed: $out"; exit 1; }
        add host_p50 "$(val what=spawn p50 <<<"$out")"; add host_p90 "$(val what=spawn p90 <<<"$out")"
        add argv_p50 "$(val what=body1 p50 <<<"$out")"; add argv_p90 "$(val what=body1 p90 <<<"$out")"
        add argv_r "$(val what=body1 ratio_p50 <<<"$out")"
        add cmd_p50 "$(val what=body2 p50 <<<"$out")"; add cmd_p90 "$(val what=body2 p90 <<<"$out")"
        add cmd_r "$(val what=body2 ratio_p50 <<<"$out")"
        add bash_p50 "$(val what=body3 p50 <<<"$out")"; add bash_p90 "$(val what=body3 p90 <<<"$out")"
        add hbash_p50 "$(val what=spawn2 p50 <<<"$out")"; add hbash_p90 "$(val what=spawn2 p90 <<<"$out")"
        add hbash_r "$(val what=spawn2 ratio_p50 <<<"$out")"
        out=$("$HL" -q -c 1 -n "$N" -W "$WARM" "$URL/health" 2>&1)
        add health_p50 "$(rfield p50 <<<"$out")"; add health_p90 "$(rfield p90 <<<"$out")"
done
row "host: posix_spawn /bin/true + wait" host
row "host: bash --noprofile -lc true (box's LANG, PATH)" hbash
row 'HTTP exec {"argv":["true"]}' argv
row 'HTTP exec {"command":"true"}' cmd
row 'HTTP exec {"argv":["bash","--noprofile","-lc","true"]}' bash
row "HTTP GET /health (the HTTP floor)" health
echo "  argv exec / host spawn, p50 of each round: $argv_r"
echo "  shell-string exec / host spawn, p50 of each round: $cmd_r"
echo "  host bash --noprofile -lc true / host spawn, p50 of each round: $hbash_r"
echo "  what the shell-string path adds to the same bash started by argv (p50 difference): $(
        awk -v a="$(med cmd_p50)" -v b="$(med bash_p50)" 'BEGIN {printf "%.3f ms", a - b}')"

echo "== CLI exec: $N_CLI steps, each runs the floor and both CLI forms once ($ROUNDS rounds; bench/spawn.c)"
for r in $(seq 1 "$ROUNDS"); do
        out=$("$SP" -n "$N_CLI" -W 5 nsenter -a -t "$INIT_PID" /bin/true \
                ::: "$AB" --data "$D" exec "$BOX" -- true ::: "$AB" --data "$D" exec "$BOX" -- true x) ||
                { echo "  spawn failed: $out"; exit 1; }
        grep -q 'fails=[1-9]' <<<"$out" && echo "  some runs failed: $out"
        add nse_p50 "$(val i=1 p50 <<<"$out")"; add nse_p90 "$(val i=1 p90 <<<"$out")"
        add cli1_p50 "$(val i=2 p50 <<<"$out")"; add cli1_p90 "$(val i=2 p90 <<<"$out")"
        add cli1_r "$(val i=2 ratio_p50 <<<"$out")"
        add cli2_p50 "$(val i=3 p50 <<<"$out")"; add cli2_p90 "$(val i=3 p90 <<<"$out")"
        add cli2_r "$(val i=3 ratio_p50 <<<"$out")"
done
row "floor: nsenter -a -t INIT /bin/true" nse
row "agentbox exec ID -- true  (shell string)" cli1
row "agentbox exec ID -- true x  (argv, no shell)" cli2
echo "  CLI (shell string) / nsenter, p50 of each round: $cli1_r"
echo "  CLI (argv) / nsenter, p50 of each round: $cli2_r"

echo "== targets (medians over the rounds)"
check() { # LABEL VALUE LIMIT
        if le "$2" "$3"; then s=met; else s=MISSED; fi
        printf '  %-58s %8s  <= %-6s %s\n' "$1" "$2" "$3" "$s"
}
check "argv exec over HTTP, p50 ms" "$(med argv_p50)" 1.0
check "argv exec over HTTP / host spawn of /bin/true (p50)" "$(med argv_r)" 1.5
check "shell-string exec over HTTP / host spawn (p50)" "$(med cmd_r)" 2
# Not a target: bash's own start, which a shell-string exec includes, against
# the same floor. At or above 2 the target above cannot be met on this host.
printf '  %-58s %8s  (the shell-string target'"'"'s floor)\n' \
        "bash's own start on this host / host spawn of /bin/true" "$(med hbash_r)"
# Issue 29's CLI target is the argv form (`exec ID -- true x`); the shell
# form also pays bash's own start (the floor above), which nsenter /bin/true
# does not: it keeps issue 11's target of 2x.
check "CLI exec ID -- true x (argv) / nsenter floor (p50)" "$(med cli2_r)" 1.5
check "CLI exec ID -- true (shell string) / nsenter floor (p50, issue 11)" "$(med cli1_r)" 2
libs=$(readelf -d "$AB" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | tr '\n' ' ')
if [ -n "$libs" ]; then
        echo "  agentbox (the CLI) loads $(echo "$libs" | wc -w) shared libraries: $libs"
else
        echo "  agentbox (the CLI) loads no shared library ($(file -b "$AB" | grep -o 'static-pie linked\|statically linked' || echo static))"
fi

# ---- leftovers: the box deleted, the server stopped (it stops its system box
# and unmounts the skills disk when no box runs) ----------------------------------
"$AB" --data "$D" rm "$BOX" >/dev/null 2>&1 && BOX=
kill "$SERVER_PID" 2>/dev/null
wait "$SERVER_PID" 2>/dev/null
SERVER_PID=
echo "== leftovers once the box is deleted and the server stopped"
. "$ROOT/bench/lib.sh"
leak_report "$D"
