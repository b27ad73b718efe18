//! `tenant-placer sandbox` driven by the real kubectl: the binary serves the in-memory API on a
//! free loopback port with the controller running, writes a kubeconfig, and kubectl (unchanged,
//! default flags) applies, gets, explains, describes, patches, edits, re-applies and deletes.
//!
//! kubectl must be on PATH (CI installs it): without it these tests fail, saying so. Every wait
//! is bounded, and every kubectl call is killed after a deadline, so nothing hangs.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

mod common;
use common::sandbox::{self, Sandbox};
use common::{COMMAND_DEADLINE, collect_lines, examples, http, run, wait_for};

use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;

/// The whitespace-separated cells of the line of `kubectl get` output naming `name`.
fn row<'a>(table: &'a str, name: &str) -> Vec<&'a str> {
    table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.contains(&name))
        .unwrap_or_else(|| panic!("no row for {name} in:\n{table}"))
}

/// `kubectl get tn`'s columns (the CRD's printer columns of priority 0, then AGE).
const TENANT_COLUMNS: [&str; 8] = [
    "NAME",
    "PHASE",
    "NODE",
    "PLACEMENTS",
    "THREADS",
    "MEMORY-GB",
    "STORAGE-GB",
    "AGE",
];

fn header(table: &str) -> Vec<&str> {
    table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect()
}

fn malformed(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: placement.tenant-placer.dev/v1alpha1\nkind: Tenant\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n{spec}"
    )
}

