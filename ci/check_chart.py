#!/usr/bin/env python3
"""Checks the Helm chart charts/tenant-placer without a helm binary or a cluster.

Run through ci/check-chart.sh, which makes the virtualenv with the pinned packages:
helm-python-sdk (Helm's own Go library, v4, behind ctypes: the same lint, values coalescing,
values.schema.json validation and template engine as the helm CLI), kubernetes-validate
(the Kubernetes OpenAPI schemas as JSON Schema, strict: unknown fields are errors) and cel-python
(a CEL parser and evaluator, for the admission policies' expressions).

What it checks:
  1. the chart's crds/ are byte-for-byte the repository's generated crds/, and Helm loads both;
  2. values.yaml has a comment on every value and values.schema.json describes every value
     (a schema with a type for each, and a description for each that is not a mapping);
  3. `helm lint --strict` passes for each value set below, and fails for each bad one;
  4. `helm template` of each value set renders, and the rendered objects say what the chart
     promises: least-privilege RBAC (exactly the expected rules, no wildcard, no secrets), the
     controller's arguments (--leader-election exactly when it is on: forced, or automatic when
     replicaCount > 1; --no-page exactly when page.enabled is false), downward-API env, probes,
     security contexts, the optional parts (Service, ServiceMonitor, PrometheusRule, the Grafana
     dashboard ConfigMap, the OTLP endpoint, Role for the Lease) exactly when switched on, the
     ServiceMonitor and PrometheusRule against the fields of prometheus-operator's
     monitoring.coreos.com/v1 CRDs (MONITORING_SCHEMAS: closed, so an unknown field fails), every
     alert with a summary and a description, its thresholds from the values, and nothing that exposes the page or metrics outside the cluster (no
     Ingress, ClusterIP Services only);
  4b. the admission guards exactly when switched on (the ValidatingAdmissionPolicy on
     nodes/status, tenants/status and noderequests/status, the MutatingAdmissionPolicies adding the Tenant finalizer,
     only while controller.finalizer is on, and the Node finalizer), each with its binding: the
     fields the API requires and the values it allows (its OpenAPI schema marks neither, so this
     is checked here, field by field), the right resources and operations, and their CEL: every
     expression parses, and is evaluated on sample requests (the controller's ServiceAccount
     system:serviceaccount:<release namespace>:<ServiceAccount> and statusWriters may write the
     status of Nodes and Tenants, provisioners and statusWriters that of NodeRequests, and nobody
     else; the message names the ServiceAccount or the provisioners; the match condition and the
     JSON Patch add each finalizer once, keeping the others);
  5. kubernetes-validate --strict accepts every rendered built-in object and the CRDs, for
     Kubernetes 1.32 and the newest version it knows (ServiceMonitor and PrometheusRule are
     not built in: checked in 4 instead);
     the admission policies for each of 1.32, 1.36 and the newest from the version their kind
     and apiVersion exist in (MutatingAdmissionPolicy v1 from 1.36);
  6. NOTES.txt tells how to apply the examples, watch tenants, reach the metrics and open the
     "Nodes & Capacity" page (or says it is off), and the Dockerfile agrees with the chart
     (user, port, entrypoint) and with the workspace members.

Exits 1 with one line per failure, else prints a summary and exits 0.
"""

from __future__ import annotations

import copy
import importlib.metadata
import json
import pathlib
import re
import sys
import tomllib
from dataclasses import dataclass, field
from typing import Any

import celpy
import celpy.celtypes
import helm_python as helm
import jsonschema
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
    ("placement.tenant-placer.dev", "nodes"): ["get", "list", "watch", "patch"],
    ("placement.tenant-placer.dev", "nodes/status"): ["patch"],
    ("placement.tenant-placer.dev", "nodeclasses"): ["list", "watch"],
    ("placement.tenant-placer.dev", "nodeclasses/status"): ["patch"],
    ("placement.tenant-placer.dev", "noderequests/status"): ["patch"],
    ("placement.tenant-placer.dev", "noderequests"): ["list", "watch", "create", "delete"],
    ("events.k8s.io", "events"): ["create"],
}
# With controller.registerNodes set or provisioner.clusterAPI.enabled, and only then: read core
# Nodes, create and delete placement Nodes (the registered ones; a request's).
NODE_RULES = {
    ("", "nodes"): ["get", "list", "watch"],
    ("placement.tenant-placer.dev", "nodes"): ["create", "delete"],
}
LEASE_RULES = {("coordination.k8s.io", "leases"): ["get", "create", "update"]}
# With provisioner.clusterAPI.enabled, these too (docs/node-requests.md, "With Cluster API").
CAPI_RULES = {
    ("cluster.x-k8s.io", "machinedeployments"): ["get", "list", "watch", "patch"],
    ("cluster.x-k8s.io", "machinedeployments/scale"): ["get", "update", "patch"],
    ("cluster.x-k8s.io", "machines"): ["get", "list", "watch", "patch"],
}

REGENERATE = ("regenerate both with: cargo run -- crd --out-dir crds && "
              "cargo run -- crd --out-dir charts/tenant-placer/crds")

# Kinds that kubernetes-validate cannot know; anything else without a schema is a failure.
NOT_BUILT_IN = {("monitoring.coreos.com/v1", "ServiceMonitor"),
                ("monitoring.coreos.com/v1", "PrometheusRule")}

# The ServiceMonitor and PrometheusRule fields the chart can set, as JSON Schema, written by hand
# from prometheus-operator's CRDs (monitoring.coreos.com/v1, example/prometheus-operator-crd/ in
# its repository, v0.82): no package registry reachable from CI ships those CRDs, so the schema
# cannot be fetched at check time. Every object is closed (additionalProperties false), so a field
# the chart sets and the CRD does not know, or a value of the wrong type or pattern, fails here
# as a real API server with those CRDs would refuse or prune it.
PROM_DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
OBJECT_META = {"type": "object", "required": ["name", "namespace"], "properties": {
    "name": {"type": "string"}, "namespace": {"type": "string"}, "labels": STRING_MAP,
    "annotations": STRING_MAP}, "additionalProperties": False}
