#!/usr/bin/env bash
# Installs the Debian bookworm packages stratsim builds with. Idempotent; needs root (or sudo).
# Usage: scripts/install-deps.sh [--fuzz]   (--fuzz: also clang and libFuzzer, for scripts/fuzz.sh)
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config
  nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libfmt-dev zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libsimgrid-dev
  libgloo-dev libhiredis-dev libeigen3-dev redis-server
  qt6-base-dev qt6-base-dev-tools qt6-svg-dev fonts-dejavu-core libvalijson-dev
  python3
)
if [ "${1:-}" = "--fuzz" ]; then packages+=(clang libclang-rt-14-dev); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
