#!/usr/bin/env bash
# A real Kubernetes control plane (etcd + kube-apiserver + kube-controller-manager,
# v1.20.2) for the operator's integration tests. No kubelet, scheduler or
# container runtime: tests play those parts through the API.
#
#   tests/kube/control-plane.sh build        build the two binaries into the cache
#   tests/kube/control-plane.sh start DIR    start a control plane, state in DIR
#   tests/kube/control-plane.sh stop DIR     stop it (kills what DIR/pids lists)
#   tests/kube/control-plane.sh bin-dir      print the cache's bin folder
#
# build: from Debian bookworm's `kubernetes` source package (upstream v1.20.2 plus
# its full vendor/ tree), see ../shared/KUBE-APISERVER.md. Idempotent: when both
# binaries are in the cache it returns at once. The cache lives outside the repo:
# ${RPCJOB_KUBE_CACHE:-$HOME/.cache/rpcjob/kube-1.20.2}. Needs the packages
# golang-go etcd-server dpkg-dev rsync openssl golang-github-modern-go-reflect2-dev
# golang-github-json-iterator-go-dev (scripts/setup.sh test installs them).
#
# start DIR writes:
#   DIR/kubeconfig      admin user (token, group system:masters), CA of the server
#   DIR/kubeconfig-nogroup  a user with no groups (every request is 403)
#   DIR/env             shell lines: KUBE_URL, KUBE_PORT, ETCD_PORT, KUBE_CA,
#                       KUBE_ADMIN_TOKEN, KUBE_NOGROUP_TOKEN, KUBE_DIR
#   DIR/pids            one "name pid" line per process
#   DIR/logs/*.log      each process's output
# It waits until /readyz answers ok and the default ServiceAccount exists.
# `start DIR` on a DIR whose etcd data exists reuses it (restart of the API server
# keeps the cluster's state); `restart-apiserver DIR` restarts only kube-apiserver
# on the same port. With RPCJOB_KUBE_OWNER_PID set, a watchdog stops the control
# plane once that process is gone (tests that crash leave no processes behind).
set -euo pipefail

KUBE_VERSION=1.20.2
KUBE_GIT_COMMIT=faecb196815e248d3ecfb03c680a4507229c2a56 # upstream v1.20.2
cache=${RPCJOB_KUBE_CACHE:-$HOME/.cache/rpcjob/kube-$KUBE_VERSION}
bin=$cache/bin

