//! The tenant-placer binary: `run` the controller, `simulate` a fleet offline, `plan` its
//! consolidation, serve a `sandbox`, or print the `crd`s.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand};
use tenant_placer::api::{LabelKey, LabelSelector, Node, NodeClass, Tenant};
use tenant_placer::controller::disruption::{Budget, ConsolidationPolicy, Window};
use tenant_placer::controller::{self, Settings};
use tenant_placer::forecast::Forecast;
use tenant_placer::leader::LeaseConfig;
use tenant_placer::report::{ConsolidationReport, FleetReport};
use tenant_placer::sim::invariants::{self, Quiescence};
use tenant_placer::sim::{Fleet, Simulated};
use tenant_placer::telemetry::Traces;
use tenant_placer::{manifests, serve};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

#[derive(Parser, Debug)]
#[command(
    name = "tenant-placer",
    version,
    about = "Places tenants on bare-metal nodes by first fit"
)]
struct Cli {
    /// Log lines for people (text) or for log collectors (json). RUST_LOG filters them.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "TENANT_PLACER_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the controller against the cluster of the in-cluster config, or else KUBECONFIG.
    Run(RunArgs),
    /// Serve an in-memory Kubernetes API on loopback with the controller running against it, for
    /// the real kubectl: no cluster needed.
    Sandbox {
        /// Address to serve on; port 0 picks a free port.
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: std::net::SocketAddr,
        /// Serve on a non-loopback address anyway (plain HTTP, no authentication: anyone who can
        /// reach it can change anything).
        #[arg(long)]
        allow_non_loopback: bool,
        /// Where to write the kubeconfig for kubectl.
        #[arg(long, default_value = "tenant-placer-sandbox.kubeconfig")]
        kubeconfig_out: PathBuf,
        /// Manifest files or directories to apply at start.
        #[arg(short = 'f', long = "filename")]
        files: Vec<PathBuf>,
        #[command(flatten)]
        placement: PlacementArgs,
    },
    /// Plan a fleet offline: apply manifests to an in-process API, run the controller until it is
    /// quiet, and print where every tenant landed and how full each node is.
    Simulate {
        /// Manifest files or directories (Nodes, Tenants). Default: the embedded examples.
        #[arg(short = 'f', long = "filename")]
        files: Vec<PathBuf>,
        /// text (tables and bars), json or yaml.
        #[arg(short, long, value_enum, default_value_t = Output::Text)]
        output: Output,
        #[command(flatten)]
        placement: PlacementArgs,
    },
    /// Plan a rebalance offline: place the fleet as `simulate` does, then print the moves that
    /// would empty the most nodes (BestFit consolidation, whole nodes only) and the nodes they
    /// free. Executes nothing: draining the freed nodes carries it out.
    Plan {
        /// Manifest files or directories (Nodes, Tenants). Default: the embedded examples.
        #[arg(short = 'f', long = "filename")]
        files: Vec<PathBuf>,
        /// text (a table and the drain commands), json or yaml.
        #[arg(short, long, value_enum, default_value_t = Output::Text)]
        output: Output,
        /// How the fleet is placed before the plan is made (the plan itself is BestFit).
        #[command(flatten)]
        placement: PlacementArgs,
    },
    /// Print the Tenant and Node CRDs as YAML, or write them into a directory.
    Crd {
        /// Write tenant.yaml and node.yaml here instead of printing them.
        #[arg(long)]
        out_dir: Option<PathBuf>,
    },
}

