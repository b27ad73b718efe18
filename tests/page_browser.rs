//! The "Nodes & Capacity" page in a real browser: `tenant-placer sandbox -f examples/` runs as a
//! child process, headless Chromium (Debian's `chromium`) loads the page it prints, and the test
//! drives Chromium over the Chrome DevTools Protocol (a WebSocket, no chromedriver):
//!
//! 1. node-eu-1's threads bar reads "2 of 64 threads" and big is listed as waiting, short by 194
//!    threads;
//! 2. `kubectl patch tn acme --type merge -p '{"spec":{"mode":"Cluster"}}'` through the sandbox
//!    API moves the bar to "4 of 64 threads" without a reload;
//! 3. screenshots at 1280x900 and at phone width (no sideways scrolling there);
//! 4. `kubectl patch pnode node-eu-1` to `Draining`: acme moves to node-eu-2, and node-eu-1 is
//!    marked draining and drained (badge, line, banner), with no move left in flight;
//! 5. node-eu-2 drains too: acme cannot leave it, and is listed as such with its status message;
//! 6. the sandbox is stopped and the page says its numbers are not current, greyed out.
//!
//! Each check waits for the state at rest, never for a moment in between, so the speed of the
//! controller cannot make it flaky.
//!
//! Chromium must be installed (`bash ci/browser-setup.sh`; `TP_CHROMIUM` names another binary):
//! without it this test fails, saying so. kubectl must be on PATH, as for the sandbox tests.
//! Every wait is bounded; Chromium runs in a process group of its own, killed when the test ends
//! however it ends. The screenshots go to the target directory; `TP_PAGE_SCREENSHOT=PATH` also
//! writes the 1280x900 one to PATH (how docs/nodes-and-capacity.png is made).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

mod common;
use common::sandbox::Sandbox;
use common::{WAIT, collect_lines, examples, wait_for};

use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};

/// How long one DevTools command may take.
const DEVTOOLS_DEADLINE: Duration = Duration::from_secs(20);

/// The Chromium binary: `TP_CHROMIUM`, else `chromium` on PATH. Fails the test when missing.
fn chromium() -> PathBuf {
    if let Some(path) = std::env::var_os("TP_CHROMIUM") {
        return PathBuf::from(path);
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("chromium"))
            .find(|candidate| candidate.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "Chromium is not installed (no `chromium` on PATH and TP_CHROMIUM is not set): this \
             test loads the fleet page in headless Chromium. Install it with \
             `bash ci/browser-setup.sh` (Debian's chromium package)."
        )
    })
}

