#!/usr/bin/env bash
# The first look: installs redis-server if missing, builds the quickstart example,
# then runs it: 3 lock clients x 16 tasks increment one counter in Redis without and with the
# lock, and a stalled holder's late write meets the fencing token. It starts its own private
# redis-server (unless REDIS_URL is set) and stops it at the end. Then it builds the demo of
# step 2 (scripts/demo.sh), so that one starts in seconds; Ctrl-C skips that build.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust (https://rustup.rs) and retry" >&2
  exit 1
fi
scripts/ensure-redis.sh
# `-p quickstart`: cargo resolves features for this package alone, so the build is the
# quickstart's own small dependency set (lock-core without its default features, tokio):
# 89 crates. (With `--bin`, features are unified over the whole workspace, which turns
# on lock-core's macro and TLS and much more.) In the dev profile: the quickstart waits on
# Redis, not on the CPU, and an unoptimised build takes less than half the CPU time.
echo "building the quickstart example (cargo build -p quickstart): the first build compiles" \
  "its own small set of crates; later runs start in seconds ..." >&2
cargo build -p quickstart
cargo run -q -p quickstart -- "$@"
echo >&2
echo "the quickstart is done. Now starting a long build: the flash-sale demo for step 2" \
  "(cargo build --release --bin flash-sale), a release build of a few hundred crates that" \
  "takes minutes, so that scripts/demo.sh starts in seconds. Ctrl-C skips it" \
  "(scripts/demo.sh then builds what is left) ..." >&2
cargo build --release --bin flash-sale
echo "built: scripts/demo.sh is next" >&2
