#!/usr/bin/env bash
# Installs the Debian packages the bundled workloads read: Fashion-MNIST (vision) and
# espeak-ng (speech synthesis). Idempotent: does nothing when they are present.
# As root it runs apt-get itself; otherwise it prints the sudo line to run and fails.
set -euo pipefail
packages=(dataset-fashion-mnist espeak-ng)
missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "sparseloom: the Debian packages ${missing[*]} are needed and this system has no apt-get;" >&2
  echo "install their equivalents by hand (see docs/workloads.md)." >&2
  exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "sparseloom: missing Debian packages: ${missing[*]}. Run:" >&2
  echo "    sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "sparseloom: installing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
