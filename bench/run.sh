#!/usr/bin/env bash
# bench/run.sh - agentbox latency and footprint, side by side with bwrap and
# Docker measured in the same run on the same host.
#
#   sudo bench/run.sh
#
# What it does (everything it creates lives under one temp dir and is removed
# at the end, also on Ctrl-C):
#   1. builds agentbox if needed (meson + ninja in build-bench/), compiles
#      bench/bench_engine.c against build-bench/libagentbox.a and runs it
#      (library level: create+first exec, exec, stop+start, spawn costs)
#   2. CLI level: `agentbox create` + `agentbox exec ID -- true`, `exec`,
#      `stop` + `start`, idle RSS of a box (init + descendants, via /proc)
#   3. bwrap running true with a comparable namespace set
#   4. Docker: installs docker.io if missing, starts a private dockerd (own
#      socket, data root and log) unless one already answers, imports a tiny
#      local image (static `true` and `pause` built here with gcc -static, no
#      network), then docker run --rm / docker exec / docker stop+start
#   5. prints one table: scenario | agentbox | bwrap | docker | docker/agentbox
#
# Knobs (environment): AGENTBOX_BUILD (build dir, default build-bench),
# N_A create iterations (20), N_B exec iterations (200), N_C stop+start
# iterations (20), N_CLI CLI exec iterations (100), N_DOCKER docker
# iterations (10), NO_DOCKER=1 skips Docker, KEEP=1 keeps the temp dir.
# Exit status is 0 unless agentbox itself fails; a missing peer is noted and
# its column left empty.
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${AGENTBOX_BUILD:-$ROOT/build-bench}
N_A=${N_A:-20}
N_B=${N_B:-200}
N_C=${N_C:-20}
N_CLI=${N_CLI:-100}
N_DOCKER=${N_DOCKER:-10}
DISK=64M

if [ "$(id -u)" -ne 0 ]; then
        echo "bench/run.sh: needs root (boxes are namespaces, cgroups and loop disks): sudo $0" >&2
        exit 2
fi

WORK=$(mktemp -d /var/tmp/agentbox-bench.XXXXXX)
chmod 700 "$WORK"
RES=$WORK/results          # "key median" lines for the table
NOTES=$WORK/notes
: >"$RES"
: >"$NOTES"
AB=$BUILD/agentbox
ABD=$WORK/cli-data
CLI_BOXES=()
BWRAP_PID=
DOCKER=
DOCKERD_PID=
DOCKER_CIDS=()
CG_PARENTS=()
DOCKER_IMG=agentbox-bench/tiny:$$

# docker_setup, docker_image, docker_teardown (shared with bench/http.sh)
. "$ROOT/bench/lib.sh"

log() { printf '\n== %s\n' "$*"; }
note() { printf '%s\n' "$*" | tee -a "$NOTES"; }

