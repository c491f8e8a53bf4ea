#!/usr/bin/env bash
# build.sh [BUILDDIR] [MESON-ARGS...] - configure (or reconfigure) a meson
# build directory and build it with ninja. BUILDDIR defaults to "build".
#
#   scripts/build.sh                       # ./build, default options
#   scripts/build.sh build-asan -Db_sanitize=address,undefined -Db_lundef=false
# Does not install dependencies: run scripts/deps.sh first.
set -euo pipefail

cd "$(dirname "$0")/.."
dir=${1:-build}
[ $# -gt 0 ] && shift

if [ -f "$dir/meson-private/coredata.dat" ]; then
        # Reconfigure only when asked for options; ninja re-runs meson by
        # itself when a meson.build changed.
        if [ $# -gt 0 ]; then
                meson setup --reconfigure "$dir" "$@" ||
                        meson setup --wipe "$dir" "$@"
        fi
else
        meson setup "$dir" "$@"
fi
ninja -C "$dir"
