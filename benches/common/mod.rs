//! Command-line arguments of the bench binaries (`cargo bench --bench NAME -- ARGS`), as they
//! all read them: `--name value` and `--flag`.
#![allow(dead_code)]

/// The value after `name`, if given.
pub fn arg_str(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// The value after `name`, parsed; `default` when absent or unreadable.
pub fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    arg_str(name)
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Whether `name` is given.
pub fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}
