#!/usr/bin/env bash
# Installs the Debian packages in clients/go/debian-packages.txt that are missing (apt-get, as root
# or through sudo); returns at once when all are there.
set -euo pipefail

list="$(dirname "$0")/debian-packages.txt"
missing=()
for package in $(grep -v '^#' "$list"); do
    dpkg-query -W -f='${db:Status-Abbrev}' "$package" 2>/dev/null | grep -q '^ii' || missing+=("$package")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

command -v apt-get >/dev/null || { echo "go-setup: needs a Debian or Ubuntu host (apt-get) for: ${missing[*]}" >&2; exit 1; }
sudo=""
[[ "$(id -u)" -eq 0 ]] || sudo=sudo
echo "go-setup: installing ${missing[*]}"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