#[test]
fn kubectl_drives_the_seed_scenario_through_the_sandbox() {
    let sandbox = Sandbox::start(&[]);
    let examples = examples();
    let examples = examples.to_str().unwrap();

    // 1. kubectl apply -f examples/: client-side apply creates all four.
    let applied = sandbox
        .kubectl(&["apply", "-f", examples])
        .ok("kubectl apply");
    for object in [
        "node.placement.tenant-placer.dev/node-eu-1 created",
        "node.placement.tenant-placer.dev/node-eu-2 created",
        "tenant.placement.tenant-placer.dev/acme created",
        "tenant.placement.tenant-placer.dev/big created",
    ] {
        assert!(applied.contains(object), "{object} missing in:\n{applied}");
    }

    // 2. acme is placed on node-eu-1; big waits for capacity. The server-side Table shows the
    //    CRD's printer columns, and kubectl adds NAMESPACE for -A.
    sandbox.wait_jsonpath(&["tn", "acme"], "{.status.phase}", "Active");
    sandbox.wait_jsonpath(&["tn", "big"], "{.status.phase}", "PendingCapacity");
    let tenants = sandbox
        .kubectl(&["get", "tn", "-A"])
        .ok("kubectl get tn -A");
    assert_eq!(
        header(&tenants),
        [&["NAMESPACE"][..], &TENANT_COLUMNS].concat(),
        "{tenants}"
    );
    // Neither is spread: PLACEMENTS is empty, and the cells after it come next.
    let acme = row(&tenants, "acme");
    assert_eq!(
        &acme[..7],
        ["default", "acme", "Active", "node-eu-1", "2", "4", "20"],
        "{tenants}"
    );
    assert!(
        acme[7].ends_with('s') || acme[7].ends_with('m'),
        "age: {tenants}"
    );
    let big = row(&tenants, "big");
    // big holds nothing: its NODE cell is empty.
    assert_eq!(
        &big[..6],
        ["default", "big", "PendingCapacity", "0", "0", "0"],
        "{tenants}"
    );

    let nodes = sandbox.kubectl(&["get", "pnodes"]).ok("kubectl get pnodes");
    assert_eq!(
        header(&nodes),
        [
            "NAME",
            "STATE",
            "FREE-THREADS",
            "FREE-MEMORY-GB",
            "FREE-STORAGE-GB",
            "TENANTS",
            "AGE"
        ],
        "{nodes}"
    );
    assert_eq!(
        &row(&nodes, "node-eu-1")[..6],
        ["node-eu-1", "Online", "62", "252", "7980", "1"]
    );
    let wide = sandbox
        .kubectl(&["get", "pnode", "-o", "wide"])
        .ok("kubectl get pnode -o wide");
    assert!(header(&wide).contains(&"ALLOCATED-THREADS"), "{wide}");

    // The category, through discovery.
    let placement = sandbox
        .kubectl(&["get", "placement"])
        .ok("kubectl get placement");
    for object in [
        "node.placement.tenant-placer.dev/node-eu-1",
        "tenant.placement.tenant-placer.dev/acme",
        "tenant.placement.tenant-placer.dev/big",
    ] {
        assert!(
            placement.contains(object),
            "{object} missing in:\n{placement}"
        );
    }

    // explain reads the OpenAPI v3 document built from the CRD schema.
    let explained = sandbox
        .kubectl(&["explain", "tenant.spec"])
        .ok("kubectl explain tenant.spec");
    assert!(explained.contains("KIND:       Tenant"), "{explained}");
    assert!(
        explained.contains("resources\t<Object> -required-"),
        "{explained}"
    );
    assert!(
        explained.contains("Resources of one replica (at least 1 thread and 1 GB of memory)."),
        "{explained}"
    );
    assert!(
        explained.contains("enum: Standalone, Cluster"),
        "{explained}"
    );

    // describe reads the object and lists its events.
    let described = sandbox
        .kubectl(&["describe", "tn", "big"])
        .ok("kubectl describe tn big");
    assert!(described.contains("PendingCapacity"), "{described}");
    assert!(
        described.contains("waiting for capacity for 256 threads"),
        "{described}"
    );
    assert!(described.contains("Events:"), "{described}");

    // 3. The seed's mode switch: Standalone -> Cluster doubles the reservation.
    let patched = sandbox
        .kubectl(&[
            "patch",
            "tn",
            "acme",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"mode":"Cluster"}}"#,
        ])
        .ok("kubectl patch");
    assert!(
        patched.contains("tenant.placement.tenant-placer.dev/acme patched"),
        "{patched}"
    );
    sandbox.wait_jsonpath(&["pnode", "node-eu-1"], "{.status.allocated.threads}", "4");

    // kubectl's default strategic merge patch is refused for a custom resource, as a real
    // server does (415), and kubectl says which patch types work.
    let refused = sandbox
        .kubectl(&["patch", "tn", "acme", "-p", r#"{"spec":{"suspend":false}}"#])
        .failed("a strategic merge patch of a custom resource");
    assert!(
        refused.contains("application/merge-patch+json"),
        "{refused}"
    );

    // kubectl edit (with an editor that changes the storage per replica), watched by
    // kubectl get -w: the watch prints the new reservation as a Table row.
    let mut watch = sandbox.kubectl_command(&["get", "tn", "acme", "-w", "--request-timeout=25s"]);
    let mut watcher = watch
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let watched = collect_lines(watcher.stdout.take().unwrap());
    wait_for("kubectl get -w to list acme", || {
        (watched.lock().unwrap().len() >= 2).then_some(())
    });
    let editor = sandbox.write(
        "editor.sh",
        "#!/bin/sh\nsed -i 's/^    storageGb: 20$/    storageGb: 30/' \"$1\"\n",
    );
    std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut edit = sandbox.kubectl_command(&["edit", "tn", "acme"]);
    edit.env("KUBE_EDITOR", &editor);
    let edited = run(edit, COMMAND_DEADLINE).ok("kubectl edit");
    assert!(
        edited.contains("tenant.placement.tenant-placer.dev/acme edited"),
        "{edited}"
    );
    sandbox.wait_jsonpath(
        &["pnode", "node-eu-1"],
        "{.status.allocated.storageGb}",
        "60",
    );
    wait_for("kubectl get -w to show the new reservation", || {
        let lines = watched.lock().unwrap();
        lines
            .iter()
            .any(|l| {
                let cells: Vec<&str> = l.split_whitespace().collect();
                cells.len() == 7 && cells[..6] == ["acme", "Active", "node-eu-1", "4", "8", "60"]
            })
            .then_some(())
    });
    let _ = watcher.kill();
    let _ = watcher.wait();

    // A second apply after the patch and the edit: the three-way merge with the
    // last-applied configuration puts mode and storage back as the files say.
    let reapplied = sandbox
        .kubectl(&["apply", "-f", examples])
        .ok("second kubectl apply");
    assert!(
        reapplied.contains("tenant.placement.tenant-placer.dev/acme configured"),
        "{reapplied}"
    );
    assert!(
        reapplied.contains("tenant.placement.tenant-placer.dev/big unchanged"),
        "{reapplied}"
    );
    assert!(
        reapplied.contains("node.placement.tenant-placer.dev/node-eu-1 unchanged"),
        "{reapplied}"
    );
    sandbox.wait_jsonpath(
        &["tn", "acme"],
        "{.spec.mode} {.spec.resources.storageGb}",
        "Standalone 20",
    );
    sandbox.wait_jsonpath(&["pnode", "node-eu-1"], "{.status.allocated.threads}", "2");
    sandbox.wait_jsonpath(
        &["pnode", "node-eu-1"],
        "{.status.allocated.storageGb}",
        "20",
    );

    // 4. Delete: the reservation goes, then the tenant.
    let deleted = sandbox
        .kubectl(&["delete", "tn", "acme", "--timeout=20s"])
        .ok("kubectl delete");
    assert!(
        deleted.contains("tenant.placement.tenant-placer.dev \"acme\" deleted"),
        "{deleted}"
    );
    sandbox.wait_jsonpath(&["pnode", "node-eu-1"], "{.status.allocated.threads}", "0");
    let gone = sandbox
        .kubectl(&["get", "tn", "acme"])
        .failed("get of a deleted tenant");
    assert!(
        gone.contains(r#"tenants.placement.tenant-placer.dev "acme" not found"#),
        "{gone}"
    );

    // 5. Malformed tenants are refused with the apiserver's messages, and nothing is created.
    let cases = [
        (
            "negative",
            "  resources: {threads: -1, memoryGb: 4, storageGb: 20}\n",
            r#"The Tenant "negative" is invalid: spec.resources.threads: Invalid value: -1: spec.resources.threads in body should be greater than or equal to 1"#,
        ),
        (
            "missing",
            "  resources: {threads: 1, memoryGb: 4}\n",
            "spec.resources.storageGb: Required value",
        ),
        (
            "wrongtype",
            "  resources: {threads: two, memoryGb: 4, storageGb: 20}\n",
            r#"spec.resources.threads: Invalid value: "string": spec.resources.threads in body must be of type integer: "string""#,
        ),
        (
            "badmode",
            "  resources: {threads: 1, memoryGb: 4, storageGb: 20}\n  mode: Solo\n",
            r#"spec.mode: Unsupported value: "Solo": supported values: "Standalone", "Cluster""#,
        ),
        (
            "typo",
            "  resources: {threads: 1, memoryGb: 4, storageGb: 20}\n  replica: 2\n",
            r#"Tenant in version "v1alpha1" cannot be handled as a Tenant: strict decoding error: unknown field "spec.replica""#,
        ),
    ];
    for (name, spec, message) in cases {
        let file = sandbox.write(&format!("{name}.yaml"), &malformed(name, spec));
        let stderr = sandbox
            .kubectl(&["apply", "-f", file.to_str().unwrap()])
            .failed(&format!("applying the malformed tenant {name}"));
        assert!(
            stderr.contains(message),
            "{name}: expected {message:?} in:\n{stderr}"
        );
        assert!(
            sandbox
                .jsonpath(&["tn", name], "{.metadata.name}")
                .is_none()
        );
    }
}

#[test]
fn the_sandbox_applies_its_manifests_as_kubectl_apply_would() {
    let sandbox = Sandbox::start(&[&examples()]);
    let printed = sandbox.printed();
    assert!(
        printed.contains("applied     2 Nodes, 2 Tenants from"),
        "{printed}"
    );
    assert!(
        printed.contains("API         http://127.0.0.1:"),
        "{printed}"
    );
    assert!(printed.contains("  kubectl get tn -A"), "{printed}");
    sandbox.wait_jsonpath(&["tn", "acme"], "{.status.phase}", "Active");
    // The objects carry the last-applied configuration kubectl apply writes, so applying the
    // same files changes nothing.
    let applied = sandbox
        .kubectl(&["apply", "-f", examples().to_str().unwrap()])
        .ok("kubectl apply");
    assert_eq!(applied.matches(" unchanged").count(), 4, "{applied}");
    let namespaces = sandbox.kubectl(&["get", "ns"]).ok("kubectl get ns");
    assert_eq!(&row(&namespaces, "default")[..2], ["default", "Active"]);
}

#[test]
fn kubectl_shows_the_spread_example_one_database_replica_in_each_zone_and_a_standalone_spread_refused()
 {
    let spread = examples().join("spread");
    let sandbox = Sandbox::start(&[&spread]);
    sandbox.wait_jsonpath(
        &["tn", "orders-db"],
        "{.status.placements[*].zone}",
        "fsn1 hel1 nbg1",
    );
    sandbox.wait_jsonpath(&["tn", "cache"], "{.status.phase}", "Active");
    let tenants = sandbox.kubectl(&["get", "tn"]).ok("kubectl get tn");
    assert_eq!(header(&tenants), TENANT_COLUMNS, "{tenants}");
    // NODE is the first node by name; THREADS the total, 8 per replica x 3.
    let db = row(&tenants, "orders-db");
    // PLACEMENTS: every node, from status.placedOn (a Table takes the first match of a column's
    // JSONPath only, so the column cannot read the list itself).
    assert_eq!(
        &db[..4],
        [
            "orders-db",
            "Active",
            "node-fsn1-1",
            "node-fsn1-1,node-hel1-1,node-nbg1-1"
        ],
        "{tenants}"
    );
    assert!(db.contains(&"24") && db.contains(&"1500"), "{tenants}");
    // The zones too, with kubectl's own custom columns (they join every match).
    let columns = "custom-columns=NAME:.metadata.name,PLACEMENTS:.status.placements[*].node,\
                   ZONES:.status.placements[*].zone";
    let placed = sandbox
        .kubectl(&["get", "tn", "-o", columns])
        .ok("kubectl get tn -o custom-columns");
    assert_eq!(
        row(&placed, "orders-db"),
        [
            "orders-db",
            "node-fsn1-1,node-hel1-1,node-nbg1-1",
            "fsn1,hel1,nbg1"
        ],
        "{placed}"
    );
    assert_eq!(
        row(&placed, "cache"),
        ["cache", "node-fsn1-1,node-fsn1-2", "fsn1,fsn1"],
        "{placed}"
    );
    // web is not spread: it has no placements; NODE says where all of it is.
    assert_eq!(row(&placed, "web"), ["web", "<none>", "<none>"], "{placed}");

    // spread needs mode Cluster: the CRD's CEL rule refuses a Standalone tenant, as a real API
    // server would.
    let standalone = sandbox.write(
        "standalone-spread.yaml",
        &malformed(
            "solo",
            "  resources: {threads: 1, memoryGb: 1, storageGb: 1}\n  mode: Standalone\n  spread: Zones\n",
        ),
    );
    let refused = sandbox
        .kubectl(&["apply", "-f", standalone.to_str().unwrap()])
        .failed("kubectl apply of a Standalone tenant with spread: Zones");
    assert!(
        refused.contains(r#"The Tenant "solo" is invalid: spec.spread"#)
            && refused.contains(
                "spec.spread other than None needs spec.mode Cluster: a Standalone tenant has \
                 one replica"
            ),
        "{refused}"
    );
    assert!(
        sandbox
            .jsonpath(&["tn", "solo"], "{.metadata.name}")
            .is_none()
    );
}

#[test]
fn kubectl_drains_a_node_and_deletes_one_and_the_tenant_moves_each_time() {
    let sandbox = Sandbox::start(&[&examples()]);
    sandbox.wait_jsonpath(&["tn", "acme"], "{.status.nodeName}", "node-eu-1");
    sandbox
        .kubectl(&[
            "patch",
            "pnode",
            "node-eu-1",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"state":"Draining"}}"#,
        ])
        .ok("kubectl patch pnode (Draining)");
    sandbox.wait_jsonpath(&["tn", "acme"], "{.status.nodeName}", "node-eu-2");
    sandbox.wait_jsonpath(
        &["pnode", "node-eu-1"],
        r#"{.status.conditions[?(@.type=="Drained")].reason}"#,
        "Empty",
    );
    let nodes = sandbox.kubectl(&["get", "pnodes"]).ok("kubectl get pnodes");
    assert_eq!(
        &row(&nodes, "node-eu-1")[..2],
        ["node-eu-1", "Draining"],
        "{nodes}"
    );
    let tenants = sandbox.kubectl(&["get", "tn"]).ok("kubectl get tn");
    assert_eq!(
        &row(&tenants, "acme")[..3],
        ["acme", "Active", "node-eu-2"],
        "{tenants}"
    );
    // Back in service; then deleting node-eu-2 drains it, and it goes once acme has moved.
    sandbox
        .kubectl(&[
            "patch",
            "pnode",
            "node-eu-1",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"state":"Online"}}"#,
        ])
        .ok("kubectl patch pnode (Online)");
    sandbox
        .kubectl(&["delete", "pnode", "node-eu-2", "--timeout=30s"])
        .ok("kubectl delete pnode node-eu-2");
    sandbox.wait_jsonpath(&["tn", "acme"], "{.status.nodeName}", "node-eu-1");
    let gone = sandbox
        .kubectl(&["get", "pnode", "node-eu-2"])
        .failed("kubectl get pnode node-eu-2 (deleted)");
    assert!(gone.contains("NotFound"), "{gone}");
}

