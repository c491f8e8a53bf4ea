#!/usr/bin/env bash
# fleet.sh [start] [DIR]   start a three-node agentbox fleet on this machine
# fleet.sh stop [DIR]      stop it (boxes keep their files; a start finds them)
# fleet.sh status [DIR]    list its nodes (GET /v1/nodes)
#
# A fleet for trying it out (docs/fleet.md): three `agentbox serve` on
# 127.0.0.1, 127.0.0.2 and 127.0.0.3 (one port, AGENTBOX_FLEET_PORT, default
# 8180), each with its own data folder DIR/nN, sharing one PostgreSQL store:
# $AGENTBOX_STORE when set, else the throwaway server scripts/pg.sh starts
# (database agentbox_fleet). The fleet's secret and the admin token are made
# once in DIR (mode 0600); the token is printed at the end. Needs root, as
# every native box does, and a build (./scripts/build.sh build) or an
# installed agentbox (AGENTBOX_BIN). DIR defaults to /tmp/agentbox-fleet.
set -euo pipefail

die() {
        echo "fleet.sh: $*" >&2
        exit 1
}

cd "$(dirname "$0")/.."
action=start
case ${1:-} in
start | stop | status)
        action=$1
        shift
        ;;
esac
dir=${1:-/tmp/agentbox-fleet}
port=${AGENTBOX_FLEET_PORT:-8180}
bin=${AGENTBOX_BIN:-$PWD/build/agentbox}
[ -x "$bin" ] || bin=$(command -v agentbox || true)
[ -n "$bin" ] || die "no agentbox: build it (./scripts/build.sh build) or set AGENTBOX_BIN"

mkdir -p "$dir"
chmod 700 "$dir"
umask 077
[ -s "$dir/secret" ] || openssl rand -hex 32 >"$dir/secret"
[ -s "$dir/token" ] || openssl rand -hex 24 >"$dir/token"
token=$(cat "$dir/token")

stop_nodes() {
        for n in 1 2 3; do
                pidf="$dir/n$n.pid"
                [ -s "$pidf" ] || continue
                pid=$(cat "$pidf")
                if kill -0 "$pid" 2>/dev/null; then
                        kill -TERM "$pid"
                        for _ in $(seq 50); do
                                kill -0 "$pid" 2>/dev/null || break
                                sleep 0.2
                        done
                fi
                rm -f "$pidf"
        done
}

case $action in
stop)
        stop_nodes
        echo "fleet.sh: stopped"
        exit 0
        ;;
status)
        curl -fsS -H "Authorization: Bearer $token" "http://127.0.0.1:$port/v1/nodes"
        echo
        exit 0
        ;;
esac

store=${AGENTBOX_STORE:-}
if [ -z "$store" ]; then
        admin=$(./scripts/pg.sh | tail -n 1)
        psql "$admin" -qAtc "SELECT 1 FROM pg_database WHERE datname = 'agentbox_fleet'" | grep -q 1 ||
                psql "$admin" -qc "CREATE DATABASE agentbox_fleet"
        store=${admin%/*}/agentbox_fleet
fi

stop_nodes
for n in 1 2 3; do
        host=127.0.0.$n
        mkdir -p "$dir/n$n"
        cat >"$dir/n$n.yaml" <<YAML
listen: $host:$port
data_dir: $dir/n$n
store: $store
fleet:
  node: n$n
  url: http://$host:$port
  secret_file: $dir/secret
YAML
        AGENTBOX_TOKEN=$token setsid "$bin" serve --config "$dir/n$n.yaml" \
                >>"$dir/n$n.log" 2>&1 </dev/null &
        echo $! >"$dir/n$n.pid"
done
for n in 1 2 3; do
        for _ in $(seq 100); do
                curl -fsS "http://127.0.0.$n:$port/health" >/dev/null 2>&1 && break
                kill -0 "$(cat "$dir/n$n.pid")" 2>/dev/null || die "node n$n did not start: see $dir/n$n.log"
                sleep 0.1
        done
done
echo "fleet.sh: three nodes up: http://127.0.0.1:$port http://127.0.0.2:$port http://127.0.0.3:$port"
echo "fleet.sh: logs and settings in $dir; stop with: scripts/fleet.sh stop $dir"
echo "export AGENTBOX_TOKEN=$token"
