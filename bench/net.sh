#!/usr/bin/env bash
# bench/net.sh - what the network modes (issue 6) cost: the latency of one
# HTTP request from a box through the allowlist proxy (plain HTTP and a
# CONNECT tunnel) side by side with the same request from a full-mode box
# (veth + NAT) and from the host itself, in one run.
#
#   sudo bench/net.sh                  # ~1 min
#   sudo N=2000 BUILD=/tmp/build-x bench/net.sh
#
# Nothing leaves the machine: the script re-runs itself in a network and a
# mount namespace of its own (unshare -n -m). In there it makes an "outside"
# namespace at 198.51.100.10 (documentation range) joined by a veth, with a
# small HTTP server (Python's, keep-alive off), names it bench.test in a hosts
# file given to the server (network_hosts_file), starts `agentbox serve` with
# network_full on, makes one allowlist box (allow: bench.test) and one full
# box, and in each runs the same client loop (python3, one new TCP connection
# per request, as curl would): N (500) sequential GETs of a 2-byte file after
# WARM (50) unmeasured ones. The host loop is the baseline.
#
# Prints p50/p90/p99 per path and the proxy's added latency (p50 through the
# proxy minus p50 of the full box's direct NATed request). Knobs: BUILD
# (default build), N, WARM.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
N=${N:-500}
WARM=${WARM:-50}
PY=/usr/bin/python3
[ -x $PY ] || PY=python3

if [ "${AB_NETBENCH_INNER:-}" != 1 ]; then
        [ "$(id -u)" = 0 ] || { echo "bench/net.sh: run as root (namespaces, veth, iptables)" >&2; exit 1; }
        [ -x "$BUILD/agentbox" ] || { echo "building into $BUILD ..."; meson setup "$BUILD" "$ROOT" >/dev/null 2>&1 || true; ninja -C "$BUILD" >/dev/null; }
        exec env AB_NETBENCH_INNER=1 unshare -n -m --propagation private "$0" "$@"
fi

