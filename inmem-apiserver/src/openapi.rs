//! OpenAPI v3 documents, as the apiserver publishes them for `kubectl
//! explain` and for kubectl's check that the server validates fields
//! (`fieldValidation`): the index `/openapi/v3` lists one document per group
//! version (`api/v1`, `apis/{group}/{version}`), each with its paths and
//! `components.schemas`.
//!
//! Rules, as the apiserver's builders apply them:
//! - a custom kind's schema is its CRD's `openAPIV3Schema` (descriptions,
//!   enums, defaults, minimums kept) with `apiVersion`, `kind` and `metadata`
//!   (a reference to `ObjectMeta`) set, named by the reversed group
//!   (`dev.example.placement.v1alpha1.Tenant`); a built-in kind served here
//!   has a schema with those three fields only;
//! - every schema of a kind and its list carries
//!   `x-kubernetes-group-version-kind`, a list, and every operation one object;
//! - write operations declare the `dryRun`, `fieldManager` and
//!   `fieldValidation` query parameters (kubectl looks for the latter on PATCH
//!   before sending `fieldValidation=Strict`);
//! - the meta types the documents refer to (`ObjectMeta`, `ListMeta`,
//!   `OwnerReference`, `Status`, `DeleteOptions`, `Patch`) are included, short;
//!   so is `autoscaling/v1` `Scale` where a kind has a scale subresource
//!   (`/{name}/scale`: read, replace, patch).

use serde_json::{Map, Value, json};

use crate::kinds::Kind;
use crate::store::State;

const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1";
/// What the `scale` subresource answers and takes.
const SCALE: &str = "io.k8s.api.autoscaling.v1.Scale";

const API_VERSION_DOC: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DOC: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const METADATA_DOC: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const LIST_METADATA_DOC: &str = "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";

/// The document path of a group version: `api/v1` or `apis/{group}/{version}`.
fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// Every served group version, in order.
fn group_versions(state: &State) -> Vec<(String, String)> {
    let mut gvs: Vec<(String, String)> = Vec::new();
    for kind in state.kinds.values() {
        for v in &kind.versions {
            let gv = (kind.group.clone(), v.name.clone());
            if !gvs.contains(&gv) {
                gvs.push(gv);
            }
        }
    }
    gvs.sort();
    gvs
}

