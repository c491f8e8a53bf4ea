#!/usr/bin/env bash
# fuzz.sh [SECONDS] - builds the libFuzzer targets under tests/fuzz with clang
# (ASan + UBSan) and runs each for SECONDS (default 60). Crashes are written to
# build-fuzz/crash-*; a corpus is kept in build-fuzz/corpus-NAME.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
command -v clang >/dev/null || apt-get install -y -qq clang >/dev/null
mkdir -p build-fuzz

# The sources and libraries each target links, besides its own file.
deps() {
        case "$1" in
        fuzz_proto)
                echo src/proto/proto.c src/base/util.c src/base/err.c
                ;;
        fuzz_ws)
                echo src/api/ws.c src/base/util.c src/base/err.c src/base/buf.c -lcrypto
                ;;
        fuzz_proxy)
                echo src/net/proxy.c src/net/policy.c src/net/addrcheck.c \
                        src/base/util.c src/base/err.c src/base/log.c \
                        src/base/events.c src/base/metrics.c -ljansson -lpthread -lm
                ;;
        *)
                echo "fuzz.sh: no source list for $1: add it to deps()" >&2
                return 1
                ;;
        esac
}

# A few valid inputs to start from when a target's corpus is empty.
seed() {
        [ -z "$(ls -A "$2")" ] || return 0
        case "$1" in
        fuzz_proxy)
                printf 'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n' >"$2/connect"
                printf 'CONNECT [2001:db8::1]:443 HTTP/1.1\r\n\r\n' >"$2/connect6"
                printf 'GET http://Example.com:8080/a?b=c HTTP/1.1\r\nHost: evil\r\n%s\r\n\r\n' \
                        'Proxy-Connection: x' >"$2/get"
                printf 'GET http://h?x=1 HTTP/1.0\r\n\r\n' >"$2/query"
                printf '{"mode":"restricted","allowed_domains":["*.a.com:443","b.org."],%s}' \
                        '"deny":["203.0.113.5","*"]' >"$2/policy"
                printf '{"mode":"full","allow":["*"],"blocked_domains":null}' >"$2/policy2"
                ;;
        esac
}

for src in tests/fuzz/fuzz_*.c; do
        name=$(basename "$src" .c)
        srcs=$(deps "$name")
        # shellcheck disable=SC2086 # the list is words on purpose
        clang -g -O1 -D_GNU_SOURCE -DAGENTBOX_VERSION='"fuzz"' -Isrc -fsanitize=fuzzer,address,undefined \
                -fno-sanitize-recover=undefined \
                -o "build-fuzz/$name" "$src" $srcs
        mkdir -p "build-fuzz/corpus-$name"
        seed "$name" "build-fuzz/corpus-$name"
        echo "== $name for ${secs}s"
        "build-fuzz/$name" -max_total_time="$secs" -artifact_prefix=build-fuzz/ \
                "build-fuzz/corpus-$name"
done
