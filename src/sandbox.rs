//! `tenant-placer sandbox`: the in-memory API served over HTTP on loopback, the CRDs installed,
//! manifests applied, the controller running against it, and a kubeconfig for the real kubectl.

use std::net::SocketAddr;
use std::path::PathBuf;

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
}

/// Runs the sandbox until Ctrl-C.
pub async fn run(options: SandboxOptions) -> Result<(), Box<dyn std::error::Error>> {
    Err(format!("sandbox is not built yet ({options:?})").into())
}
