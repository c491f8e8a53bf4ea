#!/usr/bin/env bash
# k8s-images.sh [--build DIR] [--tag TAG] [--init-only] [--out DIR]
#
# Builds the two images the kubernetes backend needs, from this project's
# own build (no downloads, no base image):
#   agentbox/init:TAG    the init carrier: only the static agentbox-init at
#                        /agentbox-init (a pod's init container runs
#                        `/agentbox-init --install /.agentbox/bin/agentbox-init`)
#   agentbox/server:TAG  the server: agentbox, agentbox-full and agentbox-init
#                        under /usr/local, the shared libraries agentbox-full
#                        links (as ldd lists them on this host), the CA
#                        certificates and the runners; ENTRYPOINT agentbox serve
# Each is a root filesystem tar (kept in --out, default BUILD/k8s-images)
# imported into the Docker engine of $DOCKER_HOST (`docker import`), ready
# for `docker tag` and `docker push` to your registry. TAG defaults to the
# version agentbox-init reports. --init-only builds the carrier alone (what
# the tests need). The last lines printed are the image names.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
tag=
init_only=0
out=
while [ $# -gt 0 ]; do
        case "$1" in
        --build) build=$2; shift 2 ;;
        --tag) tag=$2; shift 2 ;;
        --init-only) init_only=1; shift ;;
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "k8s-images.sh: unknown argument $1" >&2; exit 2 ;;
        esac
done
init=$build/agentbox-init
[ -x "$init" ] || { echo "k8s-images.sh: no $init: run scripts/build.sh $build first" >&2; exit 1; }
if readelf -l "$init" 2>/dev/null | grep -q INTERP; then
        echo "k8s-images.sh: $init is dynamically linked (a sanitized build?): the carrier needs a static one" >&2
        exit 1
fi
[ -n "$tag" ] || tag=$("$init" --version | awk '{print $2}')
out=${out:-$build/k8s-images}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# the carrier: one file
mkdir -p "$work/init"
install -m 0755 "$init" "$work/init/agentbox-init"
tar -C "$work/init" --owner=0 --group=0 --numeric-owner -cf "$out/init-rootfs.tar" .
docker import --change 'ENTRYPOINT ["/agentbox-init"]' --change 'CMD ["--version"]' \
        "$out/init-rootfs.tar" "agentbox/init:$tag" >/dev/null

if [ "$init_only" = 0 ]; then
        r=$work/server
        mkdir -p "$r/usr/local/bin" "$r/usr/local/libexec/agentbox" "$r/usr/local/share/agentbox" \
                "$r/etc/ssl/certs" "$r/tmp" "$r/var/lib/agentbox"
        chmod 1777 "$r/tmp"
        install -m 0755 "$build/agentbox" "$r/usr/local/bin/agentbox"
        install -m 0755 "$build/agentbox-full" "$r/usr/local/libexec/agentbox/agentbox-full"
        install -m 0755 "$init" "$r/usr/local/libexec/agentbox/agentbox-init"
        cp -r runners "$r/usr/local/share/agentbox/runners"
        # the shared libraries and their loader, at the paths ldd names
        for f in "$build/agentbox" "$build/agentbox-full"; do
                ldd "$f" | awk '/=>/ {print $3} !/=>/ && $1 ~ /^\// {print $1}'
        done | sort -u | while read -r lib; do
                [ -n "$lib" ] || continue
                mkdir -p "$r$(dirname "$lib")"
                cp -L "$lib" "$r$lib"
        done
        [ ! -f /etc/ssl/certs/ca-certificates.crt ] || cp /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/"
        printf 'root:x:0:0:root:/root:/sbin/nologin\n' >"$r/etc/passwd"
        printf 'root:x:0:\n' >"$r/etc/group"
        tar -C "$r" --owner=0 --group=0 --numeric-owner -cf "$out/server-rootfs.tar" .
        docker import --change 'ENTRYPOINT ["/usr/local/bin/agentbox"]' \
                --change 'CMD ["serve"]' --change 'ENV AGENTBOX_DATA=/var/lib/agentbox' \
                "$out/server-rootfs.tar" "agentbox/server:$tag" >/dev/null
        echo "agentbox/server:$tag"
fi
echo "agentbox/init:$tag"
