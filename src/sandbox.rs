//! `tenant-placer sandbox`: the in-memory API served over HTTP on loopback, the CRDs installed,
//! manifests applied, the controller running against it, and a kubeconfig for the real kubectl.
//!
//! Rules enforced here:
//! - plain HTTP without authentication, so a non-loopback address is refused unless asked for;
//! - manifests are read (and refused, naming file and document) before anything starts, and go
//!   through the API as a client's requests would: Nodes first, then everything else;
//! - each applied object carries the `kubectl.kubernetes.io/last-applied-configuration`
//!   annotation that `kubectl apply` would have written, so a later `kubectl apply` of the same
//!   files makes a proper three-way merge;
//! - the kubeconfig names one cluster, user (no credentials) and context, and is current;
//! - the controller's HTTP server (health, metrics and the read-only "Nodes & Capacity" page)
//!   runs on a port of its own, always on loopback, whatever address the API is served on.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::controller::{self, Settings};
use crate::leader::AbortOnDrop;
use crate::manifests::{self, ManifestError};
use crate::serve;
use crate::sim::{Fleet, FleetError, Simulated};

/// The annotation `kubectl apply` keeps its last applied configuration in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The name of the cluster, user and context in the kubeconfig.
pub const CONTEXT: &str = "tenant-placer-sandbox";

/// What `tenant-placer sandbox` was asked for.
#[derive(Clone, Debug)]
pub struct SandboxOptions {
    /// Where to serve the API; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Serve on a non-loopback address anyway (plain HTTP, no authentication).
    pub allow_non_loopback: bool,
    /// Where to write the kubeconfig.
    pub kubeconfig_out: PathBuf,
    /// Manifests to apply once the API is up.
    pub files: Vec<PathBuf>,
    /// How the controller places, orders and records (`run`'s flags).
    pub settings: Settings,
    /// Play the provisioner in-process: NodeRequests become Nodes (`--provisioner simulated`), or
    /// Machines of a simulated Cluster API (`--provisioner cluster-api`).
    pub provisioner: Option<Simulated>,
}

/// Why the sandbox could not start.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "refusing to serve on {0}: the sandbox speaks plain HTTP without authentication, so anyone \
         who can reach it can change anything; use a loopback address (127.0.0.1 or ::1), or pass \
         --allow-non-loopback if you really mean it"
    )]
    NotLoopback(SocketAddr),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(transparent)]
    Fleet(#[from] FleetError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot write the kubeconfig to {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A running sandbox: the API served on `addr`, the controller running. Dropping it stops both.
#[derive(Debug)]
pub struct Sandbox {
    /// The address the API is served on.
    pub addr: SocketAddr,
    /// The API URL clients use (`http://ADDR`; loopback when serving on every address).
    pub url: String,
    /// Where the kubeconfig was written (absolute when it could be made so).
    pub kubeconfig: PathBuf,
    /// The objects applied from the manifests (with the last-applied annotation).
    pub applied: Vec<Value>,
    /// Where the controller's HTTP server listens (loopback): the fleet page, /metrics.
    pub page_addr: SocketAddr,
    /// The fleet page's URL (`http://ADDR/`).
    pub page_url: String,
    /// What the page server shows of the controller (readiness, metrics, the fleet page).
    pub state: serve::State,
    /// The in-memory API.
    pub fleet: Fleet,
    server: JoinHandle<()>,
    // Both stop when the sandbox is dropped (or when `start` fails half-way).
    _controller: AbortOnDrop,
    _page_server: AbortOnDrop,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.server.abort();
        self.fleet.stop();
    }
}