/// Headless Chromium with one page, driven over the DevTools Protocol. Closed (and its whole
/// process group killed) when dropped.
struct Browser {
    child: Child,
    _profile: tempfile::TempDir,
    socket: WebSocket<TcpStream>,
    session: String,
    next_id: u64,
    stderr: Arc<Mutex<Vec<String>>>,
    /// Uncaught JavaScript exceptions and console errors the page reported.
    page_errors: Vec<String>,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let id = self.next_id;
        let close = json!({"id": id, "method": "Browser.close"});
        let _ = self.socket.send(Message::text(close.to_string()));
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(5) {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // Renderers and helpers share the browser's process group (made at spawn): end them all.
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    fn launch(width: u32, height: u32) -> Browser {
        let binary = chromium();
        let profile = tempfile::tempdir().unwrap();
        let mut child = Command::new(&binary)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--window-size={width},{height}"))
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let stderr = collect_lines(child.stderr.take().unwrap());
        // Chromium writes its DevTools port and browser path here once it listens.
        let active_port = profile.path().join("DevToolsActivePort");
        let (port, path) = wait_for("Chromium to open its DevTools port", || {
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "Chromium exited ({status}) before opening its DevTools port:\n{}",
                    stderr.lock().unwrap().join("\n")
                );
            }
            let text = std::fs::read_to_string(&active_port).ok()?;
            let mut lines = text.lines();
            let port: u16 = lines.next()?.trim().parse().ok()?;
            let path = lines.next()?.trim().to_owned();
            Some((port, path))
        });
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(DEVTOOLS_DEADLINE)).unwrap();
        stream.set_write_timeout(Some(DEVTOOLS_DEADLINE)).unwrap();
        let (socket, _) = tungstenite::client(format!("ws://127.0.0.1:{port}{path}"), stream)
            .unwrap_or_else(|e| panic!("DevTools WebSocket handshake failed: {e}"));
        // From here on, reads wake up often so that every wait can check its deadline.
        socket
            .get_ref()
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut browser = Browser {
            child,
            _profile: profile,
            socket,
            session: String::new(),
            next_id: 1,
            stderr,
            page_errors: Vec::new(),
        };
        let target = browser.call("Target.createTarget", json!({"url": "about:blank"}));
        let target_id = target["targetId"].as_str().unwrap().to_owned();
        let attached = browser.call(
            "Target.attachToTarget",
            json!({"targetId": target_id, "flatten": true}),
        );
        browser.session = attached["sessionId"].as_str().unwrap().to_owned();
        browser.call("Runtime.enable", json!({}));
        browser.call("Page.enable", json!({}));
        browser.viewport(width, height, false);
        browser
    }

    /// Sends one command (to the page's session once attached) and waits for its answer.
    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut command = json!({"id": id, "method": method, "params": params});
        if !self.session.is_empty() {
            command["sessionId"] = json!(self.session);
        }
        self.socket
            .send(Message::text(command.to_string()))
            .unwrap_or_else(|e| panic!("sending {method}: {e}"));
        let started = Instant::now();
        loop {
            assert!(
                started.elapsed() < DEVTOOLS_DEADLINE,
                "no answer to {method} within {DEVTOOLS_DEADLINE:?}; Chromium said:\n{}",
                self.stderr.lock().unwrap().join("\n")
            );
            let message = match self.socket.read() {
                Ok(Message::Text(text)) => text,
                Ok(_) => continue,
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    continue;
                }
                Err(e) => panic!("the DevTools connection failed during {method}: {e}"),
            };
            let message: Value = serde_json::from_str(message.as_str()).unwrap();
            if message["id"] == id {
                if let Some(error) = message.get("error") {
                    panic!("{method} failed: {error}");
                }
                return message["result"].clone();
            }
            self.note_event(&message);
        }
    }

    fn note_event(&mut self, message: &Value) {
        match message["method"].as_str() {
            Some("Runtime.exceptionThrown") => {
                let details = &message["params"]["exceptionDetails"];
                let text = details["exception"]["description"]
                    .as_str()
                    .or(details["text"].as_str())
                    .unwrap_or("?");
                self.page_errors.push(format!("uncaught: {text}"));
            }
            Some("Runtime.consoleAPICalled") if message["params"]["type"] == "error" => {
                self.page_errors
                    .push(format!("console.error: {}", message["params"]["args"]));
            }
            _ => {}
        }
    }

    fn viewport(&mut self, width: u32, height: u32, mobile: bool) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile}),
        );
    }

    fn navigate(&mut self, url: &str) {
        let answer = self.call("Page.navigate", json!({"url": url}));
        assert!(
            answer.get("errorText").is_none(),
            "navigating to {url}: {answer}"
        );
    }

    /// The value of a JavaScript expression in the page.
    fn eval(&mut self, expression: &str) -> Value {
        let answer = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true}),
        );
        if let Some(exception) = answer.get("exceptionDetails") {
            panic!("evaluating {expression}: {exception}");
        }
        answer["result"]["value"].clone()
    }

    /// Waits until `expression` is true in the page; on a timeout, shows what the page says.
    fn wait_until(&mut self, what: &str, expression: &str) {
        let started = Instant::now();
        loop {
            if self.eval(expression) == json!(true) {
                return;
            }
            if started.elapsed() > WAIT {
                let text = self.eval("document.body ? document.body.innerText : ''");
                panic!(
                    "timed out after {WAIT:?} waiting for {what} ({expression}); the page reads:\n{}",
                    text.as_str().unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn text(&mut self, selector: &str) -> String {
        let expression = format!(
            "(() => {{ const e = document.querySelector({}); return e ? e.textContent.replace(/\\s+/g, ' ').trim() : null; }})()",
            json!(selector)
        );
        match self.eval(&expression) {
            Value::String(text) => text,
            other => panic!("no element {selector} ({other})"),
        }
    }

    /// A PNG of the viewport, or of the whole page when `full_page`.
    fn screenshot(&mut self, path: &Path, full_page: bool) {
        let mut params = json!({"format": "png"});
        if full_page {
            let size = self.call("Page.getLayoutMetrics", json!({}));
            let content = &size["cssContentSize"];
            params["captureBeyondViewport"] = json!(true);
            params["clip"] = json!({"x": 0, "y": 0, "width": content["width"], "height": content["height"], "scale": 1});
        }
        let shot = self.call("Page.captureScreenshot", params);
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, png).unwrap();
    }
}

/// `selector`'s text equals `want`, as a JavaScript condition.
fn text_is(selector: &str, want: &str) -> String {
    format!(
        "(() => {{ const e = document.querySelector({}); return !!e && e.textContent.trim() === {}; }})()",
        json!(selector),
        json!(want)
    )
}

const EU1_THREADS: &str = "tr[data-node=\"node-eu-1\"] .meter[data-dim=\"threads\"] .used";
const EU1_THREADS_BAR: &str = "tr[data-node=\"node-eu-1\"] .meter[data-dim=\"threads\"] .bar";
const BIG: &str = "li[data-pending=\"default/big\"]";
const EU1_ROW: &str = "tr[data-node=\"node-eu-1\"]";
const EU2_ROW: &str = "tr[data-node=\"node-eu-2\"]";
const ACME_BLOCKED: &str = "li[data-blocked=\"default/acme\"]";

/// `kubectl patch pnode NAME` to `spec.state: Draining`.
fn drain(sandbox: &Sandbox, node: &str) {
    sandbox
        .kubectl(&[
            "patch",
            "pnode",
            node,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"state":"Draining"}}"#,
        ])
        .ok("kubectl patch pnode");
}

