#!/usr/bin/env bash
# bench/scale.sh - many boxes on one host (issue 11): RUNNING running boxes and
# STOPPED stopped ones made over HTTP, execs in a sample of both, then every
# box deleted; memory, disk and time per box, and a check that nothing leaked.
#
#   sudo bench/scale.sh                          # RUNNING=2000 STOPPED=10000, ~30 min
#   sudo RUNNING=100 STOPPED=200 bench/scale.sh  # a rehearsal, ~1 min
#
# Steps (one `agentbox serve` with a data folder of its own under
# /var/tmp/agentbox-scale.*; 256 MiB disks and memory limits, idle pause and
# stop off, pool off, resource sampling off):
#   0. refuses to start without room: free disk (df) for every box plus 5 GiB,
#      available memory for every running box plus 4 GiB (estimates printed);
#      while making boxes it stops early when memory or disk runs short.
#   1. RUNNING boxes (ids r0..), POST /v1/sandboxes with PAR connections, in
#      batches: create latency p50/p90 per batch, so its growth with the
#      box count shows; memory available before and after.
#   2. STOPPED boxes (ids s0..): created, then stopped (POST .../stop).
#   3. with everything made: N_LATE more creates one at a time (compared with
#      N_LATE made the same way at the start, with no other box), exec `true`
#      in SAMPLE running boxes, and in SAMPLE
#      stopped boxes (resume + exec; those are stopped again after).
#   4. every box deleted (DELETE /v1/sandboxes/ID with PAR connections; the
#      server deletes asynchronously, waited for),
#      the server stopped, leftovers counted (bench/lib.sh leak_report:
#      loop devices, mounts in every namespace, cgroups, uid-range claims,
#      processes), and the host's loop device and zombie counts compared with
#      the start.
# Cleans up on exit and on Ctrl-C (trap): server, boxes (CLI rm), cgroup
# parent, data folder. Knobs: BUILD (default build-bench), RUNNING, STOPPED,
# PAR (4), BATCH (500), SAMPLE (50), N_LATE (20), KEEP=1.
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-bench}
RUNNING=${RUNNING:-2000}
STOPPED=${STOPPED:-10000}
PAR=${PAR:-4}
BATCH=${BATCH:-500}
SAMPLE=${SAMPLE:-50}
N_LATE=${N_LATE:-20}
MIN_MEM_KIB=$((3 * 1024 * 1024)) # stop making boxes below this much available memory
MIN_DISK_KIB=$((4 * 1024 * 1024))

[ "$(id -u)" -eq 0 ] || { echo "bench/scale.sh: needs root: sudo $0" >&2; exit 2; }

WORK=$(mktemp -d /var/tmp/agentbox-scale.XXXXXX)
chmod 700 "$WORK"
DATA=$WORK/data
AB=$BUILD/agentbox
HL=$WORK/http_load
SERVER_PID=
URL=

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

log() { printf '\n== %s\n' "$*"; }
mem_avail() { awk '/MemAvailable/ {print $2}' /proc/meminfo; }
disk_free() { df -Pk "$WORK" | awk 'NR == 2 {print $4}'; }
loops() { ls -d /sys/block/loop* 2>/dev/null | wc -l; }
attached_loops() { cat /sys/block/loop*/loop/backing_file 2>/dev/null | wc -l; }
zombies() { ps -eo stat= | grep -c '^Z'; }
now_us() { echo "${EPOCHREALTIME/./}"; }

