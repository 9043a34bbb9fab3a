//! The cluster: membership, the views workers route by, and the agent that gossips them.
//!
//! # Layout
//! - [`membership`]: the membership lattice and the failure detector (pure).
//! - [`replication`]: the explicit replication vectors between nodes — bucket digests and
//!   the entries of the buckets that differ.
//! - [`state`]: cluster metadata as gossiped — the membership and its protobuf form — and
//!   the views built from it.
//! - [`agent`]: the per-node task that gossips cluster metadata with peers, detects failures
//!   and hands every worker a fresh `ViewState` when the rings change.
//!
//! The agent publishes [`ViewState`](crate::view::ViewState)s: what workers route by.

pub mod agent;
pub mod membership;
pub mod replication;
pub mod state;