#[test]
fn the_fleet_page_shows_the_examples_follows_a_patch_live_and_says_when_it_is_not_current() {
    let started = Instant::now();
    chromium(); // fails here, before anything starts, when Chromium is missing
    let mut sandbox = Sandbox::start(&[&examples()]);
    let mut browser = Browser::launch(1280, 900);
    browser.navigate(sandbox.page_url());

    // 1. node-eu-1's threads bar: 2 of 64; big waits, short by 194 threads.
    browser.wait_until(
        "node-eu-1's threads bar to read 2 of 64",
        &text_is(EU1_THREADS, "2 of 64 threads"),
    );
    let label = browser.eval(&format!(
        "document.querySelector({}).getAttribute('aria-label')",
        json!(EU1_THREADS_BAR)
    ));
    assert!(
        label
            .as_str()
            .unwrap()
            .contains("2 of 64 threads allocated (3%), 62 free"),
        "{label}"
    );
    browser.wait_until(
        "big to be listed as waiting",
        &format!("!!document.querySelector({})", json!(BIG)),
    );
    let big = browser.text(BIG);
    for part in [
        "default/big",
        "PendingCapacity",
        "256 threads",
        "short by 194",
        "short by 772",
        "short by 92,020",
        "no node has room",
    ] {
        assert!(big.contains(part), "big's entry lacks {part:?}: {big}");
    }
    let policy = browser.text("section.policy");
    assert!(
        policy.contains("FirstFit")
            && policy.contains("first Online node, by name")
            && policy.contains("moves only off a draining node or to make room"),
        "{policy}"
    );
    assert!(
        browser.text("#connection").starts_with("Live"),
        "{}",
        browser.text("#connection")
    );

    // 2. acme switches to Cluster (2 replicas): the bar moves to 4 without a reload.
    browser.eval("window.__loadedOnce = 'still the same document'");
    sandbox
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
    browser.wait_until(
        "node-eu-1's threads bar to read 4 of 64 after the patch",
        &text_is(EU1_THREADS, "4 of 64 threads"),
    );
    assert_eq!(
        browser.eval("window.__loadedOnce"),
        json!("still the same document"),
        "the page reloaded instead of updating in place"
    );
    assert_eq!(
        browser.eval(&format!(
            "document.querySelector({}).getAttribute('aria-valuenow')",
            json!(EU1_THREADS_BAR)
        )),
        json!("4")
    );

    // 3. Screenshots: 1280x900, and a phone, where nothing scrolls sideways.
    browser.eval("document.querySelectorAll('details[data-node]').forEach(d => d.open = true)");
    std::thread::sleep(Duration::from_millis(600)); // the bars' width transition
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR"));
    browser.screenshot(&shots.join("nodes-and-capacity.png"), false);
    if let Some(path) = std::env::var_os("TP_PAGE_SCREENSHOT") {
        browser.screenshot(Path::new(&path), false);
    }
    browser.viewport(390, 844, true);
    browser.wait_until(
        "the phone layout to fit the screen's width",
        "document.documentElement.scrollWidth <= window.innerWidth",
    );
    browser.screenshot(&shots.join("nodes-and-capacity-phone.png"), true);
    browser.viewport(1280, 900, false);

    // 4. node-eu-1 drains: at rest acme is on node-eu-2 and node-eu-1 says it is drained.
    drain(&sandbox, "node-eu-1");
    browser.wait_until(
        "node-eu-1 drained, acme active on node-eu-2 and no move in flight",
        &format!(
            "{} && {} && document.getElementById('moves-section').hidden",
            text_is(
                &format!("{EU1_ROW} .drain-note"),
                "draining: drained, holds nothing"
            ),
            text_is(
                &format!("{EU2_ROW} li[data-tenant=\"default/acme\"] .badge"),
                "Active"
            ),
        ),
    );
    let eu1 = browser.text(&format!("{EU1_ROW} th"));
    assert!(eu1.contains("Draining"), "node-eu-1's name cell: {eu1}");
    let banner = browser.text("[data-draining=\"node-eu-1\"]");
    assert!(
        banner.contains("node-eu-1 is draining (Drained: True)")
            && banner.contains("holds no reservations"),
        "{banner}"
    );
    let tooltip = browser.eval(&format!(
        "document.querySelector({}).title",
        json!(format!("{EU1_ROW} .badge.state-draining"))
    ));
    assert!(
        tooltip.as_str().unwrap().contains("holds no reservations"),
        "the Draining badge's tooltip is the Drained message: {tooltip}"
    );

    // 5. node-eu-2 drains too: acme has nowhere to go; it stays, marked, and says why.
    drain(&sandbox, "node-eu-2");
    browser.wait_until(
        "acme to be listed as unable to leave node-eu-2",
        &format!(
            "!document.getElementById('blocked-section').hidden && !!document.querySelector({})",
            json!(ACME_BLOCKED)
        ),
    );
    let blocked = browser.text(ACME_BLOCKED);
    for part in [
        "default/acme",
        "cannot move",
        "on node-eu-2, which is draining",
        "no other node can take it",
    ] {
        assert!(
            blocked.contains(part),
            "acme's entry lacks {part:?}: {blocked}"
        );
    }
    browser.wait_until(
        "node-eu-2 to say a tenant remains",
        &text_is(
            &format!("{EU2_ROW} .drain-note"),
            "draining: 1 tenant remains",
        ),
    );
    let eu2 = browser.text(EU2_ROW);
    assert!(
        eu2.contains("Draining") && eu2.contains("cannot move: no room elsewhere"),
        "{eu2}"
    );
    browser.screenshot(&shots.join("nodes-and-capacity-draining.png"), true);

    // 6. The data source goes away: the page says so and greys the numbers out.
    sandbox.stop();
    browser.wait_until(
        "the page to say its numbers are not current",
        "!document.getElementById('stale').hidden && document.getElementById('main').classList.contains('stale')",
    );
    let notice = browser.text("#stale");
    assert!(notice.contains("may be out of date"), "{notice}");
    assert!(
        browser.text("#connection").contains("Not current"),
        "{}",
        browser.text("#connection")
    );
    let opacity =
        browser.eval("getComputedStyle(document.querySelector('main section.data')).opacity");
    assert_eq!(opacity, json!("0.35"), "the numbers are not greyed out");
    browser.screenshot(&shots.join("nodes-and-capacity-stale.png"), false);

    // Failed requests for the live stream after the sandbox stopped are expected; nothing else.
    let errors: Vec<_> = browser
        .page_errors
        .iter()
        .filter(|e| !e.contains("api/fleet/events"))
        .collect();
    assert!(errors.is_empty(), "the page reported errors: {errors:?}");
    eprintln!(
        "browser test: {:.1} s; screenshots in {}",
        started.elapsed().as_secs_f64(),
        shots.display()
    );
}