RELABEL_CONFIGS = {"type": "array", "items": {"type": "object", "additionalProperties": False,
                                              "properties": {
    "sourceLabels": {"type": "array",
                     "items": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"}},
    "separator": {"type": "string"}, "targetLabel": {"type": "string"},
    "regex": {"type": "string"}, "modulus": {"type": "integer", "minimum": 0},
    "replacement": {"type": "string"},
    "action": {"enum": [a for name in ("Replace", "Keep", "Drop", "HashMod", "LabelMap",
                                       "LabelDrop", "LabelKeep", "Lowercase", "Uppercase",
                                       "KeepEqual", "DropEqual") for a in (name, name.lower())]},
}}}
MONITORING_SCHEMAS = {
    "ServiceMonitor": {"type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
                       "additionalProperties": False, "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "ServiceMonitor"},
        "metadata": OBJECT_META,
        "spec": {"type": "object", "required": ["selector"], "additionalProperties": False,
                 "properties": {
            "namespaceSelector": {"type": "object", "additionalProperties": False, "properties": {
                "any": {"type": "boolean"},
                "matchNames": {"type": "array", "items": {"type": "string"}}}},
            "selector": {"type": "object", "additionalProperties": False,
                         "properties": {"matchLabels": STRING_MAP}},
            "endpoints": {"type": "array", "items": {"type": "object",
                                                     "additionalProperties": False, "properties": {
                "port": {"type": "string"}, "path": {"type": "string"},
                "interval": {"type": "string", "pattern": PROM_DURATION},
                "scrapeTimeout": {"type": "string", "pattern": PROM_DURATION},
                "relabelings": RELABEL_CONFIGS, "metricRelabelings": RELABEL_CONFIGS}}},
        }}}},
    "PrometheusRule": {"type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
                       "additionalProperties": False, "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "PrometheusRule"},
        "metadata": OBJECT_META,
        "spec": {"type": "object", "additionalProperties": False, "properties": {
            "groups": {"type": "array", "items": {"type": "object", "required": ["name"],
                                                  "additionalProperties": False, "properties": {
                "name": {"type": "string", "minLength": 1},
                "interval": {"type": "string", "pattern": PROM_DURATION},
                "rules": {"type": "array", "items": {"type": "object", "required": ["expr"],
                                                     "additionalProperties": False,
                                                     "properties": {
                    "alert": {"type": "string"}, "record": {"type": "string"},
                    "expr": {"type": ["string", "integer"]},
                    "for": {"type": "string", "pattern": PROM_DURATION},
                    "keep_firing_for": {"type": "string", "minLength": 1,
                                        "pattern": PROM_DURATION},
                    "labels": STRING_MAP, "annotations": STRING_MAP}}}}}}}}}},
}
# The alerts monitoring/alerts.yaml defines, each with a summary and a description.
ALERTS = {"TenantPlacerTenantsPendingTooLong", "TenantPlacerNodeRequestsFailing",
          "TenantPlacerNodeRequestsInFlightTooLong", "TenantPlacerReservationLostOrRestored",
          "TenantPlacerUndecodableObjects", "TenantPlacerNodeStatusConflictsPersist",
          "TenantPlacerNoLeader", "TenantPlacerConsolidationBlockedByBudget",
          "TenantPlacerMachinesIdle"}

# The admission guards (admissionregistration.k8s.io/v1), cluster-scoped, and the first Kubernetes
# version with each kind at v1: ValidatingAdmissionPolicy went GA in 1.30, MutatingAdmissionPolicy
# in 1.36. kubernetes-validate 1.37.0 has schemas for the v1 MutatingAdmissionPolicy and its binding
# from 1.36 on (1.32 to 1.35 have only v1alpha1 and v1beta1), so they are validated for 1.36 and
# the newest version it knows, and the ValidatingAdmissionPolicy also for 1.32.
ADMISSION_API = "admissionregistration.k8s.io/v1"
VAP, VAP_BINDING = "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"
MAP, MAP_BINDING = "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"
ADMISSION_SINCE = {VAP: "1.30", VAP_BINDING: "1.30", MAP: "1.36", MAP_BINDING: "1.36"}
ADMISSION_KUBE_VERSIONS = ["1.32", "1.36", kv_utils.latest_version()]
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", *ADMISSION_SINCE}
PLACEMENT_GROUP = "placement.tenant-placer.dev"
TENANT_FINALIZER = "placement.tenant-placer.dev/reservation"
NODE_FINALIZER = "placement.tenant-placer.dev/reservations"


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
    prometheus_rule: bool = False
    dashboard: bool = False
    page: bool = True
    # Admission guards: the ValidatingAdmissionPolicy, the MutatingAdmissionPolicies, the Tenant
    # one among them (only while controller.finalizer is on), admissionGuards.statusWriters and
    # admissionGuards.provisioners.
    validating: bool = True
    mutating: bool = True
    tenant_finalizer_policy: bool = True
    status_writers: list[str] = field(default_factory=list)
    provisioners: list[str] = field(default_factory=list)
    # provisioner.clusterAPI.enabled: the controller buys through Cluster API.
    cluster_api: bool = False


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
    cel_parsed: int = 0
    cel_evaluated: int = 0
    monitoring_validated: int = 0

    def check(self, ok: bool, message: str) -> bool:
        if not ok:
            self.failures.append(message)
        return ok


# Two pools, one release each (docs/placement.md, "Pools"): disjoint selectors, and each release's status
# guard admitting the other pool's controller too (every guard sees every status write).
POOL_CASES = [
    Case(f"pool '{pool}': release 'pool-{pool}' with node and tenant selectors, leader election",
         {"replicaCount": 2,
          "controller": {"nodeSelector": f"pool={pool},tier!=gold", "tenantSelector": f"pool={pool}"},
          "admissionGuards": {"statusWriters": [
              f"system:serviceaccount:{NAMESPACE}:pool-{other}-tenant-placer"]}},
         release=f"pool-{pool}", leader_election=True, replicas=2,
         status_writers=[f"system:serviceaccount:{NAMESPACE}:pool-{other}-tenant-placer"])
    for pool, other in (("eu", "us"), ("us", "eu"))
]


