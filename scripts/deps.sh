#!/usr/bin/env bash
# deps.sh [EXTRA-PACKAGE...] - install the Debian packages agentbox needs to
# build, run and test. Idempotent: asks dpkg first and touches the network
# (apt-get update + install) only when something is missing.
#
#   scripts/deps.sh              # what the build and the test suite need
#   scripts/deps.sh docker.io    # ... plus extra packages (e.g. for bench/)
set -euo pipefail

# One package a line; add new build or test dependencies here.
PACKAGES=(
        build-essential
        meson
        ninja-build
        pkg-config
        libseccomp-dev
        libjansson-dev
        libmicrohttpd-dev
        libsqlite3-dev
        libpq-dev
        libcurl4-openssl-dev
        libarchive-dev
        zlib1g-dev
        libssl-dev
        libyaml-dev
        libpcre2-dev
        postgresql
        wrk
        e2fsprogs
        util-linux
        iproute2
        iptables
        curl
        python3-pip
        python3
        clang-format
        clang
        bubblewrap
        busybox-static
        mmdebstrap
        procps
        systemd
        docker-registry
        zstd
        python3-kubernetes
)
# kubectl for tests/k8s: Debian's kubernetes-client, unless a kubectl is
# already there (another package's /usr/bin/kubectl would conflict).
command -v kubectl >/dev/null || PACKAGES+=(kubernetes-client)

die() {
        echo "deps.sh: $*" >&2
        exit 1
}

[ "$(id -u)" -eq 0 ] || die "must run as root (it installs Debian packages with apt-get); try: sudo $0 $*"
if ! command -v dpkg-query >/dev/null || ! command -v apt-get >/dev/null; then
        die "needs a Debian-based system (dpkg-query and apt-get not found)"
fi

installed() {
        [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]
}

missing=()
for p in "${PACKAGES[@]}" "$@"; do
        installed "$p" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
        echo "deps.sh: all ${#PACKAGES[@]} required packages${1:+ and $# extra} already installed"
        exit 0
fi

echo "deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp /tmp/agentbox-deps.XXXXXX.log)
apt_opts=(-q -y -o Dpkg::Use-Pty=0 -o DPkg::Lock::Timeout=300 --no-install-recommends)
if ! apt-get "${apt_opts[@]}" update >"$log" 2>&1 ||
        ! apt-get "${apt_opts[@]}" install "${missing[@]}" >>"$log" 2>&1; then
        tail -n 40 "$log" >&2
        die "apt-get failed (full log: $log)"
fi
rm -f "$log"

for p in "${missing[@]}"; do
        installed "$p" || die "package $p still not installed after apt-get install"
done
echo "deps.sh: done"
