#!/bin/sh
# apt-sources.sh [MIRROR [SECURITY_MIRROR]]  (run inside an image, as root)
# Points apt at the given Debian mirror (bookworm, bookworm-updates) and security
# mirror (bookworm-security), for builds on machines that reach only a local or
# snapshot mirror. With no MIRROR it leaves the base image's sources alone.
set -eu
mirror=${1:-}
security=${2:-}
[ -n "$mirror" ] || exit 0
rm -f /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources
{
  echo "deb $mirror bookworm main"
  echo "deb $mirror bookworm-updates main"
  [ -z "$security" ] || echo "deb $security bookworm-security main"
} > /etc/apt/sources.list