def check_pools_apart(report: Report, chart: helm.Chart) -> str:
    """Two pool releases render distinct Lease names and selector args: side by side, neither
    follows the other's Lease nor watches the other's objects."""
    seen: dict[str, tuple[str, list[str]]] = {}
    for case in POOL_CASES:
        objects = render(chart, case.values, case.release)
        deployment = next(o for o in objects if o["kind"] == "Deployment")
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        lease = next((a for a in args if a.startswith("--lease-name=")), "")
        selectors = [a for a in args if a.startswith(("--node-selector=", "--tenant-selector="))]
        seen[case.release] = (lease, selectors)
    leases = {lease for lease, _ in seen.values()}
    report.check(len(leases) == len(POOL_CASES) and "" not in leases,
                 f"pool releases share a Lease: {seen}")
    selector_sets = {tuple(s) for _, s in seen.values()}
    report.check(len(selector_sets) == len(POOL_CASES) and all(len(s) == 2 for s in selector_sets),
                 f"pool releases do not each pass their own selectors: {seen}")
    return "pools: " + "; ".join(f"{r}: {lease}, {' '.join(s)}" for r, (lease, s) in seen.items())


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
            prometheus_rule=True,
            dashboard=True,
            status_writers=all_on["admissionGuards"]["statusWriters"],
            provisioners=all_on["admissionGuards"]["provisioners"],
            cluster_api=True,
        ),
        Case("provisioner.clusterAPI.enabled, a shorter timeout",
             {"provisioner": {"clusterAPI": {"enabled": True, "provisioningTimeoutSeconds": 900}}},
             cluster_api=True),
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
             {"controller": {"finalizer": False, "events": "problems", "queue": "StrictFIFO",
                             "maxMigrations": 4, "requestAfterSeconds": 0,
                             "emptyNodeSeconds": 3600}},
             tenant_finalizer_policy=False),
        Case("admission guards off (clusters before 1.30)",
             {"admissionGuards": {"validating": {"enabled": False},
                                  "mutating": {"enabled": False}}},
             validating=False, mutating=False, tenant_finalizer_policy=False),
        Case("mutating guards off (clusters 1.30 to 1.35)",
             {"admissionGuards": {"mutating": {"enabled": False}}},
             mutating=False, tenant_finalizer_policy=False),
        Case("fullnameOverride, release 'edge', extra statusWriters",
             {"fullnameOverride": "placer",
              "admissionGuards": {"statusWriters": ["alice@example.com",
                                                    "system:serviceaccount:ops:break-glass"]}},
             release="edge",
             status_writers=["alice@example.com", "system:serviceaccount:ops:break-glass"]),
        Case("two provisioners, one of them also a statusWriter",
             {"admissionGuards": {"provisioners": ["system:serviceaccount:capi:provisioner",
                                                   "kubernetes-admin"],
                                  "statusWriters": ["kubernetes-admin"]}},
             status_writers=["kubernetes-admin"],
             provisioners=["system:serviceaccount:capi:provisioner", "kubernetes-admin"]),
        Case("nodes registered from the cluster (controller.registerNodes)",
             {"controller": {"registerNodes": "tenant-placer.dev/pool in (metal,bare-metal)"}}),
        Case("consolidation within a budget and weeknight windows",
             {"controller": {"consolidation": "WhenUnderutilized", "consolidateAfterSeconds": 0,
                             "consolidateRegistered": True, "disruptionBudget": "2",
                             "disruptionSchedule": ["0 22 * * mon-fri 8h", "@daily 1h"]}}),
        Case("make-room off (controller.makeRoomMoves=0)", {"controller": {"makeRoomMoves": 0}}),
        Case("alerts and dashboard without a ServiceMonitor, dashboard in Grafana's namespace",
             {"metrics": {"prometheusRule": {"enabled": True}},
              "grafana": {"dashboard": {"enabled": True, "namespace": "monitoring"}}},
             prometheus_rule=True, dashboard=True),
        *POOL_CASES,
    ]
    bad = [
        BadCase("controller.logFormat=xml", {"controller": {"logFormat": "xml"}}, "logFormat"),
        BadCase("replicaCount=0", {"replicaCount": 0}, "replicaCount"),
        BadCase("provisioner.clusterAPI.provisioningTimeoutSeconds=0",
                {"provisioner": {"clusterAPI": {"enabled": True, "provisioningTimeoutSeconds": 0}}},
                "provisioningTimeoutSeconds"),
        BadCase("controller.concurrency=0", {"controller": {"concurrency": 0}}, "concurrency"),
        BadCase("controller.requestsInFlight=0", {"controller": {"requestsInFlight": 0}},
                "requestsInFlight"),
        BadCase("controller.policy=Random", {"controller": {"policy": "Random"}}, "policy"),
        BadCase("controller.queue=LIFO", {"controller": {"queue": "LIFO"}}, "queue"),
        BadCase("controller.maxMigrations=0", {"controller": {"maxMigrations": 0}},
                "maxMigrations"),
        BadCase("controller.emptyNodeSeconds=0", {"controller": {"emptyNodeSeconds": 0}},
                "emptyNodeSeconds"),
        BadCase("controller.requestAfterSeconds=-1", {"controller": {"requestAfterSeconds": -1}},
                "requestAfterSeconds"),
        BadCase("controller.events=some", {"controller": {"events": "some"}}, "events"),
        BadCase("controller.consolidation=Always", {"controller": {"consolidation": "Always"}},
                "consolidation"),
        BadCase("controller.makeRoomMoves=-1", {"controller": {"makeRoomMoves": -1}},
                "makeRoomMoves"),
        BadCase("controller.consolidateAfterSeconds=-1",
                {"controller": {"consolidateAfterSeconds": -1}}, "consolidateAfterSeconds"),
        BadCase("controller.disruptionBudget=150%", {"controller": {"disruptionBudget": "150%"}},
                "disruptionBudget"),
        BadCase("controller.disruptionBudget a number", {"controller": {"disruptionBudget": 2}},
                "disruptionBudget"),
        BadCase("controller.disruptionSchedule a string",
                {"controller": {"disruptionSchedule": "@daily 1h"}}, "disruptionSchedule"),
        BadCase("controller.finalizer='no'", {"controller": {"finalizer": "no"}}, "finalizer"),
        BadCase("metrics.port=70000", {"metrics": {"port": 70000}}, "port"),
        BadCase("leaderElection.enabled='yes'", {"leaderElection": {"enabled": "yes"}},
                "enabled"),
        BadCase("image.pullPolicy=Sometimes", {"image": {"pullPolicy": "Sometimes"}},
                "pullPolicy"),
        BadCase("page.enabled='yes'", {"page": {"enabled": "yes"}}, "enabled"),
        BadCase("misspelt page key 'enable'", {"page": {"enable": False}}, "enable"),
        BadCase("misspelt top-level key 'replicas'", {"replicas": 2}, "replicas"),
        BadCase("admissionGuards.validating.enabled='yes'",
                {"admissionGuards": {"validating": {"enabled": "yes"}}}, "enabled"),
        BadCase("misspelt admissionGuards key 'mutating.enable'",
                {"admissionGuards": {"mutating": {"enable": False}}}, "enable"),
        BadCase("admissionGuards.statusWriters with an empty name",
                {"admissionGuards": {"statusWriters": [""]}}, "statusWriters"),
        BadCase("admissionGuards.statusWriters not a list",
                {"admissionGuards": {"statusWriters": "kubernetes-admin"}}, "statusWriters"),
        BadCase("admissionGuards.provisioners with an empty name",
                {"admissionGuards": {"provisioners": [""]}}, "provisioners"),
        BadCase("controller.nodeSelector not a string",
                {"controller": {"nodeSelector": {"pool": "eu"}}}, "nodeSelector"),
        BadCase("controller.tenantSelector not a string",
                {"controller": {"tenantSelector": ["pool=eu"]}}, "tenantSelector"),
        BadCase("controller.registerNodes not a string",
                {"controller": {"registerNodes": True}}, "registerNodes"),
        BadCase("controller.zoneLabel not a label key",
                {"controller": {"zoneLabel": "Topology.io/zone name"}}, "zoneLabel"),
        BadCase("controller.zoneLabel with a name part of 64 characters",
                {"controller": {"zoneLabel": "example.com/" + "z" * 64}}, "zoneLabel"),
        BadCase("a relabeling with an unknown action",
                {"metrics": {"serviceMonitor": {"enabled": True, "relabelings": [
                    {"sourceLabels": ["__name__"], "action": "rename"}]}}}, "action"),
        BadCase("prometheusRule.alerts.pendingMinutes=0",
                {"metrics": {"prometheusRule": {"alerts": {"pendingMinutes": 0}}}},
                "pendingMinutes"),
        BadCase("prometheusRule.alerts.idleMachineMinutes=0",
                {"metrics": {"prometheusRule": {"alerts": {"idleMachineMinutes": 0}}}},
                "idleMachineMinutes"),
        BadCase("tracing.otlpEndpoint without a scheme",
                {"tracing": {"otlpEndpoint": "otel-collector:4318"}}, "otlpEndpoint"),
        BadCase("tracing.otlpEndpoint over https (no TLS is linked)",
                {"tracing": {"otlpEndpoint": "https://otel-collector:4318"}}, "otlpEndpoint"),
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
        repo_files == chart_files and len(repo_files) == 4,
        f"crds: charts/tenant-placer/crds/ has {chart_files}, crds/ has {repo_files} "
        f"(expected the same four files; {REGENERATE})",
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
            report.check(isinstance(value, dict) or bool(sub.get("description")),
                         f"values.schema.json: {where} has no description")
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
            # A switch adds verbs to a resource in a rule of its own.
            seen.setdefault((groups[0], resources[0]), []).extend(verbs)
    report.check(seen == expected,
                 f"{label}: {where(obj)}: rules {seen}, expected exactly {expected}")


def cluster_rules(case: Case) -> dict[tuple[str, str], list[str]]:
    """The ClusterRole's rules for this case: the base; with nodes registered from the cluster or
    Cluster API, core Nodes read and placement Nodes made and removed; and Cluster API's own
    (which also patches NodeRequests' finalizers)."""
    rules = {key: list(verbs) for key, verbs in CLUSTER_RULES.items()}
    if case.values.get("controller", {}).get("registerNodes") or case.cluster_api:
        for key, verbs in NODE_RULES.items():
            rules.setdefault(key, []).extend(verbs)
    if case.cluster_api:
        rules.update(CAPI_RULES)
        rules[(PLACEMENT_GROUP, "noderequests")] += ["patch"]
    return rules


def release_names(case: Case) -> tuple[str, str]:
    """The fullname and the controller's ServiceAccount name that the chart should use."""
    values = case.values
    fullname = values.get("fullnameOverride") or (
        case.release if "tenant-placer" in case.release else f"{case.release}-tenant-placer")
    sa_name = (values.get("serviceAccount", {}).get("name")
               or (fullname if case.service_account_created else "default"))
    return fullname, sa_name


def check_rendered(report: Report, case: Case, objects: list[dict[str, Any]]) -> None:
    label = case.name
    values = case.values
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        by_kind.setdefault(obj.get("kind", "?"), []).append(obj)

    fullname, sa_name = release_names(case)

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
        cluster_scoped = obj.get("kind") in CLUSTER_SCOPED
        want_namespace = None if cluster_scoped else NAMESPACE
        if obj.get("kind") == "ConfigMap":
            want_namespace = (values.get("grafana", {}).get("dashboard", {}).get("namespace")
                              or NAMESPACE)
        report.check(
            meta.get("namespace") == want_namespace,
            f"{label}: {where(obj)}: namespace {meta.get('namespace')!r}",
        )

    def expect_count(kind: str, count: int) -> list[dict[str, Any]]:
        found = by_kind.get(kind, [])
        report.check(len(found) == count,
                     f"{label}: {len(found)} {kind} object(s) rendered, expected {count}")
        return found

    # RBAC.
    for obj in expect_count("ClusterRole", 1 if case.rbac else 0):
        check_rbac_rules(report, label, obj, cluster_rules(case))
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
                 f"--requests-in-flight={controller.get('requestsInFlight', 16)}",
                 f"--policy={controller.get('policy', 'FirstFit')}",
                 f"--events={controller.get('events', 'problems')}",
                 f"--queue={controller.get('queue', 'BestEffortFIFO')}",
                 f"--max-migrations={controller.get('maxMigrations', 16)}",
                 f"--request-after-seconds={controller.get('requestAfterSeconds', 60)}",
                 f"--empty-node-seconds={controller.get('emptyNodeSeconds', 600)}",
                 f"--consolidation={controller.get('consolidation', 'WhenEmpty')}",
                 f"--consolidate-after-seconds={controller.get('consolidateAfterSeconds', 300)}",
                 f"--disruption-budget={controller.get('disruptionBudget', '10%')}",
                 f"--make-room-moves={controller.get('makeRoomMoves', 4)}"]
    want_args += ["--consolidate-registered"] if controller.get("consolidateRegistered") else []
    want_args += [f"--disruption-schedule={w}" for w in controller.get("disruptionSchedule", [])]
    want_args += [] if controller.get("finalizer", True) else ["--no-finalizer"]
    want_args += ["--leader-election"] if case.leader_election else []
    want_args += [] if case.page else ["--no-page"]
    want_args += [f"--{flag}={controller[key]}"
                  for key, flag in (("nodeSelector", "node-selector"),
                                    ("tenantSelector", "tenant-selector"),
                                    ("registerNodes", "register-nodes"),
                                    ("zoneLabel", "zone-label")) if controller.get(key)]
    capi = values.get("provisioner", {}).get("clusterAPI", {})
    want_args += (["--provisioner=cluster-api",
                   f"--provisioning-timeout-seconds={capi.get('provisioningTimeoutSeconds', 1800)}"]
                  if case.cluster_api else [])
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
        for key in ("relabelings", "metricRelabelings"):
            want = values.get("metrics", {}).get("serviceMonitor", {}).get(key)
            report.check(endpoints[:1] == [] or endpoints[0].get(key) == want,
                         f"{label}: ServiceMonitor {key} {endpoints[0].get(key)}, want {want}")
    check_monitoring(report, case, expect_count, fullname)


