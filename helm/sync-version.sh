#!/usr/bin/env bash
# Writes the repo's VERSION into the chart's Chart.yaml (version and appVersion):
# the one place the version comes from. tests/helm (helm_version) checks they agree.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=$(head -n1 "$root/VERSION" | tr -d '[:space:]')
chart=$root/helm/rpcjob-operator/Chart.yaml
sed -i -E "s/^version:.*/version: $version/; s/^appVersion:.*/appVersion: \"$version\"/" "$chart"
grep -E '^(version|appVersion):' "$chart"
