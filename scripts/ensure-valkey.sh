#!/usr/bin/env bash
# Makes a Valkey >= 9.0 server (valkey-server, valkey-cli, valkey-benchmark) available and prints
# the absolute path of the directory that holds them as the LAST line of stdout; everything
# else goes to stderr. CI and the tests use it as
#   dir="$(scripts/ensure-valkey.sh | tail -n1)"
#   REDIS_SERVER_BIN="$dir/valkey-server" REDIS_CLI_BIN="$dir/valkey-cli" <test command>
#
# Debian 12 ships no Valkey, and the binary packages of Debian's newer suite (testing) need a
# newer libc, so this builds Debian's own `valkey` SOURCE package from testing (9.1.x when
# written): `apt-get source` through a temporary apt configuration (its own sources list, lists
# and cache dirs in a temp dir, on the mirror named by the machine's own apt sources, falling back
# to http://deb.debian.org/debian); the machine's apt configuration and lists are not touched. It
# installs dpkg-dev and libssl-dev with the normal apt when they are missing (gcc and make must
# be there), builds with `make -j2 BUILD_TLS=yes` (without TLS, with a loud warning, if that
# fails) in a temp dir that is removed afterwards, and installs the binaries into the cache.
#
# Time (2 cores, measured with Valkey 9.1.2): about 4 minutes cold (lists and source download
# ~5 s, the build the rest); a cache hit takes ~0.04 s.
# Cache: ${VALKEY_CACHE_DIR:-$HOME/.cache/lock-toolkit/valkey-<version>}; a later run whose cached
# `valkey-server --version` reports >= 9.0 prints that directory at once, with no download or
# build. Delete the directory to rebuild. Concurrent runs wait for each other (flock).
#
# Environment:
#   VALKEY_SERVER_BIN    use this binary instead (must run); its directory is printed as is.
#   VALKEY_CACHE_DIR     the exact install dir (default: see above).
#   VALKEY_DEBIAN_SUITE  the Debian suite to take the source from (default: testing).
#
# Scripting: Valkey 9.1 moved Lua into a module (src/modules/lua). The default build, used
# here, links it statically (BUILD_LUA unset) and loads it at startup, so EVAL/EVALSHA/SCRIPT/
# FUNCTION/FCALL work. Ways to run a server WITHOUT scripting (all tried with 9.1.2):
#   - with the binary built here, at run time: start it with `--enable-module-command local`
#     and send `MODULE UNLOAD lua` (from 127.0.0.1; it also drops loaded functions). Then:
#       EVAL "return 1" 0 / SCRIPT LOAD   -> ERR Could not find scripting engine 'lua'
#       FUNCTION LOAD "#!lua name=..."     -> ERR Engine 'lua' not found
#       FCALL myfn 0                       -> ERR Function not found
#       EVALSHA <sha> 0                    -> NOSCRIPT No matching script.
#     (the commands still exist: COMMAND INFO EVAL answers; HELLO's "modules" list is empty).
#   - a build without Lua: `make BUILD_LUA=no` (same errors as above, with no extra step).
#     (`make BUILD_LUA=module` builds src/modules/lua/libvalkeylua.so for `--loadmodule`
#     instead; not tried.)
#   - or hide the commands: `--rename-command EVAL ''` (and EVALSHA, EVAL_RO, EVALSHA_RO,
#     SCRIPT, FUNCTION, FCALL, FCALL_RO) -> ERR unknown command 'EVAL', with args beginning
#     with: 'return 1' '0'; or deny them with an ACL:
#     `--user default on nopass '~*' '&*' +@all -@scripting` ->
#     NOPERM User default has no permissions to run the 'eval' command
#     (likewise 'fcall', 'function|load', 'script|load', 'evalsha').
set -euo pipefail
exec 3>&1 1>&2 # stdout is for the final directory only; all chatter goes to stderr

# Prints the version (e.g. 9.1.2) of the valkey-server "$1" if it runs, else fails.
server_version() {
  local out
  out="$(timeout 20 "$1" --version 2>/dev/null)" || return 1
  out="${out#* v=}"
  out="${out%% *}"
  [[ "$out" =~ ^[0-9]+\.[0-9]+ ]] || return 1
  echo "$out"
}

# Succeeds when directory "$1" holds a running valkey-server >= 9.0 and a running valkey-cli.
usable_dir() {
  local v
  [ -x "$1/valkey-server" ] && [ -x "$1/valkey-cli" ] || return 1
  v="$(server_version "$1/valkey-server")" || return 1
  [ "${v%%.*}" -ge 9 ] || return 1
  timeout 20 "$1/valkey-cli" --version >/dev/null 2>&1
}

