//! The kinds the server serves: a few built-in ones, stored generically with
//! the update policy of their real registry strategy (core `v1` `Node` among
//! them: see the `node` module), and the custom kinds learnt from
//! CustomResourceDefinitions.

use serde_json::{Value, json};

use crate::rules::RuleTree;
use crate::scale::{self, ScalePaths};
use crate::selector::FieldLabel;
use crate::status::{BadValue, FieldError, FieldErrorKind, GroupResource};

/// One served kind and the rules its registry strategy applies.
#[derive(Debug, Clone)]
pub(crate) struct Kind {
    pub group: String,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub list_kind: String,
    pub namespaced: bool,
    /// The served versions.
    pub versions: Vec<KindVersion>,
    /// Objects are stored (and observed) at this version.
    pub storage_version: String,
    /// A custom resource: no strategic merge patch.
    pub custom: bool,
    /// `metadata.generation` starts at 1 and moves on spec changes.
    pub tracks_generation: bool,
    /// `AllowUnconditionalUpdate`: a PUT may omit `metadata.resourceVersion`.
    pub unconditional_update: bool,
    /// `AllowCreateOnUpdate`: a PUT to a missing object creates it.
    pub create_on_update: bool,
    /// `ReturnDeletedObject`: an immediate delete answers the object, not a Status.
    pub returns_deleted_object: bool,
    /// With the status subresource, a create keeps the status it is given (nodes) instead of
    /// dropping it.
    pub keeps_status_on_create: bool,
    /// What a write to `/status` may change.
    pub status_write: StatusWrite,
    pub short_names: Vec<String>,
    /// The categories (`kubectl get all`, `kubectl get placement`).
    pub categories: Vec<String>,
    /// The field labels field selectors may use besides `metadata.name` and
    /// `metadata.namespace`, with the JSON path each reads in the stored
    /// object (the core form, for `events.k8s.io` events).
    pub field_labels: Vec<FieldLabel>,
    /// The documentation of the kind, where the CRD schema gives none.
    pub description: String,
}

/// What a write to `/status` may change: the rule of the kind's status strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StatusWrite {
    /// Only `status`; all else is the stored object's (custom resources, CRDs).
    OnlyStatus,
    /// All but `spec`, which is the stored object's (nodes: labels written through `/status`
    /// are kept).
    AllButSpec,
}

/// One served version of a kind.
#[derive(Debug, Clone)]
pub(crate) struct KindVersion {
    pub name: String,
    /// The `openAPIV3Schema`, for custom kinds.
    pub schema: Option<Value>,
    /// Where in `schema` its `x-kubernetes-validations` are; None without any.
    pub rules: Option<RuleTree>,
    /// The `/status` subresource is enabled.
    pub status: bool,
    /// The `/scale` subresource, when enabled (custom kinds only).
    pub scale: Option<ScalePaths>,
    /// The columns of `kubectl get` (a CRD's `additionalPrinterColumns`).
    pub columns: Vec<PrinterColumn>,
}

/// A cell that a built-in kind's printer computes (`table` computes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Printer {
    /// `translateTimestampSince(creationTimestamp)`: the age, `<unknown>` without a timestamp.
    Age,
    /// A node's readiness and schedulability (`Ready,SchedulingDisabled`).
    NodeStatus,
    /// A node's roles, from its `node-role.kubernetes.io/*` labels.
    NodeRoles,
    /// A node's first address of this type, or `<none>`.
    NodeAddress(&'static str),
    /// A field of a node's `status.nodeInfo`, or `empty`.
    NodeInfo {
        field: &'static str,
        empty: &'static str,
    },
}

/// One column of the server-side Table (`additionalPrinterColumns`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PrinterColumn {
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    /// A simple JSONPath such as `.status.phase`.
    pub json_path: String,
    /// A `date` cell as the timestamp itself (the default table's `Created
    /// At`) rather than the age the CRD convertor and the built-in printers
    /// show.
    pub timestamp: bool,
    /// A cell computed as a built-in kind's printer computes it, instead of read at
    /// `json_path`.
    pub printer: Option<Printer>,
}