cleanup() {
        local rc=$?
        trap - EXIT INT TERM
        set +e
        for id in "${CLI_BOXES[@]}"; do
                "$AB" --data "$ABD" rm "$id" >/dev/null 2>&1
        done
        [ -n "$BWRAP_PID" ] && kill "$BWRAP_PID" 2>/dev/null && wait "$BWRAP_PID" 2>/dev/null
        docker_teardown
        # The engine leaves one empty cgroup parent per data folder behind: ours go.
        for cg in "${CG_PARENTS[@]}"; do
                [ -n "$cg" ] || continue
                for d in /sys/fs/cgroup/*/"$cg" /sys/fs/cgroup/"$cg"; do
                        [ -d "$d" ] && rmdir "$d" 2>/dev/null
                done
        done
        # Anything still mounted under the work dir (dockerd's overlays) goes first.
        if [ -d "$WORK" ]; then
                awk -v w="$WORK" 'index($2, w) == 1 {print $2}' /proc/self/mounts | sort -r |
                        while read -r m; do umount -l "$m" 2>/dev/null; done
        fi
        if [ "${KEEP:-0}" = 1 ]; then
                echo "bench/run.sh: kept $WORK"
        else
                rm -rf "$WORK"
        fi
        exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- timing helpers -------------------------------------------------------

# stats FILE: "n min median p90" in ms of a file of microsecond samples.
stats() {
        sort -n "$1" | awk '{v[NR]=$1} END {
                if (NR == 0) { print "0 - - -"; exit }
                med = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2
                k = int(0.9 * NR); if (k < 0.9 * NR) k++; if (k < 1) k = 1
                printf "%d %.3f %.3f %.3f\n", NR, v[1]/1000, med/1000, v[k]/1000 }'
}

# timeit KEY LABEL N CMD...: runs CMD N times, each timed alone (the command
# may be a shell function); records the median under KEY. A failed run aborts
# the series (returns 1).
timeit() {
        local key=$1 label=$2 n=$3 i a b f=$WORK/samples.$1
        shift 3
        : >"$f"
        for ((i = 0; i < n; i++)); do
                a=${EPOCHREALTIME/./}
                if ! "$@" >/dev/null 2>&1; then
                        note "  $label: run $i failed: $*"
                        return 1
                fi
                b=${EPOCHREALTIME/./}
                echo $((b - a)) >>"$f"
        done
        read -r cnt mn med p90 < <(stats "$f")
        printf '  %-46s n=%-4s min %8s  median %8s  p90 %8s ms\n' "$label" "$cnt" "$mn" "$med" "$p90"
        echo "$key $med" >>"$RES"
}

# Like timeit, but runs SETUP (untimed) before and TEARDOWN (untimed) after each run.
timeit_wrapped() {
        local key=$1 label=$2 n=$3 setup=$4 teardown=$5 i a b f=$WORK/samples.$1
        shift 5
        : >"$f"
        for ((i = 0; i < n; i++)); do
                $setup "$i" >/dev/null 2>&1
                a=${EPOCHREALTIME/./}
                if ! "$@" "$i" >/dev/null 2>&1; then
                        note "  $label: run $i failed"
                        $teardown "$i" >/dev/null 2>&1
                        return 1
                fi
                b=${EPOCHREALTIME/./}
                $teardown "$i" >/dev/null 2>&1
                echo $((b - a)) >>"$f"
        done
        read -r cnt mn med p90 < <(stats "$f")
        printf '  %-46s n=%-4s min %8s  median %8s  p90 %8s ms\n' "$label" "$cnt" "$mn" "$med" "$p90"
        echo "$key $med" >>"$RES"
}

# rss_tree PID: "rss_kib pss_kib nprocs" of PID and all its descendants.
rss_tree() {
        local root=$1
        local -A parent=()
        local p pp
        for s in /proc/[0-9]*/stat; do
                p=${s#/proc/}
                p=${p%/stat}
                pp=$(awk '{sub(/^.*\) /, ""); print $2}' "$s" 2>/dev/null) || continue
                [ -n "$pp" ] && parent[$p]=$pp
        done
        local rss=0 pss=0 n=0 q v
        for p in "${!parent[@]}"; do
                q=$p
                while [ -n "$q" ] && [ "$q" != "$root" ] && [ "$q" != 0 ] && [ "$q" != 1 ]; do
                        q=${parent[$q]:-}
                done
                [ "$q" = "$root" ] || [ "$p" = "$root" ] || continue
                v=$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null)
                [ -n "$v" ] || continue
                rss=$((rss + v))
                v=$(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null)
                pss=$((pss + ${v:-0}))
                n=$((n + 1))
        done
        echo "$rss $pss $n"
}

kib_to_mib() { awk -v k="$1" 'BEGIN {printf "%.2f", k / 1024}'; }

# ---- 0. machine -----------------------------------------------------------

log "machine"
echo "  date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "  kernel:  $(uname -r)"
echo "  cpus:    $(nproc) ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo))"
echo "  memory:  $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
echo "  cgroup:  $(if [ -f /sys/fs/cgroup/cgroup.controllers ] && ! [ -d /sys/fs/cgroup/memory ]; then echo v2; else echo 'v1 (hybrid)'; fi)"
echo "  load:    $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  work:    $WORK"

