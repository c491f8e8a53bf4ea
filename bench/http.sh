#!/usr/bin/env bash
# bench/http.sh - `agentbox serve` over HTTP on loopback, side by side with
# Docker in the same run on the same host (the benchmarks of issue 3).
#
#   sudo bench/http.sh                          # ~4 min with the 60 s concurrency part
#   sudo DURATION=10 BUILD=/tmp/build-bench bench/http.sh
#
# What it does (everything lives under one /var/tmp/agentbox-http.* dir and is
# removed at the end, also on Ctrl-C: servers, boxes, cgroup parents,
# containers, the image, dockerd if it started one):
#   0. builds agentbox in $BUILD if needed, compiles bench/http_load.c with cc
#      into the temp dir, sets up Docker (bench/lib.sh: Debian docker.io, a private
#      dockerd, a tiny local image with a static /true and /pause)
#   1. server A (`agentbox serve`, pool_size 0) on a free loopback port, with a
#      temp data dir and config (256M disks and memory, idle stop off, resource
#      sampling off, the default reaper interval)
#      - exec of `true` in a running box: N_EXEC sequential requests on one
#        keep-alive connection (http_load -c 1), p50/p99; the server-side exec
#        time from /metrics over the same requests; GET /health the same way
#        (the HTTP floor); the in-box cost of /bin/true, bash -c true and
#        bash -lc true (a timing loop run inside the box); CPU per exec (box
#        cgroups, server, load generator, rest of the host); a perf trace of
#        N_PERF execs cut into phases (client, server, init, the command);
#        vs `docker exec CID /true`, N_DOCKER_EXEC runs from this shell
#      - resume: POST .../stop (untimed), then POST .../start timed; and stop,
#        then the first exec timed (resume + exec); vs `docker stop -t 0`
#        (untimed) + `docker start` timed
#      - a new box without a pool: POST /v1/sandboxes with fresh keys
#   2. server B (pool_size POOL_SIZE, reaper 100 ms): POST /v1/sandboxes with
#      fresh keys, one at a time, each after /health shows the pool full again
#      (+ a settle pause); every answer must be 201 with a backend_id starting
#      with "pool-" (else it is reported, not counted as a pool claim); then
#      POST /v1/exec with fresh keys (pool claim + first exec in one call);
#      vs `docker run -d --network none IMG /pause`
#   3. GET /health requests per second: wrk -t2 -c64 -d${WRK_SECS}s, then
#      http_load -c 64 for as long
#   4. CONC_BOXES boxes x CONC_PER_BOX connections (200) each running exec of
#      `true` for DURATION seconds: requests, errors, rps, p50/p99, CPU per
#      exec; before it, one connection per CPU for CAP_SECS (no queueing)
#   5. one table with the issue's targets, each marked met or missed
#
# Knobs (environment): BUILD (default build-bench), DURATION (60), N_EXEC (300),
# N_DOCKER_EXEC (30), N_RESUME (20), N_DOCKER_START (10), N_CREATE (20),
# N_POOL (30), N_POOL_EXEC (10), N_DOCKER_RUN (10), POOL_SIZE (4), WRK_SECS (10),
# CAP_SECS (10: the one-connection-per-CPU run before the concurrent one),
# PERF (1: trace N_PERF=40 execs with perf to cut one exec into phases; 0 skips),
# CONC_BOXES (20), CONC_PER_BOX (10), NO_DOCKER=1, KEEP=1 (keep the temp dir).
#
# Latencies of agentbox rows are measured by http_load inside one process on
# an open keep-alive connection (first byte written -> last byte read);
# docker rows are timed from this shell around the docker CLI, as a user runs
# it (they include spawning the CLI, ~1 ms here). Percentiles are nearest-rank.
# Exit status: 0 unless the build fails or agentbox serve does not start or
# dies during the run (a failed series is reported and the run goes on).
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-bench}
DURATION=${DURATION:-60}
N_EXEC=${N_EXEC:-300}
N_DOCKER_EXEC=${N_DOCKER_EXEC:-30}
N_RESUME=${N_RESUME:-20}
N_DOCKER_START=${N_DOCKER_START:-10}
N_CREATE=${N_CREATE:-20}
N_POOL=${N_POOL:-30}
N_POOL_EXEC=${N_POOL_EXEC:-10}
N_DOCKER_RUN=${N_DOCKER_RUN:-10}
POOL_SIZE=${POOL_SIZE:-4}
WRK_SECS=${WRK_SECS:-10}
CAP_SECS=${CAP_SECS:-10}
CONC_BOXES=${CONC_BOXES:-20}
CONC_PER_BOX=${CONC_PER_BOX:-10}

if [ "$(id -u)" -ne 0 ]; then
        echo "bench/http.sh: needs root (boxes are namespaces, cgroups and loop disks): sudo $0" >&2
        exit 2
fi

WORK=$(mktemp -d /var/tmp/agentbox-http.XXXXXX)
chmod 700 "$WORK"
RES=$WORK/results # "key value" lines for the table
NOTES=$WORK/notes
: >"$RES"
: >"$NOTES"
AB=$BUILD/agentbox
HL=$WORK/http_load
DOCKER=
DOCKERD_PID=
DOCKER_CIDS=()
DOCKER_IMG=agentbox-bench/tiny-http:$$
SERVER_PIDS=()  # running agentbox serve processes
DATA_DIRS=()    # their data dirs (boxes removed with the CLI at the end)
URL=            # base URL of the server in use
SEQ=1000        # %n of http_load: fresh keys for every create

# docker_setup, docker_image, docker_teardown (shared with bench/run.sh)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

log() { printf '\n== %s\n' "$*"; }
note() { printf '%s\n' "$*" | tee -a "$NOTES"; }
put() { echo "$1 $2" >>"$RES"; }
get() { awk -v k="$1" '$1 == k {v = $2} END {print v}' "$RES"; }



