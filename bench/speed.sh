#!/usr/bin/env bash
# bench/speed.sh - how long a new box and a resume take over HTTP, and whether
# a create costs more when many boxes run (issue 11), against floors measured
# in the same run.
#
#   sudo bench/speed.sh                  # ~3 min (SCALE_N=1000 running boxes)
#   sudo SCALE_N=0 bench/speed.sh        # ~30 s: no box-count series
#
# One `agentbox serve` (pool_size 0, idle stop off, 256 MiB disks and memory,
# resource sampling off) on a free loopback port with a data folder under one
# /var/tmp/agentbox-speed.* dir. Series, medians (nearest rank), ms:
#   1. N rounds, interleaved so that load changes hit every series alike:
#        floor  spawn /bin/true from this shell ("host"),
#        floor  bwrap --unshare-all ... /bin/true: a whole fresh sandbox
#               (Debian's bubblewrap, installed if missing),
#        create POST /v1/sandboxes with fresh keys (no pool: a new box),
#        resume POST /v1/sandboxes/ID/start of a box stopped just before
#               (the stop is not timed).
#   2. SCALE_N running boxes: made with POST /v1/sandboxes (time per box
#      reported), then N creates timed as in 1 (with bwrap again, for the
#      floor at that moment), compared with the creates of series 1.
#   3. every box is deleted (DELETE ?app_id=, asynchronous; waited for), the
#      server stopped, and leftovers counted: loop devices backed by files of
#      the data folder, mounts under it, the data folder's cgroups, uid-range
#      claims naming it, box processes. Any leftover is reported as a LEAK.
# Then one table: each target of the issue, its value, MET or MISSED.
#
# Latencies of HTTP rows are http_load's (bench/http_load.c, compiled here):
# first byte written -> last byte read, on an open connection. Floors are timed
# from this shell around the command ($EPOCHREALTIME), so they include the
# shell's fork + exec (~1 ms): the same for bwrap as for the host floor.
# Knobs: BUILD (default build-bench), N (20), SCALE_N (1000), KEEP=1.
# Cleans up on exit and on Ctrl-C (trap): server, boxes, cgroup parent, temp dir.
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-bench}
N=${N:-20}
SCALE_N=${SCALE_N:-1000}

if [ "$(id -u)" -ne 0 ]; then
        echo "bench/speed.sh: needs root (boxes are namespaces, cgroups and loop disks): sudo $0" >&2
        exit 2
fi

WORK=$(mktemp -d /var/tmp/agentbox-speed.XXXXXX)
chmod 700 "$WORK"
DATA=$WORK/data
AB=$BUILD/agentbox
HL=$WORK/http_load
RES=$WORK/results
NOTES=$WORK/notes
: >"$RES"
: >"$NOTES"
SERVER_PID=
URL=
SEQ=1000

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

log() { printf '\n== %s\n' "$*"; }
note() { printf '%s\n' "$*" | tee -a "$NOTES"; }
put() { echo "$1 $2" >>"$RES"; }
get() { awk -v k="$1" '$1 == k {v = $2} END {print v}' "$RES"; }

