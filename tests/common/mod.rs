//! The harness of the tests that drive child processes (the sandbox binary, kubectl, Chromium):
//! bounded waits, commands run to their end under a deadline with their output collected, and
//! [`sandbox::Sandbox`], the running `tenant-placer sandbox`.
//!
//! ```text
//!   Sandbox::start(files)  the binary on a free loopback port, killed when dropped
//!     ├ kubectl(args)      kubectl against it (its own kubeconfig, cache and HOME) → Output
//!     ├ wait_jsonpath(..)  polls `kubectl get -o jsonpath` until it reads as wanted
//!     └ page_url()         the fleet page it serves
//!   run(command, deadline) → Output { status, stdout, stderr }, .ok(what) / .failed(what)
//!   wait_for(what, probe)  polls until Some, or fails the test after WAIT
//!   http(addr, request)    one raw HTTP/1.1 exchange, the whole answer as text
//! ```
//!
//! Every wait is bounded and every child is killed at its deadline, so nothing hangs.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod sandbox;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long any one wait (for the sandbox, the controller, Chromium, the page) may take.
pub const WAIT: Duration = Duration::from_secs(30);
/// How often a wait looks again.
pub const POLL: Duration = Duration::from_millis(100);
/// How long any one command (kubectl, the binary) may run.
pub const COMMAND_DEADLINE: Duration = Duration::from_secs(30);

/// The repository's examples directory.
pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

/// Lines a background process printed so far, read by a thread.
pub fn collect_lines(pipe: impl Read + Send + 'static) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&lines);
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            sink.lock().unwrap().push(line);
        }
    });
    lines
}

/// Waits until `probe` answers Some, polling every [`POLL`], or fails the test after [`WAIT`].
pub fn wait_for<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(found) = probe() {
            return found;
        }
        assert!(
            started.elapsed() < WAIT,
            "timed out after {WAIT:?} waiting for {what}"
        );
        std::thread::sleep(POLL);
    }
}

/// What a finished command printed.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// Its stdout; fails the test, showing both streams, unless it succeeded.
    pub fn ok(self, what: &str) -> String {
        assert!(
            self.status.success(),
            "{what} failed ({}):\nstdout: {}\nstderr: {}",
            self.status,
            self.stdout,
            self.stderr
        );
        self.stdout
    }

    /// Its stderr; fails the test unless it failed.
    pub fn failed(self, what: &str) -> String {
        assert!(
            !self.status.success(),
            "{what} should have failed:\nstdout: {}",
            self.stdout
        );
        self.stderr
    }
}

/// Runs a command to its end (no stdin), killing it and failing the test after `deadline`.
pub fn run(mut command: Command, deadline: Duration) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
    let stdout = drain(child.stdout.take().unwrap());
    let stderr = drain(child.stderr.take().unwrap());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{command:?} did not finish within {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

/// All a pipe says until it closes, read by a thread.
fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        text
    })
}

/// Sends `request` (raw HTTP/1.1, which should say `Connection: close`) to `addr` and returns the
/// whole answer: for requests no client library would send, such as one with a foreign `Host`.
pub fn http(addr: &str, request: &str) -> String {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(COMMAND_DEADLINE)).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}