/// `/openapi/v3`: the documents, each under a URL with its content's hash.
pub(crate) fn index(state: &State) -> Value {
    let mut paths = Map::new();
    for (group, version) in group_versions(state) {
        let Some(doc) = document(state, &group, &version) else {
            continue;
        };
        let path = gv_path(&group, &version);
        let hash = fnv1a(&serde_json::to_vec(&doc).unwrap_or_default());
        paths.insert(
            path.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={hash:016X}")}),
        );
    }
    json!({"paths": paths})
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The schema name of a kind: `io.k8s.api.core.v1.Namespace`, or the
/// reversed group for custom kinds (`dev.example.placement.v1alpha1.Tenant`).
pub(crate) fn schema_name(kind: &Kind, version: &str, kind_name: &str) -> String {
    let prefix = if kind.custom {
        kind.group.split('.').rev().collect::<Vec<_>>().join(".")
    } else if kind.group.is_empty() {
        "io.k8s.api.core".to_owned()
    } else if kind.group == "apiextensions.k8s.io" {
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions".to_owned()
    } else {
        let short = kind.group.split('.').next().unwrap_or_default();
        format!("io.k8s.api.{short}")
    };
    format!("{prefix}.{version}.{kind_name}")
}

fn reference(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn gvk(kind: &Kind, version: &str, kind_name: &str) -> Value {
    json!({"group": kind.group, "version": version, "kind": kind_name})
}

/// The document of one group version; None when nothing is served there.
pub(crate) fn document(state: &State, group: &str, version: &str) -> Option<Value> {
    let kinds: Vec<&Kind> = state
        .kinds
        .values()
        .filter(|k| k.group == group && k.version(version).is_some())
        .map(AsRef::as_ref)
        .collect();
    if kinds.is_empty() {
        return None;
    }
    let mut schemas = meta_schemas();
    if kinds
        .iter()
        .any(|k| k.version(version).is_some_and(|v| v.scale.is_some()))
    {
        schemas.extend(scale_schemas());
    }
    let mut paths = Map::new();
    for kind in kinds {
        let name = schema_name(kind, version, &kind.kind);
        let list_name = schema_name(kind, version, &kind.list_kind);
        schemas.insert(name.clone(), kind_schema(kind, version));
        schemas.insert(list_name.clone(), list_schema(kind, version, &name));
        add_paths(&mut paths, kind, version, &name, &list_name);
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.35.0+inmem"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

fn kind_schema(kind: &Kind, version: &str) -> Value {
    let mut schema = kind
        .version(version)
        .and_then(|v| v.schema.clone())
        .filter(Value::is_object)
        .unwrap_or_else(|| {
            json!({"description": kind.description, "type": "object", "x-kubernetes-preserve-unknown-fields": true})
        });
    if let Some(map) = schema.as_object_mut() {
        let properties = map
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(properties) = properties.as_object_mut() {
            properties.insert(
                "apiVersion".into(),
                json!({"description": API_VERSION_DOC, "type": "string"}),
            );
            properties.insert(
                "kind".into(),
                json!({"description": KIND_DOC, "type": "string"}),
            );
            properties.insert(
                "metadata".into(),
                json!({"description": METADATA_DOC, "allOf": [reference(&format!("{META}.ObjectMeta"))], "default": {}}),
            );
        }
        map.entry("type").or_insert_with(|| "object".into());
        map.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([gvk(kind, version, &kind.kind)]),
        );
    }
    schema
}

fn list_schema(kind: &Kind, version: &str, item: &str) -> Value {
    json!({
        "description": format!("{} is a list of {}", kind.list_kind, kind.kind),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"description": API_VERSION_DOC, "type": "string"},
            "items": {
                "description": format!("List of {}. More info: https://git.k8s.io/community/contributors/devel/api-conventions.md", kind.plural),
                "type": "array",
                "items": reference(item),
            },
            "kind": {"description": KIND_DOC, "type": "string"},
            "metadata": {"description": LIST_METADATA_DOC, "allOf": [reference(&format!("{META}.ListMeta"))], "default": {}},
        },
        "x-kubernetes-group-version-kind": [gvk(kind, version, &kind.list_kind)],
    })
}

fn param(name: &str, location: &str, description: &str, type_: &str) -> Value {
    let mut p = json!({
        "name": name, "in": location, "description": description,
        "schema": {"type": type_, "uniqueItems": true},
    });
    if location == "path" {
        p["required"] = true.into();
    }
    p
}

fn query(name: &str) -> Value {
    let (description, type_) = match name {
        "pretty" => ("If 'true', then the output is pretty printed.", "string"),
        "dryRun" => (
            "When present, indicates that modifications should not be persisted. Valid values are: - All: all dry run stages will be processed",
            "string",
        ),
        "fieldManager" => (
            "fieldManager is a name associated with the actor or entity that is making these changes.",
            "string",
        ),
        "fieldValidation" => (
            "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: unknown fields are dropped silently. - Warn: a warning is sent for each unknown field dropped (the default). - Strict: the request fails with a BadRequest error if any unknown field would be dropped.",
            "string",
        ),
        "force" => (
            "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people.",
            "boolean",
        ),
        "watch" | "allowWatchBookmarks" | "sendInitialEvents" => ("", "boolean"),
        "limit" | "timeoutSeconds" | "gracePeriodSeconds" => ("", "integer"),
        _ => ("", "string"),
    };
    param(name, "query", description, type_)
}

fn list_params() -> Vec<Value> {
    [
        "allowWatchBookmarks",
        "continue",
        "fieldSelector",
        "labelSelector",
        "limit",
        "resourceVersion",
        "resourceVersionMatch",
        "sendInitialEvents",
        "timeoutSeconds",
        "watch",
    ]
    .into_iter()
    .map(query)
    .collect()
}

fn write_params(patch: bool) -> Vec<Value> {
    let mut params: Vec<Value> = ["dryRun", "fieldManager", "fieldValidation"]
        .into_iter()
        .map(query)
        .collect();
    if patch {
        params.push(query("force"));
    }
    params
}

fn camel(text: &str) -> String {
    text.split(['.', '-', '/'])
        .filter(|s| !s.is_empty())
        .map(|s| {
            let mut chars = s.chars();
            chars.next().map_or_else(String::new, |c| {
                c.to_uppercase().chain(chars).collect::<String>()
            })
        })
        .collect()
}

struct Op<'a> {
    kind: &'a Kind,
    version: &'a str,
    tag: String,
}

