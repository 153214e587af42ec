#!/usr/bin/env bash
# The main job: installs redis-server if missing, builds the flash-sale app (release), then runs
# its demo, which starts its own private redis-server (unless REDIS_URL is set), a temporary
# SQLite database and 3 instances of the app, and stops them all at the end. Arguments go to
# the demo (`scripts/demo.sh --no-lock`, `scripts/demo.sh --stall-holder`,
# `scripts/demo.sh --stall-holder --stock-in redis`: the stock kept in Redis, sold by a guarded take).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust (https://rustup.rs) and retry" >&2
  exit 1
fi
scripts/ensure-redis.sh
# `--bin flash-sale`, not `-p flash-sale`: one feature set for the workspace, shared with
# scripts/quickstart.sh's build (see there), so after it only the demo's own crates compile.
echo "building the flash-sale demo (cargo build --release --bin flash-sale): the first build" \
  "compiles about 215 crates, about 4.5 minutes on 2 cores (none after a complete" \
  "scripts/quickstart.sh, which builds it too); later runs start in seconds ..." >&2
cargo build --release --bin flash-sale
exec cargo run --release -q --bin flash-sale -- demo "$@"