/// Starts the sandbox: checks the address, reads the manifests, installs the CRDs, starts the
/// controller, serves the API, applies the manifests and writes the kubeconfig.
pub async fn start(options: &SandboxOptions) -> Result<Sandbox, SandboxError> {
    if !options.listen.ip().is_loopback() && !options.allow_non_loopback {
        return Err(SandboxError::NotLoopback(options.listen));
    }
    let objects = manifests::read_paths(&options.files)?;
    let fleet = Fleet::new()?;
    // As on a Kubernetes 1.36 cluster with the chart's admission guards.
    fleet.admit_finalizers(options.settings.finalizer);
    // A cluster has the `default` namespace from the start.
    let default_namespace = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}});
    if let Err(status) = fleet.api.create(default_namespace) {
        tracing::warn!(%status, "could not create the default namespace");
    }
    // The controller runs as in `run`, reporting into the handles its HTTP server shows.
    let state = serve::State::new(
        controller::Handles::default(),
        serve::Settings::of(&options.settings),
    );
    // First, so that Cluster API's kinds are served when the controller starts.
    if let Some(provisioner) = options.provisioner.clone() {
        fleet.start_provisioner(provisioner).await?;
    }
    let controller = AbortOnDrop(tokio::spawn(controller::run_with(
        fleet.client.clone(),
        options.settings.clone(),
        state.handles(),
    )));
    let page_listen = SocketAddr::new(loopback_like(options.listen.ip()), 0);
    let page_listener =
        TcpListener::bind(page_listen)
            .await
            .map_err(|source| SandboxError::Listen {
                addr: page_listen,
                source,
            })?;
    let page_addr = page_listener
        .local_addr()
        .map_err(|source| SandboxError::Listen {
            addr: page_listen,
            source,
        })?;
    let page_state = state.clone();
    let page_server = AbortOnDrop(tokio::spawn(async move {
        if let Err(error) = serve::serve_on(page_listener, page_state).await {
            tracing::error!(%error, "the page server stopped");
        }
    }));
    let listener =
        TcpListener::bind(options.listen)
            .await
            .map_err(|source| SandboxError::Listen {
                addr: options.listen,
                source,
            })?;
    let addr = listener
        .local_addr()
        .map_err(|source| SandboxError::Listen {
            addr: options.listen,
            source,
        })?;
    let server = tokio::spawn(inmem_apiserver::server::serve(fleet.api.clone(), listener));
    let objects: Vec<Value> = objects.into_iter().map(with_last_applied).collect();
    // Nodes first, so that first fit sees the whole fleet as the manifests describe it.
    let (nodes, others): (Vec<_>, Vec<_>) =
        objects.iter().cloned().partition(|o| o["kind"] == "Node");
    fleet.apply(&nodes).await?;
    settle(&fleet, !nodes.is_empty()).await;
    fleet.apply(&others).await?;
    // Let the controller place them first, so that its log comes before the instructions.
    settle(&fleet, !others.is_empty()).await;
    let url = format!("http://{}", client_addr(addr));
    let kubeconfig = absolute(&options.kubeconfig_out);
    std::fs::write(&kubeconfig, kubeconfig_yaml(&url)).map_err(|source| {
        SandboxError::Kubeconfig {
            path: kubeconfig.clone(),
            source,
        }
    })?;
    Ok(Sandbox {
        addr,
        url,
        kubeconfig,
        applied: objects,
        page_addr,
        page_url: format!("http://{page_addr}/"),
        state,
        fleet,
        server,
        _controller: controller,
        _page_server: page_server,
    })
}

/// Waits (a little) for the controller to catch up with what was just applied.
async fn settle(fleet: &Fleet, anything_applied: bool) {
    if !anything_applied {
        return;
    }
    if let Err(error) = fleet
        .settle(Duration::from_millis(100), Duration::from_secs(10))
        .await
    {
        tracing::warn!(%error, "the controller is taking long to catch up; going on");
    }
}

/// Runs the sandbox until Ctrl-C (or SIGTERM).
pub async fn run(options: SandboxOptions) -> Result<(), Box<dyn std::error::Error>> {
    let sandbox = start(&options).await?;
    print!("{}", banner(&sandbox, &options));
    stop_signal().await?;
    println!("\nstopped; the sandbox's objects are gone (they lived in memory only)");
    drop(sandbox);
    Ok(())
}

async fn stop_signal() -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            interrupted = tokio::signal::ctrl_c() => interrupted,
            _ = terminate.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await
    }
}