def check_monitoring(report: Report, case: Case, expect_count: Any, fullname: str) -> None:
    """The PrometheusRule, the dashboard ConfigMap and the OTLP endpoint, exactly when switched
    on, with what their values say; ServiceMonitor and PrometheusRule against MONITORING_SCHEMAS."""
    label, values = case.name, case.values
    for kind in MONITORING_SCHEMAS:
        for obj in expect_count(kind, {"ServiceMonitor": case.service_monitor,
                                       "PrometheusRule": case.prometheus_rule}[kind]):
            validator = jsonschema.Draft202012Validator(MONITORING_SCHEMAS[kind])
            for error in validator.iter_errors(
                    {k: v for k, v in obj.items() if k != "__source__"}):
                path = ".".join(str(p) for p in error.absolute_path)
                report.failures.append(f"{label}: {where(obj)}: monitoring.coreos.com/v1 "
                                       f"{kind} schema: {path}: {error.message}")
            report.monitoring_validated += 1
            # The schema bites: a field the CRD does not define, deep inside, is refused.
            bad = copy.deepcopy({k: v for k, v in obj.items() if k != "__source__"})
            inner = (bad["spec"]["endpoints"][0] if kind == "ServiceMonitor"
                     else bad["spec"]["groups"][0]["rules"][0])
            inner["severity"] = "warning"
            report.check(any(True for _ in validator.iter_errors(bad)),
                         f"{label}: the {kind} schema accepts an unknown field")
    rule_values = values.get("metrics", {}).get("prometheusRule", {})
    for rule in by_kind_of(expect_count, "PrometheusRule", case.prometheus_rule):
        extra = rule_values.get("labels", {})
        report.check(extra.items() <= rule["metadata"]["labels"].items(),
                     f"{label}: PrometheusRule lacks the labels {extra}")
        rules = [r for g in rule["spec"]["groups"] for r in g.get("rules", [])]
        names = {r.get("alert") for r in rules}
        report.check(names == ALERTS, f"{label}: alerts {sorted(map(str, names))}, "
                                      f"want {sorted(ALERTS)}")
        selector = f'job="{fullname}-metrics",namespace="{NAMESPACE}"'
        for r in rules:
            notes = r.get("annotations", {})
            report.check(bool(notes.get("summary")) and len(notes.get("description", "")) > 80,
                         f"{label}: alert {r.get('alert')} lacks a summary or a description "
                         "that says what to look at")
            report.check(selector in r["expr"],
                         f"{label}: alert {r.get('alert')} does not select {selector}: {r['expr']}")
        pending = rule_values.get("alerts", {}).get("pendingMinutes", 30)
        pending_rule = next((r for r in rules
                             if r.get("alert") == "TenantPlacerTenantsPendingTooLong"), {})
        report.check(pending_rule.get("expr", "").endswith(f"> {pending} * 60"),
                     f"{label}: the pending alert does not use pendingMinutes={pending}: "
                     f"{pending_rule.get('expr')}")
    dashboard_values = values.get("grafana", {}).get("dashboard", {})
    for config_map in by_kind_of(expect_count, "ConfigMap", case.dashboard):
        report.check(config_map["metadata"]["labels"].get("grafana_dashboard") == "1",
                     f"{label}: {where(config_map)} is not labelled grafana_dashboard: \"1\"")
        extra = dashboard_values.get("labels", {})
        report.check(extra.items() <= config_map["metadata"]["labels"].items(),
                     f"{label}: {where(config_map)} lacks the labels {extra}")
        try:
            dashboard = json.loads(config_map.get("data", {}).get("tenant-placer.json", ""))
            report.check(len(dashboard.get("panels", [])) >= 10
                         and all(t.get("expr") for p in dashboard["panels"]
                                 for t in p.get("targets", [])),
                         f"{label}: the dashboard has too few panels or a target without expr")
        except json.JSONDecodeError as error:
            report.failures.append(f"{label}: the dashboard is not JSON: {error}")
    endpoint = values.get("tracing", {}).get("otlpEndpoint", "")
    for deployment in by_kind_of(expect_count, "Deployment", True):
        env = {e["name"]: e.get("value") for e in
               deployment["spec"]["template"]["spec"]["containers"][0].get("env", [])}
        report.check(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") == (endpoint or None),
                     f"{label}: OTEL_EXPORTER_OTLP_ENDPOINT is "
                     f"{env.get('OTEL_EXPORTER_OTLP_ENDPOINT')!r}, want {endpoint or None!r}")


