#!/usr/bin/env bash
# The first look: installs redis-server if missing, builds the quickstart example (release),
# then runs it: 3 lock clients x 16 tasks increment one counter in Redis without and with the
# lock, and a stalled holder's late write meets the fencing token. It starts its own private
# redis-server (unless REDIS_URL is set) and stops it at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust (https://rustup.rs) and retry" >&2
  exit 1
fi
scripts/ensure-redis.sh
echo "building the quickstart example (cargo build --release -p quickstart): the first build" \
  "compiles about 110 crates, about 1.5 minutes on 2 cores; later runs start in seconds ..." >&2
cargo build --release -p quickstart
exec cargo run --release -q -p quickstart "$@"