/// How the controller places, orders and records: the same for `run` and `sandbox`.
#[derive(clap::Args, Debug)]
struct PlacementArgs {
    /// Tenant reconciles running at once (at least 1).
    #[arg(long, default_value_t = 96, env = "TENANT_PLACER_CONCURRENCY",
          value_parser = clap::value_parser!(u16).range(1..))]
    concurrency: u16,
    /// Seconds between fallback re-checks of a tenant waiting for room (doubles while
    /// nothing changes, up to 15 minutes). Node events re-check sooner. At least 1.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pending_recheck_seconds: u64,
    /// How new tenants are placed: FirstFit, BestFit, LeastLoaded or RoundRobin.
    #[arg(long, default_value_t = placement::Policy::FirstFit, env = "TENANT_PLACER_POLICY")]
    policy: placement::Policy,
    /// Do not put the reservation finalizer on Tenants: one write less per tenant. A delete is
    /// then released from its watch event, and a delete the controller missed (it was down) by
    /// the periodic node sweep instead of blocking the delete.
    #[arg(long, env = "TENANT_PLACER_NO_FINALIZER")]
    no_finalizer: bool,
    /// Events on Tenants: Problems (the default: Pending, ResizeBlocked, ReservationLost,
    /// ReservationRestored, DuplicateReleased and failures) or All (also every placement, resize
    /// and release: one write more per placement).
    #[arg(long, value_enum, default_value_t = controller::EventLevel::Problems, env = "TENANT_PLACER_EVENTS")]
    events: controller::EventLevel,
    /// Order of waiting tenants: BestEffortFIFO (oldest first; one that fits nowhere does not
    /// block younger ones) or StrictFIFO (nothing younger passes the oldest waiting tenant).
    #[arg(long, default_value_t = placement::QueueMode::BestEffortFifo, env = "TENANT_PLACER_QUEUE")]
    queue: placement::QueueMode,
    /// Node changes are judged for waiting tenants at most once per this many milliseconds
    /// (at least 1).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    requeue_window_ms: u64,
    /// Seconds between sweeps of every node for orphaned entries and stale totals (at least 1).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    orphan_sweep_seconds: u64,
    /// Moves off draining nodes in flight at once, at most (at least 1).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..), env = "TENANT_PLACER_MAX_MIGRATIONS")]
    max_migrations: u16,
    /// A tenant waiting for capacity this many seconds gets a NodeRequest for a NodeClass that
    /// can hold it; 0 requests nothing.
    #[arg(
        long,
        default_value_t = 60,
        env = "TENANT_PLACER_REQUEST_AFTER_SECONDS"
    )]
    request_after_seconds: u64,
    /// A Node made for a NodeRequest that has held nothing this many seconds is handed back (its
    /// request deleted; the provisioner removes the machine). At least 1.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..), env = "TENANT_PLACER_EMPTY_NODE_SECONDS")]
    empty_node_seconds: u64,
    /// What is done with nodes the controller could do without: `Never` (not even an empty
    /// bought machine goes back), `WhenEmpty` (an empty bought machine goes back after
    /// --empty-node-seconds), `WhenUnderutilized` (also drain the bought nodes the rebalance
    /// plan can empty, make-before-break, then hand them back).
    #[arg(long, value_enum, default_value_t = ConsolidationPolicy::WhenEmpty, env = "TENANT_PLACER_CONSOLIDATION")]
    consolidation: ConsolidationPolicy,
    /// With WhenUnderutilized: seconds a node must stay freeable before it is drained.
    #[arg(long, default_value_t = 300, allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(0..), env = "TENANT_PLACER_CONSOLIDATE_AFTER_SECONDS")]
    consolidate_after_seconds: i64,
    /// With WhenUnderutilized: consolidate registered nodes too (left Draining once empty, their
    /// Drained condition True: nobody can sell them back).
    #[arg(long, env = "TENANT_PLACER_CONSOLIDATE_REGISTERED")]
    consolidate_registered: bool,
    /// Nodes of the pool consolidation empties at once, at most: a count (`2`) or a share of
    /// the pool's nodes (`10%`, rounded up). A person's drain is not counted.
    #[arg(long, default_value = "10%", env = "TENANT_PLACER_DISRUPTION_BUDGET")]
    disruption_budget: Budget,
    /// When consolidation may drain: a cron schedule of five fields in UTC and how long each
    /// opening lasts, e.g. "0 22 * * mon-fri 8h" (repeatable; none: always).
    #[arg(long)]
    disruption_schedule: Vec<Window>,
    /// A tenant that fits on no node, but would on one if at most this many smaller tenants there
    /// moved to other nodes with room, gets those moves (make-before-break, within the budget and
    /// windows) before any machine is bought for it. 0: never. Runs in the purchase look
    /// (--request-after-seconds above 0).
    #[arg(long, default_value_t = 4, env = "TENANT_PLACER_MAKE_ROOM_MOVES")]
    make_room_moves: u16,
    /// Limit this controller to a pool of Nodes: a label selector (`pool=eu,tier!=gold`). Only
    /// these Nodes are watched, placed on and written, and only NodeClasses whose Nodes match
    /// are bought. Unset: every Node.
    #[arg(long, env = "TENANT_PLACER_NODE_SELECTOR")]
    node_selector: Option<LabelSelector>,
    /// Limit this controller to a pool of Tenants: a label selector. Only these Tenants are
    /// watched, placed and written; an entry of another tenant is never released. Unset: every
    /// Tenant.
    #[arg(long, env = "TENANT_PLACER_TENANT_SELECTOR")]
    tenant_selector: Option<LabelSelector>,
    /// The Node label whose value names a node's zone, for tenants with `spread: Zones`: a label
    /// key (an optional DNS prefix and `/`, then a name of at most 63 characters)
    /// [default: topology.kubernetes.io/zone].
    #[arg(long, value_name = "KEY")]
    zone_label: Option<LabelKey>,
    /// Register nodes from the cluster: keep one placement Node per core Node matching this
    /// label selector (e.g. `tenant-placer.dev/pool=bare-metal`), of the same name, its capacity
    /// from the core Node's allocatable, its state from Ready and cordon, its labels the core
    /// Node's plus placement.tenant-placer.dev/registered=true; a core Node deleted or no longer
    /// matching deletes (drains) it. Placement Nodes made otherwise are never touched. Unset or
    /// empty: off.
    #[arg(long, env = "TENANT_PLACER_REGISTER_NODES")]
    register_nodes: Option<LabelSelector>,
    /// Play the provisioner in-process: `cluster-api` buys through the MachineDeployment each
    /// NodeClass names (`spec.clusterAPI`; in simulate, plan and sandbox a simulated Cluster API
    /// plays its part); `simulated` (simulate, plan and sandbox only) turns each NodeRequest
    /// into a Node after --provisioner-delay-ms.
    #[arg(long, value_enum, env = "TENANT_PLACER_PROVISIONER")]
    provisioner: Option<ProvisionerKind>,
    /// With `--provisioner cluster-api`: a request whose Machine is not Running this many
    /// seconds after it was made fails (at least 1).
    #[arg(long, default_value_t = 1800, value_parser = clap::value_parser!(u64).range(1..), env = "TENANT_PLACER_PROVISIONING_TIMEOUT_SECONDS")]
    provisioning_timeout_seconds: u64,
    /// How long the simulated provisioner (or simulated Cluster API) takes to deliver a machine
    /// [default: 2000].
    #[arg(long)]
    provisioner_delay_ms: Option<u64>,
    /// Classes whose requests the simulated provisioner fails (comma-separated), to watch the
    /// controller plan on another class.
    #[arg(long, value_delimiter = ',')]
    provisioner_fails: Vec<String>,
}

