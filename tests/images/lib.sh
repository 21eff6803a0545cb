# Shared by the image scripts: where images live and how buildah is called.
#
# Images go to a storage root of their own (vfs driver, no daemon, no overlay
# mounts needed), so the tests neither see nor disturb any other containers
# storage on the machine. Override with RPCJOB_IMAGE_WORKDIR.
workdir=${RPCJOB_IMAGE_WORKDIR:-/var/tmp/rpcjob-images}
storage_root=$workdir/storage
base_image=localhost/rpcjob-base:bookworm

bah() {  # buildah on the tests' own storage
  buildah --root "$storage_root" --runroot "$workdir/run" --storage-driver vfs "$@"
}

image_exists() { bah inspect --type image "$1" >/dev/null 2>&1; }

# The Debian mirror this machine's apt uses for bookworm (deb822 .sources first,
# then one-line sources.list entries). RPCJOB_DEBIAN_MIRROR overrides.
debian_mirror() {
  if [ -n "${RPCJOB_DEBIAN_MIRROR:-}" ]; then echo "$RPCJOB_DEBIAN_MIRROR"; return; fi
  local m
  m=$(awk '
      function flush() { if (types ~ /(^| )deb( |$)/ && suites ~ /(^| )bookworm( |$)/ && uri != "" && !found) { print uri; found = 1 } types = suites = uri = "" }
      /^[[:space:]]*$/ { flush(); next }
      /^Types:/  { sub(/^Types:[[:space:]]*/, "");  types = $0 }
      /^Suites:/ { sub(/^Suites:[[:space:]]*/, ""); suites = $0 }
      /^URIs:/   { sub(/^URIs:[[:space:]]*/, "");   uri = $1 }
      END { flush() }' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
  if [ -z "$m" ] && [ -f /etc/apt/sources.list ]; then
    m=$(awk '$1 == "deb" && $3 == "bookworm" { print $2; exit }' /etc/apt/sources.list)
  fi
  echo "${m:-http://deb.debian.org/debian}"
}
