#!/usr/bin/env bash
# Tests the chart checks themselves, independent of the other parts' progress:
# a scratch repo = the real chart + VERSION + fixtures (a CRD, a dashboard, a rule
# file, RBAC markers). Every check must pass on it; then each mutation must make
# the named check fail with the expected message.
#   selftest.sh REPO HELM
set -euo pipefail
repo=$(cd "$1" && pwd) helm=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fresh() {
  rm -rf "$tmp/r" && mkdir -p "$tmp/r/helm"
  cp "$repo/VERSION" "$tmp/r/"
  cp -a "$repo/helm/rpcjob-operator" "$tmp/r/helm/"       # keeps the symlinks
  cp -r "$here/fixtures/crds" "$here/fixtures/metrics" "$here/fixtures/operator" "$tmp/r/"
}
check() { python3 "$here/check_chart.py" "$1" --source-dir "$tmp/r" --helm "$helm" 2>&1 | grep -v 'level=INFO'; }
failures=0

fresh
for c in version crd lint render package rbac; do
  if out=$(check $c); then echo "ok: $c passes on the good chart"
  else echo "FAIL: $c fails on the good chart:"; echo "$out"; failures=$((failures + 1)); fi
done

expect_fail() {  # expect_fail CHECK PATTERN DESCRIPTION (after mutating $tmp/r)
  local out
  if out=$(check "$1"); then
    echo "FAIL: $1 passed although $3"; failures=$((failures + 1))
  elif ! grep -q -- "$2" <<<"$out"; then
    echo "FAIL: $1 failed for another reason than '$2' ($3):"; echo "$out"; failures=$((failures + 1))
  else
    echo "ok: $1 catches: $3"
  fi
  fresh
}
c=$tmp/r/helm/rpcjob-operator
sed -i 's/^version: .*/version: 9.9.9/' "$c/Chart.yaml";                       expect_fail version "run helm/sync-version.sh" "Chart.yaml's version differs from VERSION"
rm "$c/crds/rpcjob.yaml"; cp "$tmp/r/crds/rpcjob.yaml" "$c/crds/";              expect_fail crd "must be a symlink" "the CRD is a copy"
rm "$tmp/r/crds/rpcjob.yaml";                                                  expect_fail render "crds/rpcjob.yaml does not exist" "crds/rpcjob.yaml is missing"
sed -i 's/readOnlyRootFilesystem: true/readOnlyRootFilesystem: false/' "$c/templates/_helpers.tpl"; expect_fail render "readOnlyRootFilesystem" "the root filesystem is writable"
sed -i 's/drop: \["ALL"\]/drop: ["NET_RAW"]/' "$c/templates/_helpers.tpl";     expect_fail render "capabilities" "not all capabilities are dropped"
sed -i '/app.kubernetes.io\/part-of/d' "$c/templates/_helpers.tpl";             expect_fail render "lacks label app.kubernetes.io/part-of" "a standard label is missing"
sed -i 's/- --leader-elect$/- --verbose/' "$c/templates/deployment.yaml";       expect_fail render "leader-elect" "leader election is off"
sed -i 's/enabled: false/enabled: true/' "$c/values.yaml";                      expect_fail render "defaults render optional objects" "optional parts are on by default"
sed -i 's/"additionalProperties": false/"additionalProperties": true/' "$c/values.schema.json"; expect_fail render "accepts --set bogus=1" "the schema accepts unknown values"
sed -i 's/{{ \$.Files.Get \$path | quote }}/{{ $.Files.Get $path | trim | quote }}/' "$c/templates/dashboards-configmap.yaml"; expect_fail render "differs from metrics/dashboards" "the dashboard JSON is altered"
sed -i 's/verbs: \[list, watch\]/verbs: [list, watch, delete]/' "$c/templates/rbac.yaml"; expect_fail rbac "the chart grants delete nodes" "the chart grants more than the code calls"
echo '// +rpcjob:rbac:groups="",resources=secrets,verbs=get' >> "$tmp/r/operator/markers.cc"; expect_fail rbac "calls get secrets" "the code calls more than the chart grants"
printf 'const Resource kClaims{"", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", true};\nvoid f() { get(kClaims); }\n' >> "$tmp/r/operator/resources.cc"; expect_fail rbac "uses persistentvolumeclaims" "the code uses a resource without a marker"
rm "$tmp/r/operator/markers.cc"; touch "$tmp/r/operator/empty.cc";             expect_fail rbac "no rbac markers found" "the operator has no markers"
sed -i 's/^  name: {{ include "rpcjob-operator.fullname" \$ }}-dashboard-.*/  name: Bad_Name/' "$c/templates/dashboards-configmap.yaml"; expect_fail lint "Invalid value" "an object name is invalid"

[ $failures -eq 0 ] && echo "selftest: all passed" || { echo "selftest: $failures failure(s)"; exit 1; }
