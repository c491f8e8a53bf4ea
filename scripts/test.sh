#!/usr/bin/env bash
# test.sh - THE test command (the README's, and CI's via .ci/run).
#
# Installs what is missing (scripts/deps.sh), builds ./build and an
# ASan+UBSan ./build-asan, checks formatting, runs every meson test in
# ./build and the unit and integration suites in ./build-asan (the CLI, the
# library and the boxes' init all sanitized), runs each libFuzzer target of
# ./build-fuzz for a few seconds (AGENTBOX_FUZZ_SECS, default 3), and ends
# with one line:
#
#   N passed, N failed, N skipped
#
# After the first build two lanes run at once (see "two lanes" below): the
# meson tests of ./build, and the other builds, the format check, the ASan
# run and the fuzz run. Every stage runs even when an earlier one failed.
# Counted as tests: every meson test of the three runs, plus "format". A
# failed stage that is no test (deps, a build, a meson run that left no log)
# counts as one failed test.
# Exit status: 0 when nothing failed, else 1.
#
# Environment:
#   AGENTBOX_TEST_JOBS   parallel meson tests of ./build (default: nproc, or
#                        nproc + 1 with lanes)
#   AGENTBOX_ASAN_JOBS   parallel meson tests of the ASan run (default: nproc)
#   AGENTBOX_TEST_SERIAL 1 (the default) = one stage after another; 0 = two
#                        lanes, the ASan and fuzz builds and runs beside the
#                        ./build tests (docs/testing.md: faster, but timing-
#                        sensitive tests such as serve_fulldisk then run under
#                        twice the load)
#   AGENTBOX_ASAN_LEAKS  1 = LeakSanitizer on in the ASan run (default 1)
set -u -o pipefail

cd "$(dirname "$0")/.." || exit 1
ncpu=$(nproc 2>/dev/null || echo 2)
# One stage after another by default. With lanes (AGENTBOX_TEST_SERIAL=0) the
# tests wait more than they compute: one more than the CPUs for ./build, as
# many as the CPUs for the ASan run beside it.
serial=${AGENTBOX_TEST_SERIAL:-1}
if [ "$serial" = 1 ]; then
        jobs=${AGENTBOX_TEST_JOBS:-$ncpu}
else
        jobs=${AGENTBOX_TEST_JOBS:-$((ncpu + 1))}
fi
asan_jobs=${AGENTBOX_ASAN_JOBS:-$ncpu}
asan_leaks=${AGENTBOX_ASAN_LEAKS:-1}

failures=()     # "stage: why" for stages that count as one failed test each
format_result=  # OK | FAIL
runs=()         # "label=BUILDDIR=EXIT" of meson test runs to count

stage() {
        printf '\n===== [%4ds] %s =====\n' "$SECONDS" "$*"
}

stage "dependencies: scripts/deps.sh"
./scripts/deps.sh || failures+=("deps: scripts/deps.sh failed")

stage "dependencies: scripts/npm-deps.sh (the MCP SDK, the JS runner, xterm.js and puppeteer-core)"
./scripts/npm-deps.sh || failures+=("deps: scripts/npm-deps.sh failed")

stage "dependencies: scripts/browser-deps.sh (Chromium for the console's browser test)"
./scripts/browser-deps.sh || failures+=("deps: scripts/browser-deps.sh failed")

stage "services: PostgreSQL on loopback (scripts/pg.sh)"
# The store suite (and the server tests that take a database URL) run
# against a real PostgreSQL server as well as SQLite.
if pg_url=$(./scripts/pg.sh | tail -n 1) && [ -n "$pg_url" ]; then
        export AGENTBOX_TEST_PG_URL=$pg_url
        echo "AGENTBOX_TEST_PG_URL=$pg_url"
else
        failures+=("services: scripts/pg.sh could not start PostgreSQL")
fi

