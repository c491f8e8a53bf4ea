#!/usr/bin/env bash
# run.sh BIN CORPUS - one short libFuzzer run of BIN (the suite's fuzz test):
# AGENTBOX_FUZZ_SECS seconds (default 3; 0: no limit) from the committed
# corpus CORPUS, new inputs kept in a scratch folder next to BIN or in
# AGENTBOX_FUZZ_KEEP (the committed corpus is never written). Long runs:
# AGENTBOX_FUZZ_RUNS stops after that many executions, AGENTBOX_FUZZ_FORK
# runs in that many worker processes. Fails on a crash, a leak, a timeout (-timeout, 30 s an
# input) or an out-of-memory; the input that did it is left in
# BIN's folder as crash-*, leak-*, timeout-* or oom-*. An undefined
# behaviour UBSan sees counts as a crash.
set -euo pipefail
bin=$1 corpus=$2
secs=${AGENTBOX_FUZZ_SECS:-3}
dir=$(dirname "$bin")
name=$(basename "$bin")
scratch=${AGENTBOX_FUZZ_KEEP:-$dir/corpus-$name}
mkdir -p "$scratch"
[ -d "$corpus" ] || corpus= # a target may have no committed corpus yet
# tests/fuzz/NAME.flags: more libFuzzer flags for one target
flags=()
f=$(dirname "$0")/$name.flags
[ ! -f "$f" ] || read -r -a flags <"$f"
[ -z "${AGENTBOX_FUZZ_RUNS:-}" ] || flags+=(-runs="$AGENTBOX_FUZZ_RUNS")
[ -z "${AGENTBOX_FUZZ_FORK:-}" ] || flags+=(-fork="$AGENTBOX_FUZZ_FORK")
# UBSan only prints a report and goes on unless told to stop: an undefined
# behaviour is a finding like a crash (the input is left as crash-*).
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
exec "$bin" "${flags[@]}" -max_total_time="$secs" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
        -artifact_prefix="$dir/" "$scratch" ${corpus:+"$corpus"}
