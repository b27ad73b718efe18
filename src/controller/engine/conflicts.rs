//! What a batch's failed writes mean for its jobs: pure, table-tested.
//!
//! Rules enforced here (docs/design.md, rule 2 and "The placement engine"):
//! - a job whose deciding failed is answered with that error;
//! - a job waiting on a node whose write failed with an error (not a 409) fails with it;
//! - a job waiting on a node whose write met a 409 is decided again from a fresh read of that
//!   node, at most `max_conflicts` times in a row, then fails so its reconcile backs off;
//! - the first job that touched a failed node, and every later job that touched no node, may
//!   have counted room that write did not take: those are decided again too (no conflict
//!   counted);
//! - everything else is answered: its writes are committed.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::error::Error;

/// How one node's write failed.
#[derive(Clone, Debug)]
pub(super) enum NodeFailure {
    /// 409: the node changed since it was read.
    Conflict,
    /// Anything else.
    Error(Arc<kube::Error>),
}

/// What the resolution needs to know of one job, in decision order.
#[derive(Clone, Copy, Debug)]
pub(super) struct JobWrites<'a> {
    /// The nodes whose write the job waits for.
    pub nodes: &'a [String],
    /// Deciding it failed (it is answered with that error).
    pub failed: bool,
    /// Conflicts it met in earlier rounds.
    pub conflicts: u32,
}

/// What becomes of one job after the batch's writes.
#[derive(Debug)]
pub(super) enum Resolution {
    /// Its writes are committed (or it failed while deciding): send its answer.
    Answer,
    /// Fail it with this error.
    Fail(Error),
    /// Decide it again in the next round, having met this many conflicts.
    Retry { conflicts: u32 },
}

