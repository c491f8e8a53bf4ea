#!/usr/bin/env bash
# run.sh - THE main command (the README's): installs what is missing, builds,
# and shows agentbox at work with the CLI on a box named "demo".
#
# Data dir: $AGENTBOX_DATA, default ./data (boxes persist there until `rm`).
#
# TODO(serve): once the HTTP server exists, end this script with
#   exec ./build/agentbox serve --data "$data" --listen "${AGENTBOX_LISTEN:-127.0.0.1:8080}"
# and keep the CLI demo behind an option (e.g. run.sh --demo).
set -euo pipefail

cd "$(dirname "$0")/.."
./scripts/deps.sh
./scripts/build.sh build

data=${AGENTBOX_DATA:-./data}
bin=./build/agentbox
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
