#!/usr/bin/env bash
# Proves that make lint's import rules (depguard in .golangci.yml) still catch what they are written for: in a copy
# of the tree, each probe below adds one forbidden import, and golangci-lint must report it under the rule named.
# A rule that no longer matches any file (a folder renamed, a glob mistyped) fails here instead of passing silently.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LINT=${GOLANGCI_LINT:-$ROOT/bin/golangci-lint}
M=github.com/cluster-proxy-operator/cluster-proxy-operator

# package dir | package name | forbidden import | rule that must report it (no probe may close an import cycle:
# the type check would fail and hide every report)
PROBES="
controllers/agentcsr|agentcsr|controllers/clusteragent|controllers-apart
internal/hub/apply|apply|controllers/index|hub-below-controllers
internal/server|server|internal/hub/render|data-plane-not-hub
pkg/clusterproxy|clusterproxy|internal/scheme|data-plane-not-hub
internal/server/userserver|userserver|internal/agent|server-not-agent
internal/agent/serviceproxy|serviceproxy|internal/server/userserver|agent-not-server
internal/contract/allowlist|allowlist|internal/agent|contract-is-shared
internal/localsystem|localsystem|internal/testsupport/testenv|testsupport-in-tests-only
internal/localsystem/squid|squid|controllers|local-system-runs-the-product
internal/repo|repo|internal/localsystem/ports|leaves
api/v1alpha1|v1alpha1|internal/certs|api-is-the-floor
cmd/manager|main|internal/server|manager-wires-the-hub
"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$ROOT"
git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$work" 2>/dev/null || true # a deleted file not yet staged is left out

dirs=()
while IFS='|' read -r dir pkg import rule; do
  [ -n "$dir" ] || continue
  printf 'package %s\n\nimport _ "%s/%s"\n' "$pkg" "$M" "$import" > "$work/$dir/zz_depguard_probe.go"
  dirs+=("./$dir/")
done <<< "$PROBES"

cd "$work"
out=$("$LINT" run --enable-only depguard --max-issues-per-linter 0 --max-same-issues 0 "${dirs[@]}" 2>&1 || true)
failed=0
while IFS='|' read -r dir pkg import rule; do
  [ -n "$dir" ] || continue
  if grep -q "^$dir/zz_depguard_probe.go:.*'$M/$import' is not allowed from list '$rule'" <<< "$out"; then
    echo "depguard-probes: $rule stops $dir importing $import"
  else
    echo "depguard-probes: $rule did NOT stop $dir importing $import" >&2
    failed=1
  fi
done <<< "$PROBES"
if [ "$failed" != 0 ]; then
  echo "$out" >&2
  exit 1
fi
