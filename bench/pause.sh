#!/usr/bin/env bash
# bench/pause.sh - pause and resume of a box over HTTP against the floor of
# freezing its cgroup by hand, in one run (issue 11: resume p50 <= 2 ms).
#
#   sudo bench/pause.sh
#   sudo N=500 BUILD=/tmp/build-bench bench/pause.sh
#
# What it does (everything under one /var/tmp/agentbox-pause.* dir, removed at
# the end, also on Ctrl-C: the server, the box, its cgroups):
#   0. builds agentbox in $BUILD if needed; compiles bench/pause_load.c with cc
#   1. starts `agentbox serve` on a free loopback port (idle pause, idle stop
#      and resource samples off, so nothing but the benchmark touches the box)
#      and creates a box running a few processes (a python3 HTTP server, a
#      shell loop, a sleep): what a paused box usually holds
#   2. pause_load: N x (POST .../pause, POST .../resume) on one keep-alive
#      connection, each request timed; N x (pause, then exec of `true`, which
#      resumes the box) with the exec timed, and N x exec of `true` on the
#      running box; then N x the floor on the same box's
#      cgroup: write FROZEN (v1 freezer.state) / 1 (v2 cgroup.freeze) and read
#      until the kernel says frozen; write THAWED / 0
#   3. on v1, when no other cgroup of the host is frozen, the floor again with
#      the freeze anchor thawed (src/native/cgroup.h: what a freeze and a thaw
#      cost when the kernel has to switch its freezer on and off)
#   4. prints n, p50, p90, p99, max of each and the ratios of the HTTP
#      medians to the floor's, and the resume target (p50 <= 2 ms)
#
# Knobs: BUILD (default build), N (300), KEEP=1 (keep the temp dir).
# Percentiles are nearest-rank. Exit status 0 unless the build fails, the
# server does not start or a request fails.
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
N=${N:-300}

if [ "$(id -u)" -ne 0 ]; then
        echo "bench/pause.sh: needs root (boxes are namespaces, cgroups and loop disks): sudo $0" >&2
        exit 2
fi

WORK=$(mktemp -d /var/tmp/agentbox-pause.XXXXXX)
chmod 700 "$WORK"
AB=$BUILD/agentbox
DATA=$WORK/data
SERVER_PID=
BOX=bench-pause

# cg_parent, stop_server, pstats
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

cleanup() {
        local rc=$?
        trap - EXIT INT TERM
        set +e
        [ -z "$SERVER_PID" ] || stop_server "$SERVER_PID"
        if [ -d "$DATA" ]; then
                "$AB" --data "$DATA" rm "$BOX" >/dev/null 2>&1
                local cg
                cg=$(cg_parent "$DATA")
                for c in /sys/fs/cgroup/*/"$cg" /sys/fs/cgroup/"$cg"; do
                        [ -d "$c" ] && rmdir "$c" 2>/dev/null
                done
                # the server stopped while its box ran: the skills disk is still mounted
                "$AB" --data "$DATA" cleanup >/dev/null 2>&1
                echo "leftovers (the server stopped, the box deleted):"
                leak_report "$DATA"
        fi
        if [ "${KEEP:-0}" = 1 ]; then
                echo "bench/pause.sh: kept $WORK"
        else
                rm -rf "$WORK"
        fi
        exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { printf '\n== %s\n' "$*"; }

log "build"
if [ ! -f "$BUILD/build.ninja" ]; then
        (cd "$ROOT" && meson setup "$BUILD" >/dev/null) || { echo "meson setup failed" >&2; exit 1; }
fi
ninja -C "$BUILD" agentbox agentbox-full agentbox-init >"$WORK/ninja.log" 2>&1 ||
        { tail -20 "$WORK/ninja.log" >&2; exit 1; }
cc -O2 -Wall -o "$WORK/pause_load" "$ROOT/bench/pause_load.c" ||
        { echo "bench/pause.sh: cannot compile bench/pause_load.c" >&2; exit 1; }
echo "  $AB ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')), $(nproc) cpus, kernel $(uname -r)"

log "server and box"
cat >"$WORK/serve.yaml" <<EOF
# written by bench/pause.sh
limits:
  disk: 256M
  memory: 256M
idle_pause: 0
idle_stop: 0
sample_interval: 0
EOF
PORT=
for _ in 1 2 3 4 5; do
        port=$((20000 + RANDOM % 40000))
        ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && continue
        env -u AGENTBOX_TOKEN AGENTBOX_INIT="$BUILD/agentbox-init" \
                "$AB" serve --listen "127.0.0.1:$port" --data "$DATA" --config "$WORK/serve.yaml" \
                >"$WORK/serve.log" 2>&1 &
        SERVER_PID=$!
        for _ in $(seq 1 200); do
                curl -s -m 1 -o /dev/null "http://127.0.0.1:$port/health" && { PORT=$port; break 2; }
                kill -0 "$SERVER_PID" 2>/dev/null || break
                sleep 0.1
        done
        stop_server "$SERVER_PID"
        SERVER_PID=
done
[ -n "$PORT" ] || { echo "bench/pause.sh: agentbox serve does not start:" >&2; tail -5 "$WORK/serve.log" >&2; exit 1; }
URL=http://127.0.0.1:$PORT
echo "  agentbox serve pid $SERVER_PID on $URL"
curl -s -X POST "$URL/v1/sandboxes" -H "Content-Type: application/json" -d "{\"id\":\"$BOX\"}" | grep -q '"status": *"running"' ||
        { echo "bench/pause.sh: cannot create the box" >&2; exit 1; }
curl -s -X POST "$URL/v1/sandboxes/$BOX/exec" -H "Content-Type: application/json" -d '{"command":"(nohup python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &); (nohup sh -c \"while :; do sleep 0.1; done\" >/dev/null 2>&1 &); (nohup sleep 100000 >/dev/null 2>&1 &); sleep 0.5"}' >/dev/null
INIT_PID=$("$AB" --data "$DATA" inspect "$BOX" | sed -n 's/.*"init_pid": *\([0-9]*\).*/\1/p')
PIDS=$("$AB" --data "$DATA" inspect "$BOX" | sed -n 's/.*"pids": *\([0-9]*\).*/\1/p' | tail -1)
FF=
while IFS=: read -r _ ctrl path; do
        case $ctrl in
        freezer) FF=/sys/fs/cgroup/freezer$path/freezer.state ;;
        "") [ -z "$FF" ] && [ -f "/sys/fs/cgroup$path/cgroup.freeze" ] && FF=/sys/fs/cgroup$path/cgroup.freeze ;;
        esac
