#!/usr/bin/env bash
# The test suite: installs redis-server if missing, then runs every test of the workspace.
# Each test starts its own redis-server processes on free loopback ports.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
exec cargo test --workspace "$@"
