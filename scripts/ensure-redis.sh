#!/usr/bin/env bash
# Installs redis-server (and redis-cli, which the Cluster tests use to form a cluster) from
# the distribution's packages when either is missing. The demo and the tests start their own
# private servers on free loopback ports; they never use a shared one.
set -euo pipefail
if command -v redis-server >/dev/null && command -v redis-cli >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
  exit 0
fi
echo "redis-server or redis-cli not found; installing them from the distribution's packages" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
if command -v apt-get >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server redis-tools >/dev/null
  # The package may start a system service on 6379; we do not use it.
elif command -v dnf >/dev/null 2>&1; then
  $SUDO dnf install -y -q redis
elif command -v brew >/dev/null 2>&1; then
  brew install redis
else
  echo "cannot install redis-server: no apt-get, dnf or brew; install it and retry" >&2
  exit 1
fi
command -v redis-server >/dev/null && command -v redis-cli >/dev/null
