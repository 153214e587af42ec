#!/usr/bin/env bash
# The main job: installs redis-server if missing, then runs the flash-sale demo, which starts
# its own private redis-server (unless REDIS_URL is set), a temporary SQLite database and 3
# instances of the app, and stops them all at the end. Arguments go to the demo
# (`scripts/demo.sh --no-lock`, `scripts/demo.sh --stall-holder`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
exec cargo run --release -q -p flash-sale -- demo "$@"
