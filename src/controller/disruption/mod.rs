//! The disruption controls given as flags: whether consolidation runs (`--consolidation`), how
//! many nodes it may empty at once and when ([`window`]). Pure values, below the settings that
//! hold them.

pub mod window;

use k8s_openapi::jiff::Timestamp;

pub use window::{Budget, Window, open};

/// The budget and the windows (`--disruption-budget`, `--disruption-schedule`): what
/// consolidation and make-room both answer to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Nodes of the pool emptied at once, at most.
    pub budget: Budget,
    /// When voluntary disruption may begin; none: always.
    pub schedule: Vec<Window>,
}

impl Limits {
    /// Whether a window is open at `now`.
    pub fn open_at(&self, now: Timestamp) -> bool {
        open(&self.schedule, now)
    }
}

/// `--consolidation`: what the controller does with nodes it could do without.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ConsolidationPolicy {
    /// Nothing: not even an empty machine is handed back.
    #[value(name = "Never")]
    Never,
    /// Hand back a bought machine that has held nothing for `--empty-node-seconds`.
    #[default]
    #[value(name = "WhenEmpty")]
    WhenEmpty,
    /// Also drain the nodes the rebalance plan can empty, then hand them back.
    #[value(name = "WhenUnderutilized")]
    WhenUnderutilized,
}

impl ConsolidationPolicy {
    /// Whether empty bought machines are handed back.
    pub fn hands_back(self) -> bool {
        self != ConsolidationPolicy::Never
    }
}