log() { echo "control-plane: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}

# ---------------------------------------------------------------- build

have_binaries() {
  [ -x "$bin/kube-apiserver" ] && [ -x "$bin/kube-controller-manager" ]
}

ensure_deb_src() {
  # A deb-src twin of the machine's Debian entries (same URIs, suites, keyring).
  local src=/etc/apt/sources.list.d/rpcjob-deb-src.sources
  if apt-get source --print-uris kubernetes >/dev/null 2>&1; then
    return 0
  fi
  [ -f /etc/apt/sources.list.d/debian.sources ] ||
    die "no /etc/apt/sources.list.d/debian.sources to derive a deb-src entry from"
  log "adding $src"
  sed -e 's/^Types:.*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources |
    as_root tee "$src" >/dev/null
  as_root apt-get update -qq
}

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

do_build() {
  if have_binaries; then
    log "binaries present in $bin"
    return 0
  fi
  local p
  for p in go etcd dpkg-source rsync openssl; do
    command -v "$p" >/dev/null || die "missing $p (run scripts/setup.sh test)"
  done
  for p in /usr/share/gocode/src/github.com/modern-go/reflect2 \
    /usr/share/gocode/src/github.com/json-iterator/go; do
    [ -d "$p" ] || die "missing $p (golang-github-modern-go-reflect2-dev, golang-github-json-iterator-go-dev)"
  done
  local start=$SECONDS
  mkdir -p "$cache"
  local work=$cache/work
  rm -rf "$work"
  mkdir -p "$work/dl"
  ensure_deb_src
  log "fetching the kubernetes source package"
  (cd "$work/dl" && apt-get source --download-only kubernetes >/dev/null)
  local dsc
  dsc=$(find "$work/dl" -maxdepth 1 -name 'kubernetes_*.dsc' | head -1)
  [ -n "$dsc" ] || die "no kubernetes .dsc downloaded"
  local gopath=$work/gopath
  local tree=$gopath/src/k8s.io/kubernetes
  mkdir -p "$(dirname "$tree")"
  dpkg-source --no-check -x "$dsc" "$tree" >/dev/null

  # The vendored reflect2 v1.0.1 crashes binaries built with Go >= 1.18; use
  # Debian's reflect2 1.0.2 and json-iterator 1.1.12 (upstream made the same bump).
  local v=$tree/vendor/github.com
  rm -rf "$v/modern-go/reflect2" "$v/json-iterator/go"
  cp -a /usr/share/gocode/src/github.com/modern-go/reflect2 "$v/modern-go/reflect2"
  mkdir -p "$v/json-iterator"
  cp -a /usr/share/gocode/src/github.com/json-iterator/go "$v/json-iterator/go"
  # reflect2 1.0.2 imports nothing new; json-iterator 1.1.12 needs only
  # modern-go/concurrent and reflect2, both vendored.
  find "$v/modern-go/reflect2" "$v/json-iterator/go" -name '*_test.go' -delete

  export GOPATH=$gopath GO111MODULE=off CGO_ENABLED=0
  export GOCACHE=$cache/gocache GOFLAGS=
  log "make gen_openapi"
  (cd "$tree" && make gen_openapi >"$work/gen_openapi.log" 2>&1) ||
    die "make gen_openapi failed, see $work/gen_openapi.log"

  local pkg=k8s.io/kubernetes/vendor/k8s.io/component-base/version
  local ld="-s -w -X $pkg.gitVersion=v$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=20"
  ld+=" -X $pkg.gitCommit=$KUBE_GIT_COMMIT -X $pkg.gitTreeState=clean"
  ld+=" -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  mkdir -p "$work/out"
  for p in kube-apiserver kube-controller-manager; do
    log "go build $p"
    (cd "$tree" && go build -trimpath -ldflags "$ld" -o "$work/out/$p" "k8s.io/kubernetes/cmd/$p")
  done
  mkdir -p "$bin"
  for p in kube-apiserver kube-controller-manager; do
    install -m 0755 "$work/out/$p" "$bin/$p.tmp"
    mv "$bin/$p.tmp" "$bin/$p"
  done
  "$bin/kube-apiserver" --version >&2
  # Keep the Go build cache (a rebuild is then fast); drop the source tree.
  rm -rf "$work"
  log "built in $((SECONDS - start)) s"
}

# ---------------------------------------------------------------- start/stop

used_ports=" "
free_port() { # free_port VAR: a port no socket uses, not handed out before by this run
  local p
  while :; do
    # Below the kernel's ephemeral range (32768-60999 by default), so an outgoing
    # connection's local port cannot take it between this check and the bind; and
    # any socket state counts, not only listeners. Concurrent starts are serialised
    # by do_start's lock, so two control planes never draw the same free port.
    p=$((20000 + (RANDOM * 32768 + RANDOM) % 12000))
    case "$used_ports" in *" $p "*) continue ;; esac
    if ! ss -Htan "( sport = :$p or dport = :$p )" 2>/dev/null | grep -q .; then
      used_ports+="$p "
      printf -v "$1" %s "$p"
      return 0
    fi
  done
}

wait_http() { # wait_http URL SECONDS [curl args...]
  local url=$1 secs=$2
  shift 2
  local deadline=$((SECONDS + secs))
  while [ $SECONDS -lt $deadline ]; do
    # curl prints its --write-out even when the connection is refused: the exit
    # status must say the request succeeded too.
    local out
    if out=$(curl -s --fail --max-time 2 "$@" "$url" 2>/dev/null) && [ "$out" = ok ]; then
      return 0
    fi
    sleep 0.2
  done
  return 1
}

