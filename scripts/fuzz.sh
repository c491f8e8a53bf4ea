#!/usr/bin/env bash
# fuzz.sh [SECONDS] - builds the libFuzzer targets under tests/fuzz with clang
# (ASan + UBSan) and runs each for SECONDS (default 60). Crashes are written to
# build-fuzz/crash-*; a corpus is kept in build-fuzz/corpus-NAME.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
command -v clang >/dev/null || apt-get install -y -qq clang >/dev/null
mkdir -p build-fuzz
for src in tests/fuzz/fuzz_*.c; do
        name=$(basename "$src" .c)
        clang -g -O1 -D_GNU_SOURCE -Isrc -fsanitize=fuzzer,address,undefined \
                -o "build-fuzz/$name" "$src" src/init/proto.c src/common/util.c src/common/err.c
        mkdir -p "build-fuzz/corpus-$name"
        echo "== $name for ${secs}s"
        "build-fuzz/$name" -max_total_time="$secs" -artifact_prefix=build-fuzz/ \
                "build-fuzz/corpus-$name"
done
