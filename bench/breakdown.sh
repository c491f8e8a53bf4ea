#!/usr/bin/env bash
# bench/breakdown.sh - where the time of a create, a start, a stop and an exec goes.
#
#   sudo bench/breakdown.sh          (AGENTBOX_BUILD=dir to use another build, N=runs)
#
# 1. Untraced component costs: mkfs.ext4 (64 MiB and 4 GiB images, the
#    engine's options), the first cgroup-v1 migration after an idle moment,
#    CLI process start with and without opening the backend.
# 2. `perf trace` (in-kernel syscall tracing: far less overhead than strace)
#    of N creates, N starts and N stops, cut into phases at syscalls the
#    engine makes in a fixed order (bench/trace_phases.py).
# 3. A system-wide `perf record` of scheduler events around N execs, filtered
#    to the CLI and the box's process tree: connect, session fork, bash, what
#    bash -lc starts while reading /etc/profile.
# 4. HTTP exec, where the time goes: `agentbox serve` on the same data folder,
#    and bench/exec_pair.c taking turns between a host spawn of /bin/true, a
#    host spawn of `bash --noprofile -lc true` (the box's login LANG and
#    PATH), an HTTP exec of {"argv":["true"]}, of {"command":"true"} and of
#    {"argv":["bash","--noprofile","-lc","true"]}, `true` sent straight to
#    the box's init (on a kept connection, and on a new one) and GET
#    /health; the differences of the medians are each layer's share.
# Everything lives in a temp dir removed at the end. Needs root and perf.
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${AGENTBOX_BUILD:-$ROOT/build-bench}
AB=$BUILD/agentbox
N=${N:-7}
[ "$(id -u)" -eq 0 ] || { echo "breakdown.sh: needs root" >&2; exit 2; }
command -v perf >/dev/null || { echo "breakdown.sh: needs perf (apt-get install linux-perf)" >&2; exit 2; }
[ -x "$AB" ] || { echo "breakdown.sh: no $AB: run bench/run.sh first (it builds)" >&2; exit 2; }

# perf's syscall and scheduler tracepoints live in tracefs: mount it for the run if needed.
MOUNTED_TRACEFS=0
if [ ! -d /sys/kernel/tracing/events ]; then
        mount -t tracefs nodev /sys/kernel/tracing || { echo "breakdown.sh: cannot mount tracefs" >&2; exit 2; }
        MOUNTED_TRACEFS=1