/// Who provisions machines for NodeRequests, when tenant-placer plays the part itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ProvisionerKind {
    /// An in-process provisioner that delivers a Node after a delay.
    Simulated,
    /// Cluster API: scale the MachineDeployment a NodeClass names and claim its new Machine.
    #[value(name = "cluster-api")]
    ClusterApi,
}

impl PlacementArgs {
    /// The settings in force, as flags would give them: what `simulate` says it used. Every
    /// flag that can change where tenants land, what is bought or what is moved is named, at
    /// its default too; a flag that is off by default only when it is on.
    fn describe(&self) -> String {
        format!(
            "--policy {} --queue {} --events {} --requeue-window-ms {} \
             --pending-recheck-seconds {} --orphan-sweep-seconds {} --max-migrations {} \
             --request-after-seconds {} --empty-node-seconds {} --concurrency {}{}{}{}{}",
            self.policy,
            self.queue,
            match self.events {
                controller::EventLevel::All => "All",
                controller::EventLevel::Problems => "Problems",
            },
            self.requeue_window_ms,
            self.pending_recheck_seconds,
            self.orphan_sweep_seconds,
            self.max_migrations,
            self.request_after_seconds,
            self.empty_node_seconds,
            self.concurrency,
            if self.no_finalizer {
                " --no-finalizer"
            } else {
                ""
            },
            self.disruption_flags(),
            self.provisioner_flags(),
            self.pool(),
        )
    }