WORK=$(mktemp -d /var/tmp/agentbox-netbench.XXXXXX)
NS=abnb-$$
SRV_PID=
cleanup() {
        set +e
        if [ -n "$SRV_PID" ]; then
                for b in nb-allow nb-full; do
                        curl -s -X DELETE "http://127.0.0.1:$PORT/v1/sandboxes/$b" >/dev/null
                done
                sleep 1
                kill "$SRV_PID" 2>/dev/null
                wait "$SRV_PID" 2>/dev/null
        fi
        for b in nb-allow nb-full; do "$BUILD/agentbox" --data "$WORK/data" rm -f "$b" >/dev/null 2>&1; done
        [ -n "${WEB_PID:-}" ] && kill "$WEB_PID" 2>/dev/null
        ip netns del "$NS" 2>/dev/null
        rm -f "/run/netns/$NS"
        rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

ip link set lo up
ip netns add "$NS"
ip link add nbveth0 type veth peer name nbveth1
ip link set nbveth1 netns "$NS"
ip addr add 198.51.100.1/24 dev nbveth0
ip link set nbveth0 up
ip netns exec "$NS" ip addr add 198.51.100.10/24 dev nbveth1
ip netns exec "$NS" ip link set nbveth1 up
ip netns exec "$NS" ip link set lo up
mkdir -p "$WORK/web"
printf 'ok' >"$WORK/web/x"
cat >"$WORK/web.py" <<'EOF'
import socket, sys
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
class H(SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass
class S(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    def server_bind(self):
        socket.socket.bind(self.socket, self.server_address)
        self.server_name, self.server_port = "198.51.100.10", 80
import os
os.chdir(sys.argv[1])
S(("198.51.100.10", 80), H).serve_forever()
EOF
ip netns exec "$NS" $PY "$WORK/web.py" "$WORK/web" &
WEB_PID=$!
echo "198.51.100.10 bench.test" >"$WORK/hosts"

PORT=$($PY -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
cat >"$WORK/config.yaml" <<EOF
network_full: true
network_hosts_file: $WORK/hosts
idle_stop: 0
EOF
"$BUILD/agentbox" serve --listen "127.0.0.1:$PORT" --data "$WORK/data" --config "$WORK/config.yaml" \
        >"$WORK/server.log" 2>&1 &
SRV_PID=$!
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.1; done
api() { curl -sS -X "$1" "http://127.0.0.1:$PORT$2" ${3:+-d "$3"}; }
api POST /v1/sandboxes '{"id":"nb-allow","network":{"mode":"allowlist","allow":["bench.test"]}}' >/dev/null
api POST /v1/sandboxes '{"id":"nb-full","network":{"mode":"full"}}' >/dev/null

# The client: MODE plain (absolute URL to the proxy), connect (CONNECT then
# GET in the tunnel), direct (GET to the address). One connection per request.
CLIENT=$(cat <<'EOF'
import socket, sys, time
mode, target, n, warm = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def once():
    if mode == "direct":
        s = socket.create_connection((target, 80))
        s.sendall(b"GET /x HTTP/1.1\r\nHost: bench.test\r\nConnection: close\r\n\r\n")
    else:
        s = socket.create_connection(("127.0.0.1", 3128))
        if mode == "plain":
            s.sendall(b"GET http://bench.test/x HTTP/1.1\r\nHost: bench.test\r\n\r\n")
        else:
            s.sendall(b"CONNECT bench.test:80 HTTP/1.1\r\nHost: bench.test:80\r\n\r\n")
            head = b""
            while b"\r\n\r\n" not in head:
                head += s.recv(4096)
            assert b" 200 " in head.split(b"\r\n")[0], head
            s.sendall(b"GET /x HTTP/1.1\r\nHost: bench.test\r\nConnection: close\r\n\r\n")
    got = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        got += d
    s.close()
    assert got.startswith(b"HTTP/1.") and got.endswith(b"ok"), got[:200]
for _ in range(warm):
    once()
ts = []
for _ in range(n):
    t0 = time.perf_counter()
    once()
    ts.append((time.perf_counter() - t0) * 1000)
ts.sort()
pick = lambda q: ts[min(len(ts) - 1, int(q * len(ts)))]
print("%.3f %.3f %.3f" % (pick(0.5), pick(0.9), pick(0.99)))
EOF
)
B64=$(printf '%s' "$CLIENT" | base64 -w0)
inbox() { # box mode target
        api POST "/v1/sandboxes/$1/exec" "{\"command\":\"python3 -c \\\"\$(echo $B64 | base64 -d)\\\" $2 $3 $N $WARM\",\"timeout_s\":600}" |
                $PY -c 'import json,sys; r=json.load(sys.stdin); print(r["stdout"].strip() or ("ERR " + r["stderr"][-300:]))'
}
echo "agentbox network modes: one HTTP GET (new connection each), N=$N after $WARM warm-up, $(nproc) CPUs"
host=$($PY -c "$CLIENT" direct 198.51.100.10 "$N" "$WARM")
full=$(inbox nb-full direct 198.51.100.10)
plain=$(inbox nb-allow plain -)
conn=$(inbox nb-allow connect -)
printf '\n%-40s %9s %9s %9s\n' path "p50 ms" "p90 ms" "p99 ms"
printf '%-40s %9s %9s %9s\n' "host -> outside (baseline)" $host
printf '%-40s %9s %9s %9s\n' "full box -> outside (veth + NAT)" $full
printf '%-40s %9s %9s %9s\n' "allowlist box, plain HTTP via proxy" $plain
printf '%-40s %9s %9s %9s\n' "allowlist box, CONNECT tunnel via proxy" $conn
$PY - "$full" "$plain" "$conn" "$host" <<'EOF'
import sys
f, p, c, h = (float(x.split()[0]) for x in sys.argv[1:5])
print("\nproxy added latency (p50): plain HTTP %+.3f ms, CONNECT %+.3f ms (vs the full box's direct request)" % (p - f, c - f))
print("NAT added latency (p50): %+.3f ms (full box vs host)" % (f - h))
EOF