rm_boxes() { # DATA: every box the CLI lists there, then its cgroup parent
        local d=$1 ids cg
        [ -d "$d" ] || return 0
        ids=$("$AB" --data "$d" ls 2>/dev/null | awk 'NR > 1 {print $1}')
        # shellcheck disable=SC2086 # one word per id
        [ -z "$ids" ] || "$AB" --data "$d" rm $ids >/dev/null 2>&1
        cg=$(cg_parent "$d")
        for c in /sys/fs/cgroup/*/"$cg" /sys/fs/cgroup/"$cg"; do
                [ -d "$c" ] && rmdir "$c" 2>/dev/null
        done
        return 0
}

cleanup() {
        local rc=$?
        trap - EXIT INT TERM
        set +e
        for p in "${SERVER_PIDS[@]}"; do stop_server "$p"; done
        for d in "${DATA_DIRS[@]}"; do rm_boxes "$d"; done
        docker_teardown
        if [ -d "$WORK" ]; then
                awk -v w="$WORK" 'index($2, w) == 1 {print $2}' /proc/self/mounts | sort -r |
                        while read -r m; do umount -l "$m" 2>/dev/null; done
        fi
        if [ "${KEEP:-0}" = 1 ]; then
                echo "bench/http.sh: kept $WORK"
        else
                rm -rf "$WORK"
        fi
        exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- helpers ----------------------------------------------------------------


# record KEY LABEL FILE: prints a line and records KEY_p50, KEY_p99, KEY_n.
record() {
        local key=$1 label=$2 n p50 p90 p99 mx
        read -r n p50 p90 p99 mx < <(pstats "$3")
        printf '  %-50s n=%-4s p50 %8s  p90 %8s  p99 %8s  max %8s ms\n' "$label" "$n" "$p50" "$p90" "$p99" "$mx"
        put "${key}_n" "$n"
        put "${key}_p50" "$p50"
        put "${key}_p99" "$p99"
}

# rfield NAME < RESULT-line output of http_load
rfield() { sed -n "s/^RESULT.* $1=\([^ ]*\).*/\1/p" | tail -1; }

# hl ARGS...: http_load, its output shown indented; its exit status.
hl() {
        local out rc
        out=$("$HL" "$@" 2>&1)
        rc=$?
        printf '%s\n' "$out" | sed 's/^/    /'
        HL_OUT=$out
        return $rc
}

# one timed request: hl1 OUTFILE [http_load args...]; appends the latency (us)
# to OUTFILE when the request succeeded; returns http_load's status.
hl1() {
        local f=$1 out rc p50
        shift
        out=$("$HL" -q -n 1 -s "$SEQ" -e 1 "$@" 2>"$WORK/hl1.err")
        rc=$?
        SEQ=$((SEQ + 1))
        p50=$(printf '%s\n' "$out" | rfield p50)
        if [ $rc -eq 0 ] && [ -n "$p50" ]; then
                awk -v m="$p50" 'BEGIN {printf "%.1f\n", m * 1000}' >>"$f"
        fi
        HL1_ERR=$(cat "$WORK/hl1.err")
        return $rc
}

# timed CMD...: runs CMD, prints its wall time in microseconds; status of CMD.
timed() {
        local a b
        a=${EPOCHREALTIME/./}
        "$@" >/dev/null 2>&1 || return 1
        b=${EPOCHREALTIME/./}
        echo $((b - a))
}

post() { curl -sS -m 60 -X POST "$URL$1" -H 'Content-Type: application/json' -d "${2:-{\}}"; }
json_id() { sed -n 's/.*"id":"\([^"]*\)".*/\1/p'; }

# health_pool: "size target" of the warm pool from GET /health.
health_pool() {
        curl -s -m 5 "$URL/health" | sed -n 's/.*"pool":{\([^}]*\)}.*/\1/p' |
                awk -F'[:,]' '{for (i = 1; i < NF; i += 2) {gsub(/"/, "", $i); a[$i] = $(i + 1)}} END {print a["size"] + 0, a["target"] + 0}'
}

wait_pool_full() { # up to 60 s
        local s t
        for _ in $(seq 1 1200); do
                read -r s t < <(health_pool)
                [ "$t" -gt 0 ] && [ "$s" -ge "$t" ] && return 0
                sleep 0.05
        done
        return 1
}

server_alive() {
        local pid=$1 name=$2
        kill -0 "$pid" 2>/dev/null && return 0
        note "  !! server $name (pid $pid) is gone; last lines of its log:"
        tail -20 "$WORK/$name.log" | sed 's/^/     /' | tee -a "$NOTES"
        return 1
}

# start_server NAME POOL [REAPER]: starts `agentbox serve` on a free loopback
# port with a fresh data dir and config (REAPER: reaper_interval, which also
# paces the pool filler; default the server's 5s); sets URL and SERVER_PID.
start_server() {
        local name=$1 pool=$2 reaper=${3:-5s} d port pid
        d=$WORK/$name
        mkdir -p "$d"
        cat >"$WORK/$name.yaml" <<EOF
# written by bench/http.sh
limits:
  disk: 256M
  memory: 256M
  timeout: 60s
idle_stop: 0
pool_size: $pool
reaper_interval: $reaper
sample_interval: 0
max_connections: 1024
EOF
        DATA_DIRS+=("$d/data")
        for _ in 1 2 3 4 5; do
                port=$((20000 + RANDOM % 40000))
                ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && continue
                env -u AGENTBOX_TOKEN AGENTBOX_INIT="$BUILD/agentbox-init" \
                        "$AB" serve --listen "127.0.0.1:$port" --data "$d/data" \
                        --config "$WORK/$name.yaml" >"$WORK/$name.log" 2>&1 &
                pid=$!
                SERVER_PIDS+=("$pid")
                for _ in $(seq 1 200); do
                        if curl -s -m 1 -o /dev/null "http://127.0.0.1:$port/health"; then
                                URL=http://127.0.0.1:$port
                                SERVER_PID=$pid
                                echo "  $name: agentbox serve pid $pid on $URL (pool_size $pool, log $WORK/$name.log)"
                                return 0
                        fi
                        kill -0 "$pid" 2>/dev/null || break
                        sleep 0.1
                done
                stop_server "$pid"
                echo "  $name: server did not come up on port $port; its log:"
                tail -5 "$WORK/$name.log" | sed 's/^/    /'
        done
        return 1
}

# new_box CHAT: creates a box for app "bench" and prints its id.
new_box() {
        local r
        r=$(post /v1/sandboxes "{\"app_id\":\"bench\",\"user_id\":\"u\",\"chat_id\":\"$1\"}")
        printf '%s\n' "$r" | json_id | head -1
        printf '%s\n' "$r" | grep -q '"status":"running"' || echo "  new_box $1: $r" >&2
}

# cpu_snap: "box_ns server_ticks busy_ticks": CPU used so far by server A's
# boxes (their cgroup parent), by server A, and by the whole host.
cpu_snap() {
        local box srv tot
        box=$(cat "/sys/fs/cgroup/cpuacct/$CG_A/cpuacct.usage" 2>/dev/null ||
                awk '$1 == "usage_usec" {print $2 * 1000}' "/sys/fs/cgroup/$CG_A/cpu.stat" 2>/dev/null)
        srv=$(awk '{sub(/^.*\) /, ""); print $12 + $13}' "/proc/$A_PID/stat" 2>/dev/null)
        tot=$(awk '$1 == "cpu" {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat)
        echo "${box:-0} ${srv:-0} ${tot:-0}"
}

# cpu_report KEY "SNAP0" "SNAP1" REQUESTS CLIENT_CPU_S: CPU per request in ms,
# split into the boxes (bash, init), the server, the load generator and the
# rest of the host (kernel threads, other work); recorded as KEY_cpu_*.
cpu_report() {
        local key=$1 n=$4 cl=${5:-0} b0 s0 t0 b1 s1 t1 hz
        read -r b0 s0 t0 <<<"$2"
        read -r b1 s1 t1 <<<"$3"
        hz=$(getconf CLK_TCK)
        [ "${n:-0}" -gt 0 ] || return 0
        read -r cb cs cc co ct < <(awk -v b="$((b1 - b0))" -v s="$((s1 - s0))" -v t="$((t1 - t0))" \
                -v hz="$hz" -v c="$cl" -v n="$n" 'BEGIN {
                        box = b / 1e6 / n; srv = s * 1000 / hz / n; cli = c * 1000 / n; tot = t * 1000 / hz / n
                        oth = tot - box - srv - cli; if (oth < 0) oth = 0
                        printf "%.3f %.3f %.3f %.3f %.3f\n", box, srv, cli, oth, tot }')
        put "${key}_cpu_box" "$cb"
        put "${key}_cpu_server" "$cs"
        put "${key}_cpu_client" "$cc"
        put "${key}_cpu_other" "$co"
        put "${key}_cpu_total" "$ct"
        echo "  CPU per request (ms): boxes $cb, server $cs, load generator $cc, rest of the host (kernel, other work) $co; total $ct"
}

metric() { # NAME: its value from GET /metrics (first sample line)
        curl -s -m 5 "$URL/metrics" | awk -v n="$1" '$1 == n {print $2; exit}'
}

# ---- 0. machine, build, Docker ------------------------------------------------

log "machine"
echo "  date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "  kernel:  $(uname -r)"
echo "  cpus:    $(nproc) ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo))"
echo "  memory:  $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
echo "  load:    $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  work:    $WORK"
put load_start "$(cut -d' ' -f1 /proc/loadavg)"

log "build"
if [ ! -f "$BUILD/build.ninja" ]; then
        (cd "$ROOT" && meson setup "$BUILD" >/dev/null) || { echo "meson setup failed" >&2; exit 1; }
fi
if ! ninja -C "$BUILD" agentbox agentbox-full agentbox-init >"$WORK/ninja.log" 2>&1; then
        if [ -x "$AB" ]; then
                note "  note: ninja failed (tree being edited?); using the existing binaries in $BUILD"
                tail -5 "$WORK/ninja.log" | sed 's/^/    /'
        else
                echo "bench/http.sh: build failed:" >&2
                tail -20 "$WORK/ninja.log" >&2
                exit 1
        fi
fi
SRCSTATE=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null)
if ! (cd "$ROOT" && git diff --quiet HEAD -- src 2>/dev/null); then
        SRCSTATE="$SRCSTATE + uncommitted src changes $(cd "$ROOT" && git diff HEAD -- src | sha1sum | cut -c1-8)"
fi
echo "  agentbox: $AB ($SRCSTATE)"
cc -std=gnu11 -O2 -Wall -Wextra -pthread "$ROOT/bench/http_load.c" -lm -o "$HL" ||
        { echo "bench/http.sh: cannot compile bench/http_load.c" >&2; exit 1; }
echo "  http_load: $HL"
if ! command -v wrk >/dev/null; then
        "$ROOT/scripts/deps.sh" wrk >"$WORK/deps.log" 2>&1 || note "  note: cannot install wrk (scripts/deps.sh wrk): wrk row skipped"
fi
command -v wrk >/dev/null && echo "  wrk: $(wrk -v 2>&1 | head -1)"

log "docker"
CID=
if [ "${NO_DOCKER:-0}" = 1 ]; then
        note "  note: NO_DOCKER=1: Docker column skipped"
elif docker_setup && docker_image; then
        echo "  $($DOCKER version --format 'client {{.Client.Version}}, server {{.Server.Version}}' 2>/dev/null), storage $($DOCKER info --format '{{.Driver}}, cgroup {{.CgroupVersion}}' 2>/dev/null)"
        CID=$($DOCKER run -d --network none "$DOCKER_IMG" /pause 2>/dev/null)
        if [ -n "$CID" ]; then
                DOCKER_CIDS+=("$CID")
                echo "  container ${CID:0:12} runs /pause"
        else
                note "  note: docker run -d failed: Docker rows skipped"
        fi
else
        [ -z "$DOCKER" ] || note "  note: cannot build the local image: Docker column skipped"
fi

# ---- 1. server A: exec, resume, create without a pool --------------------------

log "server A (no pool)"
start_server A 0 || { echo "bench/http.sh: agentbox serve does not start" >&2; exit 1; }
A_PID=$SERVER_PID
A_URL=$URL
CG_A=$(cg_parent "$WORK/A/data")

log "exec of true in a running box"
EXEC_BOX=$(new_box exec)
[ -n "$EXEC_BOX" ] || { echo "bench/http.sh: cannot create a box" >&2; exit 1; }
EXEC_URL=$URL/v1/sandboxes/$EXEC_BOX/exec
echo "  box $EXEC_BOX"
hl -c 1 -n 20 -d '{"command":"true"}' -x '"exit_code":0' "$EXEC_URL" >/dev/null # warm-up
c0=$(metric agentbox_exec_duration_seconds_count)
s0=$(metric agentbox_exec_duration_seconds_sum)
echo "  http_load -c 1 -n $N_EXEC -d '{\"command\":\"true\"}' $EXEC_URL"
: >"$WORK/s.exec"
cpu0=$(cpu_snap)
hl -c 1 -n "$N_EXEC" -d '{"command":"true"}' -x '"exit_code":0' -o "$WORK/s.exec" -e 5 "$EXEC_URL" ||
        note "  !! exec series had errors (see above)"
cpu1=$(cpu_snap)
c1=$(metric agentbox_exec_duration_seconds_count)
s1=$(metric agentbox_exec_duration_seconds_sum)
record exec "exec true over HTTP (1 connection)" "$WORK/s.exec"
cpu_report exec "$cpu0" "$cpu1" "$N_EXEC" "$(printf '%s\n' "$HL_OUT" | rfield cpu_s)"
put exec_mean "$(printf '%s\n' "$HL_OUT" | rfield mean)"
put exec_errors "$(printf '%s\n' "$HL_OUT" | rfield errors)"
if [ -n "$c0" ] && [ -n "$c1" ] && [ "$c1" -gt "$c0" ]; then
        put exec_server_mean "$(awk -v a="$s0" -v b="$s1" -v n=$((c1 - c0)) 'BEGIN {printf "%.3f", (b - a) / n * 1000}')"
        echo "  server-side exec time (metrics: connect to init + run + answer), mean over $((c1 - c0)): $(get exec_server_mean) ms (HTTP mean $(get exec_mean) ms)"
fi

: >"$WORK/s.health1"
hl -c 1 -n "$N_EXEC" -W 20 -o "$WORK/s.health1" "$URL/health" >/dev/null
record health1 "GET /health (1 connection): the HTTP floor" "$WORK/s.health1"
: >"$WORK/s.get1"
hl -c 1 -n "$N_EXEC" -W 20 -o "$WORK/s.get1" "$URL/v1/sandboxes/$EXEC_BOX" >/dev/null
record get1 "GET /v1/sandboxes/ID (store read + cgroup stats)" "$WORK/s.get1"

# The in-box cost of what every exec runs: a loop inside the box times 40
# launches of each ($EPOCHREALTIME around each); medians.
INBOX_CMD='t(){ for i in $(seq 40); do local s=$EPOCHREALTIME; $@; local e=$EPOCHREALTIME; printf %s, $(( ${e/./}-${s/./} )); done; echo; }; t /bin/true; t bash -c true; t bash -lc true; t bash --noprofile -lc true'
r=$(post "/v1/sandboxes/$EXEC_BOX/exec" "{\"command\":\"$INBOX_CMD\"}")
printf '%s\n' "$r" | sed -n 's/.*"stdout":"\([^"]*\)".*/\1/p' | sed 's/\\n/\n/g' >"$WORK/inbox.txt"
if [ "$(grep -c , "$WORK/inbox.txt")" = 4 ]; then
        i=0
        for k in true bashc bashlc noprof; do
                i=$((i + 1))
                sed -n "${i}p" "$WORK/inbox.txt" | tr ',' '\n' | grep . >"$WORK/s.inbox_$k"
                read -r _ med _ < <(pstats "$WORK/s.inbox_$k")
                put "inbox_$k" "$med"
        done
        echo "  inside the box (40 launches from a bash loop, medians): /bin/true $(get inbox_true) ms,"
        echo "    bash -c true $(get inbox_bashc) ms, bash -lc true $(get inbox_bashlc) ms, bash --noprofile -lc true $(get inbox_noprof) ms"
else
        note "  note: the in-box timing loop failed: $r"
fi

# Where an exec's time goes: a system-wide `perf record` of fork/exec/exit and
# a few socket syscalls around N_PERF requests (20 ms apart), cut into phases
# by the process tree of the box's init and the server's threads.
if [ "${PERF:-1}" = 1 ] && command -v perf >/dev/null; then
        INIT_PID=$("$AB" --data "$WORK/A/data" inspect "$EXEC_BOX" 2>/dev/null |
                awk -F'[:,]' '/"init_pid"/ {gsub(/ /, "", $2); print $2}')
        cat >"$WORK/phases.awk" <<'EOF'
function kv(name) { return match(rest, name "=[^ ]+") ? substr(rest, RSTART + length(name) + 1, RLENGTH - length(name) - 1) : "" }
{
        for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+\/[0-9]+$/) break
        if (i > NF) next
        comm = $1; split($i, pt, "/"); pid = pt[1] + 0
        t = $(i + 1); sub(/:$/, "", t); t *= 1000
        ev = $(i + 2); sub(/:$/, "", ev)
        rest = ""; for (j = i + 3; j <= NF; j++) rest = rest " " $j
}
comm == "http_load" && ev == "syscalls:sys_enter_sendto" { st = 1; t0 = t; idt = 0; next }
st == 1 && pid == spid && ev == "syscalls:sys_exit_recvfrom" { t1 = t; st = 2; next }
st == 2 && pid == spid && ev == "syscalls:sys_enter_connect" { t2 = t; st = 3; next }
st == 3 && pid == ipid && ev == "sched:sched_process_fork" { sess = kv("child_pid") + 0; st = 4; next }
st == 4 && pid == sess && ev == "sched:sched_process_fork" { cmd = kv("child_pid") + 0; st = 5; next }
st == 5 && pid == cmd && ev == "sched:sched_process_exec" { t4 = t; st = 6; chain = kv("filename"); next }
st == 6 && pid == cmd && ev == "sched:sched_process_exec" { chain = chain " -> " kv("filename"); next }
st == 6 && pid == cmd && ev == "sched:sched_process_fork" { kid = kv("child_pid") + 0; tk = t; next }
st == 6 && pid == kid && ev == "sched:sched_process_exit" { idt += t - tk; next }
st == 6 && pid == cmd && ev == "sched:sched_process_exit" { t5 = t; st = 7; next }
st == 7 && pid == sess && ev == "syscalls:sys_enter_sendto" { t6 = t; st = 8; next }
st == 8 && comm == "http_load" && ev == "syscalls:sys_exit_recvfrom" {
        n++
        p[1, n] = t1 - t0; p[2, n] = t2 - t1; p[3, n] = t4 - t2; p[4, n] = t5 - t4
        p[5, n] = idt; p[6, n] = t6 - t5; p[7, n] = t - t6; p[8, n] = t - t0
        chains[chain]++
        st = 0
}
function median(k,   a, m, x, y, tmp) {
        m = 0; for (x = 1; x <= n; x++) a[++m] = p[k, x]
        for (x = 2; x <= m; x++) { tmp = a[x]; for (y = x - 1; y >= 1 && a[y] > tmp; y--) a[y + 1] = a[y]; a[y + 1] = tmp }
        return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
}
END {
        if (n == 0) { print "  no complete request found in the trace"; exit 1 }
        split("client send -> server has read the request|server: parse, route, store lookup, box state -> connect to init|connect -> init accepts, forks a session, it forks, exec|the command process: exec -> exit|  of which its children (bash -lc: /etc/profile runs id -u)|command exit -> session sends the result|server: result -> audit + activity (SQLite), JSON -> client has it|total, client send -> response read (traced)", lab, "|")
        top = ""; for (c in chains) if (top == "" || chains[c] > chains[top]) top = c
        printf "  phases of one exec over HTTP, medians of %d traced requests (ms);\n", n
        printf "  the command process exec'd: %s (%d of %d requests)\n", top, chains[top], n
        printf "cmd_chain %s\n", top >>res
        for (k = 1; k <= 8; k++) { printf "    %-72s %7.3f\n", lab[k], median(k); printf "ph%d %.3f\n", k, median(k) >>res }
}
EOF
        if [ -n "$INIT_PID" ] && perf record -q -a -o "$WORK/exec.perf" \
                -e sched:sched_process_fork,sched:sched_process_exec,sched:sched_process_exit \
                -e syscalls:sys_enter_connect,syscalls:sys_enter_sendto,syscalls:sys_exit_recvfrom \
                -- "$HL" -q -n "${N_PERF:-40}" -i 20 -d '{"command":"true"}' "$EXEC_URL" >/dev/null 2>"$WORK/perf.err"; then
                perf script -i "$WORK/exec.perf" -F comm,pid,tid,time,event,trace 2>/dev/null |
                        awk -v spid="$A_PID" -v ipid="$INIT_PID" -v res="$RES" -f "$WORK/phases.awk" ||
                        note "  note: the perf trace could not be cut into phases"
        else
                note "  note: perf record failed (PERF=0 skips it): $(tail -2 "$WORK/perf.err" 2>/dev/null)"
        fi
        rm -f "$WORK/exec.perf"