stage "services: a private Docker engine (scripts/dockerd.sh)"
# The Docker backend's tests run against a real engine of their own (own
# socket and data root, a busybox image made locally), apart from any
# system Docker.
if docker_line=$(./scripts/dockerd.sh | tail -n 1) && [ "${docker_line#DOCKER_HOST=}" != "$docker_line" ]; then
        export AGENTBOX_TEST_DOCKER_HOST=${docker_line#DOCKER_HOST=}
        echo "AGENTBOX_TEST_DOCKER_HOST=$AGENTBOX_TEST_DOCKER_HOST"
else
        failures+=("services: scripts/dockerd.sh could not start a Docker engine")
fi

stage "build: build"
build_ok=1
./scripts/build.sh build || { build_ok=0; failures+=("build: build failed"); }

# Two lanes: from here on they run at once. The end-to-end tests mostly wait
# (servers starting, boxes booting, polls, deadlines) and leave the CPUs
# idle. The main lane runs the meson tests of ./build, its output live. The
# side lane builds ./build-asan, ./build-fuzz and checks formatting at nice
# 10 (the compilers take the CPU the waiting tests leave), starts the ASan
# test run as soon as ./build-asan is built, then runs the fuzz targets one
# at a time. Its output goes to files, printed after the main lane's in the
# usual stage order. AGENTBOX_TEST_SERIAL=1: one stage after another.
side=$(mktemp -d "${TMPDIR:-/tmp}/agentbox-test.XXXXXX") || exit 1
trap 'rm -rf "$side"' EXIT

# mark WHAT: a line of the side lane in the live output.
mark() {
        printf '[%4ds] side lane: %s\n' "$SECONDS" "$*"
}

# side_stage LOG TITLE: starts $side/LOG.log with the stage's header.
side_stage() {
        mark "$2"
        printf '\n===== [%4ds] %s =====\n' "$SECONDS" "$2" >"$side/$1.log"
}

# side_step LOG TITLE CMD...: runs CMD (a command or a function) at nice
# 10 into $side/LOG.log.
side_step() {
        local log=$1 rc
        side_stage "$log" "$2"
        shift 2
        (
                renice -n 10 -p "$BASHPID" >/dev/null
                "$@"
        ) >>"$side/$log.log" 2>&1
        rc=$?
        printf '(ended at %ds, exit %d)\n' "$SECONDS" $rc >>"$side/$log.log"
        return $rc
}

# side_fail WHY: a stage that is no test failed; counts as one failed test.
side_fail() {
        printf '%s\n' "$*" >>"$side/failures"
}

format_check() {
        if ! command -v clang-format >/dev/null; then
                echo "clang-format not found"
                return 1
        fi
        local bad=() n=0 f out
        while IFS= read -r -d '' f; do
                n=$((n + 1))
                if ! out=$(clang-format --dry-run --Werror --ferror-limit=1 "$f" 2>&1); then
                        bad+=("$f")
                        printf '%s\n' "$out" | head -n 3
                fi
        done < <(find src tests bench \( -name '*.c' -o -name '*.h' \) -type f -print0 2>/dev/null | sort -z)
        if [ ${#bad[@]} -eq 0 ]; then
                echo "$n files formatted correctly"
                return 0
        fi
        echo "${#bad[@]} of $n files need formatting; fix with:"
        echo "  clang-format -i ${bad[*]}"
        return 1
}

# meson_test LABEL BUILDDIR [MESON-TEST-ARGS...]: its exit status goes to
# $side/LABEL.rc for the summary.
meson_test() {
        local label=$1 dir=$2
        shift 2
        rm -f "$dir/meson-logs/testlog.json"
        meson test -C "$dir" --print-errorlogs "$@"
        echo $? >"$side/$label.rc"
}

asan_tests() {
        side_stage test-asan "test: build-asan (unit + integration suites under ASan+UBSan)"
        ASAN_OPTIONS="detect_leaks=$asan_leaks:halt_on_error=1:abort_on_error=0:print_summary=1" \
                UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
                meson_test build-asan build-asan --suite unit --suite integration --timeout-multiplier 3 \
                --num-processes "$asan_jobs" >>"$side/test-asan.log" 2>&1
        mark "test: build-asan ended"
}

side_lane() {
        local asan_pid=
        if side_step build-asan "build: build-asan (ASan+UBSan)" \
                ./scripts/build.sh build-asan -Db_sanitize=address,undefined -Db_lundef=false; then
                if [ "$serial" = 1 ]; then
                        asan_tests
                else
                        asan_tests &
                        asan_pid=$!
                fi
        else
                side_fail "build-asan: build failed"
        fi
        local fuzz_ok=1
        side_step build-fuzz "build: build-fuzz (clang, libFuzzer + ASan + UBSan: scripts/fuzz.sh --build-only)" \
                ./scripts/fuzz.sh --build-only || { fuzz_ok=0; side_fail "build-fuzz: build failed"; }
        if side_step format "format: clang-format --dry-run --Werror (src/ tests/ bench/)" format_check; then
                echo OK >"$side/format.result"
        else
                echo FAIL >"$side/format.result"
        fi
        if [ $fuzz_ok = 1 ]; then
                # One target at a time: a fuzzer computes flat out for its seconds.
                side_stage test-fuzz "test: build-fuzz (every fuzz target for a few seconds from its corpus)"
                AGENTBOX_FUZZ_SECS=${AGENTBOX_FUZZ_SECS:-3} meson_test build-fuzz build-fuzz --suite fuzz \
                        --no-rebuild --num-processes 1 >>"$side/test-fuzz.log" 2>&1
                mark "test: build-fuzz ended"
        fi
        [ -z "$asan_pid" ] || wait "$asan_pid"
}

side_pid=
if [ "$serial" = 1 ]; then
        side_lane
else
        side_lane &
        side_pid=$!
fi

stage "test: build (all suites)"
if [ $build_ok = 1 ]; then
        meson_test build build --num-processes "$jobs"
else
        echo "skipped: the build failed"
fi
if [ -n "$side_pid" ]; then
        stage "waiting for the side lane"
        wait "$side_pid"
fi

# The side lane's output, in stage order.
for log in build-asan build-fuzz format test-asan test-fuzz; do
        [ ! -f "$side/$log.log" ] || cat "$side/$log.log"
done
[ -f "$side/failures" ] && mapfile -t -O ${#failures[@]} failures <"$side/failures"
format_result=$(cat "$side/format.result" 2>/dev/null)
for label in build build-asan build-fuzz; do
        [ ! -f "$side/$label.rc" ] || runs+=("$label=$label=$(cat "$side/$label.rc")")
done
[ -f "$side/test-asan.log" ] || echo "test: build-asan skipped: the build failed"
[ -f "$side/test-fuzz.log" ] || echo "test: build-fuzz skipped: the build failed"

# Boxes left behind by an end-to-end test that was killed (timeout) are
# removed now rather than by the next run.
if [ $build_ok = 1 ] && [ -x build/agentbox ] && command -v python3 >/dev/null; then
        AGENTBOX_BIN=$PWD/build/agentbox python3 tests/lib/abtest.py --sweep ||
                echo "warning: sweeping stale test data dirs failed"
fi

stage "summary"
# How busy the run kept the CPUs: the CPU time of every process it started
# and waited for (boxes' and containers' processes are not counted).
echo "CPU time in ${SECONDS}s (user, system; the script itself, then what it started):"
times
args=("format=$format_result")
for r in "${runs[@]}"; do
        args+=("run=$r")
done
for f in "${failures[@]}"; do
        args+=("stagefail=$f")
done
if ! command -v python3 >/dev/null; then
        printf 'FAIL  %s\n' "python3 missing: cannot read the test logs" "${failures[@]}"
        echo "0 passed, $((${#failures[@]} + 1)) failed, 0 skipped"
        exit 1
fi
python3 - "${args[@]}" <<'PY'
import json, sys

passed = failed = skipped = 0
lines = []
GOOD = {"OK", "EXPECTEDFAIL"}  # EXPECTEDFAIL: the test did what it declared
SKIP = {"SKIP"}

for arg in sys.argv[1:]:
    kind, _, val = arg.partition("=")
    if kind == "format":
        if val == "OK":
            passed += 1
        elif val:
            failed += 1
            lines.append("FAIL  format (clang-format: see the format stage)")
    elif kind == "stagefail":
        failed += 1
        lines.append("FAIL  " + val)
    elif kind == "run":
        label, bdir, rc = val.split("=")
        rc = int(rc)
        path = bdir + "/meson-logs/testlog.json"
        n = bad = 0
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for raw in f:
                    raw = raw.strip()
                    if not raw:
                        continue
                    try:
                        t = json.loads(raw)
                    except ValueError:
                        failed += 1
                        bad += 1
                        lines.append("FAIL  %s: unreadable line in %s" % (label, path))
                        continue
                    n += 1
                    res = t.get("result", "?")
                    if res in GOOD:
                        passed += 1
                    elif res in SKIP:
                        skipped += 1
                    else:
                        failed += 1
                        bad += 1
                        lines.append("%-5s %s: %s (%s)" % ("FAIL", label, t.get("name", "?"), res))
        except OSError as e:
            failed += 1
            lines.append("FAIL  %s: meson test left no log (exit %d): %s" % (label, rc, e))
            continue
        if rc != 0 and bad == 0:
            # meson itself failed (rebuild error, bad arguments, interrupted).
            failed += 1
            lines.append("FAIL  %s: meson test exited %d with no failed test in its log" % (label, rc))
        print("%s: %d tests in %s" % (label, n, path))

for l in lines:
    print(l)
print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
sys.exit(1 if failed else 0)
PY
rc=$?
if [ $rc -gt 1 ]; then
        echo "0 passed, 1 failed, 0 skipped"
        exit 1
fi
exit $rc
