#!/usr/bin/env bash
# Builds the local base image the Dockerfiles name through BASE_IMAGE:
#   debootstrap --variant=minbase bookworm (from this machine's Debian mirror)
#   -> a tarball -> `buildah from scratch` + `buildah add` -> localhost/rpcjob-base:bookworm
# It stands in for debian:bookworm-slim on machines that cannot pull from a registry.
# Skips the work when the image already exists (RPCJOB_REBUILD_BASE=1 forces it).
# Needs root (debootstrap), debootstrap and buildah.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

if image_exists "$base_image" && [ "${RPCJOB_REBUILD_BASE:-0}" != 1 ]; then
  echo "make-base: $base_image exists"
  exit 0
fi
mirror=$(debian_mirror)
rootfs=$workdir/base-rootfs
mkdir -p "$workdir"
rm -rf "$rootfs"
echo "make-base: debootstrap --variant=minbase bookworm from $mirror"
start=$SECONDS
debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$workdir/debootstrap.log" 2>&1 \
  || { tail -n 30 "$workdir/debootstrap.log"; echo "make-base: debootstrap failed" >&2; exit 1; }
# Slim it the way the official slim images are: no downloaded .debs, no apt lists.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/tmp/*
tar -C "$rootfs" --numeric-owner -cf "$workdir/base-rootfs.tar" .
rm -rf "$rootfs"

ctr=$(bah from scratch)
bah add "$ctr" "$workdir/base-rootfs.tar" / >/dev/null
bah config --cmd /bin/bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --label org.opencontainers.image.description="debootstrap --variant=minbase bookworm ($mirror)" "$ctr"
bah commit -q --rm "$ctr" "$base_image" >/dev/null
rm -f "$workdir/base-rootfs.tar"
echo "make-base: $base_image built in $((SECONDS - start))s"
