#!/usr/bin/env bash
# browser-deps.sh - install what the web console's browser tests need:
# Debian's chromium (driven headless by puppeteer-core from console/, which
# scripts/npm-deps.sh installs) and a font for its screenshots. Idempotent:
# does nothing when chromium is there. Called by scripts/test.sh.
set -euo pipefail

cd "$(dirname "$0")/.."
if [ -x /usr/bin/chromium ] && fc-list 2>/dev/null | grep -qi dejavu; then
        echo "browser-deps.sh: chromium already installed"
        exit 0
fi
./scripts/deps.sh chromium fonts-dejavu-core fontconfig
