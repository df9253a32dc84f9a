#!/usr/bin/env bash
# Builds bin/ocm-local, the real Open Cluster Management v1.2.0 hub components and klusterlet agent, from its own Go
# module in hack/ocm (OCM v1.2.0 needs k8s.io v0.34; the operator's module uses v0.37). Skipped when the binary is
# newer than the module's sources. The first build takes several minutes; later ones are cached.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN_DIR=${BIN_DIR:-$ROOT/bin}
SRC="$ROOT/hack/ocm"
OUT="$BIN_DIR/ocm-local"

if [ -x "$OUT" ] && [ -z "$(find "$SRC" -maxdepth 1 \( -name '*.go' -o -name go.mod -o -name go.sum \) -newer "$OUT")" ]; then
  echo "ocm-local: $OUT is up to date" >&2
  exit 0
fi
echo "ocm-local: building $OUT (several minutes the first time)" >&2
mkdir -p "$BIN_DIR"
# sigs.k8s.io/about-api has no checksum-database entry; go.sum still pins it.
cd "$SRC" && CGO_ENABLED=0 GONOSUMDB=sigs.k8s.io/about-api go build -trimpath -o "$OUT" .