fi

if [ -n "$CID" ]; then
        for _ in 1 2 3; do $DOCKER exec "$CID" /true >/dev/null 2>&1; done
        : >"$WORK/s.dexec"
        for ((i = 0; i < N_DOCKER_EXEC; i++)); do
                timed $DOCKER exec "$CID" /true >>"$WORK/s.dexec" || { note "  docker exec run $i failed"; break; }
        done
        record dexec "docker exec CID /true" "$WORK/s.dexec"
fi
server_alive "$A_PID" A || exit 1

log "resume of a stopped box"
RES_BOX=$(new_box resume)
echo "  box $RES_BOX"
post "/v1/sandboxes/$RES_BOX/exec" '{"command":"true"}' >/dev/null
: >"$WORK/s.start"
: >"$WORK/s.resexec"
for ((i = 0; i < N_RESUME; i++)); do
        post "/v1/sandboxes/$RES_BOX/stop" >"$WORK/stop.out" || { note "  stop failed: $(cat "$WORK/stop.out")"; break; }
        sleep 0.2
        hl1 "$WORK/s.start" -d '{}' -x '"status":"running"' "$URL/v1/sandboxes/$RES_BOX/start" ||
                { note "  POST start failed: $HL1_ERR"; break; }
        sleep 0.2
        post "/v1/sandboxes/$RES_BOX/stop" >"$WORK/stop.out" || { note "  stop failed: $(cat "$WORK/stop.out")"; break; }
        sleep 0.2
        hl1 "$WORK/s.resexec" -d '{"command":"true"}' -x '"exit_code":0' "$URL/v1/sandboxes/$RES_BOX/exec" ||
                { note "  exec of a stopped box failed: $HL1_ERR"; break; }
        sleep 0.2
