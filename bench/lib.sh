# shellcheck shell=bash
# bench/lib.sh - helpers shared by the benchmarks: Docker set-up (bench/run.sh,
# bench/http.sh) and server/statistics helpers (bench/http.sh, bench/runner.sh).
# Source it; it defines functions only.
#
# The caller provides:
#   WORK        a private temp dir (dockerd's data root, socket and log go
#               under $WORK/docker; the image is built in $WORK/img)
#   DOCKER_IMG  the name to give the local image
#   note MSG    prints MSG and keeps it for the end of the run
# and declares DOCKER= DOCKERD_PID= DOCKER_CIDS=() before calling these.
#
# docker_setup     installs Debian's docker.io if missing; uses a dockerd that
#                  already answers, else starts a private one (own socket,
#                  data root, exec root and log under $WORK/docker; no bridge,
#                  no iptables, cgroupfs driver). Sets DOCKER to the client
#                  command (with -H when private) and DOCKERD_PID when it
#                  started one. Returns 1 (after a note) when Docker cannot run.
# docker_image     builds $DOCKER_IMG by `docker import` of a tar holding a
#                  static /true and /pause (gcc -static here; no registry, no
#                  network). /pause sleeps until killed: a long-lived PID 1.
# docker_teardown  removes the containers in DOCKER_CIDS and the image, and
#                  stops the dockerd it started (SIGTERM, then SIGKILL after 10 s).
#                  Anything dockerd left mounted under $WORK is the caller's to
#                  unmount.

docker_setup() {
        if ! command -v dockerd >/dev/null; then
                echo "  installing docker.io (Debian) ..."
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                        docker.io >"$WORK/apt.log" 2>&1 ||
                        { note "  note: apt-get install docker.io failed (see below): Docker column skipped"; tail -3 "$WORK/apt.log"; return 1; }
        fi
        # The Debian client matches the Debian daemon; another docker on PATH may not.
        local cli=/usr/bin/docker
        [ -x $cli ] || cli=$(command -v docker) || { note "  note: no docker client: Docker column skipped"; return 1; }
        if $cli info >/dev/null 2>&1; then
                DOCKER=$cli
                echo "  using the dockerd that already runs (left running afterwards)"
                return 0
        fi
        local d=$WORK/docker
        mkdir -p "$d"
        dockerd --data-root "$d/root" --exec-root "$d/exec" -H "unix://$d/docker.sock" \
                --pidfile "$d/docker.pid" --iptables=false --ip-masq=false --bridge=none \
                --exec-opt native.cgroupdriver=cgroupfs >"$d/dockerd.log" 2>&1 &
        DOCKERD_PID=$!
        DOCKER="$cli -H unix://$d/docker.sock"
        for _ in $(seq 1 300); do
                $DOCKER info >/dev/null 2>&1 && { echo "  started a private dockerd (pid $DOCKERD_PID, log $d/dockerd.log)"; return 0; }
                kill -0 "$DOCKERD_PID" 2>/dev/null || break
                sleep 0.1
        done
        note "  note: dockerd did not come up (last lines of its log below): Docker column skipped"
        tail -5 "$d/dockerd.log" | sed 's/^/    /' | tee -a "$NOTES"
        DOCKER=
        return 1
}

docker_image() {
        local r=$WORK/img
        mkdir -p "$r"
        cat >"$WORK/tiny.c" <<'EOF'
/* /true exits 0; /pause sleeps until killed (PID 1 of the long-lived container). */
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv)
{
        (void)argc;
        const char *n = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
        if (!strcmp(n, "pause"))
                for (;;)
                        pause();
        return 0;
}
EOF
        gcc -O2 -static -s -o "$r/true" "$WORK/tiny.c" || return 1
        ln "$r/true" "$r/pause"
        mkdir -p "$r/proc" "$r/dev" "$r/sys" "$r/etc" "$r/tmp"
        tar -C "$r" -c . | $DOCKER import - "$DOCKER_IMG" >/dev/null
}

docker_teardown() {
        if [ -n "$DOCKER" ]; then
                for c in "${DOCKER_CIDS[@]}"; do $DOCKER rm -f "$c" >/dev/null 2>&1; done
                $DOCKER rmi -f "$DOCKER_IMG" >/dev/null 2>&1
        fi
        if [ -n "$DOCKERD_PID" ]; then
                kill "$DOCKERD_PID" 2>/dev/null
                for _ in $(seq 1 100); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.1; done
                kill -9 "$DOCKERD_PID" 2>/dev/null
                wait "$DOCKERD_PID" 2>/dev/null
        fi
        DOCKER_CIDS=()
        DOCKERD_PID=
}

