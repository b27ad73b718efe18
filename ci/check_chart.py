#!/usr/bin/env python3
"""Checks the Helm chart charts/tenant-placer without a helm binary or a cluster.

Run through ci/check-chart.sh, which makes the virtualenv with the two pinned packages:
helm-python-sdk (Helm's own Go library, v4, behind ctypes: the same lint, values coalescing,
values.schema.json validation and template engine as the helm CLI) and kubernetes-validate
(the Kubernetes OpenAPI schemas as JSON Schema, strict: unknown fields are errors).

What it checks:
  1. the chart's crds/ are byte-for-byte the repository's generated crds/, and Helm loads both;
  2. values.yaml has a comment on every value and values.schema.json describes every value;
  3. `helm lint --strict` passes for each value set below, and fails for each bad one;
  4. `helm template` of each value set renders, and the rendered objects say what the chart
     promises: least-privilege RBAC (exactly the expected rules, no wildcard, no secrets), the
     controller's arguments (--leader-election exactly when it is on: forced, or automatic when
     replicaCount > 1; --no-page exactly when page.enabled is false), downward-API env, probes,
     security contexts, the optional parts (Service, ServiceMonitor, Role for the Lease) exactly
     when switched on, and nothing that exposes the page or metrics outside the cluster (no
     Ingress, ClusterIP Services only);
  5. kubernetes-validate --strict accepts every rendered built-in object and the CRDs, for
     Kubernetes 1.32 and the newest version it knows (ServiceMonitor is not built in: skipped);
  6. NOTES.txt tells how to apply the examples, watch tenants, reach the metrics and open the
     "Nodes & Capacity" page (or says it is off), and the Dockerfile agrees with the chart
     (user, port, entrypoint) and with the workspace members.

Exits 1 with one line per failure, else prints a summary and exits 0.
"""

from __future__ import annotations

import pathlib
import re
import sys
import tomllib
from dataclasses import dataclass, field
from typing import Any

import helm_python as helm
import kubernetes_validate
import kubernetes_validate.utils as kv_utils
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "tenant-placer"
REPO_CRDS = ROOT / "crds"
ALL_ON_VALUES = ROOT / "ci" / "chart-values-all-on.yaml"
NAMESPACE = "tenant-placer-system"
KUBE_VERSIONS = ["1.32", kv_utils.latest_version()]
LINT_KUBE_VERSION = "v1.32.0"

# The only RBAC the controller gets: (apiGroup, resource) -> verbs, one resource per rule.
CLUSTER_RULES = {
    ("placement.tenant-placer.dev", "tenants"): ["get", "list", "watch", "patch"],
    ("placement.tenant-placer.dev", "tenants/status"): ["patch"],
    ("placement.tenant-placer.dev", "nodes"): ["get", "list", "watch"],
    ("placement.tenant-placer.dev", "nodes/status"): ["update"],
    ("events.k8s.io", "events"): ["create"],
}
LEASE_RULES = {("coordination.k8s.io", "leases"): ["get", "create", "update"]}

REGENERATE = ("regenerate both with: cargo run -- crd --out-dir crds && "
              "cargo run -- crd --out-dir charts/tenant-placer/crds")

# Kinds that kubernetes-validate cannot know; anything else without a schema is a failure.
NOT_BUILT_IN = {("monitoring.coreos.com/v1", "ServiceMonitor")}


@dataclass
class Case:
    """One value set: what to pass to Helm and what the rendered chart must then contain."""

    name: str
    values: dict[str, Any]
    release: str = "tenant-placer"
    leader_election: bool = False
    replicas: int = 1
    rbac: bool = True
    service_account_created: bool = True
    service: bool = True
    service_monitor: bool = False
    page: bool = True


@dataclass
class BadCase:
    """A value set Helm must refuse, and a regex its message must match. Lint runs templates in
    Helm's lint mode, where `fail` only logs, so a rule kept only in a template (lint=False) is
    checked through `helm template` alone."""

    name: str
    values: dict[str, Any]
    message: str
    lint: bool = True


@dataclass
class Report:
    failures: list[str] = field(default_factory=list)
    validated: int = 0

    def check(self, ok: bool, message: str) -> bool:
        if not ok:
            self.failures.append(message)
        return ok


