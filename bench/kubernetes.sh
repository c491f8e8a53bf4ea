#!/usr/bin/env bash
# kubernetes.sh - create, first exec, exec, stop and start on the kubernetes
# backend (stand-in cluster) beside the Docker backend, in one run: see the
# header of bench/kubernetes.py. BUILD=build N=5.
set -euo pipefail
exec python3 "$(dirname "$0")/kubernetes.py" "$@"