cleanup() {
        local rc=$?
        trap - EXIT INT TERM
        set +e
        if [ -n "$SERVER_PID" ]; then stop_server "$SERVER_PID"; fi
        echo "bench/scale.sh: cleaning up ($(ls "$DATA/boxes" 2>/dev/null | wc -l) boxes left)"
        rm_all_boxes "$DATA"
        if [ "${KEEP:-0}" = 1 ]; then echo "bench/scale.sh: kept $WORK"; else rm -rf "$WORK"; fi
        exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# hl NAME ARGS...: http_load with its RESULT line kept in $WORK/NAME.out;
# prints "requests errors p50 p90 rps".
hl() {
        local name=$1
        shift
        "$HL" -q -T 120000 -e 3 "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
        sed -n 's/^RESULT //p' "$WORK/$name.out" | tr ' ' '\n' |
                awk -F= '{v[$1] = $2} END {printf "%s %s %s %s %s\n", v["requests"], v["errors"], v["p50"], v["p90"], v["rps"]}'
}

# ---- 0. room --------------------------------------------------------------------

log "machine and room"
echo "  date: $(date -u +%Y-%m-%dT%H:%M:%SZ); kernel $(uname -r); $(nproc) cpus; load $(cut -d' ' -f1-3 /proc/loadavg)"
df -h /work "$WORK" | sed 's/^/  /'
echo "  memory available: $(($(mem_avail) / 1024)) MiB; pid_max $(cat /proc/sys/kernel/pid_max)"
need_disk=$(((RUNNING + STOPPED) * 3 * 1024 + 5 * 1024 * 1024))
need_mem=$((RUNNING * 8 * 1024 + 4 * 1024 * 1024))
echo "  needs (estimate): disk $((need_disk / 1024)) MiB (3 MiB a box + 5 GiB), memory $((need_mem / 1024)) MiB (8 MiB a running box + 4 GiB)"
if [ "$(disk_free)" -lt "$need_disk" ] || [ "$(mem_avail)" -lt "$need_mem" ]; then
        echo "bench/scale.sh: not enough room for RUNNING=$RUNNING STOPPED=$STOPPED here; try fewer" >&2
        exit 2
fi
LOOPS0=$(attached_loops)
ZOMBIES0=$(zombies)
echo "  loop devices attached now: $LOOPS0 (of $(loops)); zombies now: $ZOMBIES0"

log "build and server"
if [ ! -f "$BUILD/build.ninja" ]; then
        (cd "$ROOT" && meson setup "$BUILD" >/dev/null) || { echo "meson setup failed" >&2; exit 1; }
fi
ninja -C "$BUILD" agentbox agentbox-full agentbox-init >"$WORK/ninja.log" 2>&1 ||
        { echo "bench/scale.sh: build failed" >&2; tail -20 "$WORK/ninja.log" >&2; exit 1; }
echo "  agentbox: $AB ($(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null))"
cc -std=gnu11 -O2 -pthread "$ROOT/bench/http_load.c" -lm -o "$HL" || exit 1
cat >"$WORK/server.yaml" <<EOF
# written by bench/scale.sh
limits:
  disk: 256M
  memory: 256M
idle_stop: 0
idle_pause: 0
pool_size: 0
sample_interval: 0
# thousands of 256M disks promise more than a bench host has free
disk_overcommit_ratio: 0
max_connections: 1024
EOF
port=$((20000 + RANDOM % 40000))
env -u AGENTBOX_TOKEN AGENTBOX_INIT="$BUILD/agentbox-init" "$AB" serve --listen "127.0.0.1:$port" \
        --data "$DATA" --config "$WORK/server.yaml" >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
URL=http://127.0.0.1:$port
for _ in $(seq 1 200); do curl -s -m 1 -o /dev/null "$URL/health" && break; sleep 0.1; done
curl -s -m 2 -o /dev/null "$URL/health" || { echo "bench/scale.sh: server did not start" >&2; tail "$WORK/server.log" >&2; exit 1; }
echo "  agentbox serve pid $SERVER_PID on $URL, data $DATA"

# make_boxes PREFIX FROM COUNT: COUNT boxes PREFIX$FROM.. in batches; one line per batch.
SHORT=
make_boxes() {
        local prefix=$1 from=$2 count=$3 i n req err p50 p90 rps
        for ((i = from; i < from + count; i += BATCH)); do
                n=$((from + count - i))
                [ "$n" -gt "$BATCH" ] && n=$BATCH
                if [ "$(mem_avail)" -lt "$MIN_MEM_KIB" ] || [ "$(disk_free)" -lt "$MIN_DISK_KIB" ]; then
                        SHORT="stopped at $prefix$i: memory available $(($(mem_avail) / 1024)) MiB, disk free $(($(disk_free) / 1024)) MiB"
                        echo "  !! $SHORT"
                        return 1
                fi
                read -r req err p50 p90 rps < <(hl "mk.$prefix.$i" -c "$PAR" -n "$n" -s "$i" \
                        -d "{\"id\":\"$prefix%n\"}" -x '"status":"running"' "$URL/v1/sandboxes")
                printf '  %s%-6s .. %s%-6s created %5s, errors %s, p50 %8s ms, p90 %8s ms, %6s boxes/s\n' \
                        "$prefix" "$i" "$prefix" "$((i + n - 1))" "$req" "$err" "$p50" "$p90" "$rps"
                echo "$prefix $i $n $req $err $p50 $p90 $rps" >>"$WORK/batches"
                [ "${err:-0}" = 0 ] || head -3 "$WORK/mk.$prefix.$i.err" | cut -c1-300 | sed 's/^/    /'
        done
}

# serial_creates TAG: N_LATE creates one at a time (ids TAG0..); prints their p50.
serial_creates() {
        local tag=$1 i err p50
        : >"$WORK/$tag"
        for ((i = 0; i < N_LATE; i++)); do
                read -r _ err p50 _ _ < <(hl "$tag.$i" -c 1 -n 1 -s "$i" -d "{\"id\":\"$tag%n\"}" \
                        -x '"status":"running"' "$URL/v1/sandboxes")
                [ "$err" = 0 ] && echo "$p50" >>"$WORK/$tag"
                sleep 0.1
        done
        sort -n "$WORK/$tag" | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]}'
}

