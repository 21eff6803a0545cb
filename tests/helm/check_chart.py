#!/usr/bin/env python3
"""Checks of the rpcjob-operator chart with the real helm binary.

    check_chart.py CHECK --source-dir REPO [--helm HELM]

CHECK is one of:
  version   Chart.yaml's version and appVersion equal the repo's VERSION
  crd       the chart's crds/rpcjob.yaml is the repo's crds/rpcjob.yaml (a symlink),
            and helm renders and packages exactly its bytes
  lint      helm lint --strict, with the default values and every optional part on
  render    helm template (defaults, every optional part on, one watched namespace):
            standard labels on every object, the restricted security context,
            probes and leader election, optional parts absent unless enabled,
            dashboards and rules identical to metrics/, the schema rejecting
            unknown values
  package   helm package: the archive holds the CRD, dashboards and rules bytes
  rbac      the rendered (Cluster)Roles grant exactly the (group, resource, verb)
            triples that the operator's `// +rpcjob:rbac:` markers declare

Each check prints what it verified and exits non-zero with the reasons on failure.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile

import yaml

CHART_REL = "helm/rpcjob-operator"
RELEASE = "rpcjob"
NAMESPACE = "rpcjob-system"
STANDARD_LABELS = ["app.kubernetes.io/name", "app.kubernetes.io/instance",
                   "app.kubernetes.io/version", "app.kubernetes.io/component",
                   "app.kubernetes.io/part-of", "app.kubernetes.io/managed-by"]
# Every optional part of the chart switched on.
ALL_ON = ["monitoring.serviceMonitor.enabled=true", "monitoring.podMonitor.enabled=true",
          "monitoring.prometheusRule.enabled=true", "grafana.dashboards.enabled=true",
          "replicaCount=2"]
OPTIONAL_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


class Failed(Exception):
    pass


class Checker:
    def __init__(self, source_dir, helm):
        self.src = os.path.abspath(source_dir)
        self.chart = os.path.join(self.src, CHART_REL)
        self.helm_bin = helm
        self.errors = []
        self.tmp = tempfile.TemporaryDirectory(prefix="rpcjob-helm-")
        # Hermetic helm: its config, cache and data go to a temporary folder.
        self.env = dict(os.environ)
        for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
            self.env[var] = os.path.join(self.tmp.name, var.lower())

    # --- helpers -------------------------------------------------------------
    def fail(self, msg):
        self.errors.append(msg)

    def ok(self, msg):
        print("ok:", msg)

    def read(self, rel):
        with open(os.path.join(self.src, rel), "rb") as f:
            return f.read()

    def version(self):
        return self.read("VERSION").decode().strip()

    def require_sources(self):
        """The chart links to files other parts own; say clearly which is missing."""
        if not os.path.isfile(self.helm_bin) or not os.access(self.helm_bin, os.X_OK):
            raise Failed(f"no helm binary at {self.helm_bin} (scripts/setup.sh test installs it)")
        missing = []
        for link in ("crds/rpcjob.yaml", "dashboards", "rules"):
            path = os.path.join(self.chart, link)
            if not os.path.islink(path):
                missing.append(f"{CHART_REL}/{link} is not a symlink (it must link into the repo, not copy)")
            elif not os.path.exists(path):
                target = os.path.relpath(os.path.realpath(path), self.src)
                missing.append(f"{target} does not exist (yet): {CHART_REL}/{link} links to it "
                               "and helm cannot load the chart without it")
        if missing:
            raise Failed("\n  ".join(["the chart's linked sources are missing:"] + missing))

    def helm(self, *args, expect_ok=True):
        proc = subprocess.run([self.helm_bin, *args], env=self.env, capture_output=True, text=True)
        if expect_ok and proc.returncode != 0:
            raise Failed(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}")
        return proc

    def template(self, sets=(), extra=()):
        args = ["template", RELEASE, self.chart, "--namespace", NAMESPACE, *extra]
        for s in sets:
            args += ["--set", s]
        out = self.helm(*args).stdout
        return [d for d in yaml.safe_load_all(out) if d]

    @staticmethod
    def name_of(obj):
        md = obj.get("metadata", {})
        return f"{obj.get('kind')}/{md.get('name')}" + (f" ({md['namespace']})" if md.get("namespace") else "")

    # --- checks --------------------------------------------------------------
    def check_version(self):
        version = self.version()
        chart = yaml.safe_load(self.read(f"{CHART_REL}/Chart.yaml"))
        for key in ("version", "appVersion"):
            if str(chart.get(key)) != version:
                self.fail(f"Chart.yaml {key} is {chart.get(key)!r}, VERSION is {version!r}: "
                          "run helm/sync-version.sh")
        if not self.errors:
            self.ok(f"Chart.yaml version and appVersion = VERSION = {version}")

    def check_crd(self):
        link = os.path.join(self.chart, "crds/rpcjob.yaml")
        repo_crd = os.path.join(self.src, "crds/rpcjob.yaml")
        if not os.path.exists(repo_crd):
            raise Failed("crds/rpcjob.yaml does not exist (yet): the chart's CRD is a symlink to it; "
                         "it is not copied, so the chart cannot be checked without it")
        if not os.path.islink(link) or not os.path.exists(link) or not os.path.samefile(link, repo_crd):
            raise Failed(f"{CHART_REL}/crds/rpcjob.yaml must be a symlink to crds/rpcjob.yaml")
        self.ok("chart crds/rpcjob.yaml is a symlink to the repo's crds/rpcjob.yaml")
        self.require_sources()
        want = list(d for d in yaml.safe_load_all(self.read("crds/rpcjob.yaml")) if d)
        got = [d for d in self.template(extra=["--include-crds"]) if d.get("kind") == "CustomResourceDefinition"]
        if got != want:
            self.fail("helm template --include-crds does not render crds/rpcjob.yaml as it is")
        else:
            self.ok(f"helm renders the CRD ({', '.join(d['metadata']['name'] for d in want)})")
        shown = self.helm("show", "crds", self.chart).stdout
        if [d for d in yaml.safe_load_all(shown) if d] != want:
            self.fail("helm show crds differs from crds/rpcjob.yaml")

    def check_lint(self):
        self.require_sources()
        for sets in ([], ALL_ON, ["operator.watchNamespace=jobs"]):
            args = ["lint", "--strict", self.chart, "--namespace", NAMESPACE]
            for s in sets:
                args += ["--set", s]
            proc = self.helm(*args, expect_ok=False)
            what = "defaults" if not sets else " ".join(sets)
            if proc.returncode != 0:
                self.fail(f"helm lint --strict ({what}) failed:\n{proc.stdout}{proc.stderr}")
            else:
                self.ok(f"helm lint --strict ({what})")

    def check_labels(self, objs, what):
        version = self.version()
        expect = {"app.kubernetes.io/name": "rpcjob-operator", "app.kubernetes.io/instance": RELEASE,
                  "app.kubernetes.io/version": version, "app.kubernetes.io/part-of": "rpcjob",
                  "app.kubernetes.io/managed-by": "Helm"}
        bad = 0
        for obj in objs:
            labels = obj.get("metadata", {}).get("labels") or {}
            places = [("", labels)]
            tmpl = obj.get("spec", {}).get("template") if obj.get("kind") == "Deployment" else None
            if tmpl:
                places.append((" pod template", tmpl.get("metadata", {}).get("labels") or {}))
            for where, labs in places:
                for key in STANDARD_LABELS:
                    if not labs.get(key):
                        self.fail(f"{what}: {self.name_of(obj)}{where} lacks label {key}"); bad += 1
                    elif key in expect and str(labs[key]) != expect[key]:
                        self.fail(f"{what}: {self.name_of(obj)}{where} label {key}={labs[key]!r}, "
                                  f"want {expect[key]!r}"); bad += 1
        if not bad:
            self.ok(f"{what}: all {len(objs)} objects carry the 6 app.kubernetes.io labels")

    def check_deployment(self, objs, what, replicas):
        deps = [o for o in objs if o["kind"] == "Deployment"]
        if len(deps) != 1:
            return self.fail(f"{what}: expected one Deployment, got {len(deps)}")
        dep = deps[0]
        spec = dep["spec"]
        if spec.get("replicas") != replicas:
            self.fail(f"{what}: replicas {spec.get('replicas')}, want {replicas}")
        pod = spec["template"]["spec"]
        psc = pod.get("securityContext") or {}
        if psc.get("runAsNonRoot") is not True:
            self.fail(f"{what}: pod securityContext.runAsNonRoot is not true")
        if (psc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
            self.fail(f"{what}: pod seccompProfile is not RuntimeDefault")
        for c in pod["containers"] + pod.get("initContainers", []):
            sc = c.get("securityContext") or {}
            want = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True}
            for k, v in want.items():
                if sc.get(k) is not v:
                    self.fail(f"{what}: container {c['name']} securityContext.{k} is {sc.get(k)!r}, want {v}")
            caps = sc.get("capabilities") or {}
            if caps.get("drop") != ["ALL"] or caps.get("add"):
                self.fail(f"{what}: container {c['name']} capabilities {caps}, want drop [ALL] and no add")
            if sc.get("privileged"):
                self.fail(f"{what}: container {c['name']} is privileged")
            if (sc.get("seccompProfile") or {}).get("type", "RuntimeDefault") != "RuntimeDefault":
                self.fail(f"{what}: container {c['name']} seccompProfile is not RuntimeDefault")
            if not (c.get("resources") or {}).get("requests") or not (c.get("resources") or {}).get("limits"):
                self.fail(f"{what}: container {c['name']} has no resource requests and limits")
        op = pod["containers"][0]
        args = op.get("args") or []
        if "--leader-elect" not in args:
            self.fail(f"{what}: operator args lack --leader-elect: {args}")
        ports = {p["name"]: p["containerPort"] for p in op.get("ports", [])}
        if f"--metrics-port={ports.get('metrics')}" not in args:
            self.fail(f"{what}: --metrics-port does not match the container port named metrics ({ports})")
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            get = (op.get(probe) or {}).get("httpGet") or {}
            if get.get("path") != path or get.get("port") not in ("metrics", ports.get("metrics")):
                self.fail(f"{what}: {probe} is {get}, want GET {path} on the metrics port")
        if not any(v.get("emptyDir") is not None for v in pod.get("volumes", [])):
            self.fail(f"{what}: no writable emptyDir beside the read-only root filesystem")
        self.ok(f"{what}: Deployment restricted (non-root, RuntimeDefault seccomp, read-only root, "
                f"no escalation, drop ALL), leader election on, probes /healthz and /readyz, replicas {replicas}")

    def check_render(self):
        self.require_sources()
        default = self.template()
        on = self.template(ALL_ON)
        scoped = self.template(["operator.watchNamespace=jobs"])
        for objs, what in ((default, "defaults"), (on, "all optional parts on"), (scoped, "watchNamespace=jobs")):
            self.check_labels(objs, what)
        self.check_deployment(default, "defaults", 1)
        self.check_deployment(on, "all optional parts on", 2)

        kinds = {o["kind"] for o in default}
        for must in ("Deployment", "ServiceAccount", "Service", "ClusterRole", "ClusterRoleBinding", "Role",
                     "RoleBinding", "Pod"):
            if must not in kinds:
                self.fail(f"defaults: no {must} rendered")
        dash_default = [o for o in default if o["kind"] == "ConfigMap"
                        and (o["metadata"].get("labels") or {}).get("grafana_dashboard")]
        if kinds & OPTIONAL_KINDS or dash_default:
            self.fail(f"defaults render optional objects: {sorted(kinds & OPTIONAL_KINDS)} "
                      f"{[self.name_of(o) for o in dash_default]}")
        else:
            self.ok("defaults: no ServiceMonitor, PodMonitor, PrometheusRule or dashboard ConfigMap")
        test_pods = [o for o in default if o["kind"] == "Pod"
                     and (o["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"]
        if len(test_pods) != 1:
            self.fail("defaults: expected one helm test hook Pod")
        else:
            cmd = " ".join(test_pods[0]["spec"]["containers"][0].get("command", []))
            if "/healthz" not in cmd:
                self.fail("helm test pod does not ask /healthz")
            else:
                self.ok("helm test hook pod asks the operator's /healthz")

        service = next(o for o in on if o["kind"] == "Service")
        sm = [o for o in on if o["kind"] == "ServiceMonitor"]
        if len(sm) != 1 or sm[0]["spec"]["selector"]["matchLabels"].items() - service["metadata"]["labels"].items():
            self.fail("ServiceMonitor missing or not selecting the metrics Service")
        elif sm[0]["spec"]["endpoints"][0]["port"] not in [p["name"] for p in service["spec"]["ports"]]:
            self.fail("ServiceMonitor endpoint port is not a port of the metrics Service")
        else:
            self.ok("ServiceMonitor selects the operator's metrics Service")
        pm = [o for o in on if o["kind"] == "PodMonitor"]
        if (len(pm) != 1 or pm[0]["spec"]["selector"]["matchLabels"] != {"app.kubernetes.io/managed-by": "rpcjob-operator"}
                or pm[0]["spec"]["podMetricsEndpoints"][0]["port"] != "metrics"):
            self.fail("PodMonitor missing, or not selecting app.kubernetes.io/managed-by=rpcjob-operator pods on port metrics")
        else:
            self.ok("PodMonitor selects worker pods (managed-by=rpcjob-operator, port metrics)")
        self.check_dashboards(on)
        self.check_rules(on)
        self.check_schema()
        self.check_network_policy(default)

    def check_network_policy(self, default):
        """The operator's NetworkPolicy per RpcJob (operator/include/rpcjob/operator/job_security.h):
        on by default with the monitoring namespace as the metrics scraper; the chart's values
        reach the operator's flags; off, the operator gets no right on networkpolicies."""
        def args(objs):
            dep = next(o for o in objs if o["kind"] == "Deployment")
            return dep["spec"]["template"]["spec"]["containers"][0].get("args", [])

        def grants(objs):
            return any("networkpolicies" in r.get("resources", []) for o in objs
                       if o["kind"] in ("ClusterRole", "Role") for r in o.get("rules", []))

        def metrics_from(objs):
            flag = "--network-policy-metrics-from="
            found = [a[len(flag):] for a in args(objs) if a.startswith(flag)]
            return json.loads(found[0]) if len(found) == 1 else None

        off = self.template(["networkPolicy.enabled=false"])
        custom = self.template(["networkPolicy.metricsFrom.namespaceSelector.matchLabels.team=obs"])
        monitoring = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
        if "--network-policy=true" not in args(default) or metrics_from(default) != monitoring:
            self.fail(f"defaults: the operator's NetworkPolicy flags are not on with the monitoring "
                      f"namespace: {args(default)}")
        elif not grants(default):
            self.fail("defaults: the NetworkPolicy is on but RBAC grants nothing on networkpolicies")
        else:
            self.ok("defaults: NetworkPolicy per job on, metrics from namespace monitoring, RBAC grants it")
        if "--network-policy=false" not in args(off) or grants(off):
            self.fail("networkPolicy.enabled=false: the flag is not false or RBAC still grants networkpolicies")
        else:
            self.ok("networkPolicy.enabled=false: flag off, no right on networkpolicies")
        labels = ((metrics_from(custom) or {}).get("namespaceSelector") or {}).get("matchLabels") or {}
        if labels.get("team") != "obs":
            self.fail(f"networkPolicy.metricsFrom does not reach the operator: {args(custom)}")
        else:
            self.ok("networkPolicy.metricsFrom reaches --network-policy-metrics-from as JSON")

    def check_dashboards(self, objs):
        files = sorted(glob.glob(os.path.join(self.src, "metrics/dashboards/*.json")))
        if not files:
            return self.fail("metrics/dashboards/ has no *.json")
        cms = {}
        for o in objs:
            if o["kind"] == "ConfigMap" and (o["metadata"].get("labels") or {}).get("grafana_dashboard") == "1":
                for key, value in (o.get("data") or {}).items():
                    cms[key] = value
        bad = 0
        for path in files:
            name = os.path.basename(path)
            with open(path, "rb") as f:
                want = f.read()
            if name not in cms:
                self.fail(f"no ConfigMap labelled grafana_dashboard=\"1\" holds {name}"); bad += 1
            elif cms[name].encode() != want:
                self.fail(f"the ConfigMap's {name} differs from metrics/dashboards/{name}"); bad += 1
            else:
                json.loads(want)
        extra = set(cms) - {os.path.basename(p) for p in files}
        if extra:
            self.fail(f"dashboard ConfigMaps hold files not in metrics/dashboards/: {sorted(extra)}")
        elif not bad:
            self.ok(f"{len(files)} dashboard ConfigMap(s) (grafana_dashboard=\"1\") equal metrics/dashboards/*.json byte for byte")

    def check_rules(self, objs):
        files = rule_files(self.src)
        rules = [o for o in objs if o["kind"] == "PrometheusRule"]
        if not files:
            return self.fail("metrics/rules/ has no *.yaml")
        specs = [r["spec"] for r in rules]
        bad = 0
        for path in files:
            with open(path, "rb") as f:
                want = yaml.safe_load(f)
            if want not in specs:
                self.fail(f"no PrometheusRule's spec equals metrics/rules/{os.path.basename(path)}"); bad += 1
        if len(rules) != len(files):
            self.fail(f"{len(rules)} PrometheusRules for {len(files)} rule files")
        elif not bad:
            self.ok(f"{len(files)} PrometheusRule(s) equal metrics/rules/*.yaml")

    def check_schema(self):
        for bogus in ("bogus=1", "monitoring.serviceMonitor.bogus=1", "image.tagg=x", "replicaCount=two"):
            proc = self.helm("template", RELEASE, self.chart, "--set", bogus, expect_ok=False)
            if proc.returncode == 0:
                self.fail(f"values.schema.json accepts --set {bogus}")
            elif "schema" not in proc.stderr.lower():
                self.fail(f"--set {bogus} failed, but not by the schema: {proc.stderr.strip()}")
        if not any("schema" in e for e in self.errors):
            self.ok("values.schema.json rejects unknown and mistyped values")

    def check_package(self):
        self.require_sources()
        out = os.path.join(self.tmp.name, "pkg")
        self.helm("package", self.chart, "--destination", out)
        archives = glob.glob(os.path.join(out, "*.tgz"))
        if len(archives) != 1:
            raise Failed(f"helm package made {archives}")
        if os.path.basename(archives[0]) != f"rpcjob-operator-{self.version()}.tgz":
            self.fail(f"package is {os.path.basename(archives[0])}, want rpcjob-operator-{self.version()}.tgz")
        with tarfile.open(archives[0]) as tar:
            members = {m.name: m for m in tar.getmembers()}
            pairs = [("crds/rpcjob.yaml", "crds/rpcjob.yaml")]
            pairs += [(f"dashboards/{os.path.basename(p)}", os.path.relpath(p, self.src))
                      for p in glob.glob(os.path.join(self.src, "metrics/dashboards/*.json"))]
            pairs += [(f"rules/{os.path.basename(p)}", os.path.relpath(p, self.src)) for p in rule_files(self.src)]
            for inside, repo in pairs:
                m = members.get(f"rpcjob-operator/{inside}")
                if m is None or not m.isfile():
                    self.fail(f"the packaged chart lacks {inside} (as a regular file)")
                elif tar.extractfile(m).read() != self.read(repo):
                    self.fail(f"the packaged {inside} differs from {repo}")
            stray = [n for n in members if re.match(r"rpcjob-operator/(dashboards/.*\.py|rules/.*test.*)$", n)]
            if stray:
                self.fail(f"the packaged chart holds files .helmignore should keep out: {stray}")
            links = [n for n, m in members.items() if m.issym() or m.islnk()]
            if links:
                self.fail(f"the packaged chart holds links: {links}")
        if not self.errors:
            self.ok(f"helm package holds {len(pairs)} linked files as regular files, byte for byte")

    def check_rbac(self):
        declared, where = scan_markers(os.path.join(self.src, "operator"))
        # Cross-check: every Resource constant the operator's code uses has a marker.
        marked = {(g, r) for g, r, _ in declared}
        for (group, plural), loc in sorted(scan_resource_uses(os.path.join(self.src, "operator")).items()):
            if (group, plural) not in marked:
                self.fail(f"the operator uses {plural} (group {group or 'core'}) at {loc}, "
                          "but no // +rpcjob:rbac: marker declares any verb on it")
        self.require_sources()
        for sets, what in (([], "all namespaces"), (["operator.watchNamespace=jobs"], "watchNamespace=jobs")):
            granted = {}
            for o in self.template(sets):
                if o["kind"] not in ("ClusterRole", "Role"):
                    continue
                for rule in o.get("rules", []):
                    for g in rule.get("apiGroups", []):
                        for r in rule.get("resources", []):
                            for v in rule.get("verbs", []):
                                if "*" in (g, r, v):
                                    self.fail(f"{what}: {self.name_of(o)} grants a wildcard: {rule}")
                                granted.setdefault((g, r, v), []).append(self.name_of(o))
            missing = sorted(set(declared) - set(granted))
            extra = sorted(set(granted) - set(declared))
            for g, r, v in missing:
                self.fail(f"{what}: the operator calls {v} {r} (group {g or 'core'}; "
                          f"{declared[(g, r, v)]}) but the chart does not grant it")
            for g, r, v in extra:
                self.fail(f"{what}: the chart grants {v} {r} (group {g or 'core'}) in "
                          f"{granted[(g, r, v)]}, but no // +rpcjob:rbac: marker in operator/ declares it")
            if not missing and not extra:
                self.ok(f"{what}: the chart's RBAC is exactly the {len(declared)} (group, resource, verb) "
                        f"triples from {len(where)} marker(s) in operator/")