fi
WORK=$(mktemp -d /var/tmp/agentbox-breakdown.XXXXXX)
D=$WORK/data
BOXES=()
CGP=
SERVER_PID=
cleanup() {
        trap - EXIT INT TERM
        if [ -n "$SERVER_PID" ]; then
                kill "$SERVER_PID" 2>/dev/null
                wait "$SERVER_PID" 2>/dev/null
        fi
        for b in "${BOXES[@]}"; do "$AB" --data "$D" rm "$b" >/dev/null 2>&1; done
        # what a server (section 4) leaves mounted once no box runs
        [ -d "$D" ] && "$AB" --data "$D" cleanup >/dev/null 2>&1
        # The engine's per-data-folder cgroup parent outlives the boxes.
        if [ -n "$CGP" ]; then
                for d in /sys/fs/cgroup/*/"$CGP" /sys/fs/cgroup/"$CGP"; do
                        [ -d "$d" ] && rmdir "$d" 2>/dev/null
                done
        fi
        for c in memory pids cpu cpuacct freezer; do rmdir /sys/fs/cgroup/$c/abbd-$$-* 2>/dev/null; done
        [ "${KEEP:-0}" = 1 ] && echo "kept $WORK" || rm -rf "$WORK"
        [ "$MOUNTED_TRACEFS" = 1 ] && umount /sys/kernel/tracing
}
trap cleanup EXIT
trap 'exit 130' INT TERM
abx() { "$AB" --data "$D" "$@"; }
med() { sort -n | awk '{v[NR]=$1} END {if (NR) printf "%.2f", (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
# ms N CMD...: median wall time of CMD in ms.
ms() {
        local n=$1 i a b
        shift
        for ((i = 0; i < n; i++)); do
                a=${EPOCHREALTIME/./}
                "$@" >/dev/null 2>&1
                b=${EPOCHREALTIME/./}
                echo $((b - a))
        done | awk '{print $1/1000}' | med
}

echo "== untraced components (median of $N)"
OPTS="lazy_itable_init=1,lazy_journal_init=1,root_owner=1048576:1048576"
mkfs_img() { rm -f "$WORK/img"; truncate -s "$1" "$WORK/img"; mkfs.ext4 -q -F -m 0 -E "$OPTS" -L agentbox "$WORK/img"; }
echo "  mkfs.ext4 64 MiB image:              $(ms "$N" mkfs_img 64M) ms"
echo "  mkfs.ext4 4 GiB image (the default): $(ms "$N" mkfs_img 4G) ms"
rm -f "$WORK/img"
python3 - "$N" "$$" <<'EOF'
import os, signal, statistics, sys, time
n, tag = int(sys.argv[1]), sys.argv[2]
first, later = [], []
for i in range(n):
    pid = os.fork()
    if pid == 0:
        signal.pause()
        os._exit(0)
    time.sleep(0.15)  # an idle moment, as between two box starts
    ts = []
    for c in ("memory", "pids", "cpu", "cpuacct", "freezer"):
        d = "/sys/fs/cgroup/%s/abbd-%s-%d" % (c, tag, i)
        os.mkdir(d)
        fd = os.open(d + "/cgroup.procs", os.O_WRONLY)
        t = time.perf_counter()
        os.write(fd, str(pid).encode())
        ts.append((time.perf_counter() - t) * 1e3)
        os.close(fd)
    first.append(ts[0])
    later.append(sum(ts[1:]))
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    for c in ("memory", "pids", "cpu", "cpuacct", "freezer"):
        os.rmdir("/sys/fs/cgroup/%s/abbd-%s-%d" % (c, tag, i))
print("  cgroup v1: first migration after idle: %.2f ms (min %.2f, max %.2f); the other 4 controllers together: %.2f ms"
      % (statistics.median(first), min(first), max(first), statistics.median(later)))
EOF
echo "  RCU: /sys/kernel/rcu_expedited=$(cat /sys/kernel/rcu_expedited 2>/dev/null || echo n/a)"
abx ls >/dev/null 2>&1
echo "  spawn /bin/true:                     $(ms 30 /bin/true) ms"
echo "  agentbox version (no backend):       $(ms 30 "$AB" version) ms"
echo "  agentbox ls (opens the backend):     $(ms 30 abx ls) ms"

echo
echo "== create (perf trace, $N runs, 64 MiB disk)"
abx create --id "bd-$$-w" --disk 64M >/dev/null && abx rm "bd-$$-w" >/dev/null
TR="execve,execveat,clone,clone3,wait4,mount,ioctl,unshare,open_tree,move_mount,mount_setattr,pivot_root,seccomp,exit_group,pidfd_send_signal,poll,ppoll"
files=()
for ((i = 0; i < N; i++)); do
        id="bd-$$-$i"
        perf trace -o "$WORK/create.$i" -e "$TR" -- "$AB" --data "$D" create --id "$id" --disk 64M >/dev/null 2>&1
        BOXES+=("$id")
        files+=("$WORK/create.$i")
        abx rm "$id" >/dev/null
        sleep 0.1
done
python3 "$ROOT/bench/trace_phases.py" start "${files[@]}"

echo
echo "== stop and start of a running box (perf trace, $N runs)"
id="bd-$$-r"
abx create --id "$id" --disk 64M >/dev/null
BOXES+=("$id")
sf=() tf=()
for ((i = 0; i < N; i++)); do
        perf trace -o "$WORK/stop.$i" -e "$TR" -- "$AB" --data "$D" stop "$id" >/dev/null 2>&1
        perf trace -o "$WORK/start.$i" -e "$TR" -- "$AB" --data "$D" start "$id" >/dev/null 2>&1
        sf+=("$WORK/stop.$i")
        tf+=("$WORK/start.$i")
        sleep 0.1
done
echo "-- stop"
python3 "$ROOT/bench/trace_phases.py" stop "${sf[@]}"
echo "-- start"
python3 "$ROOT/bench/trace_phases.py" start "${tf[@]}"

echo
echo "== exec true (perf record -a of fork/exec/exit + connect/accept, $N runs)"
for _ in 1 2 3; do abx exec "$id" -- true; done
INIT=$(abx inspect "$id" | awk -F'[:,]' '/"init_pid"/ {gsub(/ /, "", $2); print $2}')
CGP=$(awk -F: '$3 ~ /^\/agentbox/ {split($3, a, "/"); print a[2]; exit}' "/proc/$INIT/cgroup")
ef=()
for ((i = 0; i < N; i++)); do
        perf record -q -a -o "$WORK/exec.$i.data" \
                -e sched:sched_process_fork,sched:sched_process_exec,sched:sched_process_exit \
                -e syscalls:sys_enter_connect,syscalls:sys_exit_accept4 \
                -- "$AB" --data "$D" exec "$id" -- true >/dev/null 2>&1
        perf script -i "$WORK/exec.$i.data" -F comm,pid,time,event,trace >"$WORK/exec.$i" 2>/dev/null
        ef+=("$WORK/exec.$i:$INIT")
done
python3 "$ROOT/bench/trace_phases.py" exec "${ef[@]}"
echo
echo "-- what bash -lc reads at startup (strace of one bash -lc true inside the box)"
echo "   files opened by bash -lc true on the host with the box's environment:"
env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/workspace LANG=C.UTF-8 \
        strace -f -e trace=openat,execve -o "$WORK/bash.st" /bin/bash -lc true
grep -E 'execve\(|openat\(.*(profile|bashrc|\.sh")' "$WORK/bash.st" | grep -v ENOENT | sed -E 's/^[0-9]+ +/   /' | cut -c1-110

echo
N_HTTP=${N_HTTP:-300}
echo "== HTTP exec: where the time goes ($N_HTTP steps, each one of every series; bench/exec_pair.c)"
cc -std=gnu11 -O2 -Wall -Wextra "$ROOT/bench/exec_pair.c" -o "$WORK/exec_pair" || exit 1
printf 'idle_stop: 0\npool_size: 0\nsample_interval: 0\n' >"$WORK/serve.yaml"
PORT=
for _ in 1 2 3 4 5; do
        p=$((20000 + RANDOM % 40000))
        ss -Hltn "sport = :$p" 2>/dev/null | grep -q . && continue
        env -u AGENTBOX_TOKEN AGENTBOX_INIT="$BUILD/agentbox-init" "$AB" serve --listen "127.0.0.1:$p" \
                --data "$D" --config "$WORK/serve.yaml" >"$WORK/serve.log" 2>&1 &
        SERVER_PID=$!
        for _ in $(seq 1 100); do
                curl -s -m 1 -o /dev/null "http://127.0.0.1:$p/health" && { PORT=$p; break 2; }
                kill -0 "$SERVER_PID" 2>/dev/null || break
                sleep 0.1
        done
        kill "$SERVER_PID" 2>/dev/null
        wait "$SERVER_PID" 2>/dev/null
        SERVER_PID=
done
if [ -z "$PORT" ]; then
        echo "  the server did not start: $(tail -3 "$WORK/serve.log")"
        exit 1
fi
BOX_PATH=$(abx exec "$id" -- 'printf %s "$PATH"')
BOX_LANG=$(abx exec "$id" -- 'printf %s "$LANG"')
out=$("$WORK/exec_pair" -n "$N_HTTP" -W 30 -u "$D/boxes/$id/init.sock" -g \
        -S "bash --noprofile -lc true" -E "PATH=$BOX_PATH" -E "LANG=$BOX_LANG" 127.0.0.1 "$PORT" \
        "/v1/sandboxes/$id/exec" '{"argv":["true"]}' '{"command":"true"}' \
        '{"argv":["bash","--noprofile","-lc","true"]}') || { echo "  $out"; exit 1; }
p50() { sed -n "s/^RESULT what=$1 .* p50=\([^ ]*\).*/\1/p" <<<"$out"; }
sp=$(p50 spawn) argv=$(p50 body1) cmd=$(p50 body2) kept=$(p50 init_kept) new=$(p50 init_new) hl=$(p50 health)
hb=$(p50 spawn2) ab=$(p50 body3)
d() { awk -v a="$1" -v b="$2" -v c="${3:-0}" 'BEGIN {printf "%.3f", a - b - c}'; }
printf '  %-58s %7s ms\n' "host: posix_spawn /bin/true + wait (the floor)" "$sp" \
        "host: bash --noprofile -lc true (the box's LANG, PATH)" "$hb" \
        "init, kept connection: true (argv)" "$kept" \
        "init, new connection: true (argv)" "$new" \
        "HTTP exec {\"argv\":[\"true\"]}" "$argv" \
        "HTTP exec {\"command\":\"true\"} (bash runs the builtin)" "$cmd" \
        "HTTP exec {\"argv\":[\"bash\",\"--noprofile\",\"-lc\",\"true\"]}" "$ab" \
        "HTTP GET /health (the HTTP floor)" "$hl"
echo "  shares of an HTTP argv exec (differences of medians; the load moves them):"
printf '  %-58s %7s ms\n' "the program: the host's spawn" "$sp" \
        "init: request, pipes, spawn in the box's namespaces, answer" "$(d "$kept" "$sp")" \
        "HTTP: a request and its answer on loopback (GET /health)" "$hl" \
        "the server: route, store, quota, init client, 2 thread hand-offs" "$(d "$argv" "$kept" "$hl")" \
        "saved by the kept connection (connect, session fork)" "$(d "$new" "$kept")"
echo "  shares of an HTTP shell-string exec:"
printf '  %-58s %7s ms\n' "bash's own start over /bin/true's (host)" "$(d "$hb" "$sp")" \
        "the shell-string path over the same bash by argv (ours)" "$(d "$cmd" "$ab")"
