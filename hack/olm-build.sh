#!/usr/bin/env bash
# Builds, static, into bin/olm:
# - from the Go module in hack/olm: Operator Lifecycle Manager v0.38.0 (olm, catalog, package-server, and cpb, the
#   copier of its bundle-unpack Jobs) and opm v1.61.0 (the version OLM v0.38.0 pins); it copies OLM's Helm chart
#   from that module to bin/olm/chart;
# - from the Go module in hack/registry: distribution's registry v3.1.2 and grpc_health_probe v0.4.40.
# 'make e2e-olm' packs the programs into the images it installs OLM and the catalog from, and serves those images from
# the registry. A module's build is skipped when its binaries are newer than its go.mod and go.sum. The first build
# takes about ten minutes; later ones are cached.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN_DIR=${BIN_DIR:-$ROOT/bin}
OUT="$BIN_DIR/olm"
OLM=github.com/operator-framework/operator-lifecycle-manager
mkdir -p "$OUT"

# stale <module dir> <binary>...: succeeds when a binary is missing or older than the module's go.mod or go.sum.
stale() {
  local src=$1 t
  shift
  for t in "$@"; do
    if [ ! -x "$OUT/$t" ] || [ -n "$(find "$src" -maxdepth 1 \( -name go.mod -o -name go.sum \) -newer "$OUT/$t")" ]; then
      return 0
    fi
  done
  return 1
}

if stale "$ROOT/hack/olm" olm catalog package-server cpb opm; then
  echo "olm-build: building olm, catalog, package-server, cpb and opm into $OUT (about ten minutes the first time)" >&2
  # The tags are operator-registry's own for opm; without cgo only its deprecated sqlite commands are missing.
  (cd "$ROOT/hack/olm" && CGO_ENABLED=0 go build -trimpath -tags json1,containers_image_openpgp \
    -ldflags "-s -w -X $OLM/pkg/version.OLMVersion=0.38.0 -X github.com/operator-framework/operator-registry/cmd/opm/version.opmVersion=v1.61.0" \
    -o "$OUT/" "$OLM/cmd/olm" "$OLM/cmd/catalog" "$OLM/cmd/package-server" "$OLM/util/cpb" \
    github.com/operator-framework/operator-registry/cmd/opm)
else
  echo "olm-build: OLM and opm in $OUT are up to date" >&2
fi

if stale "$ROOT/hack/registry" registry grpc_health_probe; then
  echo "olm-build: building registry and grpc_health_probe into $OUT" >&2
  (cd "$ROOT/hack/registry" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$OUT/" \
    github.com/distribution/distribution/v3/cmd/registry)
  (cd "$ROOT/hack/registry" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$OUT/grpc_health_probe" \
    github.com/grpc-ecosystem/grpc-health-probe)
else
  echo "olm-build: registry and grpc_health_probe in $OUT are up to date" >&2
fi

dir=$(cd "$ROOT/hack/olm" && go list -m -f '{{.Dir}}' "$OLM")
rm -rf "$OUT/chart"
cp -R "$dir/deploy/chart" "$OUT/chart"
chmod -R u+w "$OUT/chart"