cleanup() {
        local rc=$?
        trap - EXIT INT TERM
        set +e
        if [ -n "$SERVER_PID" ]; then stop_server "$SERVER_PID"; fi
        rm_all_boxes "$DATA"
        if [ "${KEEP:-0}" = 1 ]; then echo "bench/speed.sh: kept $WORK"; else rm -rf "$WORK"; fi
        exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# record KEY LABEL FILE: one line, and KEY_p50 / KEY_p90 / KEY_n in the results.
record() {
        local n p50 p90 p99 mx
        read -r n p50 p90 p99 mx < <(pstats "$3")
        printf '  %-52s n=%-4s p50 %8s  p90 %8s  max %8s ms\n' "$2" "$n" "$p50" "$p90" "$mx"
        put "${1}_n" "$n"
        put "${1}_p50" "$p50"
        put "${1}_p90" "$p90"
}

# timed_us CMD...: runs CMD, prints its wall time in microseconds.
timed_us() {
        local a b
        a=${EPOCHREALTIME/./}
        "$@" >/dev/null 2>&1 || return 1
        b=${EPOCHREALTIME/./}
        echo $((b - a))
}

# hl1 OUTFILE ARGS...: one timed request; appends its latency (us) to OUTFILE.
hl1() {
        local f=$1 out rc p50
        shift
        out=$("$HL" -q -n 1 -s "$SEQ" -e 1 "$@" 2>"$WORK/hl1.err")
        rc=$?
        SEQ=$((SEQ + 1))
        p50=$(printf '%s\n' "$out" | sed -n 's/^RESULT.* p50=\([^ ]*\).*/\1/p')
        if [ $rc -eq 0 ] && [ -n "$p50" ]; then
                awk -v m="$p50" 'BEGIN {printf "%.1f\n", m * 1000}' >>"$f"
        fi
        return $rc
}

post() { curl -sS -m 60 -X POST "$URL$1" -H 'Content-Type: application/json' -d "${2:-{\}}"; }

BW=(bwrap --unshare-all --die-with-parent --ro-bind /usr /usr --symlink usr/bin /bin
        --symlink usr/lib /lib --symlink usr/lib64 /lib64 --symlink usr/sbin /sbin
        --proc /proc --dev /dev --tmpfs /tmp /bin/true)

# ---- machine, build ----------------------------------------------------------

log "machine"
echo "  date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "  kernel:  $(uname -r); cpus: $(nproc); memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
echo "  load:    $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  work:    $WORK"
put load_start "$(cut -d' ' -f1 /proc/loadavg)"
if ! command -v bwrap >/dev/null; then
        echo "  installing bubblewrap (Debian) ..."
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >"$WORK/apt.log" 2>&1 ||
                note "  note: cannot install bubblewrap: no bwrap floor"
fi
command -v bwrap >/dev/null && echo "  bwrap:   $(bwrap --version)"

log "build"
if [ ! -f "$BUILD/build.ninja" ]; then
        (cd "$ROOT" && meson setup "$BUILD" >/dev/null) || { echo "meson setup failed" >&2; exit 1; }
fi
ninja -C "$BUILD" agentbox agentbox-full agentbox-init >"$WORK/ninja.log" 2>&1 ||
        { echo "bench/speed.sh: build failed:" >&2; tail -20 "$WORK/ninja.log" >&2; exit 1; }
SRCSTATE=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null)
if ! (cd "$ROOT" && git diff --quiet HEAD -- src 2>/dev/null); then
        SRCSTATE="$SRCSTATE + uncommitted src changes"
fi
echo "  agentbox: $AB ($SRCSTATE)"
cc -std=gnu11 -O2 -pthread "$ROOT/bench/http_load.c" -lm -o "$HL" ||
        { echo "bench/speed.sh: cannot compile bench/http_load.c" >&2; exit 1; }

log "server"
cat >"$WORK/server.yaml" <<EOF
# written by bench/speed.sh
limits:
  disk: 256M
  memory: 256M
idle_stop: 0
pool_size: 0
sample_interval: 0
max_connections: 1024
EOF
start_speed_server() {
        local port
        for _ in 1 2 3 4 5; do
                port=$((20000 + RANDOM % 40000))
                ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && continue
                env -u AGENTBOX_TOKEN AGENTBOX_INIT="$BUILD/agentbox-init" \
                        "$AB" serve --listen "127.0.0.1:$port" --data "$DATA" \
                        --config "$WORK/server.yaml" >"$WORK/server.log" 2>&1 &
                SERVER_PID=$!
                for _ in $(seq 1 200); do
                        if curl -s -m 1 -o /dev/null "http://127.0.0.1:$port/health"; then
                                URL=http://127.0.0.1:$port
                                echo "  agentbox serve pid $SERVER_PID on $URL (log $WORK/server.log)"
                                return 0
                        fi
                        kill -0 "$SERVER_PID" 2>/dev/null || break
                        sleep 0.1
                done
                stop_server "$SERVER_PID"
                SERVER_PID=
        done
        return 1
}
start_speed_server || { echo "bench/speed.sh: agentbox serve does not start" >&2; tail -5 "$WORK/server.log" >&2; exit 1; }
CGP=$(cg_parent "$DATA")