# ---- 1. build + library level ---------------------------------------------

log "build"
if [ ! -f "$BUILD/build.ninja" ]; then
        (cd "$ROOT" && meson setup "$BUILD" >/dev/null) || { echo "meson setup failed" >&2; exit 1; }
fi
if ! ninja -C "$BUILD" agentbox agentbox-full agentbox-init libagentbox.a >"$WORK/ninja.log" 2>&1; then
        if [ -x "$AB" ] && [ -f "$BUILD/libagentbox.a" ]; then
                note "  note: ninja failed (tree being edited?); using the existing binaries in $BUILD"
                tail -5 "$WORK/ninja.log" | sed 's/^/    /'
        else
                echo "bench/run.sh: build failed:" >&2
                tail -20 "$WORK/ninja.log" >&2
                exit 1
        fi
fi
# The exact source measured: commit, plus a hash of uncommitted changes under src/.
SRCSTATE=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null)
if ! (cd "$ROOT" && git diff --quiet HEAD -- src 2>/dev/null); then
        SRCSTATE="$SRCSTATE + uncommitted src changes $(cd "$ROOT" && git diff HEAD -- src | sha1sum | cut -c1-8)"
fi
echo "  agentbox: $AB ($SRCSTATE)"
gcc -std=gnu11 -D_GNU_SOURCE -O2 -Wall -Wextra -Wno-unused-parameter -I"$ROOT/src" \
        "$ROOT/bench/bench_engine.c" "$BUILD/libagentbox.a" -ljansson -lseccomp -lm -lpthread \
        -o "$WORK/bench_engine" || { echo "bench/run.sh: cannot compile bench_engine" >&2; exit 1; }

log "library level (bench_engine: -a $N_A -b $N_B -c $N_C)"
if ! "$WORK/bench_engine" --data "$WORK/engine-data" --init "$BUILD/agentbox-init" \
        -a "$N_A" -b "$N_B" -c "$N_C" --default-disk-n 5 --spawn-n 100 | tee "$WORK/engine.txt" |
        grep -v -e '^RESULT' -e '^CGPARENT'; then
        echo "bench/run.sh: bench_engine failed" >&2
        exit 1
fi
awk '$1 == "RESULT" {print "lib_" $2, $5}' "$WORK/engine.txt" >>"$RES"
CG_PARENTS+=("$(awk '$1 == "CGPARENT" {print $2; exit}' "$WORK/engine.txt")")

# ---- 2. CLI level ---------------------------------------------------------

log "agentbox CLI level ($AB)"
abx() { "$AB" --data "$ABD" "$@"; }
# Spawning any binary from this shell costs this much: the floor of every CLI row.
timeit floor_spawn "floor: spawn /bin/true from this shell" "$N_CLI" /bin/true

cli_id() { echo "cb-$$-$1"; }
cli_create_exec() { abx create --id "$(cli_id "$1")" --disk "$DISK" && abx exec "$(cli_id "$1")" -- true; }
cli_rm() { abx rm "$(cli_id "$1")"; }
none() { :; }
abx create --id "cb-$$-warm" --disk "$DISK" >/dev/null && abx exec "cb-$$-warm" -- true && abx rm "cb-$$-warm" >/dev/null
timeit_wrapped cli_create "agentbox create + exec true" "$N_A" none cli_rm cli_create_exec ||
        exit 1

RUN="cb-$$-run"
abx create --id "$RUN" --disk "$DISK" >/dev/null || exit 1
CLI_BOXES+=("$RUN")
for _ in 1 2 3 4 5; do abx exec "$RUN" -- true; done
timeit cli_exec "agentbox exec ID -- true" "$N_CLI" abx exec "$RUN" -- true || exit 1
INIT_PID=$(abx inspect "$RUN" | awk -F'[:,]' '/"init_pid"/ {gsub(/ /, "", $2); print $2}')
if [ -n "$INIT_PID" ] && command -v nsenter >/dev/null; then
        # The kernel's floor for "run a process in a live box": join its namespaces.
        timeit nsenter_exec "floor: nsenter -a -t INIT /bin/true" "$N_CLI" \
                nsenter -a -t "$INIT_PID" /bin/true || true