/// What the user is told once the sandbox is up.
pub fn banner(sandbox: &Sandbox, options: &SandboxOptions) -> String {
    let kubeconfig = sandbox.kubeconfig.display();
    let mut counts: Vec<(String, usize)> = Vec::new();
    for object in &sandbox.applied {
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        match counts.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n = n.saturating_add(1),
            None => counts.push((kind, 1)),
        }
    }
    let applied = if counts.is_empty() {
        "nothing (add manifests with -f FILE_OR_DIR, or kubectl apply them)".to_owned()
    } else {
        let kinds: Vec<String> = counts
            .iter()
            .map(|(kind, n)| format!("{n} {kind}{}", if *n == 1 { "" } else { "s" }))
            .collect();
        let from: Vec<String> = options
            .files
            .iter()
            .map(|f| f.display().to_string())
            .collect();
        format!("{} from {}", kinds.join(", "), from.join(", "))
    };
    let exposure = if sandbox.addr.ip().is_loopback() {
        "plain HTTP, no authentication, loopback only"
    } else {
        "plain HTTP, NO AUTHENTICATION, reachable from other machines"
    };
    format!(
        "tenant-placer sandbox: an in-memory Kubernetes API with the tenant-placer controller running against it\n\
         \n\
         API         {url} ({exposure})\n\
         applied     {applied}\n\
         kubeconfig  {kubeconfig}\n\
         page        {page} (Nodes & Capacity: live, read-only; /metrics beside it)\n\
         \n\
         In another terminal:\n\
         \n\
         \x20 export KUBECONFIG={kubeconfig}\n\
         \x20 kubectl get tn -A\n\
         \x20 kubectl get pnodes\n\
         \n\
         Ctrl-C stops it; everything lives in memory and is gone then.\n",
        url = sandbox.url,
        page = sandbox.page_url,
    )
}

/// The loopback address of the same family as `ip`.
fn loopback_like(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
    }
}

/// The address a local client dials: the loopback one when serving on every address.
fn client_addr(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), addr.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), addr.port())
        }
        _ => addr,
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

/// A kubeconfig with one cluster, one user without credentials, and one current context.
pub fn kubeconfig_yaml(server: &str) -> String {
    format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: {CONTEXT}\n\
         \x20 cluster:\n\
         \x20   server: {server}\n\
         users:\n\
         - name: {CONTEXT}\n\
         \x20 user: {{}}\n\
         contexts:\n\
         - name: {CONTEXT}\n\
         \x20 context:\n\
         \x20   cluster: {CONTEXT}\n\
         \x20   user: {CONTEXT}\n\
         \x20   namespace: default\n\
         current-context: {CONTEXT}\n\
         preferences: {{}}\n"
    )
}

/// The object with the annotation `kubectl apply` would have written: the object as applied
/// (without that annotation, with `annotations: {}` left in its place), as compact JSON with
/// sorted keys and a final newline.
pub fn with_last_applied(mut object: Value) -> Value {
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return object;
    };
    let annotations = metadata
        .entry("annotations")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    if !annotations.is_object() {
        *annotations = Value::Object(serde_json::Map::new());
    }
    if let Some(map) = annotations.as_object_mut() {
        map.remove(LAST_APPLIED);
    }
    let mut applied = serde_json::to_string(&object).unwrap_or_default();
    applied.push('\n');
    if let Some(map) = object
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        map.insert(LAST_APPLIED.into(), applied.into());
    }
    object
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use serde_json::json;

    use super::*;

    #[test]
    fn the_last_applied_annotation_is_what_kubectl_writes() {
        let object =
            json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a"}, "spec": {"b": 1}});
        let annotated = with_last_applied(object);
        assert_eq!(
            annotated["metadata"]["annotations"][LAST_APPLIED],
            "{\"apiVersion\":\"v1\",\"kind\":\"X\",\"metadata\":{\"annotations\":{},\"name\":\"a\"},\"spec\":{\"b\":1}}\n"
        );
    }

    #[test]
    fn every_address_is_dialled_on_loopback() {
        let any: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        assert_eq!(client_addr(any).to_string(), "127.0.0.1:8080");
        let v6: SocketAddr = "[::]:80".parse().unwrap();
        assert_eq!(client_addr(v6).to_string(), "[::1]:80");
    }

    #[tokio::test]
    async fn a_non_loopback_address_is_refused_unless_allowed() {
        let options = SandboxOptions {
            listen: "0.0.0.0:0".parse().unwrap(),
            allow_non_loopback: false,
            kubeconfig_out: PathBuf::from("unused"),
            files: Vec::new(),
            settings: Settings::default(),
            provisioner: None,
        };
        let error = start(&options).await.unwrap_err();
        assert!(
            error.to_string().contains("--allow-non-loopback"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn the_page_states_the_policy_the_controller_places_by() {
        let dir = tempfile::tempdir().unwrap();
        let options = SandboxOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            allow_non_loopback: false,
            kubeconfig_out: dir.path().join("kubeconfig"),
            files: Vec::new(),
            settings: Settings {
                policy: placement::Policy::BestFit,
                ..Settings::default()
            },
            provisioner: None,
        };
        let sandbox = start(&options).await.unwrap();
        let page = sandbox.state.page().expect("the sandbox serves its page");
        assert_eq!(page.snapshot().policy.name, "BestFit");
    }
}
