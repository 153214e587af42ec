#!/usr/bin/env bash
# The test suite: installs redis-server if missing, then runs every test of the workspace.
# Each test starts its own redis-server processes on free loopback ports.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
echo "building and running every test (cargo test --workspace): about 8 minutes from a fresh" \
  "clone on 2 cores ..." >&2
exec cargo test --workspace "$@"