done
record resume "POST .../start of a stopped box" "$WORK/s.start"
record resexec "exec true in a stopped box (resume + exec)" "$WORK/s.resexec"
if [ -n "$CID" ]; then
        : >"$WORK/s.dstart"
        for ((i = 0; i < N_DOCKER_START; i++)); do
                $DOCKER stop -t 0 "$CID" >/dev/null 2>&1
                sleep 0.2
                timed $DOCKER start "$CID" >>"$WORK/s.dstart" || { note "  docker start run $i failed"; break; }
                sleep 0.2
        done
        record dstart "docker start CID (after docker stop -t 0)" "$WORK/s.dstart"
fi
server_alive "$A_PID" A || exit 1

log "a new box without a pool (server A, pool_size 0)"
: >"$WORK/s.create"
for ((i = 0; i < N_CREATE; i++)); do
        hl1 "$WORK/s.create" -d '{"app_id":"bench","user_id":"u","chat_id":"create-%n"}' \
                -x '"status":"running"' "$URL/v1/sandboxes" || { note "  create failed: $HL1_ERR"; break; }
        sleep 0.3
done
record create "POST /v1/sandboxes, fresh keys, no pool" "$WORK/s.create"
server_alive "$A_PID" A || exit 1

# ---- 2. server B: the warm pool ------------------------------------------------

