#!/usr/bin/env bash
# Install Debian packages for the commands that are missing:  apt_ensure.sh COMMAND=PACKAGE[,PACKAGE...] ...
# (the test scripts' set-up on a fresh machine; needs root and apt). Bounded waits, quiet unless it fails.
set -euo pipefail
missing=()
for spec in "$@"; do
  if ! command -v "${spec%%=*}" >/dev/null; then
    IFS=, read -r -a pkgs <<< "${spec#*=}"
    missing+=("${pkgs[@]}")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "apt_ensure: missing ${missing[*]}; install them (needs root and apt)" >&2; exit 1
fi
echo "apt_ensure: installing ${missing[*]} from apt" >&2
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
if ! { timeout 600 apt-get update -qq && timeout 900 apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  tail -20 "$log" >&2; rm -f "$log"; exit 1
fi
rm -f "$log"