    /// The consolidation, disruption and make-room flags (make-room moves within the same
    /// budget and windows as consolidation, so they count whatever `--consolidation` is).
    fn disruption_flags(&self) -> String {
        let mut flags = format!(
            " --consolidation {:?} --consolidate-after-seconds {}",
            self.consolidation, self.consolidate_after_seconds
        );
        if self.consolidate_registered {
            flags.push_str(" --consolidate-registered");
        }
        flags.push_str(&format!(" --disruption-budget {}", self.disruption_budget));
        for window in &self.disruption_schedule {
            flags.push_str(&format!(" --disruption-schedule '{window}'"));
        }
        flags.push_str(&format!(" --make-room-moves {}", self.make_room_moves));
        flags
    }

    /// The provisioner flags, when one plays in-process (in `simulate` and `plan` Cluster API is
    /// simulated too, and takes the same delay).
    fn provisioner_flags(&self) -> String {
        let mut flags = match self.provisioner {
            Some(ProvisionerKind::Simulated) => format!(
                " --provisioner simulated --provisioner-delay-ms {}",
                self.provisioner_delay()
            ),
            Some(ProvisionerKind::ClusterApi) => format!(
                " --provisioner cluster-api --provisioning-timeout-seconds {} \
                 --provisioner-delay-ms {}",
                self.provisioning_timeout_seconds,
                self.provisioner_delay()
            ),
            None => return String::new(),
        };
        if !self.provisioner_fails.is_empty() {
            flags.push_str(&format!(
                " --provisioner-fails {}",
                self.provisioner_fails.join(",")
            ));
        }
        flags
    }

    /// The selector flags in force (pools, registration, the zone label), as they would be
    /// typed (empty when none is set).
    fn pool(&self) -> String {
        let mut flags = String::new();
        for (flag, selector) in [
            ("--node-selector", self.node_selector()),
            ("--tenant-selector", self.tenant_selector()),
            ("--register-nodes", self.register_nodes()),
        ] {
            if let Some(selector) = selector {
                flags.push_str(&format!(" {flag} '{selector}'"));
            }
        }
        if let Some(key) = &self.zone_label {
            flags.push_str(&format!(" --zone-label {key}"));
        }
        flags
    }

    /// The node selector, unless it is unset or empty (both take every Node).
    fn node_selector(&self) -> Option<LabelSelector> {
        self.node_selector.clone().filter(|s| !s.is_everything())
    }

    /// The registration selector, unless it is unset or empty (both register nothing: an empty
    /// selector would take every core Node, which is never what an empty chart value means).
    fn register_nodes(&self) -> Option<LabelSelector> {
        self.register_nodes.clone().filter(|s| !s.is_everything())
    }

    /// The tenant selector, unless it is unset or empty (both take every Tenant).
    fn tenant_selector(&self) -> Option<LabelSelector> {
        self.tenant_selector.clone().filter(|s| !s.is_everything())
    }