fi
cli_restart() { abx stop "$RUN" && abx start "$RUN"; }
timeit cli_restart "agentbox stop + start" "$N_C" cli_restart || exit 1

# Idle footprint of a fresh box: its init and every descendant.
RSSBOX="cb-$$-rss"
abx create --id "$RSSBOX" --disk "$DISK" >/dev/null || exit 1
CLI_BOXES+=("$RSSBOX")
P=$(abx inspect "$RSSBOX" | awk -F'[:,]' '/"init_pid"/ {gsub(/ /, "", $2); print $2}')
CG_PARENTS+=("$(awk -F: '$3 ~ /^\/agentbox/ {split($3, a, "/"); print a[2]; exit}' "/proc/$P/cgroup")")
read -r r0 s0 n0 < <(rss_tree "$P")
sleep 2
read -r r2 s2 n2 < <(rss_tree "$P")
# The box's own memory cgroup, wherever the engine put it (v1 memory or v2 unified).
CGV1=$(awk -F: '$2 == "memory" {print $3}' "/proc/$P/cgroup")
CGV2=$(awk -F: '$1 == "0" {print $3}' "/proc/$P/cgroup")
CGMEM=$(cat "/sys/fs/cgroup/memory$CGV1/memory.usage_in_bytes" 2>/dev/null ||
        cat "/sys/fs/cgroup$CGV2/memory.current" 2>/dev/null || echo 0)
echo "  idle box RSS right after create:  $(kib_to_mib "$r0") MiB (PSS $(kib_to_mib "$s0") MiB, $n0 processes)"
echo "  idle box RSS after 2 s idle:      $(kib_to_mib "$r2") MiB (PSS $(kib_to_mib "$s2") MiB, $n2 processes)"
echo "  box cgroup memory usage (incl. page cache, tmpfs, kernel): $(kib_to_mib $((CGMEM / 1024))) MiB"
echo "rss0 $(kib_to_mib "$r0")" >>"$RES"
echo "rss2 $(kib_to_mib "$r2")" >>"$RES"
echo "cgmem $(kib_to_mib $((CGMEM / 1024)))" >>"$RES"

if command -v hyperfine >/dev/null; then
        hyperfine -N --warmup 5 --runs "$N_CLI" --export-json "$WORK/hf.json" \
                "$AB --data $ABD exec $RUN -- true" >/dev/null 2>&1 &&
                python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print("  cross-check, hyperfine -N: agentbox exec median %.3f ms (mean %.3f ± %.3f)" % (r["median"]*1e3, r["mean"]*1e3, r["stddev"]*1e3))' "$WORK/hf.json"
fi

# ---- 3. bwrap -------------------------------------------------------------

log "bwrap"
if command -v bwrap >/dev/null || apt-get install -y -qq bubblewrap >/dev/null 2>&1; then
        # Same namespace set as a box (user mount pid ipc uts net cgroup), read-only /usr.
        BW=(bwrap --unshare-all --die-with-parent --ro-bind /usr /usr --symlink usr/bin /bin
                --symlink usr/sbin /sbin --symlink usr/lib /lib --symlink usr/lib64 /lib64
                --proc /proc --dev /dev --tmpfs /tmp --chdir /tmp)
        timeit bwrap_true "bwrap ... /bin/true" "$N_A" "${BW[@]}" /bin/true || true
        timeit bwrap_bashlc "bwrap ... bash -lc true (+ro /etc)" "$N_A" \
                "${BW[@]}" --ro-bind /etc /etc /bin/bash -lc true || true
        "${BW[@]}" /bin/sleep 600 &
        BWRAP_PID=$!
        sleep 0.3
        read -r b0 _ _ < <(rss_tree "$BWRAP_PID")
        sleep 2
        read -r b2 _ bn2 < <(rss_tree "$BWRAP_PID")
        echo "  idle bwrap sandbox (bwrap + sleep) RSS: $(kib_to_mib "$b0") MiB, after 2 s $(kib_to_mib "$b2") MiB ($bn2 processes)"
        echo "bwrap_rss0 $(kib_to_mib "$b0")" >>"$RES"
        echo "bwrap_rss2 $(kib_to_mib "$b2")" >>"$RES"
        kill "$BWRAP_PID" 2>/dev/null
        wait "$BWRAP_PID" 2>/dev/null
        BWRAP_PID=
