//! The one error type. Each variant names what was being done; `label()` is a short metric label.

use kube::core::Status;

/// Everything that can fail in the controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("tenant {tenant} has no metadata.uid")]
    MissingUid { tenant: String },

    #[error("reading node {node}: {source}")]
    ReadNode { node: String, source: kube::Error },

    #[error("reading tenant {tenant}: {source}")]
    ReadTenant { tenant: String, source: kube::Error },

    #[error("writing the status of node {node}: {source}")]
    WriteNodeStatus {
        node: String,
        source: std::sync::Arc<kube::Error>,
    },

    #[error("node {node} kept changing under us: {attempts} conflicting writes in a row")]
    ConflictRetriesExhausted { node: String, attempts: u32 },

    #[error("node {node} cannot be read: {reason}; its reservations are kept until it is fixed")]
    UnreadableNode { node: String, reason: String },

    #[error("gave up after {writes} node writes for tenant {tenant} without settling")]
    TooManyWrites { tenant: String, writes: u32 },

    #[error("writing the status of tenant {tenant}: {source}")]
    WriteTenantStatus { tenant: String, source: kube::Error },

    #[error("adding the finalizer to tenant {tenant}: {source}")]
    AddFinalizer { tenant: String, source: kube::Error },

    #[error("removing the finalizer from tenant {tenant}: {source}")]
    RemoveFinalizer { tenant: String, source: kube::Error },

    #[error("updating the reservations finalizer of node {node}: {source}")]
    NodeFinalizer { node: String, source: kube::Error },

    #[error("tenant {tenant} was released (deleted) while its decision waited")]
    TenantReleased { tenant: String },

    #[error("the node cache stopped before it was ready")]
    CacheClosed,

    #[error("creating or deleting node request {request}: {source}")]
    NodeRequest {
        request: String,
        source: kube::Error,
    },

    #[error("the placement engine has stopped (the controller is shutting down or lost its lease)")]
    EngineStopped,
}

impl Error {
    /// A short label for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Error::MissingUid { .. } => "missing_uid",
            Error::ReadNode { .. } => "read_node",
            Error::ReadTenant { .. } => "read_tenant",
            Error::WriteNodeStatus { .. } => "write_node_status",
            Error::ConflictRetriesExhausted { .. } => "conflict_retries_exhausted",
            Error::UnreadableNode { .. } => "unreadable_node",
            Error::TooManyWrites { .. } => "too_many_writes",
            Error::WriteTenantStatus { .. } => "write_tenant_status",
            Error::AddFinalizer { .. } => "add_finalizer",
            Error::RemoveFinalizer { .. } => "remove_finalizer",
            Error::NodeFinalizer { .. } => "node_finalizer",
            Error::TenantReleased { .. } => "tenant_released",
            Error::CacheClosed => "cache_closed",
            Error::EngineStopped => "engine_stopped",
            Error::NodeRequest { .. } => "node_request",
        }
    }
}

/// The apiserver's answer when a kube call failed with a Status, if it did.
pub fn api_status(error: &kube::Error) -> Option<&Status> {
    match error {
        kube::Error::Api(status) => Some(status),
        _ => None,
    }
}

/// 409 Conflict: the object changed since the resourceVersion we sent.
pub fn is_conflict(error: &kube::Error) -> bool {
    api_status(error).is_some_and(|s| s.is_conflict())
}

/// 404 Not Found.
pub fn is_not_found(error: &kube::Error) -> bool {
    api_status(error).is_some_and(|s| s.is_not_found())
}