    fn settings(&self) -> Settings {
        Settings {
            concurrency: self.concurrency,
            pending_recheck: Duration::from_secs(self.pending_recheck_seconds),
            policy: self.policy,
            finalizer: !self.no_finalizer,
            events: self.events,
            queue: self.queue,
            requeue_window: Duration::from_millis(self.requeue_window_ms),
            orphan_sweep: Duration::from_secs(self.orphan_sweep_seconds),
            max_migrations: self.max_migrations,
            zone_label: self.zone_label.as_ref().map(|key| key.as_str().into()),
            request_after: (self.request_after_seconds > 0)
                .then(|| Duration::from_secs(self.request_after_seconds)),
            empty_node_after: Duration::from_secs(self.empty_node_seconds),
            pool_nodes: self.node_selector(),
            pool_tenants: self.tenant_selector(),
            register_nodes: self.register_nodes(),
            cluster_api: self.provisioner == Some(ProvisionerKind::ClusterApi),
            provisioning_timeout: Duration::from_secs(self.provisioning_timeout_seconds),
            consolidation: self.consolidation,
            consolidate_after: Duration::from_secs(
                u64::try_from(self.consolidate_after_seconds).unwrap_or(0),
            ),
            consolidate_registered: self.consolidate_registered,
            disruption_budget: self.disruption_budget,
            disruption_schedule: self.disruption_schedule.clone(),
            make_room_moves: self.make_room_moves,
            ..Settings::default()
        }
    }

    /// The Node label naming zones: `--zone-label`, else `topology.kubernetes.io/zone`.
    fn zone_label(&self) -> &str {
        self.zone_label
            .as_ref()
            .map_or(tenant_placer::api::ZONE_LABEL, LabelKey::as_str)
    }

    /// How long the simulated provisioner takes, in milliseconds.
    fn provisioner_delay(&self) -> u64 {
        self.provisioner_delay_ms.unwrap_or(2000)
    }