else
        note "  bwrap is not installed and could not be installed: column skipped"
fi

# ---- 4. Docker ------------------------------------------------------------

log "docker"
if [ "${NO_DOCKER:-0}" = 1 ]; then
        note "  note: NO_DOCKER=1: Docker column skipped"
elif docker_setup && docker_image; then
        echo "  $($DOCKER version --format 'client {{.Client.Version}}, server {{.Server.Version}}' 2>/dev/null), storage $($DOCKER info --format '{{.Driver}}, cgroup {{.CgroupVersion}}' 2>/dev/null)"
        $DOCKER run --rm --network none "$DOCKER_IMG" /true >/dev/null 2>&1 # warm-up
        timeit docker_run "docker run --rm IMG /true" "$N_DOCKER" \
                $DOCKER run --rm --network none "$DOCKER_IMG" /true || true
        CID=$($DOCKER run -d --network none "$DOCKER_IMG" /pause 2>/dev/null)
        if [ -n "$CID" ]; then
                DOCKER_CIDS+=("$CID")
                for _ in 1 2 3; do $DOCKER exec "$CID" /true >/dev/null 2>&1; done
                timeit docker_exec "docker exec CID /true" "$((N_DOCKER * 3))" $DOCKER exec "$CID" /true || true
                # -t 0: SIGKILL at once, as agentbox stop does (the default waits 10 s for PID 1).
                docker_restart() { $DOCKER stop -t 0 "$CID" && $DOCKER start "$CID"; }
                timeit docker_restart "docker stop -t 0 + docker start" "$N_DOCKER" docker_restart || true
                sleep 0.5
                DP=$($DOCKER inspect -f '{{.State.Pid}}' "$CID")
                read -r d0 _ _ < <(rss_tree "$DP")
                sleep 2
                read -r d2 _ dn2 < <(rss_tree "$DP")
                SHIM=$(awk '{sub(/^.*\) /, ""); print $2}' "/proc/$DP/stat")
                read -r sr _ _ < <(rss_tree "$SHIM")
                echo "  idle container processes RSS: $(kib_to_mib "$d0") MiB, after 2 s $(kib_to_mib "$d2") MiB ($dn2 processes)"
                echo "  container + its $(cat "/proc/$SHIM/comm" 2>/dev/null) (pid $SHIM): $(kib_to_mib "$sr") MiB"
                echo "docker_rss0 $(kib_to_mib "$d0")" >>"$RES"
                echo "docker_rss2 $(kib_to_mib "$d2")" >>"$RES"
                echo "docker_rss_shim $(kib_to_mib "$sr")" >>"$RES"
                if command -v hyperfine >/dev/null; then
                        hyperfine -N --warmup 3 --runs "$((N_DOCKER * 3))" --export-json "$WORK/hfd.json" \
                                "$DOCKER exec $CID /true" >/dev/null 2>&1 &&
                                python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print("  cross-check, hyperfine -N: docker exec median %.3f ms (mean %.3f ± %.3f)" % (r["median"]*1e3, r["mean"]*1e3, r["stddev"]*1e3))' "$WORK/hfd.json"
                fi
        else
                note "  note: docker run -d failed: exec/restart rows skipped"
        fi
else
        [ -z "$DOCKER" ] || note "  note: cannot build the local image: Docker column skipped"
fi

# ---- 5. the table ---------------------------------------------------------