# One box to resume again and again; two warm-up creates (the first create of
# a server formats the disk template and walks /etc once).
RES_ID=$(post /v1/sandboxes '{"app_id":"bench","user_id":"u","chat_id":"resume"}' | sed -n 's/.*"id":"\([^"]*\)".*/\1/p' | head -1)
[ -n "$RES_ID" ] || { echo "bench/speed.sh: cannot create a box" >&2; exit 1; }
for i in 1 2; do post /v1/sandboxes "{\"app_id\":\"bench\",\"user_id\":\"u\",\"chat_id\":\"warm-$i\"}" >/dev/null; done
for _ in 1 2 3; do "${BW[@]}" >/dev/null 2>&1; done

# rounds TAG COUNT: COUNT interleaved rounds of the floors, a create and
# (TAG=one only) a resume.
rounds() {
        local tag=$1 n=$2 i t
        : >"$WORK/s.$tag.true"
        : >"$WORK/s.$tag.bwrap"
        : >"$WORK/s.$tag.create"
        : >"$WORK/s.$tag.resume"
        for ((i = 0; i < n; i++)); do
                t=$(timed_us /bin/true) && echo "$t" >>"$WORK/s.$tag.true"
                if command -v bwrap >/dev/null; then
                        t=$(timed_us "${BW[@]}") && echo "$t" >>"$WORK/s.$tag.bwrap"
                fi
                sleep 0.1
                hl1 "$WORK/s.$tag.create" -d '{"app_id":"bench","user_id":"u","chat_id":"c-%n"}' \
                        -x '"status":"running"' "$URL/v1/sandboxes" ||
                        note "  !! create failed: $(head -c 300 "$WORK/hl1.err")"
                sleep 0.1
                if [ "$tag" = one ]; then
                        post "/v1/sandboxes/$RES_ID/stop" >/dev/null || note "  !! stop failed"
                        sleep 0.2
                        hl1 "$WORK/s.$tag.resume" -d '{}' -x '"status":"running"' \
                                "$URL/v1/sandboxes/$RES_ID/start" ||
                                note "  !! start failed: $(head -c 300 "$WORK/hl1.err")"
                        sleep 0.1
                fi
        done
        record "${tag}_true" "floor: spawn /bin/true from the shell" "$WORK/s.$tag.true"
        [ -s "$WORK/s.$tag.bwrap" ] && record "${tag}_bwrap" "floor: bwrap sandbox running /bin/true" "$WORK/s.$tag.bwrap"
        record "${tag}_create" "POST /v1/sandboxes, a new box (no pool)" "$WORK/s.$tag.create"
        [ "$tag" = one ] && record "${tag}_resume" "POST /v1/sandboxes/ID/start of a stopped box" "$WORK/s.$tag.resume"
        return 0
}

log "1. create and resume at a few running boxes ($N rounds)"
rounds one "$N"

running() { find "/sys/fs/cgroup/pids/$CGP" "/sys/fs/cgroup/$CGP" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | wc -l; }