def rule_files(src):
    """metrics/rules/*.yaml|yml that are rule files (promtool's *test* files are not)."""
    return sorted(p for p in glob.glob(os.path.join(src, "metrics/rules/*.y*ml"))
                  if os.path.splitext(p)[1] in (".yaml", ".yml") and "test" not in os.path.basename(p))


MARKER = re.compile(r"//\s*\+rpcjob:rbac:(\S+)")
VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}


def scan_markers(operator_dir):
    """{(group, resource, verb): "file:line"} from `// +rpcjob:rbac:` markers."""
    sources = [p for ext in ("*.h", "*.hh", "*.hpp", "*.cc", "*.cpp", "*.cxx")
               for p in glob.glob(os.path.join(operator_dir, "**", ext), recursive=True)]
    if not sources:
        raise Failed("operator/ has no C++ sources (yet): nothing to derive the RBAC rules from")
    declared, where, errors = {}, [], []
    for path in sorted(sources):
        with open(path, encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = MARKER.search(line)
                if not m:
                    continue
                loc = f"{os.path.relpath(path, os.path.dirname(operator_dir))}:{lineno}"
                fields = {}
                for part in m.group(1).split(","):
                    key, sep, value = part.partition("=")
                    if not sep or key not in ("groups", "resources", "verbs"):
                        errors.append(f"{loc}: bad marker field {part!r}")
                        continue
                    fields[key] = [("" if x in ('""', "core") else x) for x in value.split(";")]
                if set(fields) != {"groups", "resources", "verbs"}:
                    errors.append(f"{loc}: a marker needs groups=, resources= and verbs=")
                    continue
                for v in fields["verbs"]:
                    if v not in VERBS:
                        errors.append(f"{loc}: unknown verb {v!r}")
                where.append(loc)
                for g in fields["groups"]:
                    for r in fields["resources"]:
                        for v in fields["verbs"]:
                            declared.setdefault((g, r, v), loc)
    if errors:
        raise Failed("malformed rbac markers:\n  " + "\n  ".join(errors))
    if not declared:
        raise Failed("no rbac markers found in operator/: each Kubernetes API call needs a marker beside it, "
                     "e.g. `// +rpcjob:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update` "
                     "(format: helm/README.md)")
    return declared, where


RESOURCE_DEF = re.compile(r'\bconst\s+Resource\s+(k\w+)\s*\{\s*"([^"]*)"\s*,\s*"[^"]*"\s*,\s*"([^"]+)"')


def scan_resource_uses(operator_dir):
    """{(group, plural): "file:line"} for each `const Resource kX{"group", "v1", "plural", ...}`
    the operator defines and uses elsewhere (a use without a marker is a missing RBAC rule).
    Empty when the client defines its resources some other way."""
    sources = [p for ext in ("*.h", "*.hh", "*.hpp", "*.cc", "*.cpp", "*.cxx")
               for p in glob.glob(os.path.join(operator_dir, "**", ext), recursive=True)]
    texts = {}
    for p in sources:
        with open(p, encoding="utf-8", errors="replace") as f:
            texts[p] = f.read()
    defs = {}
    for text in texts.values():
        for m in RESOURCE_DEF.finditer(text):
            defs[m.group(1)] = (m.group(2), m.group(3))
    uses = {}
    for p, text in sorted(texts.items()):
        for lineno, line in enumerate(text.splitlines(), 1):
            if re.search(r"\bconst\s+Resource\s+k", line) or line.lstrip().startswith("//"):
                continue
            for name in re.findall(r"\b(k[A-Z]\w*)\b", line):
                if name in defs:
                    uses.setdefault(defs[name], f"{os.path.relpath(p, os.path.dirname(operator_dir))}:{lineno}")
    return uses


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("check", choices=["version", "crd", "lint", "render", "package", "rbac"])
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--helm", default=None)
    a = ap.parse_args()
    helm = a.helm or os.environ.get("HELM") or os.path.join(a.source_dir, "tools/bin/helm")
    checker = Checker(a.source_dir, helm)
    try:
        getattr(checker, f"check_{a.check}")()
    except Failed as e:
        checker.fail(str(e))
    if checker.errors:
        print(f"FAILED ({a.check}):", file=sys.stderr)
        for e in checker.errors:
            print("  " + e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