def by_kind_of(expect_count: Any, kind: str, on: bool) -> list[dict[str, Any]]:
    """The objects of a kind, checked to be there exactly when `on` (at most one)."""
    return expect_count(kind, 1 if on else 0)


# ---------------------------------------------------------------------------------------------
# 4b. admission guards
#
# The OpenAPI schemas of the admission policies mark no field required and no value as one of
# a set (kubernetes-validate accepts `patchType: Whatever` and a policy with no mutations), so
# what the API reference says is required or allowed is checked here, field by field. Their CEL
# is parsed and evaluated with cel-python: a generic CEL implementation, which checks the syntax
# and what the expressions compute on sample requests, not the Kubernetes type checking or cost
# limits that the API server applies when it compiles them.

CEL_ENV = celpy.Environment(annotations={"JSONPatch": celpy.celtypes.MessageType})
CEL_PROGRAMS: dict[str, Any] = {}  # each distinct expression is parsed once
CEL_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
OPERATIONS = {"CREATE", "UPDATE", "DELETE", "CONNECT", "*"}
FAILURE_POLICIES = {"Fail", "Ignore"}
VALIDATION_REASONS = {"Unauthorized", "Forbidden", "Invalid", "RequestEntityTooLarge"}
VALIDATION_ACTIONS = {"Deny", "Warn", "Audit"}
PATCH_TYPES = {"ApplyConfiguration": "applyConfiguration", "JSONPatch": "jsonPatch"}
REINVOCATION_POLICIES = {"Never", "IfNeeded"}


class CelFailed(Exception):
    """A CEL expression that did not parse or evaluate; the failure is already reported."""


