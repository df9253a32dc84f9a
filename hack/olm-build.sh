#!/usr/bin/env bash
# Builds Operator Lifecycle Manager v0.38.0 (olm, catalog, package-server) and opm v1.61.0 (the version OLM v0.38.0
# pins) into bin/olm, static, from the tools of the Go module in hack/olm, and copies OLM's Helm chart from that
# module to bin/olm/chart. 'make e2e-olm' packs the programs into the images it installs OLM and the catalog from.
# The build is skipped when the binaries are newer than the module's go.mod and go.sum. The first build takes about
# ten minutes; later ones are cached.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN_DIR=${BIN_DIR:-$ROOT/bin}
SRC="$ROOT/hack/olm"
OUT="$BIN_DIR/olm"
OLM=github.com/operator-framework/operator-lifecycle-manager
TOOLS=(olm catalog package-server opm)

fresh=1
for t in "${TOOLS[@]}"; do
  if [ ! -x "$OUT/$t" ] || [ -n "$(find "$SRC" -maxdepth 1 \( -name go.mod -o -name go.sum \) -newer "$OUT/$t")" ]; then
    fresh=0
  fi
done
copy_chart() {
  local dir
  dir=$(cd "$SRC" && go list -m -f '{{.Dir}}' "$OLM")
  rm -rf "$OUT/chart"
  cp -R "$dir/deploy/chart" "$OUT/chart"
  chmod -R u+w "$OUT/chart"
}
if [ "$fresh" = 1 ]; then
  echo "olm-build: $OUT is up to date" >&2
  copy_chart
  exit 0
fi
echo "olm-build: building ${TOOLS[*]} into $OUT (about ten minutes the first time)" >&2
mkdir -p "$OUT"
cd "$SRC"
# The tags are operator-registry's own for opm; without cgo only its deprecated sqlite commands are missing.
CGO_ENABLED=0 go build -trimpath -tags json1,containers_image_openpgp \
  -ldflags "-s -w -X $OLM/pkg/version.OLMVersion=0.38.0 -X github.com/operator-framework/operator-registry/cmd/opm/version.opmVersion=v1.61.0" \
  -o "$OUT/" "$OLM/cmd/olm" "$OLM/cmd/catalog" "$OLM/cmd/package-server" github.com/operator-framework/operator-registry/cmd/opm
copy_chart
