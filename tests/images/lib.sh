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

# debian_mirror [SUITE]: the mirror this machine's apt uses for SUITE (default
# bookworm; deb822 .sources first, then one-line sources.list entries).
# RPCJOB_DEBIAN_MIRROR overrides; an unknown suite prints the default archive.
debian_mirror() {
  if [ -n "${RPCJOB_DEBIAN_MIRROR:-}" ]; then echo "$RPCJOB_DEBIAN_MIRROR"; return; fi
  local suite=${1:-bookworm} m
  m=$(awk -v suite="$suite" '
      function flush() { if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " ") && uri != "" && !found) { print uri; found = 1 } types = suites = uri = "" }
      /^[[:space:]]*$/ { flush(); next }
      /^Types:/  { sub(/^Types:[[:space:]]*/, "");  types = $0 }
      /^Suites:/ { sub(/^Suites:[[:space:]]*/, ""); suites = $0 }
      /^URIs:/   { sub(/^URIs:[[:space:]]*/, "");   uri = $1 }
      END { flush() }' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
  if [ -z "$m" ] && [ -f /etc/apt/sources.list ]; then
    m=$(awk -v suite="$suite" '$1 == "deb" && $3 == suite { print $2; exit }' /etc/apt/sources.list)
  fi
  case "$suite" in
    *-security) echo "${m:-http://deb.debian.org/debian-security}" ;;
    *) echo "${m:-http://deb.debian.org/debian}" ;;
  esac
}