log "0. $N_LATE creates one at a time, with (almost) no other box"
# Untimed: the first create of a data folder formats the disk template.
hl warm -c 1 -n 1 -s 0 -d '{"id":"warm%n"}' "$URL/v1/sandboxes" >/dev/null
early=$(serial_creates early)
echo "  create p50 $early ms"

# ---- 1. running boxes -------------------------------------------------------------

log "1. $RUNNING running boxes ($PAR connections, batches of $BATCH)"
: >"$WORK/batches"
mem0=$(mem_avail)
t0=$(now_us)
make_boxes r 0 "$RUNNING"
t1=$(now_us)
mem1=$(mem_avail)
MADE_R=$(awk '$1 == "r" {s += $4 - $5} END {print s + 0}' "$WORK/batches")
echo "  $MADE_R running: $(((t1 - t0) / 1000)) ms, $(awk -v t=$((t1 - t0)) -v n="$MADE_R" 'BEGIN {if (n) printf "%.1f", t / n / 1000}') ms a box at $PAR connections"
echo "  memory available: $((mem0 / 1024)) -> $((mem1 / 1024)) MiB: $(awk -v a="$mem0" -v b="$mem1" -v n="$MADE_R" 'BEGIN {if (n) printf "%.2f", (a - b) / 1024 / n}') MiB a running box (everything: kernel, init, page cache)"
echo "  server RSS $(awk '/VmRSS/ {print $2 / 1024 " MiB"}' "/proc/$SERVER_PID/status")"
pids=$(grep -l "/$(cg_parent "$DATA")/" /proc/[0-9]*/cgroup 2>/dev/null | cut -d/ -f3 | head -200)
rss=$(for p in $pids; do awk '/VmRSS/ {print $2}' "/proc/$p/status" 2>/dev/null; done | awk '{s += $1; n++} END {if (n) printf "%.2f MiB over %d processes", s / 1024 / n * 1, n}')
echo "  RSS of a box process (mean of up to 200): $rss"

# ---- 2. stopped boxes ----------------------------------------------------------------

if [ -z "$SHORT" ] && [ "$STOPPED" -gt 0 ]; then
        log "2. $STOPPED stopped boxes (created, then stopped)"
        t0=$(now_us)
        made_s=0
        for ((j = 0; j < STOPPED; j += BATCH)); do
                n=$((STOPPED - j))
                [ "$n" -gt "$BATCH" ] && n=$BATCH
                make_boxes s "$j" "$n" || break
                read -r req err p50 p90 rps < <(hl "st.$j" -c "$PAR" -n "$n" -s "$j" -d '{}' \
                        -x '"status":"stopped"' "$URL/v1/sandboxes/s%n/stop")
                printf '  s%-6s .. s%-6s stopped %5s, errors %s, p50 %8s ms\n' "$j" "$((j + n - 1))" "$req" "$err" "$p50"
                made_s=$((made_s + req - err))
        done
        t1=$(now_us)
        echo "  $made_s stopped boxes: $(((t1 - t0) / 1000)) ms, $(awk -v t=$((t1 - t0)) -v n="$made_s" 'BEGIN {if (n) printf "%.1f", t / n / 1000}') ms a box (create + stop, $PAR connections)"
