#!/usr/bin/env bash
# npm-deps.sh - install the npm packages of the project, each pinned by its
# package-lock.json:
#   tests/mcp    the official MCP TypeScript SDK (tests/mcp)
#   tests/e2b    E2B's JS SDK, 2.51.0 (`e2b`) and 2.45.0 (`e2b-2.45.0`, an npm
#                alias), driving the E2B front (tests/e2b)
#   tests/opensandbox  OpenSandbox's JS SDK (@alibaba-group/opensandbox), the
#                client of the OpenSandbox front's test
#   runners/js   the modules JS snippets may require (lodash, dayjs, moment,
#                uuid, crypto-js, qs) and the Bun binary (@oven/bun-linux-x64)
#                of the in-box JS runner
#   tests/llm    the official openai client, checking the stand-in model
#                server of the chat tests (tests/llm/fidelity.mjs)
#   console      xterm.js (@xterm/xterm, @xterm/addon-fit), embedded into the
#                binary by the build (console/embed.py), and puppeteer-core for
#                the console's browser tests (tests/console)
#   tests/k8s    kubernetes-models: the Kubernetes OpenAPI schema as validators,
#                for the stand-in cluster's schema check (tests/k8s/validate.mjs)
# Idempotent and fast: a directory whose node_modules exists is left alone;
# installs node and npm with scripts/deps.sh when they are missing.
set -euo pipefail

cd "$(dirname "$0")/.."
todo=()
for dir in tests/mcp tests/e2b tests/opensandbox tests/llm tests/k8s runners/js console; do
        if [ -d "$dir/node_modules" ]; then
                echo "npm-deps.sh: $dir/node_modules already installed"
        else
                todo+=("$dir")
        fi
done
[ ${#todo[@]} -eq 0 ] && exit 0

if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
        ./scripts/deps.sh nodejs npm
fi
for dir in "${todo[@]}"; do
        echo "npm-deps.sh: npm ci --prefix $dir"
        npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error
done