#[test]
fn kubectl_sees_a_waiting_tenant_get_a_machine_asked_for_delivered_used_and_an_idle_one_go_back() {
    let purchase = examples().join("purchase");
    let sandbox = Sandbox::start_with(
        &[&examples(), &purchase],
        &[
            "--provisioner",
            "simulated",
            "--provisioner-delay-ms",
            "500",
            "--request-after-seconds",
            "1",
            "--empty-node-seconds",
            "2",
        ],
    );
    // big fits on neither seed node: after a second of waiting, a machine is asked for.
    sandbox.wait_jsonpath(&["tn", "big"], "{.status.phase}", "PendingCapacity");
    let classes = sandbox.kubectl(&["get", "nclass"]).ok("kubectl get nclass");
    assert_eq!(
        &row(&classes, "hetzner-ax162")[..3],
        ["hetzner-ax162", "hetzner/AX162-R", "384"],
        "{classes}"
    );
    sandbox.wait_jsonpath(&["nreq"], "{.items[0].spec.tenants[0]}", "default/big");
    let request = sandbox
        .jsonpath(&["nreq"], "{.items[0].metadata.name}")
        .unwrap();
    // The machine arrives as a Node named after the request, and big is placed there.
    sandbox.wait_jsonpath(&["nreq", &request], "{.status.phase}", "Ready");
    sandbox.wait_jsonpath(&["tn", "big"], "{.status.nodeName}", &request);
    let listed = sandbox.kubectl(&["get", "nreq"]).ok("kubectl get nreq");
    assert_eq!(
        &row(&listed, &request)[..5],
        [
            request.as_str(),
            "hetzner-ax162",
            "Ready",
            request.as_str(),
            "[\"default/big\"]"
        ],
        "{listed}"
    );
    let region = sandbox
        .jsonpath(&["pnode", &request], "{.metadata.labels.region}")
        .unwrap();
    assert_eq!(region, "eu-central");
    // big goes: the machine holds nothing for two seconds and is handed back, Node and all.
    sandbox
        .kubectl(&["delete", "tn", "big", "--timeout=30s"])
        .ok("kubectl delete tn big");
    let gone = || {
        sandbox
            .kubectl(&["get", "pnode", &request])
            .failed("kubectl get pnode (handed back)")
    };
    wait_for("the idle machine to go back", || {
        sandbox
            .kubectl_command(&["get", "pnode", &request])
            .output()
            .ok()
            .filter(|o| !o.status.success())
            .map(drop)
    });
    assert!(gone().contains("NotFound"));
    let requests = sandbox.kubectl(&["get", "nreq"]).ok("kubectl get nreq");
    assert!(!requests.contains(&request), "{requests}");
}

