//! The tenant-placer binary: `run` the controller, or print the `crd`s.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tenant_placer::controller::{self, Settings};

#[derive(Parser, Debug)]
#[command(
    name = "tenant-placer",
    version,
    about = "Places tenants on bare-metal nodes by first fit"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the controller against the cluster of the in-cluster config, or else KUBECONFIG.
    Run {
        /// Tenant reconciles running at once.
        #[arg(long, default_value_t = 8, env = "TENANT_PLACER_CONCURRENCY")]
        concurrency: u16,
        /// Seconds between fallback re-checks of a tenant waiting for room (doubles while
        /// nothing changes, up to 15 minutes). Node events re-check sooner.
        #[arg(long, default_value_t = 60)]
        pending_recheck_seconds: u64,
    },
    /// Print the Tenant and Node CRDs as YAML, or write them into a directory.
    Crd {
        /// Write tenant.yaml and node.yaml here instead of printing them.
        #[arg(long)]
        out_dir: Option<PathBuf>,
    },
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .init();
    match Cli::parse().command {
        Command::Run {
            concurrency,
            pending_recheck_seconds,
        } => {
            let client = kube::Client::try_default().await?;
            let settings = Settings {
                concurrency,
                pending_recheck: Duration::from_secs(pending_recheck_seconds),
                ..Settings::default()
            };
            tracing::info!(?settings, "starting tenant-placer");
            controller::run(client, settings).await;
        }
        Command::Crd { out_dir } => {
            for (file, yaml) in tenant_placer::api::crd_yaml()? {
                match &out_dir {
                    Some(dir) => std::fs::write(dir.join(file), yaml)?,
                    None => print!("---\n{yaml}"),
                }
            }
        }
    }
    Ok(())
}
