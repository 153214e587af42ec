#!/usr/bin/env bash
# Installs redis-server (and redis-cli, which the Cluster tests use to form a cluster, and
# openssl, with which the TLS tests make their throwaway certificates) from the distribution's
# packages when one is missing. The quickstart, the demo and the tests
# start their own private servers on free loopback ports; they never use a shared one.
#
# With REDIS_SERVER_BIN set (another build of Redis, or a Redis-compatible server such as
# valkey-server), nothing is installed: this checks that the binary runs (and REDIS_CLI_BIN,
# or redis-cli on the PATH, for the Cluster tests) and stops if it does not.
set -euo pipefail
if [ -n "${REDIS_SERVER_BIN:-}" ]; then
  if ! version="$("$REDIS_SERVER_BIN" --version 2>&1)"; then
    echo "REDIS_SERVER_BIN=$REDIS_SERVER_BIN does not run (\`$REDIS_SERVER_BIN --version\`" \
      "failed: $version); fix it or unset it to use the distribution's redis-server" >&2
    exit 1
  fi
  echo "using REDIS_SERVER_BIN=$REDIS_SERVER_BIN: $version" >&2
  cli="${REDIS_CLI_BIN:-redis-cli}"
  if ! "$cli" --version >/dev/null 2>&1; then
    echo "warning: $cli does not run (set REDIS_CLI_BIN): the Cluster tests need it to form" \
      "a cluster; nothing else does" >&2
  fi
  if ! command -v openssl >/dev/null 2>&1; then
    echo "warning: openssl not found: the TLS tests (tests/tests/tls.rs) need it" >&2
  fi
  exit 0
fi
if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 \
  && command -v openssl >/dev/null 2>&1; then
  exit 0
fi
echo "redis-server, redis-cli or openssl not found; installing them from the distribution's" \
  "packages (a minute or so) ..." >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
if command -v apt-get >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server redis-tools openssl \
    >/dev/null
  # The package may start a system service on 6379; we do not use it.
elif command -v dnf >/dev/null 2>&1; then
  $SUDO dnf install -y -q redis openssl
elif command -v brew >/dev/null 2>&1; then
  brew install redis openssl
else
  echo "cannot install redis-server: no apt-get, dnf or brew; install it and retry" >&2
  exit 1
fi
command -v redis-server >/dev/null && command -v redis-cli >/dev/null && command -v openssl >/dev/null
