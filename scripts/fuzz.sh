#!/usr/bin/env bash
# fuzz.sh [TARGET...] [--time S] [--runs N] [--fork J] [--ubsan-only]
#         [--build-only] - builds the libFuzzer targets of tests/fuzz in
# ./build-fuzz (clang, -fsanitize=fuzzer,address,undefined; meson
# -Dfuzz=true) and runs each TARGET (default: all) for S seconds (default
# 60), starting from its committed corpus tests/fuzz/corpus/TARGET. New
# inputs go to build-fuzz/tests/fuzz/corpus-TARGET (never into the committed
# corpus); a crash, leak, timeout, out-of-memory or undefined behaviour stops
# the run, leaves the input in the build's tests/fuzz/ (crash-*, leak-*,
# timeout-*, oom-*) and makes the exit status 1.
#   --runs N      stop a run after N executions (with --time 0: no time limit)
#   --fork J      one run in J worker processes (libFuzzer's -fork), for a
#                 long run on J cores
#   --ubsan-only  build and run in ./build-fuzz-ubsan: UBSan without ASan
#                 (no leak or overflow checks), several times faster for the
#                 targets whose libraries allocate large buffers per input
#                 (fuzz_layer, fuzz_archive); it grows the same kept corpus
# A bare number is taken as --time (the old usage).
#
# The suite (scripts/test.sh) builds with --build-only and runs every target
# for a few seconds as the meson tests of suite 'fuzz' (tests/fuzz/run.sh).
# Long runs: nice -n 19 scripts/fuzz.sh fuzz_http --time 3600
#            scripts/fuzz.sh fuzz_layer --ubsan-only --time 0 --runs 10000000
set -euo pipefail
cd "$(dirname "$0")/.."
secs=60
runs=
fork=
ubsan_only=0
build_only=0
targets=()
while [ $# -gt 0 ]; do
        case "$1" in
        --time | --runs | --fork) [ $# -ge 2 ] || { echo "fuzz.sh: $1 needs a number" >&2; exit 2; } ;;
        esac
        case "$1" in
        --time) secs=$2; shift 2 ;;
        --time=*) secs=${1#--time=}; shift ;;
        --runs) runs=$2; shift 2 ;;
        --runs=*) runs=${1#--runs=}; shift ;;
        --fork) fork=$2; shift 2 ;;
        --fork=*) fork=${1#--fork=}; shift ;;
        --ubsan-only) ubsan_only=1; shift ;;
        --build-only) build_only=1; shift ;;
        -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
        [0-9]*) secs=$1; shift ;;
        *) targets+=("${1%.c}"); shift ;;
        esac
done
command -v clang >/dev/null || ./scripts/deps.sh clang
all=$(sed -n "s/^  '\(fuzz_[a-z0-9_]*\)',$/\1/p" tests/fuzz/meson.build)
[ ${#targets[@]} -gt 0 ] || read -r -a targets <<<"$(echo $all)"
for t in "${targets[@]}"; do
        grep -qx "$t" <<<"$all" || { echo "fuzz.sh: no target $t (have: $(echo $all))" >&2; exit 2; }
done

for n in "$secs" ${runs:+"$runs"} ${fork:+"$fork"}; do
        [[ $n =~ ^[0-9]+$ ]] || { echo "fuzz.sh: not a number: $n" >&2; exit 2; }
done
dir=build-fuzz san=address,undefined
[ $ubsan_only = 0 ] || dir=build-fuzz-ubsan san=undefined
if [ ! -f "$dir/build.ninja" ]; then
        CC=clang meson setup "$dir" -Dfuzz=true -Db_sanitize=$san -Db_lundef=false \
                -Dwerror=false -Dbuildtype=debugoptimized >/dev/null
fi
ninja -C "$dir" $(printf 'tests/fuzz/%s ' "${targets[@]}")
[ $build_only = 0 ] || exit 0

rc=0
for t in "${targets[@]}"; do
        echo "== $t for ${secs}s${runs:+ or $runs executions}${fork:+ in $fork processes} ($dir)"
        AGENTBOX_FUZZ_SECS=$secs AGENTBOX_FUZZ_RUNS=$runs AGENTBOX_FUZZ_FORK=$fork \
                AGENTBOX_FUZZ_KEEP=build-fuzz/tests/fuzz/corpus-$t \
                tests/fuzz/run.sh "$dir/tests/fuzz/$t" "tests/fuzz/corpus/$t" || rc=1
done
exit $rc