impl Op<'_> {
    fn operation(
        &self,
        action: &str,
        verb: &str,
        suffix: &str,
        response: &str,
        params: Vec<Value>,
    ) -> Value {
        let group = if self.kind.group.is_empty() {
            "Core".to_owned()
        } else {
            camel(&self.kind.group)
        };
        let scope = if self.kind.namespaced && !suffix.contains("ForAllNamespaces") {
            "Namespaced"
        } else {
            ""
        };
        let json_schema = json!({"schema": reference(response)});
        let mut op = json!({
            "tags": [self.tag],
            "description": format!("{action} {}", self.kind.kind),
            "operationId": format!("{verb}{group}{}{scope}{}{suffix}", camel(self.version), self.kind.kind),
            "parameters": params,
            "responses": {
                "200": {"description": "OK", "content": {"application/json": json_schema}},
                "401": {"description": "Unauthorized"},
            },
            "x-kubernetes-action": verb_action(verb),
            "x-kubernetes-group-version-kind": gvk(self.kind, self.version, &self.kind.kind),
        });
        if matches!(verb, "create" | "replace" | "patch") {
            let body_ref = if verb == "patch" {
                reference(&format!("{META}.Patch"))
            } else {
                reference(response)
            };
            let media: Vec<&str> = if verb == "patch" {
                vec![
                    "application/json-patch+json",
                    "application/merge-patch+json",
                    "application/apply-patch+yaml",
                ]
            } else {
                vec!["*/*"]
            };
            let content: Map<String, Value> = media
                .into_iter()
                .map(|m| (m.to_owned(), json!({"schema": body_ref})))
                .collect();
            op["requestBody"] = json!({"content": content, "required": true});
        }
        if verb == "create" {
            op["responses"]["201"] =
                json!({"description": "Created", "content": {"application/json": json_schema}});
        }
        op
    }
}

fn verb_action(verb: &str) -> &'static str {
    match verb {
        "list" => "list",
        "create" => "post",
        "deletecollection" => "deletecollection",
        "read" => "get",
        "replace" => "put",
        "patch" => "patch",
        "delete" => "delete",
        _ => "get",
    }
}

fn add_paths(
    paths: &mut Map<String, Value>,
    kind: &Kind,
    version: &str,
    name: &str,
    list_name: &str,
) {
    let prefix = format!("/{}", gv_path(&kind.group, version));
    let tag = if kind.group.is_empty() {
        format!("core_{version}")
    } else {
        format!("{}_{version}", camel(&kind.group).to_lowercase())
    };
    let op = Op { kind, version, tag };
    let status_ref = format!("{META}.Status");
    let namespace = param(
        "namespace",
        "path",
        "object name and auth scope, such as for teams and projects",
        "string",
    );
    let object_name = param(
        "name",
        "path",
        &format!("name of the {}", kind.kind),
        "string",
    );
    let base = if kind.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", kind.plural)
    } else {
        format!("{prefix}/{}", kind.plural)
    };
    let mut scope_params = vec![query("pretty")];
    if kind.namespaced {
        scope_params.insert(0, namespace.clone());
    }
    let with = |mut params: Vec<Value>, extra: Vec<Value>| {
        params.extend(extra);
        params
    };
    paths.insert(
        base.clone(),
        json!({
            "get": op.operation("list or watch objects of kind", "list", "", list_name, list_params()),
            "post": op.operation("create a", "create", "", name, write_params(false)),
            "delete": op.operation("delete collection of", "deletecollection", "", &status_ref, list_params()),
            "parameters": scope_params,
        }),
    );
    let item_params = with(vec![object_name], scope_params.clone());
    paths.insert(
        format!("{base}/{{name}}"),
        json!({
            "get": op.operation("read the specified", "read", "", name, Vec::new()),
            "put": op.operation("replace the specified", "replace", "", name, write_params(false)),
            "patch": op.operation("partially update the specified", "patch", "", name, write_params(true)),
            "delete": op.operation("delete a", "delete", "", &status_ref, vec![query("dryRun"), query("gracePeriodSeconds"), query("propagationPolicy")]),
            "parameters": item_params,
        }),
    );
    if kind.version(version).is_some_and(|v| v.status) {
        paths.insert(
            format!("{base}/{{name}}/status"),
            json!({
                "get": op.operation("read status of the specified", "read", "Status", name, Vec::new()),
                "put": op.operation("replace status of the specified", "replace", "Status", name, write_params(false)),
                "patch": op.operation("partially update status of the specified", "patch", "Status", name, write_params(true)),
                "parameters": item_params,
            }),
        );
    }
    if kind.version(version).is_some_and(|v| v.scale.is_some()) {
        paths.insert(
            format!("{base}/{{name}}/scale"),
            json!({
                "get": op.operation("read scale of the specified", "read", "Scale", SCALE, Vec::new()),
                "put": op.operation("replace scale of the specified", "replace", "Scale", SCALE, write_params(false)),
                "patch": op.operation("partially update scale of the specified", "patch", "Scale", SCALE, write_params(true)),
                "parameters": item_params,
            }),
        );
    }
    if kind.namespaced {
        paths.insert(
            format!("{prefix}/{}", kind.plural),
            json!({
                "get": op.operation("list or watch objects of kind", "list", "ForAllNamespaces", list_name, list_params()),
                "parameters": [query("pretty")],
            }),
        );
    }
}

