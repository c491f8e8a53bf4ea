#!/usr/bin/env bash
# pg.sh [DIR]        start a throwaway PostgreSQL server for the tests
# pg.sh stop [DIR]   stop it
#
# The cluster lives in DIR (default /tmp/agentbox-pg): data in DIR/data, the
# unix socket and the log in DIR. It listens on 127.0.0.1 only, on port 55432
# or the next free one, with trust authentication for local connections, so
# it is for tests, never for data you keep. As root it runs as the `postgres`
# OS user (initdb and postgres refuse root). Idempotent and quick when the
# server already runs. The last line of output is the url to use, e.g.
#
#   export AGENTBOX_TEST_PG_URL=$(scripts/pg.sh | tail -n 1)
#
# Environment: AGENTBOX_PG_PORT  the first port to try (default 55432).
set -euo pipefail

die() {
        echo "pg.sh: $*" >&2
        exit 1
}

cd "$(dirname "$0")/.."
action=start
if [ "${1:-}" = stop ]; then
        action=stop
        shift
fi
dir=${1:-/tmp/agentbox-pg}
case $dir in
/*) ;;
*) dir=$PWD/$dir ;;
esac
data=$dir/data
first_port=${AGENTBOX_PG_PORT:-55432}

# The newest installed server version (Debian: /usr/lib/postgresql/VERSION/bin).
find_bin() {
        local d
        d=$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -t/ -k5,5V | tail -n 1)
        if [ -n "$d" ] && [ -x "$d/pg_ctl" ]; then
                echo "$d"
        elif command -v pg_ctl >/dev/null; then
                dirname "$(command -v pg_ctl)"
        fi
}
bin=$(find_bin)
if [ -z "$bin" ]; then
        [ $action = stop ] && exit 0
        echo "pg.sh: PostgreSQL is not installed; running scripts/deps.sh" >&2
        ./scripts/deps.sh >&2
        bin=$(find_bin)
        [ -n "$bin" ] || die "no PostgreSQL server binaries after scripts/deps.sh"
fi

# Runs a command as the cluster's owner: `postgres` when we are root.
if [ "$(id -u)" -eq 0 ]; then
        owner=postgres
        id -u "$owner" >/dev/null 2>&1 || die "no 'postgres' OS user (install the postgresql package)"
        as_owner() { runuser -u "$owner" -- "$@"; }
else
        owner=$(id -un)
        as_owner() { "$@"; }
fi

running() {
        [ -f "$data/PG_VERSION" ] && as_owner "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1
}

url_for() {
        echo "postgres://postgres@127.0.0.1:$1/postgres"
}

if [ $action = stop ]; then
        if running; then
                as_owner "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null
                echo "pg.sh: stopped the server in $dir"
        else
                echo "pg.sh: no server running in $dir"
        fi
        exit 0
fi

if running && [ -f "$dir/port" ]; then
        port=$(cat "$dir/port")
        if "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -t 5; then
                url_for "$port"
                exit 0
        fi
fi

mkdir -p "$dir"
chmod 0700 "$dir"
[ "$owner" = "$(id -un)" ] || chown "$owner:" "$dir"
as_owner test -w "$dir" ||
        die "$owner cannot write $dir (is a parent folder private?): pick another DIR"

# A cluster of another major version (the server was upgraded) holds only
# test data: make a new one.
major=$("$bin/postgres" --version | sed -E 's/.* ([0-9]+)[.0-9]*.*/\1/')
if [ -f "$data/PG_VERSION" ] && [ "$(cat "$data/PG_VERSION")" != "$major" ] && ! running; then
        echo "pg.sh: $data is from PostgreSQL $(cat "$data/PG_VERSION"), not $major: recreating it" >&2
        rm -rf "$data"
fi
if [ ! -f "$data/PG_VERSION" ]; then
        echo "pg.sh: creating a cluster in $data" >&2
        as_owner "$bin/initdb" -D "$data" -U postgres -E UTF8 --no-locale \
                --auth-local=trust --auth-host=trust --no-sync >"$dir/initdb.log" 2>&1 ||
                { tail -n 20 "$dir/initdb.log" >&2; die "initdb failed (log: $dir/initdb.log)"; }
        echo "include_if_exists = 'agentbox.conf'" >>"$data/postgresql.conf"
fi

port_free() {
        ! ss -Htln "sport = :$1" 2>/dev/null | grep -q .
}

if running; then
        # A server from an earlier run without its port file: ask it.
        port=$(sed -n 4p "$data/postmaster.pid")
else
        port=
        for ((p = first_port; p < first_port + 100; p++)); do
                if port_free "$p"; then
                        port=$p
                        break
                fi
        done
        [ -n "$port" ] || die "no free port in $first_port..$((first_port + 99))"
        # Test settings: no durability (the data is thrown away), local only.
        cat >"$data/agentbox.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
        [ "$owner" = "$(id -un)" ] || chown "$owner:" "$data/agentbox.conf"
        echo "pg.sh: starting PostgreSQL ($("$bin/postgres" --version)) on 127.0.0.1:$port" >&2
        as_owner "$bin/pg_ctl" -D "$data" -l "$dir/server.log" -w -t 60 start >/dev/null ||
                { tail -n 20 "$dir/server.log" >&2; die "the server did not start (log: $dir/server.log)"; }
fi
echo "$port" >"$dir/port"
"$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -t 30 || die "the server does not answer on port $port"
url_for "$port"