def cases() -> tuple[list[Case], list[BadCase]]:
    all_on = helm.values_from_yaml(ALL_ON_VALUES.read_text())
    good = [
        Case("defaults", {}),
        Case(
            "all-on (ci/chart-values-all-on.yaml)",
            all_on,
            leader_election=True,
            replicas=2,
            service_monitor=True,
        ),
        Case("replicaCount=2, leaderElection automatic", {"replicaCount": 2},
             leader_election=True, replicas=2),
        Case("replicaCount=3, leaderElection=false",
             {"replicaCount": 3, "leaderElection": {"enabled": False}}, replicas=3),
        Case("replicaCount=1, leaderElection=true", {"leaderElection": {"enabled": True}},
             leader_election=True),
        Case("release 'prod', no rbac, existing ServiceAccount, no metrics Service",
             {"rbac": {"create": False},
              "serviceAccount": {"create": False, "name": "existing-sa"},
              "metrics": {"service": {"enabled": False}}},
             release="prod", rbac=False, service_account_created=False, service=False),
        Case("page.enabled=false", {"page": {"enabled": False}}, page=False),
        Case("lean writes: no finalizer, problem events only, StrictFIFO",
             {"controller": {"finalizer": False, "events": "problems", "queue": "StrictFIFO"}}),
    ]
    bad = [
        BadCase("controller.logFormat=xml", {"controller": {"logFormat": "xml"}}, "logFormat"),
        BadCase("replicaCount=0", {"replicaCount": 0}, "replicaCount"),
        BadCase("controller.concurrency=0", {"controller": {"concurrency": 0}}, "concurrency"),
        BadCase("controller.policy=Random", {"controller": {"policy": "Random"}}, "policy"),
        BadCase("controller.queue=LIFO", {"controller": {"queue": "LIFO"}}, "queue"),
        BadCase("controller.events=some", {"controller": {"events": "some"}}, "events"),
        BadCase("controller.finalizer='no'", {"controller": {"finalizer": "no"}}, "finalizer"),
        BadCase("metrics.port=70000", {"metrics": {"port": 70000}}, "port"),
        BadCase("leaderElection.enabled='yes'", {"leaderElection": {"enabled": "yes"}},
                "enabled"),
        BadCase("image.pullPolicy=Sometimes", {"image": {"pullPolicy": "Sometimes"}},
                "pullPolicy"),
        BadCase("page.enabled='yes'", {"page": {"enabled": "yes"}}, "enabled"),
        BadCase("misspelt page key 'enable'", {"page": {"enable": False}}, "enable"),
        BadCase("misspelt top-level key 'replicas'", {"replicas": 2}, "replicas"),
        BadCase("serviceMonitor without the metrics Service",
                {"metrics": {"service": {"enabled": False}, "serviceMonitor": {"enabled": True}}},
                r"metrics[./]service[./]enabled"),
    ]
    return good, bad


# ---------------------------------------------------------------------------------------------
# 1. CRDs


def check_crds(report: Report, chart: helm.Chart) -> list[dict[str, Any]]:
    chart_dir = CHART / "crds"
    repo_files = sorted(p.name for p in REPO_CRDS.glob("*.yaml"))
    chart_files = sorted(p.name for p in chart_dir.glob("*.yaml"))
    report.check(
        repo_files == chart_files and len(repo_files) == 2,
        f"crds: charts/tenant-placer/crds/ has {chart_files}, crds/ has {repo_files} "
        f"(expected the same two files; {REGENERATE})",
    )
    for name in sorted(set(repo_files) & set(chart_files)):
        report.check(
            (REPO_CRDS / name).read_bytes() == (chart_dir / name).read_bytes(),
            f"crds: charts/tenant-placer/crds/{name} differs from crds/{name} "
            f"({REGENERATE})",
        )
    loaded = sorted(c["filename"] for c in chart.crds)
    report.check(
        [name.rsplit("/", 1)[-1] for name in loaded] == chart_files,
        f"crds: Helm loads {loaded} from the chart, expected the files in crds/",
    )
    objects = []
    for crd in chart.crds:
        for doc in yaml.safe_load_all(crd["data"]):
            if doc:
                objects.append(doc)
                report.check(
                    doc.get("kind") == "CustomResourceDefinition",
                    f"crds: {crd['filename']} holds a {doc.get('kind')}, not a CRD",
                )
    return objects