fn string(description: &str) -> Value {
    json!({"description": description, "type": "string"})
}

/// `autoscaling/v1` `Scale`, for the documents of kinds with a scale subresource.
fn scale_schemas() -> Map<String, Value> {
    let spec_status = "More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#spec-and-status.";
    let mut schemas = Map::new();
    schemas.insert(
        SCALE.into(),
        json!({
            "description": "Scale represents a scaling request for a resource.",
            "type": "object",
            "properties": {
                "apiVersion": string(API_VERSION_DOC),
                "kind": string(KIND_DOC),
                "metadata": {"description": "Standard object metadata; More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata.", "default": {}, "allOf": [reference(&format!("{META}.ObjectMeta"))]},
                "spec": {"description": format!("spec defines the behavior of the scale. {spec_status}"), "default": {}, "allOf": [reference(&format!("{SCALE}Spec"))]},
                "status": {"description": format!("status is the current status of the scale. {spec_status} Read-only."), "default": {}, "allOf": [reference(&format!("{SCALE}Status"))]},
            },
            "x-kubernetes-group-version-kind": [{"group": "autoscaling", "kind": "Scale", "version": "v1"}],
        }),
    );
    schemas.insert(
        format!("{SCALE}Spec"),
        json!({
            "description": "ScaleSpec describes the attributes of a scale subresource.",
            "type": "object",
            "properties": {
                "replicas": {"description": "replicas is the desired number of instances for the scaled object.", "type": "integer", "format": "int32"},
            },
        }),
    );
    schemas.insert(
        format!("{SCALE}Status"),
        json!({
            "description": "ScaleStatus represents the current status of a scale subresource.",
            "type": "object",
            "required": ["replicas"],
            "properties": {
                "replicas": {"description": "replicas is the actual number of observed instances of the scaled object.", "type": "integer", "format": "int32", "default": 0},
                "selector": string("selector is the label query over pods that should match the replicas count. This is same as the label selector but in the string format to avoid introspection by clients. The string will be in the same format as the query-param syntax. More info about label selectors: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/"),
            },
        }),
    );
    schemas
}