get() { awk -v k="$1" '$1 == k {v = $2} END {print v}' "$RES"; }
ratio() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN {if (a > 0) printf "%.1fx", b / a}'; }
row() { # label agentbox bwrap docker
        local r
        r=$(ratio "$2" "$4")
        printf '| %-48s | %10s | %10s | %10s | %8s |\n' "$1" "${2:--}" "${3:--}" "${4:--}" "${r:--}"
}
check() { # label value limit
        awk -v l="$1" -v v="$2" -v m="$3" 'BEGIN { if (v == "") { printf "  %-44s  n/a\n", l; exit }
                printf "  %-44s %8.2f  (target <= %s)  %s\n", l, v, m, (v + 0 <= m + 0) ? "MET" : "NOT MET" }'
}

log "results (medians; ms unless noted)"
printf '| %-48s | %10s | %10s | %10s | %8s |\n' "scenario" "agentbox" "bwrap" "docker" "dock/ab"
printf '|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..50})" "------------" "------------" "------------" "----------"
row "create + first exec true (library)" "$(get lib_create)" "$(get bwrap_true)" "$(get docker_run)"
row "create + first exec true (CLI)" "$(get cli_create)" "$(get bwrap_true)" "$(get docker_run)"
row "  same, default 4 GiB disk (library)" "$(get lib_create_default_disk)" "" ""
row "exec true in a running box (library)" "$(get lib_exec)" "" "$(get docker_exec)"
row "exec true in a running box (CLI)" "$(get cli_exec)" "" "$(get docker_exec)"
row "stop + start (library)" "$(get lib_restart)" "" "$(get docker_restart)"
row "stop + start (CLI)" "$(get cli_restart)" "" "$(get docker_restart)"
row "idle RSS right after create (MiB)" "$(get rss0)" "$(get bwrap_rss0)" "$(get docker_rss0)"
row "idle RSS after 2 s (MiB)" "$(get rss2)" "$(get bwrap_rss2)" "$(get docker_rss2)"
row "  docker: container + containerd-shim (MiB)" "" "" "$(get docker_rss_shim)"
echo
echo "  bwrap runs a fresh sandbox per command (it has no running box to exec into);"
echo "  its column is 'bwrap ... /bin/true' (bash -lc true: $(get bwrap_bashlc) ms). docker run"
echo "  includes --rm; docker rows run a static /true directly, agentbox runs bash -lc true."
echo "  Library-level exec splits: connect $(get lib_exec_connect) ms, request $(get lib_exec_request) ms;"
echo "  PING round trip (no process spawned) $(get lib_ping) ms. Floors: spawning /bin/true from the"
echo "  timing shell $(get floor_spawn) ms; nsenter -a into the live box $(get nsenter_exec) ms."
echo "  Inside a box: /bin/true $(get lib_spawn_box_true) ms, bash -c true $(get lib_spawn_box_bash_c) ms,"
echo "  bash -lc true $(get lib_spawn_box_bash_lc) ms, bash --noprofile -lc true $(get lib_spawn_box_bash_lc_noprofile) ms"
echo "  (host: $(get lib_spawn_host_true) / $(get lib_spawn_host_bash_c) / $(get lib_spawn_host_bash_lc) / $(get lib_spawn_host_bash_lc_noprofile) ms)."
echo "  load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (2 cores; other work on the host adds noise)"
echo
echo "targets (issue):"
check "(a) create -> first exec true, library, ms" "$(get lib_create)" 10
check "(a) create -> first exec true, CLI, ms" "$(get cli_create)" 10
check "(b) exec true, library, ms" "$(get lib_exec)" 2
check "(b) exec true, CLI, ms" "$(get cli_exec)" 2
check "(c) stop -> start, library, ms" "$(get lib_restart)" 20
check "(c) stop -> start, CLI, ms" "$(get cli_restart)" 20
check "idle box RSS after 2 s, MiB" "$(get rss2)" 1
if [ -s "$NOTES" ]; then
        echo
        echo "notes:"
        cat "$NOTES"
fi
exit 0