log "warm pool (server B, pool_size $POOL_SIZE)"
if start_server B "$POOL_SIZE" 100ms; then
        B_PID=$SERVER_PID
        if wait_pool_full; then
                echo "  pool full: $(health_pool | awk '{print $1 " of " $2}')"
                : >"$WORK/s.pool"
                : >"$WORK/s.notpool"
                for ((i = -2; i < N_POOL; i++)); do # two warm-up claims
                        wait_pool_full || { note "  the pool did not refill within 60 s"; break; }
                        sleep 0.3
                        f=$WORK/s.pool
                        [ $i -lt 0 ] && f=/dev/null
                        if ! hl1 "$f" -d '{"app_id":"bench","user_id":"u","chat_id":"pool-%n"}' \
                                -x '"backend_id":"pool-' "$URL/v1/sandboxes"; then
                                echo "$HL1_ERR" >>"$WORK/notpool.txt"
                                [ $i -ge 0 ] && echo x >>"$WORK/s.notpool"
                        fi
                done
                record pool "POST /v1/sandboxes, fresh keys, claimed from the pool" "$WORK/s.pool"
                np=$(wc -l <"$WORK/s.notpool")
                put pool_notpool "$np"
                if [ "$np" -gt 0 ]; then
                        note "  !! $np acquires with the pool full did not answer 201 with a pool- backend_id; first:"
                        head -3 "$WORK/notpool.txt" | sed 's/^/     /' | tee -a "$NOTES"
                fi
                : >"$WORK/s.poolexec"
                for ((i = 0; i < N_POOL_EXEC; i++)); do
                        wait_pool_full || break
                        sleep 0.3
                        hl1 "$WORK/s.poolexec" -d '{"app_id":"bench","user_id":"u","chat_id":"pex-%n","command":"true"}' \
                                -x '"exit_code":0' "$URL/v1/exec" || { note "  /v1/exec failed: $HL1_ERR"; break; }
                done
                record poolexec "POST /v1/exec, fresh keys (pool claim + first exec)" "$WORK/s.poolexec"
        else
                note "  !! the warm pool of server B never filled: $(curl -s "$URL/health")"
        fi
        server_alive "$B_PID" B
        stop_server "$B_PID"
        rm_boxes "$WORK/B/data"
