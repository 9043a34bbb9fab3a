//! The cluster: membership, the views workers route by, and the agent that gossips them.
//!
//! # Layout
//! - [`membership`]: the membership lattice and the failure detector (pure).
//! - [`state`]: cluster metadata as gossiped — membership plus the replication table — and
//!   its protobuf form.
//! - [`agent`]: the per-node task that gossips cluster metadata with peers, detects failures
//!   and hands every worker a fresh [`ViewState`] when the rings change.
//!
//! The agent publishes [`ViewState`](crate::view::ViewState)s: what workers route by.

pub mod agent;
pub mod membership;
pub mod state;
