//! A simulated Cluster API (placeholder until the actor lands): its CRDs.

/// Cluster API's MachineDeployment, MachineSet and Machine CRDs, minimal.
pub const CRDS: &str = include_str!("crds.yaml");