# ---- shared by bench/http.sh and bench/runner.sh ----------------------------

# The cgroup parent the native backend makes for a data dir: agentbox-%08x of
# a 64-bit FNV-1a hash of the dir's real path (src/backend/native.c).
cg_parent() {
        local p h=1469598103934665603 i c
        p=$(realpath "$1")
        for ((i = 0; i < ${#p}; i++)); do
                printf -v c '%d' "'${p:i:1}"
                h=$(((h ^ c) * 1099511628211))
        done
        printf 'agentbox-%08x\n' $(((h ^ (h >> 32)) & 0xffffffff))
}

stop_server() { # PID: SIGTERM, then SIGKILL after 10 s
        local pid=$1
        kill -TERM "$pid" 2>/dev/null || return 0
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
}

# pstats FILE: "n p50 p90 p99 max" (ms, nearest rank) of a file of microsecond samples.
pstats() {
        sort -n "$1" | awk '
                function q(p,   k) { k = int(p * NR); if (k < p * NR) k++; if (k < 1) k = 1; return v[k] / 1000 }
                {v[NR] = $1}
                END { if (NR == 0) { print "0 - - - -"; exit }
                      printf "%d %.3f %.3f %.3f %.3f\n", NR, q(0.5), q(0.9), q(0.99), v[NR] / 1000 }'
}

# rm_all_boxes DATA: removes every box the CLI lists in the data folder DATA
# (in batches), then the folder's cgroup parent. For cleanup traps.
rm_all_boxes() {
        local d=$1 cg c
        [ -d "$d/boxes" ] || return 0
        "$AB" --data "$d" ls 2>/dev/null | awk 'NR > 1 {print $1}' |
                xargs -r -n 200 "$AB" --data "$d" rm >/dev/null 2>&1
        cg=$(cg_parent "$d")
        for c in /sys/fs/cgroup/*/"$cg" /sys/fs/cgroup/"$cg"; do
                [ -d "$c" ] && rmdir "$c" 2>/dev/null
        done
        return 0
}

# leak_report DATA: what boxes of the data folder DATA left behind once they
# are all deleted: loop devices backed by its files, mounts of it in any mount
# namespace, its cgroups, uid-range claims naming it
# (AGENTBOX_UID_REGISTRY or /var/lib/agentbox/uid-ranges), processes in its
# cgroups. One line each; a line starting with "LEAK" for anything found.
leak_report() {
        local d cg n f p reg
        d=$(realpath "$1")
        cg=$(cg_parent "$1")
        n=0
        for f in /sys/block/loop*/loop/backing_file; do
                [ -r "$f" ] && case $(cat "$f" 2>/dev/null) in "$d"/*) n=$((n + 1)) ;; esac
        done
        report_count "loop devices backed by its files" "$n"
        n=$(for p in /proc/[0-9]*; do readlink "$p/ns/mnt" 2>/dev/null | tr '\n' ' '; echo "$p"; done |
                sort -u -k1,1 | awk '{print $2}' | while read -r p; do
                        grep -F -c " $d/" "$p/mountinfo" 2>/dev/null; done | awk '{s += $1} END {print s + 0}')
        report_count "mounts under it (every mount namespace)" "$n"
        n=$(find /sys/fs/cgroup -maxdepth 2 -name "$cg" -type d 2>/dev/null | wc -l)
        report_count "cgroup directories ($cg)" "$n"
        reg=${AGENTBOX_UID_REGISTRY:-/var/lib/agentbox/uid-ranges}
        n=$(grep -l -F -r "$d/" "$reg" 2>/dev/null | wc -l)
        report_count "uid-range claims naming it ($reg)" "$n"
        n=$(grep -l -F "/$cg/" /proc/[0-9]*/cgroup 2>/dev/null | wc -l)
        report_count "processes in its cgroups" "$n"
}

report_count() { # LABEL COUNT
        if [ "$2" -gt 0 ]; then
                echo "  LEAK $1: $2"
        else
                echo "  $1: 0"
        fi
}