#[test]
fn kubectl_sees_a_machine_deployment_scaled_for_waiting_tenants_and_its_machine_given_back() {
    let sandbox = Sandbox::start_with(
        &[&examples().join("cluster-api")],
        &[
            "--provisioner",
            "cluster-api",
            "--provisioner-delay-ms",
            "300",
            "--request-after-seconds",
            "1",
            "--empty-node-seconds",
            "2",
        ],
    );
    // No Node at all: both tenants wait, and one AX102 is bought for them through the
    // MachineDeployment.
    sandbox.wait_jsonpath(&["nreq"], "{.items[0].spec.nodeClass}", "hetzner-ax102");
    let request = sandbox
        .jsonpath(&["nreq"], "{.items[0].metadata.name}")
        .unwrap();
    sandbox.wait_jsonpath(&["nreq", &request], "{.status.phase}", "Ready");
    for tenant in ["shop", "search"] {
        sandbox.wait_jsonpath(&["tn", tenant], "{.status.nodeName}", &request);
    }
    let md = ["md", "-n", "fleet", "workers-ax102"];
    assert_eq!(sandbox.jsonpath(&md, "{.spec.replicas}").unwrap(), "1");
    let recorded = sandbox
        .jsonpath(&["nreq", &request], "{.status.machine}")
        .unwrap();
    let machine = recorded.strip_prefix("fleet/").unwrap().to_owned();
    let machine_path = ["machine", "-n", "fleet", machine.as_str()];
    let claim = sandbox
        .jsonpath(
            &machine_path,
            r"{.metadata.annotations.placement\.tenant-placer\.dev/node-request}",
        )
        .unwrap();
    assert_eq!(claim, request);
    assert_eq!(
        sandbox.jsonpath(&machine_path, "{.status.phase}").unwrap(),
        "Running"
    );
    let node = sandbox
        .jsonpath(&machine_path, "{.status.nodeRef.name}")
        .unwrap();
    assert!(
        sandbox
            .kubectl(&["get", "node", &node])
            .ok("kubectl get the core Node")
            .contains(&node)
    );
    let on_node = sandbox
        .jsonpath(
            &["pnode", &request],
            r"{.metadata.annotations.placement\.tenant-placer\.dev/machine}",
        )
        .unwrap();
    assert_eq!(on_node, recorded);
    // Both go: the machine idles two seconds, then goes back through delete-machine.
    sandbox
        .kubectl(&["delete", "tn", "shop", "search", "--timeout=30s"])
        .ok("kubectl delete tn shop search");
    sandbox.wait_jsonpath(&md, "{.spec.replicas}", "0");
    wait_for("the Machine to be gone", || {
        sandbox
            .kubectl(&["get", "machines", "-n", "fleet", "-o", "name"])
            .ok("kubectl get machines")
            .trim()
            .is_empty()
            .then_some(())
    });
    // Its finalizer goes at the provisioner's next look.
    wait_for("the request gone", || {
        let requests = sandbox.kubectl(&["get", "nreq"]).ok("kubectl get nreq");
        (!requests.contains(&request)).then_some(())
    });
}

