#!/usr/bin/env bash
# Provides etcd, kube-apiserver, kube-controller-manager and kubectl for envtest and the process-level tests in $BIN_DIR/k8s/<version>.
# First tries setup-envtest; where it cannot download (no internet), builds the binaries from Go
# modules. Prints the directory to use as KUBEBUILDER_ASSETS on its last line. A second run is a no-op.
# With --nodes it also builds what real nodes run (kubelet, kube-scheduler, kube-proxy, CoreDNS) in the same
# throw-away module, so one build and one cache serve envtest and the real clusters.
set -euo pipefail

NODES=""
[ "${1:-}" = "--nodes" ] && NODES=1

K8S_VERSION=${K8S_VERSION:-1.36.3}
ETCD_VERSION=${ETCD_VERSION:-3.6.5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN_DIR=${BIN_DIR:-$ROOT/bin}
ASSETS="$BIN_DIR/k8s/$K8S_VERSION-$(go env GOOS)-$(go env GOARCH)"
log() { echo "envtest-assets: $*" >&2; }

K8S_COMMANDS="kube-apiserver kube-controller-manager kubectl"
NODE_COMMANDS="kube-scheduler kubelet kube-proxy"
COREDNS_VERSION=${COREDNS_VERSION:-1.15.0}
all_present() { for b in "$@"; do [ -x "$ASSETS/$b" ] || return 1; done; }
have_all() {
  all_present etcd $K8S_COMMANDS || return 1
  [ -z "$NODES" ] || all_present $NODE_COMMANDS coredns
}

if have_all; then echo "$ASSETS"; exit 0; fi
mkdir -p "$ASSETS"
# One build at a time: the targets of a parallel make wait for the one that builds, then find its binaries.
exec 9>"$ASSETS/.build.lock"
flock 9
if have_all; then echo "$ASSETS"; exit 0; fi

# 1. setup-envtest (works where its release bucket is reachable).
if [ ! -x "$ASSETS/kube-apiserver" ] && [ -z "${SKIP_SETUP_ENVTEST:-}" ]; then
  if GOBIN="$BIN_DIR" go install sigs.k8s.io/controller-runtime/tools/setup-envtest@release-0.22 >/dev/null 2>&1; then
    if dir=$(timeout 60 "$BIN_DIR/setup-envtest" use "$K8S_VERSION" --bin-dir "$BIN_DIR/setup-envtest-assets" -p path 2>/dev/null) && [ -x "$dir/kube-apiserver" ]; then
      log "setup-envtest provided $dir"
      cp "$dir/etcd" "$dir/kube-apiserver" "$ASSETS/"
    else
      log "setup-envtest could not download; building from Go modules"
    fi
  else
    log "setup-envtest is not installable; building from Go modules"
  fi
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# 2. etcd from go.etcd.io/etcd/server/v3.
if [ ! -x "$ASSETS/etcd" ]; then
  log "building etcd v$ETCD_VERSION (cached after the first run)"
  mkdir -p "$WORK/etcd"
  cat >"$WORK/etcd/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  (cd "$WORK/etcd" && go mod init envtest/etcd >/dev/null 2>&1 \
    && go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >/dev/null 2>&1 \
    && go mod tidy >/dev/null 2>&1 \
    && CGO_ENABLED=0 go build -o "$ASSETS/etcd" .)
fi

# 3. The Kubernetes commands from k8s.io/kubernetes, in a throw-away module that replaces every k8s.io/<staging>
#    module with its published v0.x release. The module is the same with and without --nodes (every command and
#    CoreDNS, a reduced plugin list, in its requirements), so the versions it selects are the same and the node
#    build compiles only what the envtest build has not: the packages are in the Go build cache. Only the missing
#    commands are built.
wanted="$K8S_COMMANDS"
[ -z "$NODES" ] || wanted="$wanted $NODE_COMMANDS coredns"
missing=""
for c in $wanted; do [ -x "$ASSETS/$c" ] || missing="$missing $c"; done
if [ -n "$missing" ]; then
  log "building${missing} v$K8S_VERSION (~7 min cold, cached after)"
  staging_version="v0.${K8S_VERSION#1.}"
  gomod=$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  mkdir -p "$WORK/k8s/coredns"
  {
    echo "module envtest/k8s"
    echo
    echo "go $(go env GOVERSION | sed 's/^go//' | cut -d. -f1,2)"
    echo
    echo "require k8s.io/kubernetes v$K8S_VERSION"
    echo "require github.com/coredns/coredns v$COREDNS_VERSION"
    echo
    grep -E '^\s*k8s.io/[a-z0-9-]+ => \./staging/' "$gomod" | awk -v v="$staging_version" '{print "replace " $1 " => " $1 " " v}'
  } >"$WORK/k8s/go.mod"
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for c in $K8S_COMMANDS $NODE_COMMANDS; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done
    printf ')\n'
  } >"$WORK/k8s/tools.go"
  cat >"$WORK/k8s/coredns/main.go" <<'GO'
// Command coredns is CoreDNS with the plugins a cluster's DNS needs.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() { coremain.Run() }
GO
  pkgs=""
  for c in $missing; do
    if [ "$c" = coredns ]; then pkgs="$pkgs ./coredns"; else pkgs="$pkgs k8s.io/kubernetes/cmd/$c"; fi
  done
  v="k8s.io/component-base/version"
  ldflags="-s -w -X $v.gitVersion=v$K8S_VERSION -X $v.gitMajor=${K8S_VERSION%%.*} -X $v.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2) -X $v.gitTreeState=clean"
  (cd "$WORK/k8s" && go mod tidy >/dev/null 2>&1 \
    && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$ASSETS/" $pkgs)
fi

have_all || { log "failed to provide envtest assets in $ASSETS"; exit 1; }
echo "$ASSETS"