#[test]
fn the_policy_banner_says_tenants_move_to_make_room_and_for_consolidation_as_the_flags_say() {
    chromium(); // fails here, before anything starts, when Chromium is missing
    let make_room = examples().join("make-room");
    let cases: [(&[&str], &str); 2] = [
        (
            &["--make-room-moves", "2"],
            "a placed tenant moves only off a draining node or to make room for a waiting tenant \
             that fits nowhere (at most 2 moved for it), make-before-break.",
        ),
        (
            &[
                "--make-room-moves",
                "0",
                "--consolidation",
                "WhenUnderutilized",
            ],
            "a placed tenant moves only off a draining node or to empty an underused node for \
             consolidation, make-before-break.",
        ),
    ];
    for (flags, ends) in cases {
        let sandbox = Sandbox::start_with(&[&make_room], flags);
        let mut browser = Browser::launch(1280, 900);
        browser.navigate(sandbox.page_url());
        browser.wait_until(
            "the policy's rule to be shown",
            "(() => { const e = document.querySelector('#policy-rule'); \
             return !!e && e.textContent.trim().length > 0; })()",
        );
        let rule = browser.text("#policy-rule");
        assert!(
            rule.ends_with(ends) && !rule.contains("no rebalancing"),
            "{flags:?}: {rule}"
        );
    }
}

#[test]
fn the_page_shows_each_class_machines_by_use_as_the_capacity_tick_judged_them() {
    chromium(); // fails here, before anything starts, when Chromium is missing
    // The seed's fleet and a NodeClass: big fits no node, and a machine is asked for it.
    let sandbox = Sandbox::start_with(
        &[&examples(), &examples().join("purchase")],
        &["--request-after-seconds", "1"],
    );
    let mut browser = Browser::launch(1280, 900);
    browser.navigate(sandbox.page_url());
    browser.wait_until(
        "the class's machines to be shown",
        "(() => { const e = document.querySelector('[data-machines=\"hetzner-ax162\"]'); \
         return !!e && /1 (in use|awaited)/.test(e.textContent); })()",
    );
    let line = browser.text("[data-machines=\"hetzner-ax162\"]");
    assert!(
        line.starts_with("hetzner-ax162: ")
            && line.contains(" in use, ")
            && line.contains(" idle, ")
            && line.contains(" awaited, ")
            && line.ends_with(" orphaned"),
        "{line}"
    );
}
