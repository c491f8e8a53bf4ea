#!/usr/bin/env bash
# dockerd.sh          start a private Docker engine for the tests
# dockerd.sh stop     stop it
#
# A dockerd of its own, apart from any system Docker: socket
# /run/agentbox-test-docker.sock, data root /var/lib/agentbox-test-docker,
# exec root /run/agentbox-test-docker, pid file /run/agentbox-test-docker.pid,
# log /var/log/agentbox-test-docker.log; no bridge, no iptables (boxes run
# with network "none"; agentbox's own network code sets up their netns),
# the cgroupfs driver and runc (crun refuses this host's hybrid cgroups).
# Installs Debian's docker.io (scripts/deps.sh docker.io) when dockerd is
# missing. Makes the test image agentbox-test/busybox:latest when the engine
# lacks it: `docker import` of a tar of busybox-static (no registry, no
# network). Idempotent and quick when the engine already runs. The last line
# of output is the address to use, e.g.
#
#   export AGENTBOX_TEST_DOCKER_HOST=$(scripts/dockerd.sh | tail -n 1 | cut -d= -f2-)
#
# (the line reads DOCKER_HOST=unix:///run/agentbox-test-docker.sock).
set -euo pipefail

die() {
        echo "dockerd.sh: $*" >&2
        exit 1
}

cd "$(dirname "$0")/.."
name=agentbox-test-docker
sock=/run/$name.sock
host=unix://$sock
data_root=/var/lib/$name
exec_root=/run/$name
pidfile=/run/$name.pid
log=/var/log/$name.log
image=agentbox-test/busybox:latest

[ "$(id -u)" -eq 0 ] || die "must run as root (dockerd needs it)"

# Debian's client matches Debian's daemon; another docker on PATH may not.
cli() {
        local c=/usr/bin/docker
        [ -x $c ] || c=$(command -v docker) || die "no docker client"
        "$c" -H "$host" "$@"
}

pid_alive() {
        [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

if [ "${1:-}" = stop ]; then
        if pid_alive; then
                pid=$(cat "$pidfile")
                kill "$pid"
                for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
                kill -9 "$pid" 2>/dev/null || true
                echo "dockerd.sh: stopped the private dockerd (pid $pid)"
        else
                echo "dockerd.sh: no private dockerd running"
        fi
        exit 0
fi

if ! command -v dockerd >/dev/null; then
        echo "dockerd.sh: dockerd is not installed; running scripts/deps.sh docker.io" >&2
        ./scripts/deps.sh docker.io >&2
        command -v dockerd >/dev/null || die "no dockerd after scripts/deps.sh docker.io"
fi

if ! cli version >/dev/null 2>&1; then
        pid_alive && die "a dockerd (pid $(cat "$pidfile")) holds $pidfile but does not answer on $sock"
        mkdir -p "$data_root" "$exec_root"
        echo "dockerd.sh: starting a private dockerd on $sock (log $log)" >&2
        # setsid: not in our session, so it outlives the caller's terminal.
        setsid dockerd --host "$host" --data-root "$data_root" --exec-root "$exec_root" \
                --pidfile "$pidfile" --bridge=none --iptables=false --ip6tables=false \
                --ip-masq=false --exec-opt native.cgroupdriver=cgroupfs \
                --default-runtime runc </dev/null >>"$log" 2>&1 &
        pid=$!
        for _ in $(seq 1 300); do
                cli version >/dev/null 2>&1 && break
                kill -0 "$pid" 2>/dev/null || { tail -n 20 "$log" >&2; die "dockerd exited (log: $log)"; }
                sleep 0.1
        done
        cli version >/dev/null 2>&1 || { tail -n 20 "$log" >&2; die "dockerd does not answer on $sock (log: $log)"; }
fi

# Boxes of test data folders that are gone (a test killed by its timeout)
# would run on forever: remove their containers and volumes.
for c in $(cli ps -aq --filter label=agentbox.data 2>/dev/null); do
        d=$(cli inspect -f '{{index .Config.Labels "agentbox.data_dir"}}' "$c" 2>/dev/null) || continue
        if [ -n "$d" ] && [ ! -e "$d" ]; then cli rm -f "$c" >/dev/null 2>&1 || true; fi
done
for v in $(cli volume ls -q --filter label=agentbox.data 2>/dev/null); do
        d=$(cli volume inspect -f '{{index .Labels "agentbox.data_dir"}}' "$v" 2>/dev/null) || continue
        if [ -n "$d" ] && [ ! -e "$d" ]; then cli volume rm -f "$v" >/dev/null 2>&1 || true; fi
done

if ! cli image inspect "$image" >/dev/null 2>&1; then
        bb=/bin/busybox
        [ -x $bb ] || ./scripts/deps.sh busybox-static >&2
        file -L $bb 2>/dev/null | grep -q 'statically linked' || ldd $bb 2>&1 | grep -q 'not a dynamic' ||
                die "$bb is not static (install busybox-static)"
        tmp=$(mktemp -d /tmp/agentbox-dockerimg.XXXXXX)
        trap 'rm -rf "$tmp"' EXIT
        mkdir -p "$tmp"/{bin,etc,proc,sys,dev,tmp,root}
        chmod 1777 "$tmp/tmp"
        cp $bb "$tmp/bin/busybox"
        for a in $("$tmp/bin/busybox" --list); do
                [ "$a" = busybox ] || ln -sf busybox "$tmp/bin/$a"
        done
        printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$tmp/etc/passwd"
        printf 'root:x:0:\nnogroup:x:65534:\n' >"$tmp/etc/group"
        # ENV: the image's environment (a box made from it shows it to its execs).
        tar -C "$tmp" --numeric-owner --owner=0 --group=0 -c . |
                cli import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
                        --change 'ENV AGENTBOX_TEST_IMAGE=busybox' --change 'CMD ["/bin/sh"]' \
                        - "$image" >/dev/null || die "docker import of $image failed"
        echo "dockerd.sh: made $image" >&2
fi
echo "DOCKER_HOST=$host"