impl PrinterColumn {
    pub fn new(name: &str, type_: &str, json_path: &str, description: &str) -> Self {
        Self {
            name: name.into(),
            type_: type_.into(),
            format: String::new(),
            description: description.into(),
            priority: 0,
            json_path: json_path.into(),
            timestamp: false,
            printer: None,
        }
    }

    /// A `string` column of a built-in printer.
    pub fn printed(name: &str, description: &str, priority: i64, printer: Printer) -> Self {
        Self {
            priority,
            printer: Some(printer),
            ..Self::new(name, "string", "", description)
        }
    }

    /// The `Created At` column of the apiserver's default table convertor.
    pub fn created_at() -> Self {
        Self {
            timestamp: true,
            ..Self::new(
                "Created At",
                "date",
                ".metadata.creationTimestamp",
                CREATION_TIMESTAMP_DOC,
            )
        }
    }

    /// The Age column CRD defaulting adds when a version declares none.
    pub fn age() -> Self {
        Self::new(
            "Age",
            "date",
            ".metadata.creationTimestamp",
            CREATION_TIMESTAMP_DOC,
        )
    }

    fn from_crd(column: &Value) -> Self {
        let text = |key: &str| column[key].as_str().unwrap_or_default().to_owned();
        Self {
            name: text("name"),
            type_: text("type"),
            format: text("format"),
            description: text("description"),
            priority: column["priority"].as_i64().unwrap_or(0),
            json_path: text("jsonPath"),
            timestamp: false,
            printer: None,
        }
    }
}

/// `NodeStatus.addresses`, as the address columns of nodes describe it.
const NODE_ADDRESSES_DOC: &str = "List of addresses reachable to the node. Queried from cloud provider, if available. More info: https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This field is declared as mergeable, but the merge key is not sufficiently unique, which can cause data corruption when it is merged. Callers should instead use a full-replacement patch. See https://pr.k8s.io/79391 for an example. Consumers should assume that addresses can change during the lifetime of a Node. However, there are some exceptions where this may not be possible, such as Pods that inherit a Node's address in its own status or consumers of the downward API (status.hostIP).";

/// The columns of `printNode` after Name; the server prints the wide ones too (priority 1).
fn node_columns() -> Vec<PrinterColumn> {
    let info = |field, empty| Printer::NodeInfo { field, empty };
    vec![
        PrinterColumn::printed("Status", "The status of the node", 0, Printer::NodeStatus),
        PrinterColumn::printed("Roles", "The roles of the node", 0, Printer::NodeRoles),
        PrinterColumn::printed("Age", CREATION_TIMESTAMP_DOC, 0, Printer::Age),
        PrinterColumn::printed(
            "Version",
            "Kubelet Version reported by the node.",
            0,
            info("kubeletVersion", ""),
        ),
        PrinterColumn::printed(
            "Internal-IP",
            NODE_ADDRESSES_DOC,
            1,
            Printer::NodeAddress("InternalIP"),
        ),
        PrinterColumn::printed(
            "External-IP",
            NODE_ADDRESSES_DOC,
            1,
            Printer::NodeAddress("ExternalIP"),
        ),
        PrinterColumn::printed(
            "OS-Image",
            "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
            1,
            info("osImage", "<unknown>"),
        ),
        PrinterColumn::printed(
            "Kernel-Version",
            "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
            1,
            info("kernelVersion", "<unknown>"),
        ),
        PrinterColumn::printed(
            "Container-Runtime",
            "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
            1,
            info("containerRuntimeVersion", "<unknown>"),
        ),
    ]
}

/// ObjectMeta's documentation of `creationTimestamp`, as the Age column describes it.
pub(crate) const CREATION_TIMESTAMP_DOC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.";

