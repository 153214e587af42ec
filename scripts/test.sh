#!/usr/bin/env bash
# The test suite, in two lanes; each test starts its own server processes on free loopback
# ports.
#
# 1. Redis (installed by scripts/ensure-redis.sh if missing; REDIS_SERVER_BIN for another
#    build): every test of the workspace. The mutex speaks the scripted protocol there.
# 2. Valkey 9 (built once from Debian's source package by scripts/ensure-valkey.sh, about 4
#    minutes on 2 cores, then cached): lock-core's, lock-tests' and lock-chaos's suites
#    again, where the mutex speaks the native protocol (SET … IFEQ, DELIFEQ) and
#    tests/tests/native.rs runs in full. Skipped only with LOCK_TESTS_VALKEY=0, or when
#    REDIS_SERVER_BIN already names the server to test.
#
# Extra arguments go to both `cargo test` runs (after `--`: to the test binaries).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
echo "building and running every test (cargo test --workspace): about 20 minutes from a fresh" \
  "clone on 2 idle cores ..." >&2
cargo test --workspace "$@"
if [ "${LOCK_TESTS_VALKEY:-1}" = 0 ] || [ -n "${REDIS_SERVER_BIN:-}" ]; then
  echo "the Valkey 9 lane is skipped (LOCK_TESTS_VALKEY=0 or REDIS_SERVER_BIN set)" >&2
  exit 0
fi
valkey="$(scripts/ensure-valkey.sh | tail -n1)"
echo "the Valkey 9 lane: lock-core's, lock-tests' and lock-chaos's suites on" \
  "$valkey/valkey-server (about 8 minutes, its build included) ..." >&2
REDIS_SERVER_BIN="$valkey/valkey-server" REDIS_CLI_BIN="$valkey/valkey-cli" \
  cargo test -p lock-core -p lock-tests -p lock-chaos "$@"