# Prints a usable cached install dir, if there is one.
find_cached() {
  local d best=""
  if [ -n "${VALKEY_CACHE_DIR:-}" ]; then
    if usable_dir "$VALKEY_CACHE_DIR"; then echo "$VALKEY_CACHE_DIR"; return 0; fi
    return 1
  fi
  # The newest usable one (sort -V: valkey-10.0.0 after valkey-9.1.2).
  while IFS= read -r d; do
    [ -d "$d" ] && [ "${d##*.tmp.}" = "$d" ] && usable_dir "$d" && best="$d"
  done < <(printf '%s\n' "$CACHE_ROOT"/valkey-* | sort -V)
  [ -n "$best" ] && echo "$best"
}

if [ -n "${VALKEY_SERVER_BIN:-}" ]; then
  if ! version="$("$VALKEY_SERVER_BIN" --version 2>&1)"; then
    echo "VALKEY_SERVER_BIN=$VALKEY_SERVER_BIN does not run (\`$VALKEY_SERVER_BIN --version\`" \
      "failed: $version); fix it or unset it to build Valkey from Debian's source package" >&2
    exit 1
  fi
  bin="$VALKEY_SERVER_BIN"
  case "$bin" in */*) ;; *) bin="$(command -v "$bin")" ;; esac
  dir="$(cd "$(dirname "$bin")" && pwd)"
  echo "using VALKEY_SERVER_BIN=$VALKEY_SERVER_BIN: $version" >&2
  [ -x "$dir/valkey-cli" ] || echo "warning: no valkey-cli next to $VALKEY_SERVER_BIN" >&2
  echo "$dir" >&3
  exit 0
fi

CACHE_ROOT="${HOME:?HOME is not set}/.cache/lock-toolkit"
if [ -n "${VALKEY_CACHE_DIR:-}" ]; then
  lock_dir="$(dirname "$VALKEY_CACHE_DIR")"
else
  lock_dir="$CACHE_ROOT"
fi
if cached="$(find_cached)"; then
  (cd "$cached" && pwd) >&3
  exit 0
fi

# Not cached: take a lock so that concurrent runs build once, then look again.
mkdir -p "$lock_dir"
exec 9>"$lock_dir/.ensure-valkey.lock"
if ! flock -w 1800 9; then
  echo "timed out waiting for another ensure-valkey.sh (lock $lock_dir/.ensure-valkey.lock)" >&2
  exit 1
fi
if cached="$(find_cached)"; then
  (cd "$cached" && pwd) >&3
  exit 0
fi

for tool in gcc make apt-get timeout flock; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "cannot build Valkey: $tool not found (this script needs Debian with gcc and make)" >&2
    exit 1
  fi
done
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# Installs Debian 12 packages "$@" with the machine's normal apt (updating its lists only if the
# install fails without).
apt_install() {
  echo "installing $* with apt ..." >&2
  if ! DEBIAN_FRONTEND=noninteractive timeout 600 $SUDO apt-get install -y -qq "$@" >/dev/null; then
    timeout 600 $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive timeout 600 $SUDO apt-get install -y -qq "$@" >/dev/null
  fi
}
command -v dpkg-source >/dev/null 2>&1 || apt_install dpkg-dev
tls=yes
if ! dpkg -s libssl-dev >/dev/null 2>&1; then
  if ! apt_install libssl-dev pkg-config; then
    echo "WARNING: could not install libssl-dev: building Valkey WITHOUT TLS; the TLS tests" \
      "will fail" >&2
    tls=no
  fi
fi

echo "no cached Valkey >= 9.0; building it from Debian's source package (about 2.5 minutes" \
  "on 2 cores) ..." >&2
work="$(mktemp -d "${TMPDIR:-/tmp}/ensure-valkey.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# The mirror that the machine's own apt sources name for its Debian release (deb822 .sources
# or one-line .list), else deb.debian.org.
# shellcheck disable=SC1091
codename="$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")"
codename="${codename:-bookworm}"
machine_mirror="$(
  {
    for f in /etc/apt/sources.list.d/*.sources; do
      [ -f "$f" ] || continue
      # One stanza per paragraph: print its first URI when its Suites name our release.
      awk -v code="$codename" '
        function flush() { if (uri != "" && ok && !done) { print uri; done = 1 } uri = ""; ok = 0 }
        /^[[:space:]]*$/ { flush(); next }
        /^#/ { next }
        tolower($1) == "uris:" { uri = $2 }
        tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == code) ok = 1 }
        tolower($1) == "enabled:" && tolower($2) == "no" { uri = "" }
        END { flush() }' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
      [ -f "$f" ] || continue
      sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" \
        | awk -v code="$codename" '($1 == "deb" || $1 == "deb-src") && $3 == code { print $2 }'
    done
  } 2>/dev/null | grep -E '^https?://' | grep -v -- '-security' | head -n1 || true
)"
machine_mirror="${machine_mirror%/}"
mirrors="${machine_mirror:-http://deb.debian.org/debian}"
[ "$mirrors" = "http://deb.debian.org/debian" ] || mirrors="$mirrors http://deb.debian.org/debian"
suite="${VALKEY_DEBIAN_SUITE:-testing}"
keyring=""
if [ -r /usr/share/keyrings/debian-archive-keyring.gpg ]; then
  keyring="[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
fi

# A temporary apt that knows only deb-src of $suite on one mirror; nothing of the machine's apt
# state is written (its lists, caches and lock are all under $work/apt).
mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/src"
APT_OPTS=(
  -o "Dir::Etc::SourceList=$work/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache"
  -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null
  -o APT::Sandbox::User=root -o Acquire::Retries=3 -o Acquire::Languages=none
)
version=""
for mirror in $mirrors; do
  echo "deb-src ${keyring}$mirror $suite main" >"$work/apt/sources.list"
  echo "looking up the valkey source package in $mirror $suite ..." >&2
  if ! timeout 600 apt-get "${APT_OPTS[@]}" -qq update >&2; then
    echo "could not read $mirror $suite (apt-get update failed)" >&2
    continue
  fi
  v="$(apt-cache "${APT_OPTS[@]}" showsrc valkey 2>/dev/null \
    | awk '/^Version:/ { print $2 }' | sort -V | tail -n1 || true)"
  if [ -z "$v" ]; then
    echo "$mirror $suite has no valkey source package" >&2
  elif ! dpkg --compare-versions "$v" ge 9.0; then
    echo "$mirror $suite has valkey $v, older than 9.0" >&2
  else
    version="$v"
    break
  fi
done
if [ -z "$version" ]; then
  echo "cannot build Valkey: found no valkey >= 9.0 source package in Debian $suite on" \
    "$mirrors (set VALKEY_DEBIAN_SUITE=unstable to try another suite)" >&2
  exit 1
fi
echo "downloading and unpacking valkey $version from $mirror $suite ..." >&2
if ! (cd "$work/src" \
  && timeout 600 apt-get "${APT_OPTS[@]}" -qq source "valkey=$version" >"$work/apt-source.log" 2>&1)
then
  cat "$work/apt-source.log" >&2
  echo "cannot build Valkey: \`apt-get source valkey=$version\` failed (output above)" >&2
  exit 1
fi
srcdir="$(find "$work/src" -mindepth 1 -maxdepth 1 -type d -name 'valkey-*' | head -n1)"
upstream="$(sed -n 's/^#define VALKEY_VERSION "\(.*\)"$/\1/p' "$srcdir/src/version.h" 2>/dev/null || true)"
if [ -z "$srcdir" ] || [ -z "$upstream" ] || [ "${upstream%%.*}" -lt 9 ]; then
  echo "cannot build Valkey: the unpacked source ($srcdir) is not Valkey >= 9.0" \
    "(src/version.h says '${upstream:-nothing}')" >&2
  exit 1
fi

# Only the three programs: no unit tests, no test modules, no sentinel/check-* copies.
build() { # $1 = BUILD_TLS value
  echo "building valkey $upstream with make -j2 BUILD_TLS=$1 (log: $work/build.log) ..." >&2
  timeout 1800 make -C "$srcdir/src" -j2 BUILD_TLS="$1" USE_SYSTEMD=no \
    valkey-server valkey-cli valkey-benchmark >"$work/build.log" 2>&1
}
if [ "$tls" = yes ] && ! build yes; then
  tail -n 30 "$work/build.log" >&2
  echo "" >&2
  echo "!!! WARNING: the TLS build of Valkey FAILED (log tail above); building WITHOUT TLS." >&2
  echo "!!! The TLS tests will fail with this server." >&2
  echo "" >&2
  tls=no
fi
if [ "$tls" = no ] && ! build no; then
  tail -n 30 "$work/build.log" >&2
  echo "cannot build Valkey $upstream: make failed (log tail above)" >&2
  exit 1
fi

dest="${VALKEY_CACHE_DIR:-$CACHE_ROOT/valkey-$upstream}"
mkdir -p "$(dirname "$dest")"
tmp_dest="$dest.tmp.$$"
rm -rf "$tmp_dest"
mkdir -p "$tmp_dest"
for prog in valkey-server valkey-cli valkey-benchmark; do
  install -m 0755 "$srcdir/src/$prog" "$tmp_dest/$prog"
done
printf 'valkey %s (Debian source package valkey %s from %s %s), BUILD_TLS=%s, Lua static\n' \
  "$upstream" "$version" "$mirror" "$suite" "$tls" >"$tmp_dest/BUILD-INFO"
if ! usable_dir "$tmp_dest"; then
  rm -rf "$tmp_dest"
  echo "cannot use the built Valkey: \`valkey-server --version\` does not report >= 9.0" >&2
  exit 1
fi
rm -rf "$dest"
mv "$tmp_dest" "$dest"
dest="$(cd "$dest" && pwd)"
echo "installed $("$dest/valkey-server" --version) (TLS: $tls) into $dest" >&2
echo "$dest" >&3