def cel_expressions(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, expression) for every CEL expression a policy spec holds."""
    found = []
    for key in ("variables", "matchConditions", "validations", "auditAnnotations"):
        for index, item in enumerate(spec.get(key) or []):
            for field_name in ("expression", "messageExpression", "valueExpression"):
                if isinstance(item, dict) and field_name in item:
                    found.append((f"spec.{key}[{index}].{field_name}", item[field_name]))
    for index, mutation in enumerate(spec.get("mutations") or []):
        for member in PATCH_TYPES.values():
            if isinstance(mutation, dict) and isinstance(mutation.get(member), dict):
                found.append((f"spec.mutations[{index}].{member}.expression",
                              mutation[member].get("expression")))
    return found


def cel_compile(report: Report, label: str, expression: Any) -> Any:
    if not isinstance(expression, str) or not expression.strip():
        report.failures.append(f"{label}: CEL expression {expression!r} is empty or not a string")
        raise CelFailed
    if expression in CEL_PROGRAMS:
        return CEL_PROGRAMS[expression]
    try:
        program = CEL_ENV.program(CEL_ENV.compile(expression))
    except celpy.CELParseError as error:
        report.failures.append(f"{label}: CEL does not parse: {expression!r}: "
                               f"{str(error).splitlines()[0]}")
        raise CelFailed from error
    report.cel_parsed += 1
    CEL_PROGRAMS[expression] = program
    return program


def cel_eval(report: Report, label: str, expression: Any, activation: dict[str, Any]) -> Any:
    """Evaluates an expression on JSON-like inputs and gives the result as plain Python."""
    program = cel_compile(report, label, expression)
    try:
        result = program.evaluate({k: celpy.json_to_cel(v) for k, v in activation.items()})
        if isinstance(result, celpy.CELEvalError):
            raise result
        plain = json.loads(json.dumps(result, cls=celpy.CELJSONEncoder))
    except Exception as error:  # celpy raises several kinds; any is a failure here
        report.failures.append(f"{label}: CEL evaluation of {expression!r} failed: "
                               f"{str(error).splitlines()[0][:300]}")
        raise CelFailed from error
    report.cel_evaluated += 1
    return plain


def eval_variables(report: Report, label: str, spec: dict[str, Any],
                   activation: dict[str, Any]) -> dict[str, Any]:
    """spec.variables in order, each seeing the ones before it, as the API server does."""
    variables: dict[str, Any] = {}
    for variable in spec.get("variables") or []:
        variables[variable["name"]] = cel_eval(report, f"{label}: variable {variable['name']}",
                                               variable["expression"],
                                               {**activation, "variables": variables})
    return variables


def apply_json_patch(document: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 `add` (the only operation the guards use); anything else is an error."""
    document = copy.deepcopy(document)
    for operation in operations:
        if operation.get("op") != "add" or not str(operation.get("path", "")).startswith("/"):
            raise ValueError(f"unexpected JSON Patch operation {operation}")
        parts = [p.replace("~1", "/").replace("~0", "~")
                 for p in operation["path"].split("/")[1:]]
        target: Any = document
        for part in parts[:-1]:
            target = target[int(part)] if isinstance(target, list) else target[part]
        last = parts[-1]
        if isinstance(target, list):
            if last == "-":
                target.append(operation["value"])
            else:
                target.insert(int(last), operation["value"])
        else:
            target[last] = operation["value"]
    return document


def check_match_rules(report: Report, label: str, rules: Any, allowed: set[str]) -> None:
    if not report.check(isinstance(rules, list) and rules,
                        f"{label}: spec.matchConstraints.resourceRules is missing or empty"):
        return
    for index, rule in enumerate(rules):
        at = f"{label}: spec.matchConstraints.resourceRules[{index}]"
        for key in ("apiGroups", "apiVersions", "operations", "resources"):
            items = rule.get(key)
            if not report.check(isinstance(items, list) and items
                                and all(isinstance(i, str) for i in items),
                                f"{at}.{key} is required: a non-empty list of strings"):
                continue
            if key != "resources":
                report.check("*" not in items or len(items) == 1,
                             f"{at}.{key}: '*' must stand alone: {items}")
        report.check(set(rule.get("operations") or []) <= allowed,
                     f"{at}.operations {rule.get('operations')}: allowed are {sorted(allowed)}")
        report.check(rule.get("scope", "*") in ("Cluster", "Namespaced", "*"),
                     f"{at}.scope {rule.get('scope')!r}")


def check_named(report: Report, label: str, items: Any, key: str, pattern: re.Pattern[str],
                most: int) -> None:
    items = items or []
    names = [item.get("name") for item in items]
    report.check(len(items) <= most, f"{label}: {len(items)} {key}, at most {most}")
    report.check(len(set(names)) == len(names), f"{label}: {key} names repeat: {names}")
    for item in items:
        report.check(isinstance(item.get("name"), str) and pattern.match(item["name"]) is not None,
                     f"{label}: {key} name {item.get('name')!r} is not valid")
        report.check(isinstance(item.get("expression"), str) and item["expression"].strip() != "",
                     f"{label}: {key} {item.get('name')!r} has no expression")