pub(crate) const CRD_GROUP: &str = "apiextensions.k8s.io";
pub(crate) const CRD_PLURAL: &str = "customresourcedefinitions";

impl Kind {
    /// A built-in kind served at one version, with the defaults most built-in
    /// strategies share (unconditional update allowed, no create-on-update).
    pub fn builtin(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> Self {
        Self {
            group: group.into(),
            plural: plural.into(),
            singular: kind.to_lowercase(),
            kind: kind.into(),
            list_kind: format!("{kind}List"),
            namespaced,
            versions: vec![KindVersion {
                name: version.into(),
                schema: None,
                rules: None,
                status: false,
                scale: None,
                columns: Vec::new(),
            }],
            storage_version: version.into(),
            custom: false,
            tracks_generation: false,
            unconditional_update: true,
            create_on_update: false,
            returns_deleted_object: false,
            keeps_status_on_create: false,
            status_write: StatusWrite::OnlyStatus,
            short_names: Vec::new(),
            categories: Vec::new(),
            field_labels: Vec::new(),
            description: String::new(),
        }
    }

    /// The same kind with these Table columns (after Name) at every version.
    fn with_columns(mut self, columns: &[PrinterColumn]) -> Self {
        for v in &mut self.versions {
            v.columns = columns.to_vec();
        }
        self
    }

    /// The built-in kinds, with the policies of their registry strategies.
    pub fn builtins() -> Vec<Self> {
        let age = PrinterColumn::age();
        vec![
            Self {
                returns_deleted_object: true,
                short_names: vec!["ns".into()],
                field_labels: vec![FieldLabel::new("status.phase", "/status/phase")],
                description: "Namespace provides a scope for Names. Use of multiple namespaces is optional.".into(),
                ..Self::builtin("", "v1", "namespaces", "Namespace", false)
            }
            .with_columns(&[
                PrinterColumn::new("Status", "string", ".status.phase", "The phase of the namespace"),
                age.clone(),
            ]),
            Self {
                short_names: vec!["cm".into()],
                description: "ConfigMap holds configuration data for pods to consume.".into(),
                ..Self::builtin("", "v1", "configmaps", "ConfigMap", true)
            }
            .with_columns(std::slice::from_ref(&age)),
            Self {
                short_names: vec!["no".into()],
                field_labels: vec![
                    FieldLabel::new("spec.unschedulable", "/spec/unschedulable").or("false"),
                ],
                keeps_status_on_create: true,
                status_write: StatusWrite::AllButSpec,
                description: "Node is a worker node in Kubernetes. Each node will have a unique identifier in the cache (i.e. in etcd).".into(),
                versions: vec![KindVersion {
                    name: "v1".into(),
                    schema: None,
                    rules: None,
                    status: true,
                    scale: None,
                    columns: node_columns(),
                }],
                ..Self::builtin("", "v1", "nodes", "Node", false)
            },
            Self {
                create_on_update: true,
                short_names: vec!["ev".into()],
                field_labels: vec![
                    FieldLabel::new("involvedObject.kind", "/involvedObject/kind"),
                    FieldLabel::new("involvedObject.namespace", "/involvedObject/namespace"),
                    FieldLabel::new("involvedObject.name", "/involvedObject/name"),
                    FieldLabel::new("involvedObject.uid", "/involvedObject/uid"),
                    FieldLabel::new("involvedObject.apiVersion", "/involvedObject/apiVersion"),
                    FieldLabel::new("involvedObject.resourceVersion", "/involvedObject/resourceVersion"),
                    FieldLabel::new("involvedObject.fieldPath", "/involvedObject/fieldPath"),
                    FieldLabel::new("reason", "/reason"),
                    FieldLabel::new("reportingComponent", "/reportingComponent"),
                    FieldLabel::new("source", "/source/component"),
                    FieldLabel::new("type", "/type"),
                ],
                description: "Event is a report of an event somewhere in the cluster.".into(),
                ..Self::builtin("", "v1", "events", "Event", true)
            }
            .with_columns(&[
                PrinterColumn::new("Type", "string", ".type", "Type of this event"),
                PrinterColumn::new("Reason", "string", ".reason", "Why the action was taken"),
                PrinterColumn::new("Message", "string", ".message", "A human-readable description"),
                age.clone(),
            ]),
            Self {
                create_on_update: true,
                field_labels: vec![
                    FieldLabel::new("regarding.kind", "/involvedObject/kind"),
                    FieldLabel::new("regarding.namespace", "/involvedObject/namespace"),
                    FieldLabel::new("regarding.name", "/involvedObject/name"),
                    FieldLabel::new("regarding.uid", "/involvedObject/uid"),
                    FieldLabel::new("regarding.apiVersion", "/involvedObject/apiVersion"),
                    FieldLabel::new("regarding.resourceVersion", "/involvedObject/resourceVersion"),
                    FieldLabel::new("regarding.fieldPath", "/involvedObject/fieldPath"),
                    FieldLabel::new("reason", "/reason"),
                    FieldLabel::new("reportingController", "/reportingComponent"),
                    FieldLabel::new("type", "/type"),
                ],
                description: "Event is a report of an event somewhere in the cluster.".into(),
                ..Self::builtin("events.k8s.io", "v1", "events", "Event", true)
            }
            .with_columns(&[
                PrinterColumn::new("Type", "string", ".type", "Type of this event"),
                PrinterColumn::new("Reason", "string", ".reason", "Why the action was taken"),
                PrinterColumn::new("Note", "string", ".note", "A human-readable description"),
                age.clone(),
            ]),
            Self {
                unconditional_update: false,
                create_on_update: true,
                description: "Lease defines a lease concept.".into(),
                ..Self::builtin("coordination.k8s.io", "v1", "leases", "Lease", true)
            }
            .with_columns(&[
                PrinterColumn::new("Holder", "string", ".spec.holderIdentity", "The identity of the holder of the lease"),
                age.clone(),
            ]),
            Self {
                tracks_generation: true,
                unconditional_update: false,
                versions: vec![KindVersion {
                    name: "v1".into(),
                    schema: None,
                rules: None,
                    status: true,
                    scale: None,
                    columns: vec![PrinterColumn::created_at()],
                }],
                short_names: vec!["crd".into(), "crds".into()],
                description: "CustomResourceDefinition represents a resource that should be exposed on the API server.  Its name MUST be in the format <.spec.name>.<.spec.group>.".into(),
                ..Self::builtin(
                    CRD_GROUP,
                    "v1",
                    CRD_PLURAL,
                    "CustomResourceDefinition",
                    false,
                )
            },
        ]
    }

    pub fn gr(&self) -> GroupResource<'_> {
        GroupResource {
            group: &self.group,
            resource: &self.plural,
        }
    }

