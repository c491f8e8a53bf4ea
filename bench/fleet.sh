#!/usr/bin/env bash
# bench/fleet.sh - a fleet's costs in one run: exec `true` through a box's
# owner and through another node, creates per second with one, two and
# three nodes (bench/fleet.py says how; docs/fleet.md what a fleet is).
#
#   sudo bench/fleet.sh
#   sudo BUILD=build N=500 BOXES=24 CLIENTS=8 bench/fleet.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export BUILD=${BUILD:-$ROOT/build}
[ -x "$BUILD/agentbox" ] || "$ROOT/scripts/build.sh" "$BUILD"
exec python3 "$ROOT/bench/fleet.py"
