//! The policy engine of latticekv's elasticity: the elastic Anna paper's Algorithms 1–5 as a
//! pure function.
//!
//! [`decide`] takes a [`Snapshot`] of one statistics window (per-node storage and
//! occupancy, per-key access counts summed across replicas, latency measured at the
//! servers), a [`PolicyConfig`] and the soft [`PolicyState`] kept between rounds, and
//! returns [`Action`]s: replication-vector changes (promotion, demotion, hot-key
//! replication, de-replication) and node additions and removals. No I/O, no clock, no
//! randomness: the monitor process collects the snapshot and carries out the actions.
//!
//! # Layout
//! - [`config`]: parameters with the paper's defaults, and their validation.
//! - [`snapshot`]: the input; [`collect`] builds it from the nodes' status reports.
//! - [`actions`]: the output.
//! - [`state`]: the soft state (grace period, pending nodes, per-key cooldowns).
//! - [`policy`]: the rules (`tiering`, `hot`, `elastic`).
//! - `sim` (feature `sim`): a tiny cluster model that applies actions to snapshots.
//! - [`manager`]: the cluster managers that carry out node additions and removals (local
//!   child processes; Kubernetes StatefulSets with the feature `kubernetes`). Unlike the
//!   rest of the crate they do I/O (tokio).
//!
//! `docs/elasticity.md` ("Policy engine") describes every rule and parameter and how they
//! differ from the paper and its reference code.
#![warn(missing_docs)]

pub mod actions;
pub mod collect;
pub mod config;
pub mod manager;
pub mod policy;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod snapshot;
pub mod state;

#[cfg(test)]
mod tests;

pub use actions::Action;
pub use config::{Aggregate, Band, ConfigError, PolicyConfig, Prices};
pub use policy::{decide, observe, Observed};
pub use snapshot::{AccessSummary, KeyStats, Latency, NodeStats, Replicas, Snapshot, Tier, Vector};
pub use state::PolicyState;