make_certs() { # make_certs DIR
  local d=$1/pki
  [ -f "$d/ca.crt" ] && return 0
  mkdir -p "$d"
  (
    cd "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
      -subj "/CN=rpcjob-test-ca" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr \
      -subj "/CN=kube-apiserver" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n' >san.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
      -out server.crt -days 3650 -extfile san.ext 2>/dev/null
    # A client certificate for the admin (tests of client-certificate kubeconfigs).
    openssl req -newkey rsa:2048 -nodes -keyout admin-client.key -out admin-client.csr \
      -subj "/O=system:masters/CN=cert-admin" 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' >client.ext
    openssl x509 -req -in admin-client.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
      -out admin-client.crt -days 3650 -extfile client.ext 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    rm -f ./*.csr ./*.ext
  )
}

write_kubeconfig() { # write_kubeconfig FILE URL CA USER TOKEN
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: $2
    certificate-authority: $3
users:
- name: $4
  user:
    token: $5
contexts:
- name: test
  context:
    cluster: test
    user: $4
    namespace: default
current-context: test
EOF
}

start_apiserver() { # start_apiserver DIR
  local dir=$1
  # shellcheck disable=SC1091
  . "$dir/env" # KUBE_PORT, ETCD_PORT, KUBE_URL, KUBE_ADMIN_TOKEN
  # shellcheck disable=SC2153
  local pki=$dir/pki kube_port=$KUBE_PORT etcd_port=$ETCD_PORT
  "$bin/kube-apiserver" \
    --bind-address=127.0.0.1 --secure-port="$kube_port" --insecure-port=0 \
    --advertise-address=127.0.0.1 --endpoint-reconciler-type=none \
    --etcd-servers="http://127.0.0.1:$etcd_port" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --tls-cert-file="$pki/server.crt" --tls-private-key-file="$pki/server.key" \
    --client-ca-file="$pki/ca.crt" --token-auth-file="$dir/tokens.csv" \
    --authorization-mode=RBAC \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$pki/sa.pub" \
    --service-account-signing-key-file="$pki/sa.key" \
    --allow-privileged=true \
    --cert-dir="$dir/apiserver-certs" \
    >>"$dir/logs/kube-apiserver.log" 2>&1 &
  local pid=$!
  sed -i '/^kube-apiserver /d' "$dir/pids"
  echo "kube-apiserver $pid" >>"$dir/pids"
  if ! wait_http "$KUBE_URL/readyz" 60 --cacert "$pki/ca.crt" \
    -H "Authorization: Bearer $KUBE_ADMIN_TOKEN"; then
    tail -30 "$dir/logs/kube-apiserver.log" >&2
    die "kube-apiserver not ready after 60 s"
  fi
}

do_start() { # do_start DIR
  local dir=$1
  # One start at a time on this machine (two test binaries under ctest -j each start
  # one): ports are found free here and bound by etcd and kube-apiserver seconds later.
  # The lock belongs to fd 9's open file, released below once everything listens (the
  # processes started here inherit the fd, so closing it alone would not release it).
  exec 9>"${TMPDIR:-/tmp}/rpcjob-control-plane.lock"
  flock -w 180 9 || log "warning: another control plane is still starting after 180 s; going on"
  trap 'flock -u 9 2>/dev/null' EXIT
  have_binaries || die "binaries not built: run $0 build"
  command -v etcd >/dev/null || die "etcd missing (etcd-server package)"
  mkdir -p "$dir/logs"
  dir=$(cd "$dir" && pwd)
  if [ -s "$dir/pids" ]; then
    do_stop "$dir"
  fi
  : >"$dir/pids"
  make_certs "$dir"
  local etcd_port peer_port kube_port admin nogroup
  if [ -f "$dir/env" ]; then
    # shellcheck disable=SC1091
    . "$dir/env"
    etcd_port=$ETCD_PORT kube_port=$KUBE_PORT
    admin=$KUBE_ADMIN_TOKEN nogroup=$KUBE_NOGROUP_TOKEN
  else
    free_port etcd_port
    free_port kube_port
    admin=$(openssl rand -hex 16)
    nogroup=$(openssl rand -hex 16)
  fi
  free_port peer_port
  cat >"$dir/tokens.csv" <<EOF
$admin,admin,admin,system:masters
$nogroup,nobody,nobody
EOF
  cat >"$dir/env" <<EOF
KUBE_DIR=$dir
KUBE_URL=https://127.0.0.1:$kube_port
KUBE_PORT=$kube_port
ETCD_PORT=$etcd_port
KUBE_CA=$dir/pki/ca.crt
KUBE_ADMIN_TOKEN=$admin
KUBE_NOGROUP_TOKEN=$nogroup
EOF
  local url=https://127.0.0.1:$kube_port
  write_kubeconfig "$dir/kubeconfig" "$url" "$dir/pki/ca.crt" admin "$admin"
  write_kubeconfig "$dir/kubeconfig-nogroup" "$url" "$dir/pki/ca.crt" nobody "$nogroup"

  etcd --name rpcjob-test --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "rpcjob-test=http://127.0.0.1:$peer_port" \
    --unsafe-no-fsync \
    >>"$dir/logs/etcd.log" 2>&1 &
  echo "etcd $!" >>"$dir/pids"
  if ! wait_http "http://127.0.0.1:$etcd_port/health" 30 -o /dev/null -w ok; then
    tail -20 "$dir/logs/etcd.log" >&2
    do_stop "$dir"
    die "etcd did not start"
  fi

  start_apiserver "$dir" || {
    do_stop "$dir"
    exit 1
  }

  # kube-controller-manager: garbage collection, namespaces, default ServiceAccounts.
  # It authenticates with the CA-signed admin client certificate.
  cat >"$dir/kcm.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: "$url", certificate-authority: "$dir/pki/ca.crt"}
users:
- name: kcm
  user: {client-certificate: "$dir/pki/admin-client.crt", client-key: "$dir/pki/admin-client.key"}
contexts:
- name: test
  context: {cluster: test, user: kcm}
current-context: test
EOF
  "$bin/kube-controller-manager" \
    --kubeconfig="$dir/kcm.kubeconfig" --bind-address=127.0.0.1 --port=0 --secure-port=0 \
    --service-account-private-key-file="$dir/pki/sa.key" \
    --root-ca-file="$dir/pki/ca.crt" --use-service-account-credentials \
    --leader-elect=false --controllers='*,-bootstrapsigner,-tokencleaner' \
    >>"$dir/logs/kube-controller-manager.log" 2>&1 &
  echo "kube-controller-manager $!" >>"$dir/pids"

  # Pods are refused until the namespace's default ServiceAccount exists.
  local deadline=$((SECONDS + 60))
  until curl -sf --max-time 2 --cacert "$dir/pki/ca.crt" -H "Authorization: Bearer $admin" \
    "$url/api/v1/namespaces/default/serviceaccounts/default" >/dev/null; do
    if [ $SECONDS -ge $deadline ]; then
      tail -30 "$dir/logs/kube-controller-manager.log" >&2
      do_stop "$dir"
      die "no default ServiceAccount after 60 s"
    fi
    sleep 0.3
  done
  # A watchdog stops everything when the owner process (a test binary) dies, even
  # if it crashed before its own clean-up ran.
  if [ -n "${RPCJOB_KUBE_OWNER_PID:-}" ]; then
    (
      trap '' HUP INT
      while kill -0 "$RPCJOB_KUBE_OWNER_PID" 2>/dev/null && [ -s "$dir/pids" ]; do sleep 1; done
      [ -s "$dir/pids" ] && do_stop "$dir"
    ) </dev/null >/dev/null 2>&1 &
    disown
  fi
  flock -u 9
  log "ready at $url (state in $dir)"
}

kill_pid() { # kill_pid PID [GRACE_TENTHS]: TERM, wait (default 5 s), then KILL
  local pid=$1 grace=${2:-50} _
  kill -0 "$pid" 2>/dev/null || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq "$grace"); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.2
  done
  kill -9 "$pid" 2>/dev/null || true
}

do_stop() { # do_stop DIR: every process listed in DIR/pids
  local dir=$1
  [ -f "$dir/pids" ] || return 0
  local pid
  # kube-apiserver drains its watches for a long time on TERM; a test control
  # plane needs no graceful end, so each process gets 2 s.
  local pids
  pids=$(awk '{print $2}' "$dir/pids")
  [ -n "$pids" ] || return 0
  # shellcheck disable=SC2086
  kill $pids 2>/dev/null || true
  local _ alive
  for _ in $(seq 20); do
    alive=
    for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive+=" $pid"; done
    [ -z "$alive" ] && break
    sleep 0.1
  done
  if [ -n "$alive" ]; then
    # shellcheck disable=SC2086
    kill -9 $alive 2>/dev/null || true
  fi
  : >"$dir/pids"
}

do_restart_apiserver() { # same port, same etcd
  local dir=$1 pid
  pid=$(awk '$1=="kube-apiserver"{print $2}' "$dir/pids")
  [ -n "$pid" ] && kill_pid "$pid" 20
  start_apiserver "$dir"
}

case "${1:-}" in
  build) do_build ;;
  start) do_start "${2:?usage: $0 start DIR}" ;;
  stop) do_stop "${2:?usage: $0 stop DIR}" ;;
  restart-apiserver) do_restart_apiserver "${2:?usage: $0 restart-apiserver DIR}" ;;
  bin-dir) echo "$bin" ;;
  *)
    echo "usage: $0 build | start DIR | stop DIR | restart-apiserver DIR | bin-dir" >&2
    exit 2
    ;;
esac