#[test]
fn the_sandbox_refuses_a_non_loopback_address() {
    let mut command = sandbox::binary();
    command.args([
        "sandbox",
        "--listen",
        "0.0.0.0:0",
        "--kubeconfig-out",
        "/nonexistent/kc",
    ]);
    let stderr = run(command, COMMAND_DEADLINE).failed("a sandbox on 0.0.0.0");
    assert!(
        stderr.contains("refusing to serve on 0.0.0.0:0"),
        "{stderr}"
    );
    assert!(stderr.contains("--allow-non-loopback"), "{stderr}");
}

#[test]
fn a_dns_rebinding_page_can_neither_write_to_the_sandbox_nor_read_its_page() {
    let sandbox = Sandbox::start(&[]);
    let api = sandbox.api_addr();
    let body = r#"{"apiVersion":"placement.tenant-placer.dev/v1alpha1","kind":"Tenant","metadata":{"name":"rebound","namespace":"default"},"spec":{"resources":{"threads":1,"memoryGb":1,"storageGb":1}}}"#;
    let create = |host: &str| {
        http(
            &api,
            &format!(
                "POST /apis/placement.tenant-placer.dev/v1alpha1/namespaces/default/tenants HTTP/1.1\r\n\
                 Host: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            ),
        )
    };

    // What a page on attacker.example, resolved to 127.0.0.1, would send.
    let refused = create(&format!(
        "attacker.example:{}",
        api.rsplit(':').next().unwrap()
    ));
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    assert!(
        refused.contains(r#"Host \"attacker.example:"#)
            && refused.contains("is not this server")
            && refused.contains("(DNS rebinding guard)"),
        "{refused}"
    );
    let tenants = sandbox.kubectl(&["get", "tn", "-A"]).ok("kubectl get tn");
    assert!(!tenants.contains("rebound"), "created anyway:\n{tenants}");

    // The same request naming the sandbox's own address is served (kubectl's Host).
    let created = create(&api);
    assert!(created.starts_with("HTTP/1.1 201"), "{created}");

    // The page server (health, metrics, the fleet page) guards the same way.
    let page = sandbox
        .page_url()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let get = |host: &str| {
        http(
            &page,
            &format!("GET /metrics HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        )
    };
    let refused = get("attacker.example");
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    assert!(refused.contains("(DNS rebinding guard)"), "{refused}");
    assert!(get(&page).starts_with("HTTP/1.1 200"));
    assert!(get("localhost").starts_with("HTTP/1.1 200"));
}