else
        note "  !! server B (pool) did not start"
fi
URL=$A_URL

if [ -n "$CID" ]; then
        $DOCKER run -d --network none "$DOCKER_IMG" /pause >"$WORK/cid" 2>/dev/null && $DOCKER rm -f "$(cat "$WORK/cid")" >/dev/null 2>&1
        : >"$WORK/s.drun"
        for ((i = 0; i < N_DOCKER_RUN; i++)); do
                a=${EPOCHREALTIME/./}
                c=$($DOCKER run -d --network none "$DOCKER_IMG" /pause 2>/dev/null) || { note "  docker run -d failed"; break; }
                b=${EPOCHREALTIME/./}
                echo $((b - a)) >>"$WORK/s.drun"
                $DOCKER rm -f "$c" >/dev/null 2>&1
                sleep 0.2
        done
        record drun "docker run -d --network none IMG /pause" "$WORK/s.drun"
fi

# ---- 3. /health requests per second --------------------------------------------

log "GET /health requests per second"
if command -v wrk >/dev/null; then
        echo "  wrk -t2 -c64 -d${WRK_SECS}s $URL/health"
        wrk -t2 -c64 -d"${WRK_SECS}s" --latency "$URL/health" >"$WORK/wrk.out" 2>&1
        sed 's/^/    /' "$WORK/wrk.out"
        put wrk_rps "$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$WORK/wrk.out")"
        put wrk_non2xx "$(awk '/Non-2xx/ {print $NF}' "$WORK/wrk.out")"
        put wrk_sockerr "$(awk -F'[ ,]+' '/Socket errors/ {print $4 + $6 + $8 + $10}' "$WORK/wrk.out")"
fi
echo "  http_load -c 64 -t $WRK_SECS $URL/health"
hl -c 64 -t "$WRK_SECS" "$URL/health" -e 3
put hl_rps "$(printf '%s\n' "$HL_OUT" | rfield rps | cut -d. -f1)"
put hl_health_errors "$(printf '%s\n' "$HL_OUT" | rfield errors)"
server_alive "$A_PID" A || exit 1

# ---- 4. 200 concurrent execs ---------------------------------------------------

NCONN=$((CONC_BOXES * CONC_PER_BOX))
log "$NCONN concurrent connections ($CONC_BOXES boxes x $CONC_PER_BOX) running exec of true for ${DURATION}s"
CONC_URLS=()
for ((i = 0; i < CONC_BOXES; i++)); do
        id=$(new_box "conc-$i")
        [ -n "$id" ] || { note "  !! cannot create box conc-$i"; break; }
        CONC_URLS+=("$URL/v1/sandboxes/$id/exec")