    /// The simulated provisioner these flags ask for, if any: the contract played directly, or
    /// a simulated Cluster API for `--provisioner cluster-api` (each Machine phase a third of the
    /// delay).
    fn provisioner(&self) -> Option<Simulated> {
        let delay = Duration::from_millis(self.provisioner_delay());
        let failing = self.provisioner_fails.iter().cloned().collect();
        match self.provisioner? {
            ProvisionerKind::Simulated => Some(Simulated::Contract(
                tenant_placer::sim::provisioner::ProvisionerConfig {
                    delay,
                    failing,
                    every: Duration::from_millis(100),
                    short: Default::default(),
                },
            )),
            ProvisionerKind::ClusterApi => Some(Simulated::ClusterApi(
                tenant_placer::sim::capi::CapiSimConfig {
                    step: delay.checked_div(3).unwrap_or_default(),
                    every: Duration::from_millis(100),
                    failing_classes: failing,
                    ..Default::default()
                },
            )),
        }
    }
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    placement: PlacementArgs,
    /// Where to serve /healthz, /readyz and /metrics.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: std::net::SocketAddr,
    /// Reconcile only while holding the leader Lease (for more than one replica).
    #[arg(long)]
    leader_election: bool,
    /// The leader Lease's name.
    #[arg(long, default_value = "tenant-placer")]
    lease_name: String,
    /// The leader Lease's namespace (in a Pod: its own, from the downward API).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    lease_namespace: String,
    /// This replica's identity in the Lease and in Events (in a Pod: its name).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Do not serve the read-only fleet page (/, /api/fleet) on the metrics address.
    #[arg(long)]
    no_page: bool,
    /// API requests waiting on the server at once (at least 1); the others queue in the
    /// controller. Each holds an HTTP/1.1 connection and its buffers while it waits.
    #[arg(long, default_value_t = 16, env = "TENANT_PLACER_REQUESTS_IN_FLIGHT",
          value_parser = clap::value_parser!(u16).range(1..))]
    requests_in_flight: u16,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LogFormat {
    Text,
    Json,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum Output {
    Text,
    Json,
    Yaml,
}

fn main() -> std::process::ExitCode {
    // Before the runtime starts any thread: glibc gives each new thread that contends its own
    // arena otherwise.
    one_malloc_arena();
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the async runtime: {e}").into())
        .and_then(|runtime| runtime.block_on(main_result()));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Holds glibc's malloc to one arena, as `MALLOC_ARENA_MAX=1` would: the controller's threads
/// rarely contend, and glibc gives each runtime worker an arena of its own that keeps what was
/// freed (docs/performance.md, "One malloc arena"). The environment variable, when set, is read
/// by glibc first; this call then sets the same bound.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn one_malloc_arena() {
    // SAFETY: mallopt only sets a malloc tunable; M_ARENA_MAX takes any positive int, and it is
    // called before this process starts a second thread. Its 0 (refused) result leaves malloc
    // as it was, which is only more memory, so it is not checked.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Other C libraries (musl) have one allocator state and no arenas to bound.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn one_malloc_arena() {}

/// Why `run` refuses the simulated provisioner's flags.
const SIMULATED_PROVISIONER_ONLY: &str = "--provisioner simulated, --provisioner-delay-ms and \
    --provisioner-fails are not taken by \
    `run`: the simulated provisioner only plays in `sandbox`, `simulate` and `plan`, in-process \
    against their in-memory API. On a cluster, `--provisioner cluster-api` buys through Cluster \
    API, or another provisioner turns NodeRequests into machines apart; then `run` only asks \
    for them.";

async fn main_result() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    // NB: `run` would accept them and do nothing: no Node would ever come of a request.
    if let Command::Run(RunArgs { placement, .. }) = &cli.command
        && (placement.provisioner == Some(ProvisionerKind::Simulated)
            || placement.provisioner_delay_ms.is_some()
            || !placement.provisioner_fails.is_empty())
    {
        Cli::command()
            .error(ErrorKind::ArgumentConflict, SIMULATED_PROVISIONER_ONLY)
            .exit();
    }
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,kube=warn".into());
    // Traces only when a collector is named: unset, no layer and no cost.
    let traces = Traces::endpoint_from_env()
        .map(|endpoint| Traces::to(&endpoint))
        .transpose()?;
    // Logs go to stderr: stdout is `simulate`'s and `crd`'s output (JSON or YAML in scripts).
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let subscriber = tracing_subscriber::registry().with(filter);
    match cli.log_format {
        LogFormat::Text => subscriber
            .with(logs)
            .with(traces.as_ref().map(Traces::layer))
            .init(),
        LogFormat::Json => subscriber
            .with(logs.json())
            .with(traces.as_ref().map(Traces::layer))
            .init(),
    }
    match cli.command {
        Command::Run(args) => run(args).await?,
        Command::Simulate {
            files,
            output,
            placement,
        } => simulate(&files, output, &placement).await?,
        Command::Plan {
            files,
            output,
            placement,
        } => plan(&files, output, &placement).await?,
        Command::Sandbox {
            listen,
            allow_non_loopback,
            kubeconfig_out,
            files,
            placement,
        } => {
            let options = tenant_placer::sandbox::SandboxOptions {
                listen,
                allow_non_loopback,
                kubeconfig_out,
                files,
                settings: placement.settings(),
                provisioner: placement.provisioner(),
            };
            tenant_placer::sandbox::run(options).await?
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

async fn run(args: RunArgs) -> Result<(), Box<dyn std::error::Error>> {
    let mut config = kube::Config::infer().await?;
    // A write without `fieldManager` is recorded in managedFields under the User-Agent's product
    // (the API server's `managerOrUserAgent`), and kube sends no User-Agent: without this the
    // controller's entries would name no manager at all.
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(concat!("tenant-placer/", env!("CARGO_PKG_VERSION"))),
    ));
    let client = tenant_placer::client::client(config, usize::from(args.requests_in_flight))?;
    let identity = args
        .identity
        .unwrap_or_else(|| format!("tenant-placer-{:08x}", fastrand::u32(..)));
    let leader_election = args
        .leader_election
        .then(|| LeaseConfig::new(args.lease_name, args.lease_namespace, identity.clone()));
    let settings = Settings {
        leader_election,
        instance: Some(identity),
        ..args.placement.settings()
    };
    tracing::info!(?settings, "starting tenant-placer");
    // The controller reports into the handles; the server shows them.
    let handles = controller::Handles::default();
    let state = serve::State::new(
        handles.clone(),
        serve::Settings {
            page: !args.no_page,
            ..serve::Settings::of(&settings)
        },
    );
    let server = serve::serve(args.metrics_addr, state);
    // NB: a task of its own on the runtime's workers, not a future the main thread polls: the
    // connections run on the workers, and each answer from the API woke the main thread (a
    // futex wake and a context switch per request; as a task, about a fifth less CPU).
    let controllers = tokio::spawn(controller::run_with(client, settings, handles));
    tokio::select! {
        finished = controllers => finished.map_err(|e| format!("the controllers stopped: {e}").into()),
        served = server => Err(format!("the metrics server on {} stopped: {served:?}", args.metrics_addr).into()),
    }
}

/// A fleet as the controller leaves it: the objects at rest and the invariants checked on them.
struct Settled {
    nodes: Vec<Node>,
    tenants: Vec<Tenant>,
    classes: Vec<NodeClass>,
    checked: Result<(), Vec<String>>,
    /// What the controller counted while it ran.
    metrics: std::sync::Arc<tenant_placer::metrics::Metrics>,
}

/// The in-process fleet `simulate` and `plan` start from: the manifests (default: the embedded
/// examples) applied to an in-memory API, Nodes first, with the controller running under the
/// placement flags until it is quiet.
async fn settle(
    files: &[PathBuf],
    placement: &PlacementArgs,
) -> Result<Settled, Box<dyn std::error::Error>> {
    let manifests = if files.is_empty() {
        let mut manifests = Vec::new();
        for (name, text) in manifests::EMBEDDED_EXAMPLES {
            manifests.extend(manifests::parse_manifests(Path::new(name), text)?);
        }
        manifests
    } else {
        manifests::read_manifests(files)?
    };
    let settings = placement.settings();
    // With a provisioner, quiet means also that no tenant is about to be planned for: wait past
    // the request delay and one look of the capacity tick.
    // Without one, the capacity tick's looks still make room and consolidate: wait for two.
    let purchase_wait = match (placement.provisioner.is_some(), settings.request_after) {
        (true, Some(after)) => after.saturating_add(settings.request_check.saturating_mul(2)),
        (false, Some(_)) => settings.request_check.saturating_mul(2),
        (_, None) => Duration::ZERO,
    };
    let fleet = Fleet::new()?;
    // As on a cluster with the chart's admission guards.
    fleet.admit_finalizers(settings.finalizer);
    // First, so that Cluster API's kinds are served when the controller starts.
    if let Some(provisioner) = placement.provisioner() {
        fleet.start_provisioner(provisioner).await?;
    }
    let handles = controller::Handles::default();
    let metrics = handles.metrics.clone();
    // The invariants hold over the pool the controller serves: a node or tenant outside it is
    // another controller's (`--node-selector`, `--tenant-selector`).
    let (pool_nodes, pool_tenants) = (settings.pool_nodes.clone(), settings.pool_tenants.clone());
    fleet.start_with(settings, handles);
    // Nodes first, so that first fit sees the whole fleet as the manifests describe it.
    let (nodes, others): (Vec<_>, Vec<_>) = manifests
        .into_iter()
        .partition(|m| m.object["kind"] == "Node");
    for (batch, idle) in [(nodes, 200), (others, 300)] {
        let idle = Duration::from_millis(idle).max(purchase_wait);
        for manifest in &batch {
            fleet
                .apply(std::slice::from_ref(&manifest.object))
                .await
                .map_err(|refused| manifest.error(refused))?;
        }
        fleet.settle(idle, Duration::from_secs(300)).await?;
    }
    fleet.stop();
    let (nodes, tenants) = (fleet.nodes(), fleet.tenants());
    // What the API holds but the types cannot: it could be neither placed nor reported.
    if let Some(unreadable) = fleet.undecodable().first() {
        return Err(format!("the API holds an object simulate cannot read: {unreadable}").into());
    }
    let in_pool = |pool: &Option<tenant_placer::api::LabelSelector>, labels| {
        pool.as_ref().is_none_or(|p| p.matches(labels))
    };
    let pool_nodes: Vec<_> = nodes
        .iter()
        .filter(|n| in_pool(&pool_nodes, kube::ResourceExt::labels(*n)))
        .cloned()
        .collect();
    let pool_tenants: Vec<_> = tenants
        .iter()
        .filter(|t| in_pool(&pool_tenants, kube::ResourceExt::labels(*t)))
        .cloned()
        .collect();
    let checked = invariants::check_zoned(
        &pool_nodes,
        &pool_tenants,
        &HashSet::new(),
        Quiescence::Settled,
        placement.zone_label(),
    );
    let classes = fleet
        .api
        .list(tenant_placer::api::GROUP, "nodeclasses")
        .into_iter()
        .filter_map(|class| serde_json::from_value(class).ok())
        .collect();
    Ok(Settled {
        nodes,
        tenants,
        classes,
        checked,
        metrics,
    })
}

async fn simulate(
    files: &[PathBuf],
    output: Output,
    placement: &PlacementArgs,
) -> Result<(), Box<dyn std::error::Error>> {
    let Settled {
        nodes,
        tenants,
        checked,
        metrics,
        ..
    } = settle(files, placement).await?;
    let report = FleetReport::new(&nodes, &tenants, placement.zone_label());
    match output {
        Output::Text => {
            println!("settings: {}\n", placement.describe());
            print!("{}", report.render_text());
            let (drained, handed_back, moved) = (
                metrics.consolidation_actions("drain"),
                metrics.consolidation_actions("hand_back"),
                metrics.make_room_moves(),
            );
            if placement.consolidation == ConsolidationPolicy::WhenUnderutilized || moved > 0 {
                println!(
                    "\nconsolidation and make-room during the run: {drained} node(s) drained, \
                     {handed_back} handed back; {moved} tenant(s) moved to make room"
                );
            }
            match &checked {
                Ok(()) => println!(
                    "\ninvariants: ok (no node over capacity, every status agrees with its node)"
                ),
                Err(violations) => {
                    println!("\ninvariants: VIOLATED\n  {}", violations.join("\n  "))
                }
            }
        }
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Output::Yaml => print!("{}", serde_saphyr::to_string(&report)?),
    }
    checked.map_err(|violations| format!("{} invariant violations", violations.len()).into())
}

/// `simulate`'s fleet, then its consolidation: printed, never executed.
async fn plan(
    files: &[PathBuf],
    output: Output,
    placement: &PlacementArgs,
) -> Result<(), Box<dyn std::error::Error>> {
    let settled = settle(files, placement).await?;
    if let Err(violations) = &settled.checked {
        return Err(format!(
            "the simulated fleet breaks {} invariant(s), so no plan is made:\n  {}",
            violations.len(),
            violations.join("\n  ")
        )
        .into());
    }
    let report = ConsolidationReport::new(&settled.nodes, &settled.tenants)?;
    let disruption = Forecast::new(
        &settled.nodes,
        &settled.tenants,
        &settled.classes,
        &placement.settings(),
        k8s_openapi::jiff::Timestamp::now(),
    )?;
    // The rebalance report's fields, and what consolidation and make-room would do.
    let mut both = serde_json::to_value(&report)?;
    both["disruption"] = serde_json::to_value(&disruption)?;
    match output {
        Output::Text => {
            println!("settings: {}\n", placement.describe());
            print!("{}", report.render_text());
            print!("\n{}", disruption.render_text());
        }
        Output::Json => println!("{}", serde_json::to_string_pretty(&both)?),
        Output::Yaml => print!("{}", serde_saphyr::to_string(&both)?),
    }
    Ok(())
}