def check_admission_structure(report: Report, label: str, obj: dict[str, Any]) -> None:
    """What the admissionregistration.k8s.io/v1 API reference requires of each kind."""
    kind, spec = obj.get("kind"), obj.get("spec")
    at = f"{label}: {where(obj)}"
    report.check(obj.get("apiVersion") == ADMISSION_API,
                 f"{at}: apiVersion {obj.get('apiVersion')!r}, want {ADMISSION_API}")
    if not report.check(isinstance(spec, dict), f"{at}: no spec"):
        return
    for path, expression in cel_expressions(spec):
        try:
            cel_compile(report, f"{at}: {path}", expression)
        except CelFailed:
            pass
    if kind in (VAP_BINDING, MAP_BINDING):
        report.check(isinstance(spec.get("policyName"), str) and spec["policyName"] != "",
                     f"{at}: spec.policyName is required")
        if kind == VAP_BINDING:
            actions = spec.get("validationActions")
            report.check(isinstance(actions, list) and actions
                         and set(actions) <= VALIDATION_ACTIONS
                         and len(set(actions)) == len(actions)
                         and not {"Deny", "Warn"} <= set(actions),
                         f"{at}: spec.validationActions {actions}: required, distinct, of "
                         f"{sorted(VALIDATION_ACTIONS)}, not both Deny and Warn")
        return
    report.check(spec.get("failurePolicy", "Fail") in FAILURE_POLICIES,
                 f"{at}: spec.failurePolicy {spec.get('failurePolicy')!r}")
    check_match_rules(report, at, (spec.get("matchConstraints") or {}).get("resourceRules"),
                      OPERATIONS if kind == VAP else OPERATIONS - {"DELETE"})
    check_named(report, at, spec.get("variables"), "variables", CEL_IDENTIFIER, 10_000)
    check_named(report, at, spec.get("matchConditions"), "matchConditions", QUALIFIED_NAME, 64)
    if kind == VAP:
        validations = spec.get("validations") or []
        report.check(bool(validations) or bool(spec.get("auditAnnotations")),
                     f"{at}: spec.validations (or auditAnnotations) is required")
        for index, validation in enumerate(validations):
            report.check(isinstance(validation.get("expression"), str),
                         f"{at}: spec.validations[{index}].expression is required")
            report.check("\n" not in validation.get("message", ""),
                         f"{at}: spec.validations[{index}].message has a line break")
            report.check(validation.get("reason", "Invalid") in VALIDATION_REASONS,
                         f"{at}: spec.validations[{index}].reason {validation.get('reason')!r}")
    else:
        report.check(spec.get("reinvocationPolicy") in REINVOCATION_POLICIES,
                     f"{at}: spec.reinvocationPolicy {spec.get('reinvocationPolicy')!r} is "
                     f"required, one of {sorted(REINVOCATION_POLICIES)}")
        mutations = spec.get("mutations")
        if report.check(isinstance(mutations, list) and mutations,
                        f"{at}: spec.mutations is required and may not be empty"):
            for index, mutation in enumerate(mutations):
                member = PATCH_TYPES.get(mutation.get("patchType"))
                present = {m for m in PATCH_TYPES.values() if m in mutation}
                report.check(member is not None and present == {member}
                             and bool((mutation.get(member) or {}).get("expression")),
                             f"{at}: spec.mutations[{index}]: patchType "
                             f"{mutation.get('patchType')!r} must be one of "
                             f"{sorted(PATCH_TYPES)} with exactly its member and an expression "
                             f"(has {sorted(present)})")


def check_admission_guards(report: Report, case: Case, objects: list[dict[str, Any]]) -> None:
    label = case.name
    fullname, sa_name = release_names(case)
    username = f"system:serviceaccount:{NAMESPACE}:{sa_name}"
    guards = [o for o in objects if o.get("kind") in ADMISSION_SINCE]
    for obj in guards:
        check_admission_structure(report, label, obj)

    def named(kind: str) -> dict[str, dict[str, Any]]:
        return {o["metadata"]["name"]: o for o in guards if o.get("kind") == kind}

    want_vap = {f"{fullname}-status-writers"} if case.validating else set()
    want_map = ({f"{fullname}-node-finalizer"} if case.mutating else set()) | (
        {f"{fullname}-tenant-finalizer"} if case.tenant_finalizer_policy else set())
    for kind, binding_kind, want in ((VAP, VAP_BINDING, want_vap), (MAP, MAP_BINDING, want_map)):
        policies, bindings = named(kind), named(binding_kind)
        report.check(set(policies) == want,
                     f"{label}: {kind} objects {sorted(policies)}, want {sorted(want)}")
        report.check(set(bindings) == want,
                     f"{label}: {binding_kind} objects {sorted(bindings)}, want {sorted(want)}")
        for name, binding in bindings.items():
            report.check(binding.get("spec", {}).get("policyName") in policies,
                         f"{label}: {binding_kind}/{name} binds "
                         f"{binding.get('spec', {}).get('policyName')!r}, not a rendered {kind}")
    try:
        for policy in named(VAP).values():
            check_status_writers(report, label, policy, named(VAP_BINDING), username,
                                 case.status_writers, case.provisioners, case.cluster_api)
        for name, policy in named(MAP).items():
            tenant = name.endswith("-tenant-finalizer")
            resource, finalizer = (("tenants", TENANT_FINALIZER) if tenant
                                   else ("nodes", NODE_FINALIZER))
            check_finalizer_policy(report, label, policy, resource, finalizer)
    except CelFailed:
        pass


def check_status_writers(report: Report, label: str, policy: dict[str, Any],
                         bindings: dict[str, dict[str, Any]], username: str,
                         extra: list[str], provisioners: list[str], cluster_api: bool) -> None:
    at, spec = f"{label}: {where(policy)}", policy["spec"]
    report.check(spec.get("failurePolicy") == "Fail", f"{at}: failurePolicy is not Fail")
    want_rules = [{"apiGroups": [PLACEMENT_GROUP], "apiVersions": ["*"],
                   "operations": ["UPDATE"],
                   "resources": ["nodes/status", "tenants/status", "noderequests/status"]}]
    rules = spec.get("matchConstraints", {}).get("resourceRules")
    report.check(rules == want_rules, f"{at}: resourceRules {rules}, want {want_rules}")
    binding = bindings.get(policy["metadata"]["name"], {})
    report.check(binding.get("spec", {}).get("validationActions") == ["Deny"],
                 f"{at}: its binding's validationActions are not [Deny]")
    validations = spec.get("validations") or []
    if not report.check(len(validations) == 1, f"{at}: {len(validations)} validations, want 1"):
        return
    validation = validations[0]
    report.check(username in validation.get("message", ""),
                 f"{at}: message does not name {username}: {validation.get('message')!r}")
    others = [f"system:serviceaccount:{NAMESPACE}:{username.rsplit(':', 1)[1]}-impostor",
              f"system:serviceaccount:elsewhere:{username.rsplit(':', 1)[1]}",
              "system:serviceaccount:capi:provisioner", "kubernetes-admin", "system:admin", "",
              username]
    for resource in ("nodes", "tenants", "noderequests"):
        # NodeRequests' status is the provisioner's, never the controller's.
        # ... unless the controller buys through Cluster API.
        request_writers = ([username] if cluster_api else []) + provisioners
        writers = ((request_writers if resource == "noderequests" else [username])
                   + [w for w in extra if w != username])
        # A NodeRequest status write: one that changes only status.use (the controller's words
        # there, always its to write), and one that changes the phase too (the provisioner's).
        ready = {"status": {"phase": "Ready", "nodeName": "n", "machine": "fleet/m",
                            "scaleGeneration": 3}}
        used = {"status": {**ready["status"], "use": "InUse", "useSince": "2026-12-07T00:00:00Z"}}
        failed = {"status": {**used["status"], "phase": "Failed"}}
        samples = ([({}, {}, "nothing"), (used, ready, "use"), (failed, ready, "phase")]
                   if resource == "noderequests" else [({}, {}, "nothing")])
        for user in writers + [o for o in others if o not in writers]:
          for obj, old, changed in samples:
            request = {"operation": "UPDATE", "subResource": "status", "name": "x",
                       "resource": {"group": PLACEMENT_GROUP, "version": "v1alpha1",
                                    "resource": resource},
                       "userInfo": {"username": user, "groups": ["system:authenticated"]}}
            activation = {"request": request, "object": obj, "oldObject": old}
            variables = eval_variables(report, at, spec, activation)
            activation["variables"] = variables
            allowed = cel_eval(report, f"{at}: validations[0].expression", validation["expression"],
                               activation)
            want_allowed = user in writers or (resource == "noderequests" and user == username
                                               and changed != "phase")
            report.check(allowed is want_allowed,
                         f"{at}: {user or '(no user)'} writing {resource}/status ({changed} "
                         f"changed): allowed={allowed}, want {want_allowed}")
            if allowed:
                continue
            message = cel_eval(report, f"{at}: validations[0].messageExpression",
                               validation.get("messageExpression"), activation)
            advice = ("the Tenant's spec" if resource == "tenants"
                      else "the Node's spec or its Tenants' specs")
            want = (f"only the tenant-placer controller ({username}) writes {resource}/status: "
                    f"the Node's status.allocations is the record of reservations; change "
                    f"{advice} instead")
            if resource == "noderequests":
                named = ", ".join(provisioners) or "none named"
                via = "the tenant-placer controller through Cluster API, " if cluster_api else ""
                delivery = ("delivers them through Cluster API" if cluster_api
                            else "asks for machines and never delivers them (it writes only "
                                 "status.use and status.useSince)")
                want = (f"only the provisioner ({via}admissionGuards.provisioners: {named}) writes "
                        f"noderequests/status: it says whether a machine was bought and which "
                        f"Node it is; the tenant-placer controller {delivery}")
            report.check(message == want, f"{at}: message {message!r}, want {want!r}")