fn meta_schemas() -> Map<String, Value> {
    let string_map = |description: &str| json!({"description": description, "type": "object", "additionalProperties": {"type": "string", "default": ""}});
    let time = |description: &str| json!({"description": description, "type": "string", "format": "date-time"});
    let int64 = |description: &str| json!({"description": description, "type": "integer", "format": "int64"});
    let mut schemas = Map::new();
    schemas.insert(
        format!("{META}.ObjectMeta"),
        json!({
            "description": "ObjectMeta is metadata that all persisted resources must have, which includes all objects users must create.",
            "type": "object",
            "properties": {
                "annotations": string_map("Annotations is an unstructured key value map stored with a resource that may be set by external tools to store and retrieve arbitrary metadata. They are not queryable and should be preserved when modifying objects. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/annotations"),
                "creationTimestamp": time("CreationTimestamp is a timestamp representing the server time when this object was created. Clients may not set this value. It is represented in RFC3339 form and is in UTC."),
                "deletionGracePeriodSeconds": int64("Number of seconds allowed for this object to gracefully terminate before it will be removed from the system. Only set when deletionTimestamp is also set. May only be shortened. Read-only."),
                "deletionTimestamp": time("DeletionTimestamp is RFC 3339 date and time at which this resource will be deleted. Set by the server when a graceful deletion is requested by the user; the object stays visible until its finalizers are removed. Read-only."),
                "finalizers": {
                    "description": "Must be empty before the object is deleted from the registry. Each entry is an identifier for the responsible component that will remove the entry from the list.",
                    "type": "array", "items": {"type": "string", "default": ""},
                    "x-kubernetes-list-type": "set",
                },
                "generateName": string("GenerateName is an optional prefix, used by the server, to generate a unique name ONLY IF the Name field has not been provided."),
                "generation": int64("A sequence number representing a specific generation of the desired state. Populated by the system. Read-only."),
                "labels": string_map("Map of string keys and values that can be used to organize and categorize (scope and select) objects. May match selectors of replication controllers and services. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels"),
                "name": string("Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"),
                "namespace": string("Namespace defines the space within which each name must be unique. An empty namespace is equivalent to the \"default\" namespace. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/namespaces"),
                "ownerReferences": {
                    "description": "List of objects depended by this object.",
                    "type": "array", "items": {"default": {}, "allOf": [reference(&format!("{META}.OwnerReference"))]},
                    "x-kubernetes-list-map-keys": ["uid"], "x-kubernetes-list-type": "map",
                    "x-kubernetes-patch-merge-key": "uid", "x-kubernetes-patch-strategy": "merge",
                },
                "resourceVersion": string("An opaque value that represents the internal version of this object that can be used by clients to determine when objects have changed. Populated by the system. Read-only. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#concurrency-control-and-consistency"),
                "selfLink": string("Deprecated: selfLink is a legacy read-only field that is no longer populated by the system."),
                "uid": string("UID is the unique in time and space value for this object. It is typically generated by the server on successful creation of a resource and is not allowed to change on PUT operations. Populated by the system. Read-only."),
            },
        }),
    );
    schemas.insert(
        format!("{META}.OwnerReference"),
        json!({
            "description": "OwnerReference contains enough information to let you identify an owning object.",
            "type": "object",
            "required": ["apiVersion", "kind", "name", "uid"],
            "properties": {
                "apiVersion": string("API version of the referent."),
                "blockOwnerDeletion": {"description": "If true, the owner cannot be deleted from the key-value store until this reference is removed.", "type": "boolean"},
                "controller": {"description": "If true, this reference points to the managing controller.", "type": "boolean"},
                "kind": string("Kind of the referent."),
                "name": string("Name of the referent."),
                "uid": string("UID of the referent."),
            },
            "x-kubernetes-map-type": "atomic",
        }),
    );
    schemas.insert(
        format!("{META}.ListMeta"),
        json!({
            "description": "ListMeta describes metadata that synthetic resources must have, including lists and various status objects.",
            "type": "object",
            "properties": {
                "continue": string("continue may be set if the user set a limit on the number of items returned, and indicates that the server has more data available."),
                "remainingItemCount": int64("remainingItemCount is the number of subsequent items in the list which are not included in this list response."),
                "resourceVersion": string("String that identifies the server's internal version of this object that can be used by clients to determine when objects have changed. Read-only."),
                "selfLink": string("Deprecated: selfLink is a legacy read-only field that is no longer populated by the system."),
            },
        }),
    );
    schemas.insert(
        format!("{META}.Status"),
        json!({
            "description": "Status is a return value for calls that don't return other objects.",
            "type": "object",
            "properties": {
                "apiVersion": string(API_VERSION_DOC),
                "code": {"description": "Suggested HTTP return code for this status, 0 if not set.", "type": "integer", "format": "int32"},
                "details": {"description": "Extended data associated with the reason.", "type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "kind": string(KIND_DOC),
                "message": string("A human-readable description of the status of this operation."),
                "metadata": {"description": LIST_METADATA_DOC, "default": {}, "allOf": [reference(&format!("{META}.ListMeta"))]},
                "reason": string("A machine-readable description of why this operation is in the \"Failure\" status."),
                "status": string("Status of the operation. One of: \"Success\" or \"Failure\"."),
            },
        }),
    );
    schemas.insert(
        format!("{META}.DeleteOptions"),
        json!({
            "description": "DeleteOptions may be provided when deleting an API object.",
            "type": "object",
            "properties": {
                "apiVersion": string(API_VERSION_DOC),
                "dryRun": {"description": "When present, indicates that modifications should not be persisted.", "type": "array", "items": {"type": "string", "default": ""}},
                "gracePeriodSeconds": int64("The duration in seconds before the object should be deleted."),
                "kind": string(KIND_DOC),
                "preconditions": {"description": "Must be fulfilled before a deletion is carried out (uid, resourceVersion).", "type": "object", "properties": {"resourceVersion": string("Specifies the target ResourceVersion"), "uid": string("Specifies the target UID.")}},
                "propagationPolicy": string("Whether and how garbage collection will be performed: Orphan, Background or Foreground."),
            },
        }),
    );
    schemas.insert(
        format!("{META}.Patch"),
        json!({
            "description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.",
            "type": "object",
        }),
    );
    schemas
}
