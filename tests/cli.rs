//! The command line refuses settings that mean nothing, before anything starts; `run` speaks
//! to an API server over HTTP as itself.
#![allow(clippy::expect_used)]

use std::process::Command;

fn tenant_placer(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tenant-placer"))
        .args(args)
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .expect("the binary runs")
}

#[test]
fn zero_or_negative_windows_intervals_and_concurrency_are_refused_with_the_flag_named() {
    let cases = [
        ("--concurrency", "0"),
        ("--requeue-window-ms", "0"),
        ("--pending-recheck-seconds", "0"),
        ("--orphan-sweep-seconds", "0"),
        ("--requeue-window-ms", "-5"),
    ];
    let commands = ["run", "sandbox"].map(|command| (command, &cases[..]));
    // Only `run` speaks to a server of its own.
    let run_only = [("--requests-in-flight", "0")];
    for (command, cases) in commands.into_iter().chain([("run", &run_only[..])]) {
        for &(flag, value) in cases {
            let out = tenant_placer(&[command, &format!("{flag}={value}")]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{command} {flag}={value}: {stderr}"
            );
            assert!(
                stderr.contains(&format!("invalid value '{value}' for '{flag}")),
                "{command} {flag}={value}: {stderr}"
            );
        }
    }
}

#[test]
fn a_selector_the_api_server_would_refuse_is_refused_with_the_flag_named() {
    for (flag, value) in [
        ("--node-selector", "pool in eu"),
        ("--tenant-selector", "=eu"),
        ("--register-nodes", "pool in metal"),
    ] {
        let out = tenant_placer(&["run", flag, value]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(
            stderr.contains(&format!("invalid value '{value}' for '{flag}")),
            "{flag} {value}: {stderr}"
        );
    }
}

#[test]
fn a_zone_label_that_is_not_a_label_key_is_refused_with_the_flag_named() {
    // (value, what the message says)
    let cases = [
        ("topology.kubernetes.io/", "its name part is empty"),
        ("Topology.io/zone", "its prefix must be a DNS subdomain"),
        ("zone name", "its name part must consist of"),
    ];
    for command in ["run", "sandbox", "simulate", "plan"] {
        for (value, why) in cases {
            let out = tenant_placer(&[command, "--zone-label", value]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{command} {value}: {stderr}");
            assert!(
                stderr.contains(&format!("invalid value '{value}' for '--zone-label <KEY>'"))
                    && stderr.contains(why),
                "{command} {value}: {stderr}"
            );
        }
    }
    // 64 characters in the name part: one too many.
    let long = "z".repeat(64);
    let out = tenant_placer(&["run", "--zone-label", &long]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("its name part is 64 characters, at most 63 are allowed"),
        "{stderr}"
    );
}

#[test]
fn simulate_says_which_pool_it_placed_when_selectors_are_set() {
    let out = tenant_placer(&[
        "simulate",
        "--node-selector",
        "pool=eu,tier!=gold",
        "--tenant-selector",
        "pool=eu",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let settings = stdout.lines().next().unwrap_or_default();
    assert!(
        settings.ends_with("--node-selector 'pool=eu,tier!=gold' --tenant-selector 'pool=eu'"),
        "{settings}"
    );
    let plain = tenant_placer(&["simulate"]);
    let plain = String::from_utf8_lossy(&plain.stdout);
    assert!(!plain.contains("selector"), "{plain}");
}

#[test]
fn simulate_registers_the_labelled_core_nodes_of_its_manifests_and_places_on_them() {
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
    let out = tenant_placer(&[
        "simulate",
        "-f",
        &format!("{examples}/registered"),
        "-f",
        &format!("{examples}/tenants.yaml"),
        "--register-nodes",
        "tenant-placer.dev/pool=bare-metal",
        "--output",
        "json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    let nodes: Vec<(String, String)> = report["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| (n["node"].to_string(), n["state"].to_string()))
        .collect();
    // control-plane-1 carries no pool label: not registered. metal-eu-2 is cordoned.
    assert_eq!(
        nodes,
        [
            ("\"metal-eu-1\"".to_owned(), "\"Online\"".to_owned()),
            ("\"metal-eu-2\"".to_owned(), "\"Cordoned\"".to_owned())
        ],
        "{report:#}"
    );
    let acme = report["tenants"]
        .as_array()
        .expect("tenants")
        .iter()
        .find(|t| t["tenant"] == "default/acme")
        .expect("acme");
    assert_eq!(acme["node"], "metal-eu-1", "{acme:#}");
}

#[test]
fn run_refuses_the_simulated_provisioner_which_only_plays_in_sandbox_and_simulate() {
    for args in [
        &["run", "--provisioner", "simulated"][..],
        &["run", "--provisioner-fails", "big"][..],
        &["run", "--provisioner-delay-ms", "10"][..],
    ] {
        let out = tenant_placer(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        for said in [
            "not taken by `run`",
            "only plays in `sandbox`, `simulate` and `plan`",
            "or another provisioner turns NodeRequests into machines apart",
        ] {
            assert!(stderr.contains(said), "{args:?}: {said:?} not in {stderr}");
        }
    }
}

/// `run` against an API server over HTTP, as the image runs it: a real API server records a
/// write without `fieldManager` under its User-Agent's product, so the controller's status
/// writes must say who they are (kube sends no User-Agent of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_names_itself_as_the_manager_of_the_status_it_writes() {
    use tenant_placer::{api::GROUP, testing};
    let fleet = tenant_placer::sim::Fleet::new().expect("the CRDs install");
    let api = fleet.api.clone();
    api.set_managed_fields(true);
    let node = testing::node("node-a").capacity(8, 32, 100);
    api.apply_by("kubectl", node.manifest())
        .expect("the node is created");
    let tenant = testing::tenant("acme").resources(1, 1, 1);
    api.apply_by("kubectl", tenant.manifest())
        .expect("the tenant is created");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(inmem_apiserver::server::serve(api.clone(), listener));
    let dir = tempfile::tempdir().expect("a directory");
    let kubeconfig = dir.path().join("kubeconfig");
    let yaml = tenant_placer::sandbox::kubeconfig_yaml(&format!("http://{addr}"));
    std::fs::write(&kubeconfig, yaml).expect("the kubeconfig is written");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenant-placer"))
        .args(["run", "--metrics-addr", "127.0.0.1:0"])
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "error")
        .spawn()
        .expect("the binary runs");
    let placed = |name: &str| {
        let tenant = api.get(GROUP, "tenants", Some("default"), name)?;
        (tenant["status"]["phase"] == "Active").then_some(tenant)
    };
    let mut waited = std::time::Duration::ZERO;
    let tenant = loop {
        if let Some(tenant) = placed("acme") {
            break tenant;
        }
        assert!(waited.as_secs() < 60, "acme was not placed in 60 s");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        waited += std::time::Duration::from_millis(50);
    };
    child.kill().ok();
    child.wait().ok();
    let managers: Vec<(&str, &str)> = tenant["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|entry| {
            let manager = entry["manager"].as_str().unwrap_or("?");
            (manager, entry["subresource"].as_str().unwrap_or(""))
        })
        .collect();
    // Its finalizer (no admission policy here) and its status.
    assert_eq!(
        managers,
        [
            ("kubectl", ""),
            ("tenant-placer", ""),
            ("tenant-placer", "status")
        ],
        "{tenant}"
    );
}

#[test]
fn a_disruption_schedule_that_can_never_open_is_refused_with_the_flag_and_value_named() {
    // 31 February: consolidation and make-room would silently never run.
    for command in ["simulate", "run", "sandbox"] {
        let out = tenant_placer(&[command, "--disruption-schedule", "0 0 31 2 * 1h"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command}: {stderr}");
        assert!(
            stderr.contains("invalid value '0 0 31 2 * 1h' for '--disruption-schedule")
                && stderr.contains("it never opens"),
            "{command}: {stderr}"
        );
    }
}

#[test]
fn simulates_settings_line_names_every_flag_that_can_change_the_outcome() {
    let settings_line = |args: &[&str]| {
        let out = tenant_placer(&[&["simulate"], args].concat());
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout.lines().next().unwrap_or_default().to_owned()
    };
    // At their defaults: make-room and the budget act whatever --consolidation is.
    let plain = settings_line(&[]);
    assert!(
        plain.ends_with(
            "--consolidation WhenEmpty --consolidate-after-seconds 300 --disruption-budget 10% \
             --make-room-moves 4"
        ),
        "{plain}"
    );
    // Every one set, each as it would be typed again (no purchase look: the simulated
    // provisioner would wait for requests that never come).
    let set = settings_line(&[
        "--request-after-seconds",
        "0",
        "--consolidation",
        "WhenUnderutilized",
        "--consolidate-after-seconds",
        "60",
        "--consolidate-registered",
        "--disruption-budget",
        "0",
        "--disruption-schedule",
        "0 22 * * mon-fri 8h",
        "--make-room-moves",
        "2",
        "--provisioner",
        "simulated",
        "--provisioner-delay-ms",
        "10",
        "--provisioner-fails",
        "small,large",
    ]);
    assert!(
        set.ends_with(
            "--consolidation WhenUnderutilized --consolidate-after-seconds 60 \
             --consolidate-registered --disruption-budget 0 --disruption-schedule \
             '0 22 * * mon-fri 8h' --make-room-moves 2 --provisioner simulated \
             --provisioner-delay-ms 10 --provisioner-fails small,large"
        ),
        "{set}"
    );
}

/// The glibc malloc heaps of threads' own arenas in a process's memory map: each is reserved as
/// 64 MiB aligned to 64 MiB, its used part `rw-p` and the rest `---p` (glibc's `new_heap`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn thread_arenas(pid: u32) -> usize {
    const HEAP: u64 = 64 << 20;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("read the maps");
    let regions: Vec<(u64, u64, &str, bool)> = maps
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let (start, end) = words.next()?.split_once('-')?;
            let perms = words.next()?;
            let named = words.nth(3).is_some();
            Some((
                u64::from_str_radix(start, 16).ok()?,
                u64::from_str_radix(end, 16).ok()?,
                perms,
                named,
            ))
        })
        .collect();
    regions
        .iter()
        .enumerate()
        .filter(|&(i, &(start, end, perms, named))| {
            let reserved_to = match regions.get(i.saturating_add(1)) {
                Some(&(next, next_end, "---p", false)) if next == end => next_end,
                _ => end,
            };
            !named
                && perms == "rw-p"
                && start % HEAP == 0
                && reserved_to == start.saturating_add(HEAP)
        })
        .count()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn the_binary_holds_itself_to_one_malloc_arena_without_the_environment_variable() {
    use std::io::BufRead;
    use std::process::Stdio;

    let dir = tempfile::tempdir().expect("a temporary directory");
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenant-placer"))
        .args(["sandbox", "--listen", "127.0.0.1:0", "-f", examples])
        .arg("--kubeconfig-out")
        .arg(dir.path().join("kubeconfig"))
        .env_remove("MALLOC_ARENA_MAX")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the sandbox");
    // Once it prints its instructions, the API, the controller and the page have run on the
    // runtime's worker threads, each of which would have taken an arena of its own.
    let stdout = std::io::BufReader::new(child.stdout.take().expect("its stdout"));
    let started = stdout
        .lines()
        .map_while(Result::ok)
        .any(|line| line.trim_start().starts_with("export KUBECONFIG="));
    std::thread::sleep(std::time::Duration::from_millis(500));
    let arenas = thread_arenas(child.id());
    let _ = child.kill();
    let _ = child.wait();
    assert!(started, "the sandbox did not start");
    assert_eq!(arenas, 0, "malloc heaps of thread arenas: {arenas}");
}