    pub fn version(&self, name: &str) -> Option<&KindVersion> {
        self.versions.iter().find(|v| v.name == name)
    }

    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_owned()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    /// The kind a CustomResourceDefinition defines, or the reasons it is invalid.
    pub fn from_crd(crd: &Value) -> Result<Self, Vec<FieldError>> {
        let text = |path: &str| {
            crd.pointer(path)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let (group, plural, kind) = (
            text("/spec/group"),
            text("/spec/names/plural"),
            text("/spec/names/kind"),
        );
        let mut errors = Vec::new();
        for (value, field) in [
            (&group, "spec.group"),
            (&plural, "spec.names.plural"),
            (&kind, "spec.names.kind"),
        ] {
            if value.is_empty() {
                errors.push(FieldError::required(field, ""));
            }
        }
        let name = text("/metadata/name");
        if name != format!("{plural}.{group}") {
            errors.push(FieldError::invalid(
                "metadata.name",
                name.into(),
                r#"must be spec.names.plural+"."+spec.group"#,
            ));
        }
        let scope = text("/spec/scope");
        if scope != "Namespaced" && scope != "Cluster" {
            errors.push(FieldError::new(
                FieldErrorKind::NotSupported,
                "spec.scope",
                BadValue::Json(scope.clone().into()),
                r#"supported values: "Cluster", "Namespaced""#,
            ));
        }
        let all_versions = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let storage: Vec<&Value> = all_versions
            .iter()
            .filter(|v| v["storage"] == json!(true))
            .collect();
        if all_versions.is_empty() {
            errors.push(FieldError::required(
                "spec.versions",
                "must have exactly one version marked as storage version",
            ));
        } else if storage.len() != 1 {
            errors.push(FieldError::invalid(
                "spec.versions",
                Value::Array(all_versions.clone()),
                "must have exactly one version marked as storage version",
            ));
        }
        for (i, v) in all_versions.iter().enumerate() {
            if let Some(schema) = v.pointer("/schema/openAPIV3Schema") {
                errors.extend(crate::rules::crd_errors(
                    schema,
                    &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                ));
            }
            errors.extend(scale::crd_errors(
                v,
                &format!("spec.versions[{i}].subresources"),
            ));
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let versions = all_versions
            .iter()
            .filter(|v| v["served"] == json!(true))
            .map(|v| {
                let mut columns: Vec<PrinterColumn> = v["additionalPrinterColumns"]
                    .as_array()
                    .map(|cs| cs.iter().map(PrinterColumn::from_crd).collect())
                    .unwrap_or_default();
                if columns.is_empty() {
                    columns.push(PrinterColumn::age());
                }
                let schema = v.pointer("/schema/openAPIV3Schema").cloned();
                KindVersion {
                    name: v["name"].as_str().unwrap_or_default().to_owned(),
                    rules: schema.as_ref().and_then(RuleTree::of),
                    schema,
                    status: v.pointer("/subresources/status").is_some(),
                    scale: ScalePaths::of_version(v),
                    columns,
                }
            })
            .collect();
        let singular = Some(text("/spec/names/singular"))
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| kind.to_lowercase());
        let list_kind = Some(text("/spec/names/listKind"))
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| format!("{kind}List"));
        let strings = |path: &str| -> Vec<String> {
            crd.pointer(path)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        let short_names = strings("/spec/names/shortNames");
        let categories = strings("/spec/names/categories");
        Ok(Self {
            storage_version: storage
                .first()
                .and_then(|v| v["name"].as_str())
                .unwrap_or_default()
                .to_owned(),
            group,
            plural,
            singular,
            kind,
            list_kind,
            namespaced: scope == "Namespaced",
            versions,
            custom: true,
            tracks_generation: true,
            unconditional_update: false,
            create_on_update: false,
            returns_deleted_object: false,
            keeps_status_on_create: false,
            status_write: StatusWrite::OnlyStatus,
            short_names,
            categories,
            field_labels: Vec::new(),
            description: String::new(),
        })
    }
}

/// The status the apiextensions controllers give an accepted CRD at once:
/// its names accepted, `NamesAccepted` and `Established` true.
pub(crate) fn established_crd_status(crd: &Value, now: &str) -> Value {
    let condition = |type_: &str, reason: &str, message: &str| json!({"type": type_, "status": "True", "lastTransitionTime": now, "reason": reason, "message": message});
    let stored: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter(|v| v["storage"] == json!(true))
                .map(|v| v["name"].clone())
                .collect()
        })
        .unwrap_or_default();
    let mut names = crd
        .pointer("/spec/names")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Some(n) = names.as_object_mut() {
        let kind = n
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        n.entry("singular")
            .or_insert_with(|| kind.to_lowercase().into());
        n.entry("listKind")
            .or_insert_with(|| format!("{kind}List").into());
    }
    json!({
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "acceptedNames": names,
        "storedVersions": stored,
    })
}
