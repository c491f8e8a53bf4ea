#!/usr/bin/env bash
# bench/flat.sh - create cost as boxes accumulate, and what an idle server
# costs (issue 31), in one run with the settings a user gets:
#
#   sudo bench/flat.sh                               # RUNNING=1000 STOPPED=10000, ~30 min
#   sudo RUNNING=100 STOPPED=300 bench/flat.sh       # a rehearsal, ~2 min
#
# One `agentbox serve` with a data folder of its own under /var/tmp, the
# defaults but for: 64 MiB disks and memory (so thousands fit), idle pause and
# idle stop off (the running boxes must stay running to be measured), and
# disk_overcommit_ratio 20 (11,000 boxes of 64 MiB promise ~690 GiB; the
# default 10 refuses that on a host with less than ~70 GiB free). Resource
# sampling, the full-disk guard, disk admission and the reaper run as
# shipped (sample_interval 10s, disk_watch_interval 1s, reaper 5s).
#
#   A. create at ~1 box: N_CREATE creates one at a time, SPACING apart; median.
#   B. RUNNING running boxes, PAR connections.
#   C. the idle server: after SETTLE s with no request at all, its CPU time
#      (utime + stime of /proc/PID/stat) over IDLE_S s, as % of one core.
#   D. create at RUNNING running boxes: as A; ratio to A.
#   E. STOPPED stopped boxes (created, then stopped), then create as A at
#      RUNNING running + STOPPED stopped; ratio to A.
#   F. every box deleted, the server stopped, leftovers counted.
# Targets (issue 31): D/A and E/A <= 1.2; C <= 0.5% of a core at 1,000 boxes.
# The machine's load is printed before and after: on a shared host the
# ratios (measured side by side in one run) are what to read.
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
RUNNING=${RUNNING:-1000}
STOPPED=${STOPPED:-10000}
PAR=${PAR:-4}
N_CREATE=${N_CREATE:-11}
SPACING=${SPACING:-0.2}
SETTLE=${SETTLE:-20}
IDLE_S=${IDLE_S:-60}
BATCH=${BATCH:-500}

[ "$(id -u)" -eq 0 ] || { echo "bench/flat.sh: needs root: sudo $0" >&2; exit 2; }

WORK=$(mktemp -d /var/tmp/agentbox-flat.XXXXXX)
chmod 700 "$WORK"
DATA=$WORK/data
AB=$BUILD/agentbox
HL=$WORK/http_load
SERVER_PID=
URL=

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