# ---------------------------------------------------------------------------------------------
# 2. values.yaml and values.schema.json


def check_values_documented(report: Report, chart: helm.Chart) -> None:
    lines = (CHART / "values.yaml").read_text().splitlines()
    key_re = re.compile(r"^(\s*)([A-Za-z0-9_.\-]+):(.*)$")
    for index, line in enumerate(lines):
        match = key_re.match(line)
        if not match:
            continue
        indent, key, rest = len(match.group(1)), match.group(2), match.group(3).strip()
        # A parent mapping (its children are keys further in) needs no comment of its own.
        following = next((n for n in lines[index + 1:]
                          if n.strip() and not n.strip().startswith("#")), "")
        child = key_re.match(following)
        if not rest and child and len(child.group(1)) > indent:
            continue
        previous = next((p for p in reversed(lines[:index]) if p.strip()), "")
        report.check(
            previous.strip().startswith("#"),
            f"values.yaml:{index + 1}: '{key}' has no comment above it",
        )

    schema = chart.schema
    if not report.check(schema is not None, "values.schema.json: missing"):
        return
    report.check(
        schema.get("$schema") == "http://json-schema.org/draft-07/schema#",
        "values.schema.json: $schema is not JSON Schema draft-07",
    )

    def walk(values: Any, node: dict[str, Any], path: str) -> None:
        if not isinstance(values, dict):
            return
        for key, value in values.items():
            sub = node.get("properties", {}).get(key)
            if sub is None and isinstance(node.get("additionalProperties"), dict):
                sub = node["additionalProperties"]
            where = f"{path}.{key}" if path else key
            if not report.check(sub is not None, f"values.schema.json: no schema for {where}"):
                continue
            report.check("type" in sub, f"values.schema.json: {where} has no type")
            walk(value, sub, where)

    walk(chart.values, schema, "")


# ---------------------------------------------------------------------------------------------
# 3 and 4. lint and template


def lint(report: Report, name: str, values: dict[str, Any]) -> list[str]:
    """Findings of warning level and above (strict lint counts them all as errors)."""
    findings: list[str] = []
    for kube_version in (None, LINT_KUBE_VERSION):
        result = helm.lint(CHART, values, strict=True, namespace=NAMESPACE,
                           kube_version=kube_version)
        findings += [f"{m['path']}: {m['error'].strip()}" for m in result["messages"]
                     if m["severity"] >= 2]
        findings += [e.strip() for e in result["errors"]]
    return sorted(set(findings))


def render(chart: helm.Chart, case_values: dict[str, Any], release: str) -> list[dict[str, Any]]:
    manifests = chart.render(case_values, name=release, namespace=NAMESPACE, is_install=True)
    objects = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                doc.setdefault("__source__", path)
                objects.append(doc)
    return objects


def where(obj: dict[str, Any]) -> str:
    return f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"


def check_rbac_rules(report: Report, label: str, obj: dict[str, Any],
                     expected: dict[tuple[str, str], list[str]]) -> None:
    seen: dict[tuple[str, str], list[str]] = {}
    for rule in obj.get("rules") or []:
        groups, resources = rule.get("apiGroups", []), rule.get("resources", [])
        verbs = rule.get("verbs", [])
        everything = groups + resources + verbs + rule.get("resourceNames", [])
        report.check(not any("*" in item for item in everything),
                     f"{label}: {where(obj)}: wildcard in rule {rule}")
        report.check("nonResourceURLs" not in rule,
                     f"{label}: {where(obj)}: nonResourceURLs in rule {rule}")
        report.check(not any(r.split("/")[0] == "secrets" for r in resources),
                     f"{label}: {where(obj)}: rule grants secrets: {rule}")
        if report.check(len(groups) == 1 and len(resources) == 1,
                        f"{label}: {where(obj)}: rule is not one group and one resource: {rule}"):
            seen[(groups[0], resources[0])] = verbs
    report.check(seen == expected,
                 f"{label}: {where(obj)}: rules {seen}, expected exactly {expected}")