done
if [ ${#CONC_URLS[@]} -eq "$CONC_BOXES" ]; then
        hl -c "$CONC_BOXES" -n "$CONC_BOXES" -d '{"command":"true"}' "${CONC_URLS[@]}" >/dev/null # warm-up
        NCPU=$(nproc)
        echo "  first $NCPU connections (one per CPU) for ${CAP_SECS}s: latency without queueing"
        cpu0=$(cpu_snap)
        hl -c "$NCPU" -t "$CAP_SECS" -T 60000 -e 5 -d '{"command":"true"}' -x '"exit_code":0' "${CONC_URLS[@]}"
        cpu1=$(cpu_snap)
        for k in rps p50 p99; do
                put "cap_$k" "$(printf '%s\n' "$HL_OUT" | rfield $k)"
        done
        cpu_report cap "$cpu0" "$cpu1" "$(printf '%s\n' "$HL_OUT" | rfield requests)" "$(printf '%s\n' "$HL_OUT" | rfield cpu_s)"
        e0=$(curl -s -m 5 "$URL/metrics" | awk '/^agentbox_errors_total/ {s += $2} END {print s + 0}')
        curl -s -m 5 "$URL/metrics" | grep '^agentbox_exec_duration_seconds_bucket' >"$WORK/hist0"
        c0=$(metric agentbox_exec_duration_seconds_count)
        s0=$(metric agentbox_exec_duration_seconds_sum)
        echo "  http_load -c $NCONN -t $DURATION -T 60000 -d '{\"command\":\"true\"}' -x '\"exit_code\":0' URL x$CONC_BOXES"
        cpu0=$(cpu_snap)
        hl -c "$NCONN" -t "$DURATION" -T 60000 -e 5 -d '{"command":"true"}' -x '"exit_code":0' "${CONC_URLS[@]}"
        cpu1=$(cpu_snap)
        cpu_report conc "$cpu0" "$cpu1" "$(printf '%s\n' "$HL_OUT" | rfield requests)" "$(printf '%s\n' "$HL_OUT" | rfield cpu_s)"
        for k in requests errors rps p50 p90 p99 max; do
                put "conc_$k" "$(printf '%s\n' "$HL_OUT" | rfield $k)"
        done
        e1=$(curl -s -m 5 "$URL/metrics" | awk '/^agentbox_errors_total/ {s += $2} END {print s + 0}')
        curl -s -m 5 "$URL/metrics" | grep '^agentbox_exec_duration_seconds_bucket' >"$WORK/hist1"
        c1=$(metric agentbox_exec_duration_seconds_count)
        s1=$(metric agentbox_exec_duration_seconds_sum)
        # The server's own exec-time histogram over the run: the bucket holding its p50 and p99.
        read -r hp50 hp99 < <(paste -d' ' "$WORK/hist0" "$WORK/hist1" | awk '{
                le = $1; sub(/.*le="/, "", le); sub(/".*/, "", le); n++; L[n] = le; C[n] = $4 - $2 }
                END { for (i = 1; i <= n; i++) { if (a == "" && C[i] >= 0.5 * C[n]) a = L[i]; if (b == "" && C[i] >= 0.99 * C[n]) b = L[i] }
                      print a, b }')
        echo "  server's exec-time histogram over the run: p50 <= ${hp50:-?} s, p99 <= ${hp99:-?} s (bucket bounds)"
        put conc_server_hp99 "${hp99:-}"
        if [ -n "$c0" ] && [ -n "$c1" ] && [ "$c1" -gt "$c0" ]; then
                put conc_server_mean "$(awk -v a="$s0" -v b="$s1" -v n=$((c1 - c0)) 'BEGIN {printf "%.3f", (b - a) / n * 1000}')"
                put conc_mean "$(printf '%s\n' "$HL_OUT" | rfield mean)"
                echo "  server-side exec time (metrics), mean over $((c1 - c0)): $(get conc_server_mean) ms; HTTP mean $(get conc_mean) ms"
        fi
        echo "  Little's law: $NCONN connections / $(get conc_rps) rps = $(awk -v c="$NCONN" -v r="$(get conc_rps)" 'BEGIN {if (r > 0) printf "%.1f", c / r * 1000}') ms mean latency at this throughput"
        put conc_server_errors $((e1 - e0))
        echo "  server: agentbox_errors_total went up by $((e1 - e0)); execs in flight now: $(metric agentbox_execs_in_flight)"
fi
server_alive "$A_PID" A || exit 1
put load_end "$(cut -d' ' -f1 /proc/loadavg)"

# ---- 5. the table --------------------------------------------------------------

ratio() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN {if (a > 0) printf "%.1fx", b / a}'; }
row() { # label ab_p50 ab_p99 docker_p50 docker_p99
        local r
        r=$(ratio "$2" "$4")
        printf '| %-52s | %9s | %9s | %9s | %9s | %8s |\n' "$1" "${2:--}" "${3:--}" "${4:--}" "${5:--}" "${r:--}"
}
verdict() { # label value op limit unit
        awk -v l="$1" -v v="$2" -v op="$3" -v m="$4" -v u="$5" 'BEGIN {
                if (v == "" || v == "nan") { printf "  %-46s %12s  (target %s %s %s)  n/a\n", l, "-", op, m, u; exit }
                ok = (op == "<=") ? (v + 0 <= m + 0) : (op == ">=") ? (v + 0 >= m + 0) : (v + 0 == m + 0)
                printf "  %-46s %12s  (target %s %s %s)  %s\n", l, v, op, m, u, ok ? "MET" : "MISSED" }'
}

log "results (ms unless noted; agentbox over HTTP on loopback, docker via its CLI)"
printf '| %-52s | %9s | %9s | %9s | %9s | %8s |\n' scenario "ab p50" "ab p99" "dock p50" "dock p99" "dock/ab"
printf '|%s|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..54})" "-----------" "-----------" "-----------" "-----------" "----------"
row "exec true in a running box (docker exec)" "$(get exec_p50)" "$(get exec_p99)" "$(get dexec_p50)" "$(get dexec_p99)"
row "new box from the warm pool (docker run -d)" "$(get pool_p50)" "$(get pool_p99)" "$(get drun_p50)" "$(get drun_p99)"
row "new box without a pool (docker run -d)" "$(get create_p50)" "$(get create_p99)" "$(get drun_p50)" "$(get drun_p99)"
row "/v1/exec with fresh keys: pool claim + first exec" "$(get poolexec_p50)" "$(get poolexec_p99)" "" ""
row "resume: POST start of a stopped box (docker start)" "$(get resume_p50)" "$(get resume_p99)" "$(get dstart_p50)" "$(get dstart_p99)"
row "resume: exec true in a stopped box" "$(get resexec_p50)" "$(get resexec_p99)" "" ""
row "GET /health, 1 connection (HTTP floor)" "$(get health1_p50)" "$(get health1_p99)" "" ""
row "GET /v1/sandboxes/ID, 1 connection" "$(get get1_p50)" "$(get get1_p99)" "" ""
printf '| %-52s | %9s | %9s |\n' "GET /health rps: wrk -t2 -c64 | http_load -c64" "$(get wrk_rps)" "$(get hl_rps)"
printf '| %-52s | %9s | %9s |\n' "$NCONN-conn exec: p50 | p99" "$(get conc_p50)" "$(get conc_p99)"
printf '| %-52s | %9s | %9s |\n' "$NCONN-conn exec: requests, errors" "$(get conc_requests)" "$(get conc_errors)"
printf '| %-52s | %9s |\n' "$NCONN-conn exec: requests per second" "$(get conc_rps)"
printf '| %-52s | %9s | %9s |\n' "$(nproc)-conn exec (one per CPU): p50 | p99" "$(get cap_p50)" "$(get cap_p99)"
printf '| %-52s | %9s |\n' "$(nproc)-conn exec (one per CPU): requests per second" "$(get cap_rps)"
echo
echo "where the exec time goes: HTTP floor (GET /health, 1 connection) p50 $(get health1_p50) ms; exec over HTTP"
echo "  p50 $(get exec_p50) ms, mean $(get exec_mean) ms, of which the server's exec call (connect to the box's"
echo "  init, run, answer; /metrics) $(get exec_server_mean) ms mean. Inside the box, from a bash loop (medians):"
echo "  bash -lc true $(get inbox_bashlc) ms, bash --noprofile -lc true $(get inbox_noprof), bash -c true $(get inbox_bashc),"
echo "  /bin/true $(get inbox_true)."
if [ -n "$(get ph8)" ]; then
        echo "  perf trace of one exec (medians): client->server $(get ph1), server before connecting to init $(get ph2),"
        echo "  init + session + fork + exec $(get ph3), the command process $(get ph4) (its children, e.g. id -u: $(get ph5)),"
        echo "  its exit -> result $(get ph6), server after the result -> client $(get ph7); total $(get ph8) ms."
        echo "  The command process exec'd: $(awk '$1 == "cmd_chain" {$1 = ""; print substr($0, 2)}' "$RES" | tail -1)."
fi
echo "  CPU per exec (ms; boxes / server / load generator / rest of host = total): 1 connection"
echo "  $(get exec_cpu_box) / $(get exec_cpu_server) / $(get exec_cpu_client) / $(get exec_cpu_other) = $(get exec_cpu_total);" \
        "$(nproc) connections $(get cap_cpu_box) / $(get cap_cpu_server) / $(get cap_cpu_client) / $(get cap_cpu_other) = $(get cap_cpu_total);"
echo "  $NCONN connections $(get conc_cpu_box) / $(get conc_cpu_server) / $(get conc_cpu_client) / $(get conc_cpu_other) = $(get conc_cpu_total)."
echo "  $NCONN connections at $(get conc_rps) execs/s wait $(awk -v c="$NCONN" -v r="$(get conc_rps)" 'BEGIN {if (r > 0) printf "%.0f", c / r * 1000}') ms on average (Little's law). Even a mean of 50 ms"
echo "  (p99 >= mean) needs $NCONN / 0.05 s = $((NCONN * 20)) execs/s, i.e. at most $(awk -v c="$NCONN" -v n="$(nproc)" 'BEGIN {printf "%.2f", n * 1000 / (c * 20)}') ms of CPU per exec on $(nproc) CPUs."
echo "  load average: $(get load_start) at the start, $(get load_end) at the end ($(nproc) CPUs, shared with the load generator)"
echo
D=$(get dexec_p50)
E=$(get exec_p50)
X=$( [ -n "$D" ] && [ -n "$E" ] && awk -v a="$E" -v b="$D" 'BEGIN {printf "%.1f", b / a}')
CE=$(get conc_errors)
CS=$(get conc_server_errors)
echo "targets (issue 3):"
verdict "exec true, p50 (ms)" "$E" "<=" 2.5 ms
verdict "exec true, docker exec p50 / agentbox p50" "$X" ">=" 25 x
verdict "acquire from the warm pool, p50 (ms)" "$(get pool_p50)" "<=" 1 ms
verdict "resume of a stopped box (POST start), p50 (ms)" "$(get resume_p50)" "<=" 20 ms
verdict "GET /health with wrk (rps)" "$(get wrk_rps)" ">=" 20000 rps
verdict "$NCONN concurrent execs, errors" "$CE" "==" 0 errors
verdict "$NCONN concurrent execs, p99 (ms)" "$(get conc_p99)" "<=" 50 ms
[ "$(get pool_notpool)" = 0 ] || echo "  (warm pool: $(get pool_notpool) acquires did not come from the pool)"
[ -z "$CS" ] || [ "$CS" = 0 ] || echo "  (the server counted $CS errors during the concurrent run)"
if [ -s "$NOTES" ]; then
        echo
        echo "notes:"
        cat "$NOTES"
fi
exit 0
