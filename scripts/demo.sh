#!/usr/bin/env bash
# The main job: installs redis-server if missing, then runs the demo, which starts its own
# private redis-server (unless REDIS_URL is set) and stops it at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
exec cargo run --release -q -p quickstart