def check_rendered(report: Report, case: Case, objects: list[dict[str, Any]]) -> None:
    label = case.name
    values = case.values
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        by_kind.setdefault(obj.get("kind", "?"), []).append(obj)

    fullname = values.get("fullnameOverride") or (
        case.release if "tenant-placer" in case.release else f"{case.release}-tenant-placer")
    sa_name = (values.get("serviceAccount", {}).get("name")
               or (fullname if case.service_account_created else "default"))

    # Labels and namespaces on everything.
    for obj in objects:
        meta = obj.get("metadata", {})
        labels = meta.get("labels", {})
        for key, want in (("app.kubernetes.io/name", "tenant-placer"),
                          ("app.kubernetes.io/instance", case.release),
                          ("app.kubernetes.io/managed-by", "Helm"),
                          ("app.kubernetes.io/version", "0.1.0"),
                          ("helm.sh/chart", "tenant-placer-0.1.0")):
            report.check(labels.get(key) == want,
                         f"{label}: {where(obj)}: label {key}={labels.get(key)!r}, want {want!r}")
        cluster_scoped = obj.get("kind") in ("ClusterRole", "ClusterRoleBinding")
        report.check(
            meta.get("namespace") == (None if cluster_scoped else NAMESPACE),
            f"{label}: {where(obj)}: namespace {meta.get('namespace')!r}",
        )

    def expect_count(kind: str, count: int) -> list[dict[str, Any]]:
        found = by_kind.get(kind, [])
        report.check(len(found) == count,
                     f"{label}: {len(found)} {kind} object(s) rendered, expected {count}")
        return found

    # RBAC.
    for obj in expect_count("ClusterRole", 1 if case.rbac else 0):
        check_rbac_rules(report, label, obj, CLUSTER_RULES)
    roles = expect_count("Role", 1 if case.rbac and case.leader_election else 0)
    for obj in roles:
        check_rbac_rules(report, label, obj, LEASE_RULES)
    role_names = {("ClusterRole", o["metadata"]["name"]) for o in by_kind.get("ClusterRole", [])}
    role_names |= {("Role", o["metadata"]["name"]) for o in roles}
    bindings = expect_count("ClusterRoleBinding", 1 if case.rbac else 0)
    bindings += expect_count("RoleBinding", 1 if case.rbac and case.leader_election else 0)
    for obj in bindings:
        ref = obj.get("roleRef", {})
        report.check((ref.get("kind"), ref.get("name")) in role_names,
                     f"{label}: {where(obj)}: roleRef {ref} names no rendered role")
        report.check(obj.get("subjects") == [{"kind": "ServiceAccount", "name": sa_name,
                                              "namespace": NAMESPACE}],
                     f"{label}: {where(obj)}: subjects {obj.get('subjects')}")

    for obj in expect_count("ServiceAccount", 1 if case.service_account_created else 0):
        report.check(obj["metadata"]["name"] == sa_name,
                     f"{label}: ServiceAccount is named {obj['metadata']['name']}, want {sa_name}")

    # The Deployment.
    deployments = expect_count("Deployment", 1)
    if not deployments:
        return
    deploy = deployments[0]
    spec = deploy.get("spec", {})
    pod = spec.get("template", {}).get("spec", {})
    pod_labels = spec.get("template", {}).get("metadata", {}).get("labels", {})
    selector = spec.get("selector", {}).get("matchLabels", {})
    report.check(deploy["metadata"]["name"] == fullname,
                 f"{label}: Deployment is named {deploy['metadata']['name']}, want {fullname}")
    report.check(spec.get("replicas") == case.replicas,
                 f"{label}: replicas {spec.get('replicas')}, want {case.replicas}")
    # /readyz is 200 on the leader and on standbys, so a surge Pod becomes Ready and the
    # rollout keeps the old Pod until then.
    want_strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    report.check(spec.get("strategy") == want_strategy,
                 f"{label}: strategy {spec.get('strategy')}, want {want_strategy}")
    report.check(selector == {"app.kubernetes.io/name": "tenant-placer",
                              "app.kubernetes.io/instance": case.release},
                 f"{label}: selector {selector}")
    report.check(selector.items() <= pod_labels.items(),
                 f"{label}: Pod labels {pod_labels} do not match the selector {selector}")
    report.check(pod.get("serviceAccountName") == sa_name,
                 f"{label}: serviceAccountName {pod.get('serviceAccountName')!r}, want {sa_name!r}")
    report.check(pod.get("automountServiceAccountToken") is True,
                 f"{label}: automountServiceAccountToken is not true")
    psc = pod.get("securityContext", {})
    for key, want in (("runAsNonRoot", True), ("runAsUser", 65532), ("runAsGroup", 65532),
                      ("fsGroup", 65532), ("seccompProfile", {"type": "RuntimeDefault"})):
        report.check(psc.get(key) == want,
                     f"{label}: pod securityContext.{key} is {psc.get(key)!r}, want {want!r}")

    containers = pod.get("containers", [])
    if not report.check(len(containers) == 1, f"{label}: {len(containers)} containers"):
        return
    container = containers[0]
    image = values.get("image", {})
    want_image = f"{image.get('repository', 'tenant-placer')}:{image.get('tag') or '0.1.0'}"
    report.check(container.get("image") == want_image,
                 f"{label}: image {container.get('image')!r}, want {want_image!r}")
    want_policy = image.get("pullPolicy", "IfNotPresent")
    report.check(container.get("imagePullPolicy") == want_policy,
                 f"{label}: imagePullPolicy {container.get('imagePullPolicy')!r}")

    controller = values.get("controller", {})
    port = values.get("metrics", {}).get("port", 8080)
    lease = values.get("leaderElection", {}).get("leaseName") or fullname
    args = container.get("args", [])
    want_args = ["run", f"--metrics-addr=0.0.0.0:{port}",
                 f"--log-format={controller.get('logFormat', 'json')}",
                 f"--concurrency={controller.get('concurrency', 96)}",
                 f"--policy={controller.get('policy', 'FirstFit')}",
                 f"--events={controller.get('events', 'all')}",
                 f"--queue={controller.get('queue', 'BestEffortFIFO')}"]
    want_args += [] if controller.get("finalizer", True) else ["--no-finalizer"]
    want_args += ["--leader-election"] if case.leader_election else []
    want_args += [] if case.page else ["--no-page"]
    want_args += [f"--lease-name={lease}"] + list(controller.get("extraArgs", []))
    report.check(args == want_args, f"{label}: args {args}, want {want_args}")
    report.check(args.count("--leader-election") == (1 if case.leader_election else 0),
                 f"{label}: --leader-election appears {args.count('--leader-election')} times, "
                 f"want {'once' if case.leader_election else 'never'}")
    report.check(args.count("--no-page") == (0 if case.page else 1),
                 f"{label}: --no-page appears {args.count('--no-page')} times, "
                 f"want {'never' if case.page else 'once'} (page.enabled={case.page})")
    report.check(container.get("command") is None,
                 f"{label}: command overrides the image's ENTRYPOINT")

    env = {e.get("name"): e for e in container.get("env", [])}
    for name, field_path in (("POD_NAMESPACE", "metadata.namespace"),
                             ("POD_NAME", "metadata.name")):
        got = env.get(name, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        report.check(got == field_path,
                     f"{label}: env {name} is not from the downward API {field_path}")

    ports = container.get("ports", [])
    report.check(ports == [{"name": "http", "containerPort": port, "protocol": "TCP"}],
                 f"{label}: container ports {ports}")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        got = container.get(probe, {}).get("httpGet", {})
        report.check(got.get("path") == path and got.get("port") in ("http", port),
                     f"{label}: {probe} is {got}, want httpGet {path} on port http")

    csc = container.get("securityContext", {})
    for key, want in (("allowPrivilegeEscalation", False), ("readOnlyRootFilesystem", True),
                      ("runAsNonRoot", True), ("capabilities", {"drop": ["ALL"]})):
        report.check(csc.get(key) == want,
                     f"{label}: container securityContext.{key} is {csc.get(key)!r}, "
                     f"want {want!r}")
    resources = container.get("resources", {})
    report.check(bool(resources.get("requests")) and bool(resources.get("limits", {}).get("memory")),
                 f"{label}: resources {resources} lack requests or a memory limit")
    if "resources" in values:
        report.check(resources == values["resources"], f"{label}: resources {resources}")

    # Pass-through values land where they belong.
    for key, got in (("nodeSelector", pod.get("nodeSelector")),
                     ("tolerations", pod.get("tolerations")),
                     ("affinity", pod.get("affinity")),
                     ("imagePullSecrets", pod.get("imagePullSecrets")),
                     ("podAnnotations", spec.get("template", {}).get("metadata", {})
                      .get("annotations"))):
        want = values.get(key) or None
        report.check(got == want, f"{label}: {key} rendered as {got!r}, want {want!r}")

    # The page is cluster-internal: nothing exposes it outside the cluster.
    report.check("Ingress" not in by_kind,
                 f"{label}: an Ingress was rendered; the page and metrics stay cluster-internal")
    for svc in by_kind.get("Service", []):
        svc_type = svc.get("spec", {}).get("type", "ClusterIP")
        report.check(svc_type == "ClusterIP",
                     f"{label}: {where(svc)} is of type {svc_type}, not ClusterIP")

    # Metrics Service and ServiceMonitor.
    services = expect_count("Service", 1 if case.service else 0)
    for svc in services:
        svc_spec = svc.get("spec", {})
        report.check(svc_spec.get("selector") == selector,
                     f"{label}: Service selector {svc_spec.get('selector')} != {selector}")
        report.check(svc_spec.get("ports") == [{"name": "http", "port": port,
                                                "targetPort": "http", "protocol": "TCP"}],
                     f"{label}: Service ports {svc_spec.get('ports')}")
    for monitor in expect_count("ServiceMonitor", 1 if case.service_monitor else 0):
        report.check(monitor.get("apiVersion") == "monitoring.coreos.com/v1",
                     f"{label}: ServiceMonitor apiVersion {monitor.get('apiVersion')}")
        match = monitor.get("spec", {}).get("selector", {}).get("matchLabels", {})
        svc_labels = services[0]["metadata"]["labels"] if services else {}
        report.check(bool(match) and match.items() <= svc_labels.items(),
                     f"{label}: ServiceMonitor selector {match} does not select the Service")
        endpoints = monitor.get("spec", {}).get("endpoints", [])
        report.check(len(endpoints) == 1 and endpoints[0].get("port") == "http"
                     and endpoints[0].get("path") == "/metrics",
                     f"{label}: ServiceMonitor endpoints {endpoints}")
        extra = values.get("metrics", {}).get("serviceMonitor", {}).get("labels", {})
        report.check(extra.items() <= monitor["metadata"]["labels"].items(),
                     f"{label}: ServiceMonitor lacks the labels {extra}")


def check_notes(report: Report, case: Case, chart: helm.Chart) -> None:
    notes = chart.render(case.values, name=case.release, namespace=NAMESPACE).get(
        "tenant-placer/templates/NOTES.txt", "")
    for line in ("kubectl apply -f examples/", "kubectl get tn -A -w", "kubectl get pnodes",
                 "port-forward deploy/", "/metrics"):
        report.check(line in notes, f"{case.name}: NOTES.txt does not say {line!r}")
    port = case.values.get("metrics", {}).get("port", 8080)
    page_url = f"http://localhost:{port}/"
    if case.page:
        report.check(page_url in notes and "Nodes & Capacity" in notes,
                     f"{case.name}: NOTES.txt does not give the page's URL {page_url}")
    else:
        report.check(page_url not in notes and "page is off" in notes,
                     f"{case.name}: NOTES.txt offers the page although page.enabled=false")


def check_dockerfile(report: Report, chart: helm.Chart) -> None:
    """The image and the chart agree, and the dependency layer copies every member's manifest."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    members = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["members"]
    for member in members:
        manifest = "Cargo.toml" if member == "." else f"{member}/Cargo.toml"
        report.check(re.search(rf"^COPY (.* )?{re.escape(manifest)}( |$)", dockerfile, re.M)
                     is not None,
                     f"Dockerfile: the dependency layer does not COPY {manifest} "
                     "(a workspace member)")
    values = chart.values
    user = values["podSecurityContext"]["runAsUser"], values["podSecurityContext"]["runAsGroup"]
    report.check(f"USER {user[0]}:{user[1]}" in dockerfile,
                 f"Dockerfile: USER is not {user[0]}:{user[1]} (podSecurityContext)")
    report.check(f"EXPOSE {values['metrics']['port']}" in dockerfile,
                 f"Dockerfile: EXPOSE is not metrics.port {values['metrics']['port']}")
    report.check('ENTRYPOINT ["/tenant-placer"]' in dockerfile,
                 'Dockerfile: ENTRYPOINT is not ["/tenant-placer"] (the chart passes only args)')


# ---------------------------------------------------------------------------------------------
# 5. kubernetes-validate


def kube_validate(report: Report, label: str, obj: dict[str, Any]) -> None:
    obj = {k: v for k, v in obj.items() if k != "__source__"}
    if (obj.get("apiVersion"), obj.get("kind")) in NOT_BUILT_IN:
        return
    for version in KUBE_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
            report.validated += 1
        except kubernetes_validate.ValidationError as error:
            path = ".".join(str(p) for p in error.path)
            report.failures.append(f"{label}: {where(obj)}: kubernetes-validate --strict "
                                   f"(Kubernetes {version}): {path}: {error.message}")
        except kv_utils.SchemaNotFoundError as error:
            report.failures.append(f"{label}: {where(obj)}: {error.message}")


# ---------------------------------------------------------------------------------------------


def main() -> int:
    report = Report()
    good, bad = cases()
    summary: list[str] = []
    with helm.Chart.load(CHART) as chart:
        meta = chart.metadata
        report.check((meta.get("apiVersion"), meta.get("name"), meta.get("version"),
                      meta.get("appVersion")) == ("v2", "tenant-placer", "0.1.0", "0.1.0"),
                     f"Chart.yaml: {meta}")
        crds = check_crds(report, chart)
        for crd in crds:
            kube_validate(report, "crds", crd)
        summary.append(f"crds: {len(crds)} CRDs, identical to crds/, valid")
        check_values_documented(report, chart)
        summary.append("values.yaml: every value commented and covered by values.schema.json")
        check_dockerfile(report, chart)
        summary.append("Dockerfile: copies every workspace member's Cargo.toml; USER, EXPOSE and "
                       "ENTRYPOINT agree with the chart")

        for case in good:
            for finding in lint(report, case.name, case.values):
                report.failures.append(f"{case.name}: helm lint --strict: {finding}")
            try:
                objects = render(chart, case.values, case.release)
            except helm.HelmError as error:
                report.failures.append(f"{case.name}: helm template failed: {error}")
                continue
            check_rendered(report, case, objects)
            check_notes(report, case, chart)
            for obj in objects:
                kube_validate(report, case.name, obj)
            kinds = ", ".join(sorted(f"{o['kind']}" for o in objects))
            summary.append(f"{case.name}: lint ok; {len(objects)} objects ({kinds}); "
                           f"leader election {'on' if case.leader_election else 'off'}")

        for case in bad:
            if case.lint:
                findings = lint(report, case.name, case.values)
                report.check(any(re.search(case.message, f) for f in findings),
                             f"bad values {case.name}: helm lint --strict did not reject them "
                             f"with a message naming {case.message!r}: {findings}")
            try:
                chart.render(case.values, name="tenant-placer", namespace=NAMESPACE)
                report.failures.append(f"bad values {case.name}: helm template accepted them")
            except helm.HelmError as error:
                report.check(re.search(case.message, str(error)) is not None,
                             f"bad values {case.name}: helm template's message does not name "
                             f"{case.message!r}: {error}")
        summary.append(f"{len(bad)} bad value sets rejected by lint and template: "
                       + "; ".join(c.name for c in bad))

    print(f"check-chart: Helm {helm.helm_sdk_version()} (helm-python-sdk {helm.__version__}), "
          f"kubernetes-validate {kv_utils.__version__} (Kubernetes {', '.join(KUBE_VERSIONS)})")
    for line in summary:
        print(f"  {line}")
    print(f"  kubernetes-validate --strict: {report.validated} object validations passed "
          "(ServiceMonitor skipped: not a built-in kind)")
    if report.failures:
        print(f"\ncheck-chart: FAILED, {len(report.failures)} problem(s):", file=sys.stderr)
        for failure in report.failures:
            print(f"  - {failure}", file=sys.stderr)
        return 1
    print("check-chart: ok")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # a broken checker must fail CI loudly, not pass
        import traceback

        traceback.print_exc()
        print("check-chart: FAILED: the checker itself crashed (traceback above)", file=sys.stderr)
        sys.exit(2)