if [ "$SCALE_N" -gt 0 ]; then
        have=$(running)
        log "2. create at $SCALE_N running boxes (making $((SCALE_N - have)) more)"
        mem0=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
        a=${EPOCHREALTIME/./}
        made=0
        for ((i = have; i < SCALE_N; i++)); do
                r=$(post /v1/sandboxes "{\"app_id\":\"bench\",\"user_id\":\"u\",\"chat_id\":\"fill-$i\"}")
                case $r in *'"status":"running"'*) made=$((made + 1)) ;; *) note "  !! filler create $i: ${r:0:200}"; break ;; esac
        done
        b=${EPOCHREALTIME/./}
        mem1=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
        echo "  made $made boxes in $(((b - a) / 1000)) ms ($(awk -v t=$((b - a)) -v n="$made" 'BEGIN {if (n) printf "%.1f", t / n / 1000}') ms each, one at a time, curl included);"
        echo "  running now: $(running); memory used by them: $(awk -v a="$mem0" -v b="$mem1" -v n="$made" 'BEGIN {if (n) printf "%.2f MiB per box", (a - b) / 1024 / n}')"
        put scale_running "$(running)"
        sleep 2
        rounds many "$N"
fi

# ---- 3. delete everything, look for leftovers ----------------------------------

log "3. delete every box, look for leftovers"
a=${EPOCHREALTIME/./}
curl -s -m 60 -X DELETE "$URL/v1/sandboxes?app_id=bench" >/dev/null
for _ in $(seq 1 1200); do
        left=$(curl -s -m 10 "$URL/v1/sandboxes?app_id=bench" | grep -o '"id":' | wc -l)
        [ "$left" = 0 ] && break
        sleep 0.5
done
b=${EPOCHREALTIME/./}
echo "  deleted in $(((b - a) / 1000)) ms; boxes left: $left"
stop_server "$SERVER_PID"
SERVER_PID=
sleep 1
leak_report "$DATA" | tee "$WORK/leaks"
put leaks "$(grep -c LEAK "$WORK/leaks")"

# ---- table ---------------------------------------------------------------------

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a != "" && b != "" && b > 0) printf "%.2f", a / b}'; }
verdict() { # label value op limit
        awk -v l="$1" -v v="$2" -v op="$3" -v m="$4" 'BEGIN {
                if (v == "") { printf "  %-56s %10s  (target %s %s)  n/a\n", l, "-", op, m; exit }
                ok = (op == "<=") ? (v + 0 <= m + 0) : (v + 0 == m + 0)
                printf "  %-56s %10s  (target %s %s)  %s\n", l, v, op, m, ok ? "MET" : "MISSED" }'
}
log "results (ms, medians; load average $(get load_start) at the start, $(cut -d' ' -f1 /proc/loadavg) now)"
printf '  %-44s %9s %9s %9s %12s\n' "" "p50" "p90" "bwrap p50" "p50 / bwrap"
for k in one_create one_resume many_create; do
        [ -n "$(get ${k}_p50)" ] || continue
        fl=$(get "${k%%_*}_bwrap_p50")
        printf '  %-44s %9s %9s %9s %12s\n' "$k" "$(get ${k}_p50)" "$(get ${k}_p90)" "${fl:--}" "$(ratio "$(get ${k}_p50)" "$fl")"
done
echo "  host floor (spawn /bin/true): $(get one_true_p50) ms"
echo
echo "targets (issue 11):"
verdict "create without a pool, p50 (ms)" "$(get one_create_p50)" "<=" 10
verdict "create without a pool / bwrap sandbox (same run)" "$(ratio "$(get one_create_p50)" "$(get one_bwrap_p50)")" "<=" 1.5
verdict "resume (start of a stopped box), p50 (ms)" "$(get one_resume_p50)" "<=" 10
if [ -n "$(get many_create_p50)" ]; then
        verdict "create at $(get scale_running) running / create at a few" "$(ratio "$(get many_create_p50)" "$(get one_create_p50)")" "<=" 1.2
        # The same, each side divided by the bwrap floor measured alongside it:
        # the host's load drifts between the two series.
        verdict "  the same, each against its own bwrap floor" "$(ratio "$(ratio "$(get many_create_p50)" "$(get many_bwrap_p50)")" "$(ratio "$(get one_create_p50)" "$(get one_bwrap_p50)")")" "<=" 1.2
fi
verdict "leftovers after deleting every box" "$(get leaks)" "==" 0
if [ -s "$NOTES" ]; then
        echo
        echo "notes:"
        cat "$NOTES"
fi
exit 0