def check_finalizer_policy(report: Report, label: str, policy: dict[str, Any], resource: str,
                           finalizer: str) -> None:
    at, spec = f"{label}: {where(policy)}", policy["spec"]
    report.check(spec.get("failurePolicy") == "Ignore", f"{at}: failurePolicy is not Ignore")
    report.check(spec.get("reinvocationPolicy") == "Never",
                 f"{at}: reinvocationPolicy is not Never")
    want_rules = [{"apiGroups": [PLACEMENT_GROUP], "apiVersions": ["*"],
                   "operations": ["CREATE"], "resources": [resource]}]
    rules = spec.get("matchConstraints", {}).get("resourceRules")
    report.check(rules == want_rules, f"{at}: resourceRules {rules}, want {want_rules}")
    for before in (None, [], ["example.com/other"], [finalizer], ["example.com/other", finalizer]):
        obj = {"apiVersion": f"{PLACEMENT_GROUP}/v1alpha1", "kind": resource[:-1].title(),
               "metadata": {"name": "sample"}, "spec": {}}
        if before is not None:
            obj["metadata"]["finalizers"] = before
        request = {"operation": "CREATE", "name": "sample",
                   "resource": {"group": PLACEMENT_GROUP, "version": "v1alpha1",
                                "resource": resource},
                   "userInfo": {"username": "kubernetes-admin"}}
        activation = {"request": request, "object": obj, "oldObject": None}
        matched = all(cel_eval(report, f"{at}: matchConditions {c.get('name')}", c["expression"],
                               activation) is True for c in spec.get("matchConditions") or [])
        after = obj
        if matched:
            activation["variables"] = eval_variables(report, at, spec, activation)
            for index, mutation in enumerate(spec.get("mutations") or []):
                if not report.check(mutation.get("patchType") == "JSONPatch",
                                    f"{at}: mutations[{index}] is not a JSONPatch"):
                    return
                patch = cel_eval(report, f"{at}: mutations[{index}].jsonPatch.expression",
                                 mutation["jsonPatch"]["expression"], activation)
                try:
                    after = apply_json_patch(after, patch)
                except (ValueError, KeyError, IndexError, TypeError) as error:
                    report.failures.append(f"{at}: JSON Patch {patch} does not apply to "
                                           f"finalizers {before}: {error!r}")
                    return
        want = list(before or [])
        want += [] if finalizer in want else [finalizer]
        got = after["metadata"].get("finalizers")
        report.check(got == want,
                     f"{at}: creating a {obj['kind']} with finalizers {before} gives {got}, "
                     f"want {want}")
        report.check({k: v for k, v in after.items() if k != "metadata"}
                     == {k: v for k, v in obj.items() if k != "metadata"},
                     f"{at}: the patch changed more than metadata.finalizers: {after}")


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


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def kube_versions_for(obj: dict[str, Any]) -> list[str]:
    """KUBE_VERSIONS, or for an admission policy each version from the one its kind came in."""
    since = ADMISSION_SINCE.get(obj.get("kind", "")) if obj.get("apiVersion") == ADMISSION_API \
        else None
    if since is None:
        return KUBE_VERSIONS
    return [v for v in ADMISSION_KUBE_VERSIONS if version_key(v) >= version_key(since)]


def kube_validate(report: Report, label: str, obj: dict[str, Any]) -> None:
    obj = {k: v for k, v in obj.items() if k != "__source__"}
    if (obj.get("apiVersion"), obj.get("kind")) in NOT_BUILT_IN:
        return
    for version in kube_versions_for(obj):
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
            check_admission_guards(report, case, objects)
            check_notes(report, case, chart)
            for obj in objects:
                kube_validate(report, case.name, obj)
            kinds = ", ".join(sorted(f"{o['kind']}" for o in objects))
            guards = ", ".join(
                part for part, on in (("validating", case.validating),
                                      ("mutating: tenant finalizer", case.tenant_finalizer_policy),
                                      ("mutating: node finalizer", case.mutating)) if on)
            summary.append(f"{case.name}: lint ok; {len(objects)} objects ({kinds}); "
                           f"leader election {'on' if case.leader_election else 'off'}; "
                           f"admission guards: {guards or 'off'}")

        summary.append(check_pools_apart(report, chart))

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
          "(ServiceMonitor and PrometheusRule skipped: not built-in kinds; the admission policies for "
          f"{', '.join(ADMISSION_KUBE_VERSIONS)} from the version their kind came in)")
    print(f"  monitoring.coreos.com/v1: {report.monitoring_validated} ServiceMonitor and "
          "PrometheusRule validations against the fields prometheus-operator's CRDs define")
    print(f"  admission guards: required fields and allowed values checked; CEL (cel-python "
          f"{importlib.metadata.version('cel-python')}): {report.cel_parsed} distinct "
          f"expressions parsed, {report.cel_evaluated} evaluations on sample requests as expected")
    if report.failures:
        report.failures = list(dict.fromkeys(report.failures))  # the same finding once
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
