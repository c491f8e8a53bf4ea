#!/usr/bin/env bash
# fuzz.sh [TARGET...] [--time S] [--build-only] - builds the libFuzzer
# targets of tests/fuzz in ./build-fuzz (clang, -fsanitize=fuzzer,address,
# undefined; meson -Dfuzz=true) and runs each TARGET (default: all) for S
# seconds (default 60), starting from its committed corpus
# tests/fuzz/corpus/TARGET. New inputs go to build-fuzz/tests/fuzz/corpus-
# TARGET (never into the committed corpus); a crash, leak, timeout or
# out-of-memory stops the run, leaves the input in build-fuzz/tests/fuzz/
# (crash-*, leak-*, timeout-*, oom-*) and makes the exit status 1.
# A bare number is taken as --time (the old usage).
#
# The suite (scripts/test.sh) builds with --build-only and runs every target
# for a few seconds as the meson tests of suite 'fuzz' (tests/fuzz/run.sh).
# Long runs: nice -n 19 scripts/fuzz.sh fuzz_http --time 3600
set -euo pipefail
cd "$(dirname "$0")/.."
secs=60
build_only=0
targets=()
while [ $# -gt 0 ]; do
        case "$1" in
        --time) secs=$2; shift 2 ;;
        --time=*) secs=${1#--time=}; shift ;;
        --build-only) build_only=1; shift ;;
        -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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

dir=build-fuzz
if [ ! -f "$dir/build.ninja" ]; then
        CC=clang meson setup "$dir" -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false \
                -Dwerror=false -Dbuildtype=debugoptimized >/dev/null
fi
ninja -C "$dir" $(printf 'tests/fuzz/%s ' "${targets[@]}")
[ $build_only = 0 ] || exit 0

rc=0
for t in "${targets[@]}"; do
        echo "== $t for ${secs}s"
        AGENTBOX_FUZZ_SECS=$secs tests/fuzz/run.sh "$dir/tests/fuzz/$t" "tests/fuzz/corpus/$t" || rc=1
done
exit $rc