/// One resolution per job, and the nodes to read again before the next round.
pub(super) fn resolve(
    jobs: &[JobWrites<'_>],
    failures: &HashMap<String, NodeFailure>,
    max_conflicts: u32,
) -> (Vec<Resolution>, BTreeSet<String>) {
    // The first job (in decision order) that touched each failed node.
    let swayed_from = jobs
        .iter()
        .position(|job| job.nodes.iter().any(|n| failures.contains_key(n)));
    let mut reread = BTreeSet::new();
    let resolutions = jobs
        .iter()
        .enumerate()
        .map(|(index, job)| {
            let failed_here: Vec<(&String, &NodeFailure)> = job
                .nodes
                .iter()
                .filter_map(|n| failures.get(n).map(|f| (n, f)))
                .collect();
            if job.failed {
                return Resolution::Answer;
            }
            if let Some((node, source)) = failed_here.iter().find_map(|(n, f)| match f {
                NodeFailure::Error(source) => Some((*n, source)),
                NodeFailure::Conflict => None,
            }) {
                return Resolution::Fail(Error::WriteNodeStatus {
                    node: node.clone(),
                    source: source.clone(),
                });
            }
            if let Some((node, _)) = failed_here.first() {
                let conflicts = job.conflicts.saturating_add(1);
                if conflicts > max_conflicts {
                    return Resolution::Fail(Error::ConflictRetriesExhausted {
                        node: (*node).clone(),
                        attempts: conflicts,
                    });
                }
                reread.insert((*node).clone());
                return Resolution::Retry { conflicts };
            }
            if job.nodes.is_empty() && swayed_from.is_some_and(|from| index > from) {
                return Resolution::Retry {
                    conflicts: job.conflicts,
                };
            }
            Resolution::Answer
        })
        .collect();
    (resolutions, reread)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn job(nodes: &[String], conflicts: u32) -> JobWrites<'_> {
        JobWrites {
            nodes,
            failed: false,
            conflicts,
        }
    }

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    fn server_error() -> NodeFailure {
        NodeFailure::Error(Arc::new(kube::Error::Api(Box::new(
            kube::core::Status::failure("etcd is down", "InternalError").with_code(500),
        ))))
    }

    /// A compact form of a resolution, for tables.
    fn short(resolution: &Resolution) -> String {
        match resolution {
            Resolution::Answer => "answer".into(),
            Resolution::Retry { conflicts } => format!("retry {conflicts}"),
            Resolution::Fail(error) => format!("fail {}", error.label()),
        }
    }

    fn resolved(
        jobs: &[JobWrites<'_>],
        failures: &[(&str, NodeFailure)],
        max_conflicts: u32,
    ) -> (Vec<String>, Vec<String>) {
        let failures = failures
            .iter()
            .map(|(n, f)| ((*n).to_owned(), f.clone()))
            .collect();
        let (resolutions, reread) = resolve(jobs, &failures, max_conflicts);
        (
            resolutions.iter().map(short).collect(),
            reread.into_iter().collect(),
        )
    }

    #[test]
    fn without_failures_every_job_is_answered_and_nothing_is_read_again() {
        let (a, none) = (names(&["a"]), names(&[]));
        let jobs = [job(&a, 0), job(&none, 0), job(&a, 2)];
        assert_eq!(
            resolved(&jobs, &[], 5),
            (names(&["answer", "answer", "answer"]), names(&[]))
        );
    }

    #[test]
    fn a_conflict_retries_the_jobs_on_that_node_and_the_later_ones_that_touched_nothing() {
        // Choice order: j0 touched a, j1 nothing (before the failed node's first job: kept),
        // j2 touched b (409), j3 touched a, j4 nothing (after j2: it may have counted b's room).
        let (a, b, none) = (names(&["a"]), names(&["b"]), names(&[]));
        let jobs = [
            job(&a, 0),
            job(&none, 0),
            job(&b, 1),
            job(&a, 0),
            job(&none, 3),
        ];
        assert_eq!(
            resolved(&jobs, &[("b", NodeFailure::Conflict)], 5),
            (
                names(&["answer", "answer", "retry 2", "answer", "retry 3"]),
                names(&["b"])
            )
        );
    }

    #[test]
    fn past_the_conflict_budget_a_job_fails_and_its_node_is_not_read_again_for_it() {
        // j0 met 5 conflicts before: a 6th > max 5 fails it. j1 met 4: a 5th is retried.
        let (a, b) = (names(&["a"]), names(&["b"]));
        let jobs = [job(&a, 5), job(&b, 4)];
        let failures = [("a", NodeFailure::Conflict), ("b", NodeFailure::Conflict)];
        assert_eq!(
            resolved(&jobs, &failures, 5),
            (
                names(&["fail conflict_retries_exhausted", "retry 5"]),
                names(&["b"])
            )
        );
    }

    #[test]
    fn a_write_error_fails_every_job_on_that_node_even_beside_a_conflict() {
        // j0 waits on a (409) and b (500): the error wins. j1 waits on b alone.
        let (ab, b) = (names(&["a", "b"]), names(&["b"]));
        let jobs = [job(&ab, 0), job(&b, 0)];
        let failures = [("a", NodeFailure::Conflict), ("b", server_error())];
        assert_eq!(
            resolved(&jobs, &failures, 5),
            (
                names(&["fail write_node_status", "fail write_node_status"]),
                names(&[])
            )
        );
    }

    #[test]
    fn a_job_that_failed_while_deciding_is_answered_with_its_own_error() {
        let a = names(&["a"]);
        let jobs = [JobWrites {
            nodes: &a,
            failed: true,
            conflicts: 0,
        }];
        assert_eq!(
            resolved(&jobs, &[("a", NodeFailure::Conflict)], 5),
            (names(&["answer"]), names(&[]))
        );
    }

    #[test]
    fn jobs_before_the_first_touch_of_a_failed_node_are_not_swayed() {
        // j0 and j1 touched nothing and came before j2, the first to touch the failed node.
        let (none, c) = (names(&[]), names(&["c"]));
        let jobs = [job(&none, 0), job(&none, 0), job(&c, 0)];
        assert_eq!(
            resolved(&jobs, &[("c", NodeFailure::Conflict)], 5),
            (names(&["answer", "answer", "retry 1"]), names(&["c"]))
        );
    }
}
