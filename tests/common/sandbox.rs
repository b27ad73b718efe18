//! A running `tenant-placer sandbox`: the in-memory API on a free loopback port with the
//! controller running, a kubeconfig for it, and the fleet page. kubectl must be on PATH (CI
//! installs it): without it [`Sandbox::start`] fails the test, saying so.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use super::{COMMAND_DEADLINE, Output, collect_lines, run, wait_for};

/// The tenant-placer binary this test target was built with.
pub fn binary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tenant-placer"))
}

/// Fails the test, saying why, unless kubectl runs.
pub fn require_kubectl() {
    match Command::new("kubectl")
        .args(["version", "--client"])
        .output()
    {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "`kubectl version --client` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!(
            "kubectl is not on PATH ({e}): these tests drive the real kubectl (1.32) against \
             `tenant-placer sandbox`; install kubectl to run them"
        ),
    }
}

/// A running `tenant-placer sandbox` process, killed when dropped (or by [`Sandbox::stop`]).
#[derive(Debug)]
pub struct Sandbox {
    child: Child,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    stdout: Arc<Mutex<Vec<String>>>,
    page_url: Option<String>,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Sandbox {
    /// Starts the binary on a free loopback port, applying `files` (`-f`), and waits for its
    /// kubectl instructions.
    pub fn start(files: &[&Path]) -> Sandbox {
        Sandbox::start_with(files, &[])
    }

    /// [`Sandbox::start`] with more `sandbox` flags (e.g. `--provisioner simulated`).
    pub fn start_with(files: &[&Path], flags: &[&str]) -> Sandbox {
        require_kubectl();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        let mut command = binary();
        command
            .args(["sandbox", "--listen", "127.0.0.1:0", "--kubeconfig-out"])
            .arg(&kubeconfig);
        for file in files {
            command.arg("-f").arg(file);
        }
        command.args(flags);
        let mut child = command
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tenant-placer sandbox");
        let stdout = collect_lines(child.stdout.take().unwrap());
        let stderr = collect_lines(child.stderr.take().unwrap());
        let mut sandbox = Sandbox {
            child,
            dir,
            kubeconfig,
            stdout,
            page_url: None,
        };
        let export = format!("export KUBECONFIG={}", sandbox.kubeconfig.display());
        wait_for("the sandbox to print its kubectl instructions", || {
            if let Some(status) = sandbox.child.try_wait().unwrap() {
                panic!(
                    "the sandbox exited ({status}):\nstdout: {:?}\nstderr: {:?}",
                    sandbox.stdout.lock().unwrap(),
                    stderr.lock().unwrap()
                );
            }
            let lines = sandbox.stdout.lock().unwrap();
            lines.iter().any(|l| l.trim() == export).then_some(())
        });
        // The page line comes before the instructions.
        sandbox.page_url = sandbox.stdout.lock().unwrap().iter().find_map(|l| {
            let rest = l.strip_prefix("page")?.trim_start();
            rest.split_whitespace()
                .next()
                .filter(|url| url.starts_with("http://127.0.0.1:"))
                .map(str::to_owned)
        });
        sandbox
    }

    /// The kubeconfig it wrote, for another client (e.g. a second controller) of its API.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Everything it printed so far.
    pub fn printed(&self) -> String {
        self.stdout.lock().unwrap().join("\n")
    }

    /// The fleet page's URL, as it printed it.
    pub fn page_url(&self) -> &str {
        self.page_url
            .as_deref()
            .unwrap_or_else(|| panic!("the sandbox printed no page URL:\n{}", self.printed()))
    }

    /// The API's address (`127.0.0.1:PORT`), from the `API` line it printed.
    pub fn api_addr(&self) -> String {
        self.stdout
            .lock()
            .unwrap()
            .iter()
            .find_map(|l| {
                let url = l.strip_prefix("API")?.split_whitespace().next()?;
                url.strip_prefix("http://").map(str::to_owned)
            })
            .unwrap_or_else(|| panic!("the sandbox printed no API URL:\n{}", self.printed()))
    }

    /// Kills it (the page and the API go away); dropping it does the same.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A kubectl command against it, with its own cache and HOME, not yet run.
    pub fn kubectl_command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("kubectl");
        command
            .args(args)
            .arg("--cache-dir")
            .arg(self.dir.path().join("kube-cache"))
            .env("KUBECONFIG", &self.kubeconfig)
            .env_remove("KUBECTL_EXTERNAL_DIFF")
            .env("HOME", self.dir.path());
        command
    }

    /// Runs kubectl against it, killed after [`COMMAND_DEADLINE`].
    pub fn kubectl(&self, args: &[&str]) -> Output {
        run(self.kubectl_command(args), COMMAND_DEADLINE)
    }

    /// `kubectl get ... -o jsonpath=...`, or None when it fails.
    pub fn jsonpath(&self, resource: &[&str], path: &str) -> Option<String> {
        let mut args = vec!["get"];
        args.extend_from_slice(resource);
        let format = format!("jsonpath={path}");
        args.extend(["-o", format.as_str()]);
        let out = self.kubectl(&args);
        out.status.success().then_some(out.stdout)
    }

    /// Waits until `kubectl get ... -o jsonpath=...` reads `want`.
    pub fn wait_jsonpath(&self, resource: &[&str], path: &str, want: &str) {
        wait_for(
            &format!(
                "`kubectl get {} -o jsonpath={path}` to be {want}",
                resource.join(" ")
            ),
            || (self.jsonpath(resource, path).as_deref() == Some(want)).then_some(()),
        );
    }

    /// Writes a file into its private directory, for kubectl to read.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}
