#!/usr/bin/env bash
# run.sh - THE main command (the README's): installs what is missing, builds,
# and starts the agentbox server in the foreground (Ctrl-C stops it; boxes
# keep their files and a restart finds them again).
#
#   scripts/run.sh                       # serve on 127.0.0.1:8080, data in ./data
#   scripts/run.sh --config my.yaml      # extra flags go to `agentbox serve`
#   scripts/run.sh --demo                # instead: a short CLI demo on a box "demo"
#
# Env: AGENTBOX_DATA (default ./data), AGENTBOX_LISTEN (default 127.0.0.1:8080),
# AGENTBOX_TOKEN (admin token; without one the API is open on loopback only).
set -euo pipefail

cd "$(dirname "$0")/.."
./scripts/deps.sh
./scripts/npm-deps.sh # the JS runner's Bun and modules (for /sandbox/js)
./scripts/build.sh build

data=${AGENTBOX_DATA:-./data}
bin=./build/agentbox

if [ "${1:-}" != --demo ]; then
        listen=${AGENTBOX_LISTEN:-127.0.0.1:8080}
        echo
        echo "agentbox: serving on http://$listen (data in $data). Try, from another terminal:"
        echo "  curl -s -X POST http://$listen/v1/exec -H 'Content-Type: application/json' -d '{\"app_id\":\"a\",\"user_id\":\"u\",\"chat_id\":\"c\",\"command\":\"uname -a\"}'"
        echo "  curl -s http://$listen/v1/sandboxes"
        echo "API: docs/api.md   settings: docs/configuration.md   Ctrl-C stops the server."
        echo
        exec "$bin" serve --data "$data" --listen "$listen" "$@"
fi

ab() {
        local a shown=
        for a in "$@"; do
                if [[ $a =~ ^[A-Za-z0-9_./=:@%+-]+$ ]]; then shown+=" $a"; else shown+=" ${a@Q}"; fi
        done
        echo "+ agentbox --data $data$shown" >&2
        "$bin" --data "$data" "$@"
}

echo
if "$bin" --data "$data" ls 2>/dev/null | awk '$1 == "demo" { f = 1 } END { exit !f }'; then
        echo "box demo exists: starting it (a no-op if it runs)"
        ab start demo
else
        ab create --id demo
fi

ab exec demo -- bash -c 'uname -a; id; ls /workspace; echo hello > /workspace/hello.txt; cat /workspace/hello.txt'
ab ls

echo
echo "agentbox works. Go on with:"
printf '  %-36s %s\n' \
        "commands from stdin (no TTY yet):" "$bin --data $data exec -i demo -- bash" \
        "stop it (its files stay on disk):" "$bin --data $data stop demo" \
        "start it again, files as they were:" "$bin --data $data start demo" \
        "delete the box and its files:" "$bin --data $data rm demo" \
        "every command:" "$bin --help"