log() { printf '\n== %s\n' "$*"; }
cleanup() {
        local rc=$?
        trap - EXIT INT TERM
        set +e
        if [ -n "$SERVER_PID" ]; then stop_server "$SERVER_PID"; fi
        rm_all_boxes "$DATA"
        umount "$DATA/skills" 2>/dev/null
        if [ "${KEEP:-0}" = 1 ]; then echo "bench/flat.sh: kept $WORK"; else rm -rf "$WORK"; fi
        exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

hl() { # NAME ARGS...: http_load; prints "requests errors p50 p90 rps"
        local name=$1
        shift
        "$HL" -q -T 120000 -e 3 "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
        sed -n 's/^RESULT //p' "$WORK/$name.out" | tr ' ' '\n' |
                awk -F= '{v[$1] = $2} END {printf "%s %s %s %s %s\n", v["requests"], v["errors"], v["p50"], v["p90"], v["rps"]}'
}

# creates TAG: N_CREATE creates one at a time, SPACING apart (ids TAG0..);
# prints "median min max" in ms. The boxes are deleted after.
creates() {
        local tag=$1 i err p50
        : >"$WORK/$tag"
        for ((i = 0; i < N_CREATE; i++)); do
                read -r _ err p50 _ _ < <(hl "$tag.$i" -c 1 -n 1 -s "$i" -d "{\"id\":\"$tag%n\"}" \
                        -x '"status":"running"' "$URL/v1/sandboxes")
                [ "$err" = 0 ] && echo "$p50" >>"$WORK/$tag"
                sleep "$SPACING"
        done
        hl "del.$tag" -c 1 -n "$N_CREATE" -s 0 -m DELETE "$URL/v1/sandboxes/$tag%n" >/dev/null
        sort -n "$WORK/$tag" | awk '{v[NR] = $1} END {if (NR) printf "%s %s %s\n", v[int((NR + 1) / 2)], v[1], v[NR]; else print "- - -"}'
}

make_boxes() { # PREFIX COUNT [stop]
        local prefix=$1 count=$2 stop=${3:-} i n req err p50 p90 rps
        for ((i = 0; i < count; i += BATCH)); do
                n=$((count - i))
                [ "$n" -gt "$BATCH" ] && n=$BATCH
                read -r req err p50 p90 rps < <(hl "mk.$prefix.$i" -c "$PAR" -n "$n" -s "$i" \
                        -d "{\"id\":\"$prefix%n\"}" -x '"status":"running"' "$URL/v1/sandboxes")
                printf '  %s%-6s .. %s%-6s created %5s, errors %s, p50 %8s ms, p90 %8s ms\n' \
                        "$prefix" "$i" "$prefix" "$((i + n - 1))" "$req" "$err" "$p50" "$p90"
                [ "${err:-0}" = 0 ] || head -3 "$WORK/mk.$prefix.$i.err" | cut -c1-300 | sed 's/^/    /'
                if [ -n "$stop" ]; then
                        read -r req err _ _ _ < <(hl "st.$prefix.$i" -c "$PAR" -n "$n" -s "$i" -d '{}' \
                                -x '"status":"stopped"' "$URL/v1/sandboxes/$prefix%n/stop")
                        [ "${err:-0}" = 0 ] || echo "  !! $err stops failed"
                fi
        done
}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$SERVER_PID/stat"; }

log "machine"
echo "  date: $(date -u +%Y-%m-%dT%H:%M:%SZ); kernel $(uname -r); $(nproc) cpus; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  disk free: $(df -Pk /var/tmp | awk 'NR == 2 {printf "%d MiB", $4 / 1024}'); memory available: $(awk '/MemAvailable/ {printf "%d MiB", $2 / 1024}' /proc/meminfo)"

log "build and server"
ninja -C "$BUILD" agentbox agentbox-full agentbox-init >"$WORK/ninja.log" 2>&1 ||
        { echo "bench/flat.sh: build failed" >&2; tail -20 "$WORK/ninja.log" >&2; exit 1; }
cc -std=gnu11 -O2 -pthread "$ROOT/bench/http_load.c" -lm -o "$HL" || exit 1
cat >"$WORK/server.yaml" <<EOF
# written by bench/flat.sh: the defaults, but for these
limits:
  disk: 64M
  memory: 64M
idle_pause: 0
idle_stop: 0
disk_overcommit_ratio: 20
EOF
port=$((20000 + RANDOM % 40000))
env -u AGENTBOX_TOKEN AGENTBOX_INIT="$BUILD/agentbox-init" "$AB" serve --listen "127.0.0.1:$port" \
        --data "$DATA" --config "$WORK/server.yaml" >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
URL=http://127.0.0.1:$port
for _ in $(seq 1 200); do curl -s -m 1 -o /dev/null "$URL/health" && break; sleep 0.1; done
curl -s -m 2 -o /dev/null "$URL/health" || { echo "bench/flat.sh: server did not start" >&2; tail "$WORK/server.log" >&2; exit 1; }
echo "  agentbox serve pid $SERVER_PID on $URL ($(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null)), config:"
sed 's/^/    /' "$WORK/server.yaml"
hl warm -c 1 -n 1 -s 0 -d '{"id":"warm%n"}' "$URL/v1/sandboxes" >/dev/null # formats the disk template

log "A. create at ~1 box ($N_CREATE one at a time, ${SPACING}s apart)"
read -r A amin amax < <(creates a)
echo "  median $A ms (min $amin, max $amax)"

log "B. $RUNNING running boxes ($PAR connections)"
make_boxes r "$RUNNING"

log "C. the idle server with $RUNNING running boxes"
sleep "$SETTLE"
hz=$(getconf CLK_TCK)
t0=$(cpu_ticks)
sleep "$IDLE_S"
t1=$(cpu_ticks)
IDLE=$(awk -v d=$((t1 - t0)) -v s="$IDLE_S" -v hz="$hz" 'BEGIN {printf "%.2f", 100 * d / hz / s}')
echo "  server CPU over ${IDLE_S}s with no request: $((t1 - t0)) ticks = $IDLE% of a core; RSS $(awk '/VmRSS/ {print $2 / 1024 " MiB"}' "/proc/$SERVER_PID/status")"

log "D. create at $RUNNING running boxes"
read -r D dmin dmax < <(creates d)
echo "  median $D ms (min $dmin, max $dmax)"

E=-
if [ "$STOPPED" -gt 0 ]; then
        log "E. $STOPPED stopped boxes (created, then stopped), then create"
        make_boxes s "$STOPPED" stop
        read -r E emin emax < <(creates e)
        echo "  median $E ms (min $emin, max $emax) at $RUNNING running + $STOPPED stopped"
fi

log "summary (load now $(cut -d' ' -f1-3 /proc/loadavg))"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0 && a != "-") printf "%.2f", a / b; else print "-"}'; }
met() { awk -v r="$1" -v t="$2" 'BEGIN {if (r == "-") print "not measured"; else if (r <= t) print "met"; else print "NOT met"}'; }
rd=$(ratio "$D" "$A")
re=$(ratio "$E" "$A")
printf '  %-44s %10s %8s  %s\n' "measure" "value" "ratio" "target"
printf '  %-44s %8s ms %8s  %s\n' "create at ~1 box (median)" "$A" "1.00" ""
printf '  %-44s %8s ms %8s  <= 1.2x: %s\n' "create at $RUNNING running" "$D" "$rd" "$(met "$rd" 1.2)"
printf '  %-44s %8s ms %8s  <= 1.2x: %s\n' "create at $RUNNING running + $STOPPED stopped" "$E" "$re" "$(met "$re" 1.2)"
printf '  %-44s %9s%% %8s  <= 0.5%%: %s\n' "idle server CPU at $RUNNING running boxes" "$IDLE" "" "$(met "$IDLE" 0.5)"

log "F. delete everything"
for spec in "r $RUNNING" "s $STOPPED" "warm 1"; do
        read -r prefix count <<<"$spec"
        [ "$count" -gt 0 ] && hl "del.$prefix" -c "$PAR" -n "$count" -s 0 -m DELETE "$URL/v1/sandboxes/$prefix%n" >/dev/null
done
for _ in $(seq 1 7200); do
        left=$(ls "$DATA/boxes" | wc -l)
        [ "$left" = 0 ] && break
        sleep 0.5
done
echo "  boxes left: $left"
stop_server "$SERVER_PID"
SERVER_PID=
sleep 1
leak_report "$DATA"