done <"/proc/$INIT_PID/cgroup"
[ -n "$FF" ] && [ -f "$FF" ] || { echo "bench/pause.sh: no freezer file for the box (init $INIT_PID)" >&2; exit 1; }
echo "  box $BOX: init pid $INIT_PID, $PIDS processes; freezer file $FF"

log "pause and resume, $N times each"
"$WORK/pause_load" 127.0.0.1 "$PORT" "$BOX" "$N" "$FF" "$WORK" || { echo "bench/pause.sh: requests failed" >&2; exit 1; }
ok=$(curl -s "$URL/v1/sandboxes/$BOX/exec" -H "Content-Type: application/json" -d '{"command":"python3 -c \"import urllib.request as u; print(u.urlopen(\\\"http://127.0.0.1:8000/\\\", timeout=5).status)\""}')
printf '%s' "$ok" | grep -q '"stdout": *"200\\n"' && echo "  after $N pauses the server in the box still answers" ||
        echo "  !! the server in the box does not answer after the run: $ok"

# The same floor with the freeze anchor thawed (cgroup.h: ab_cg_freeze_anchor):
# what each freeze and thaw costs on v1 when no other cgroup is frozen.
ANCHOR=
case $FF in */freezer.state) ANCHOR=/sys/fs/cgroup/freezer/agentbox-freeze-anchor ;; esac
if [ -n "$ANCHOR" ] && [ -f "$ANCHOR/freezer.state" ] &&
        [ "$(find /sys/fs/cgroup/freezer -name freezer.state -exec grep -l -v THAWED {} + 2>/dev/null | grep -vc "^$ANCHOR/")" = 0 ]; then
        mkdir -p "$WORK/noanchor"
        echo THAWED >"$ANCHOR/freezer.state"
        "$WORK/pause_load" 127.0.0.1 "$PORT" "$BOX" "$N" "$FF" "$WORK/noanchor" floor ||
                echo "  !! the floor without the anchor had errors"
        echo FROZEN >"$ANCHOR/freezer.state"
else
        ANCHOR=
        echo "  (no floor without the anchor: v2, or another cgroup on the host is frozen)"
fi

log "results (ms)"
printf '  %-44s %6s %8s %8s %8s %8s\n' "" n p50 p90 p99 max
row() { # LABEL FILE: prints the row, leaves the p50 in P50
        local n p90 p99 max
        read -r n P50 p90 p99 max < <(pstats "$2")
        printf '  %-44s %6s %8s %8s %8s %8s\n' "$1" "$n" "$P50" "$p90" "$p99" "$max"
}
row "pause over HTTP (POST .../pause)" "$WORK/pause.us"; P=$P50
row "resume over HTTP (POST .../resume)" "$WORK/resume.us"; R=$P50
row "floor: freeze the cgroup, wait until frozen" "$WORK/floor_pause.us"; FP=$P50
row "floor: thaw the cgroup" "$WORK/floor_resume.us"; FR=$P50
row "exec true on a paused box (resumes it)" "$WORK/exec_paused.us"; XP=$P50
row "exec true on a running box" "$WORK/exec_running.us"; XR=$P50
if [ -n "$ANCHOR" ]; then
        row "floor without the freeze anchor: freeze" "$WORK/noanchor/floor_pause.us"
        row "floor without the freeze anchor: thaw" "$WORK/noanchor/floor_resume.us"
fi
echo
awk -v p="$P" -v r="$R" -v fp="$FP" -v fr="$FR" -v xp="$XP" -v xr="$XR" 'BEGIN {
        printf "  pause p50 %.3f ms = %.1fx the floor (%.3f ms), +%.3f ms\n", p, (fp > 0 ? p / fp : 0), fp, p - fp
        printf "  resume p50 %.3f ms = %.1fx the floor (%.3f ms), +%.3f ms\n", r, (fr > 0 ? r / fr : 0), fr, r - fr
        printf "  exec on a paused box p50 %.3f ms = running %.3f ms +%.3f ms (the transparent resume)\n", xp, xr, xp - xr
        printf "  target resume p50 <= 2 ms: %s\n", (r <= 2 ? "met" : "MISSED")
}'