fi
TOTAL=$(ls "$DATA/boxes" | wc -l)
used=$(du -sk "$DATA" | cut -f1)
apparent=$(du -sk --apparent-size "$DATA/boxes" | cut -f1)
echo "  disk: $TOTAL boxes use $((used / 1024)) MiB ($(awk -v u="$used" -v n="$TOTAL" 'BEGIN {if (n) printf "%.2f", u / 1024 / n}') MiB a box on disk; $(awk -v u="$apparent" -v n="$TOTAL" 'BEGIN {if (n) printf "%.0f", u / 1024 / n}') MiB apparent: sparse images)"
echo "  memory available now: $(($(mem_avail) / 1024)) MiB; loop devices attached: $(attached_loops)"

# ---- 3. with everything made ----------------------------------------------------------

log "3. at $TOTAL boxes ($MADE_R running)"
late=$(serial_creates late)
echo "  create p50 $late ms ($N_LATE one at a time); with no other box: $early ms: $(awk -v a="$late" -v b="$early" 'BEGIN {if (b > 0) printf "%.2fx", a / b}')"
exec_sample() { # PREFIX COUNT MAX: exec true in SAMPLE boxes PREFIX0..MAX-1 (spread out)
        local prefix=$1 max=$2 k id
        : >"$WORK/ex.$prefix"
        for ((k = 0; k < SAMPLE && k < max; k++)); do
                id=$prefix$((k * max / SAMPLE))
                read -r _ err p50 _ _ < <(hl "ex.$prefix.$k" -c 1 -n 1 -d '{"command":"true"}' -x '"exit_code":0' "$URL/v1/sandboxes/$id/exec")
                [ "$err" = 0 ] && echo "$p50" >>"$WORK/ex.$prefix" || echo "  !! exec in $id failed: $(head -c 200 "$WORK/ex.$prefix.$k.err")"
        done
        sort -n "$WORK/ex.$prefix" | awk -v n="$(wc -l <"$WORK/ex.$prefix")" '{v[NR] = $1} END {if (NR) printf "p50 %s ms, p90 %s ms over %d boxes", v[int((NR + 1) / 2)], v[int(NR * 0.9 + 0.999)], n}'
}
echo "  exec true in running boxes: $(exec_sample r "$MADE_R")"
if [ "${made_s:-0}" -gt 0 ]; then
        echo "  exec true in stopped boxes (resume + exec): $(exec_sample s "$made_s")"
fi

# ---- 4. delete everything, leftovers --------------------------------------------------

log "4. delete all $TOTAL boxes"
t0=$(now_us)
del_err=0
# DELETE answers 202 at once; the server's deleters do the work (waited for below).
for spec in "r $MADE_R" "s ${made_s:-0}" "early $N_LATE" "late $N_LATE" "warm 1"; do
        read -r prefix count <<<"$spec"
        [ "$count" -gt 0 ] || continue
        read -r _ err _ _ _ < <(hl "del.$prefix" -c "$PAR" -n "$count" -s 0 -m DELETE "$URL/v1/sandboxes/$prefix%n")
        del_err=$((del_err + ${err:-0}))
done
t1=$(now_us)
for _ in $(seq 1 7200); do
        left=$(ls "$DATA/boxes" | wc -l)
        [ "$left" = 0 ] && break
        sleep 0.5
done
t2=$(now_us)
echo "  DELETE requests: $(((t1 - t0) / 1000)) ms for $TOTAL ($del_err failed); all gone after $(((t2 - t0) / 1000)) ms: $(awk -v t=$((t2 - t0)) -v n="$TOTAL" 'BEGIN {if (n) printf "%.1f", t / n / 1000}') ms a box; left: $left"
stop_server "$SERVER_PID"
SERVER_PID=
sleep 2
log "leftovers"
leak_report "$DATA" | tee "$WORK/leaks"
echo "  loop devices attached: $LOOPS0 before, $(attached_loops) now (the host's, all users)"
echo "  zombies: $ZOMBIES0 before, $(zombies) now (the host's, all users)"
echo "  memory available: $((mem0 / 1024)) MiB before, $(($(mem_avail) / 1024)) MiB now"
n=$(grep -c LEAK "$WORK/leaks")
[ -z "$SHORT" ] || echo "  note: $SHORT"
echo
echo "result: $MADE_R running + ${made_s:-0} stopped boxes made, execs in samples, all deleted; leaks: $n"
exit 0
