#!/usr/bin/env bash
# npm-deps.sh - install the npm packages of the tests (tests/mcp: the official
# MCP TypeScript SDK, pinned by tests/mcp/package-lock.json). Idempotent: does
# nothing when tests/mcp/node_modules exists; installs node and npm with
# scripts/deps.sh when they are missing.
set -euo pipefail

cd "$(dirname "$0")/.."
if [ -d tests/mcp/node_modules ]; then
        echo "npm-deps.sh: tests/mcp/node_modules already installed"
        exit 0
fi
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
        ./scripts/deps.sh nodejs npm
fi
echo "npm-deps.sh: npm ci --prefix tests/mcp"
npm ci --prefix tests/mcp --no-audit --no-fund --loglevel=error
