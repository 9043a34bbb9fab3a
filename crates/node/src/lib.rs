//! The latticekv storage node.
//!
//! A node runs one worker thread per core. Each worker owns a [`Shard`](shard::Shard) — its
//! keys, its clock, its changeset — on a single-threaded tokio runtime, so the request path
//! takes no locks and touches no shared memory. Workers talk only by message passing
//! ([`mesh`]): forwarded requests, gossip of replicated keys, control messages.
//!
//! # Layout
//! - [`cluster`]: membership, failure detection, cluster views, the cluster agent.
//! - [`config`]: node configuration and limits, with documented defaults.
//! - [`durability`]: write-ahead logs, the disk journal syncer, acknowledgement levels.
//! - [`error`]: [`NodeError`], every error a request can get, with its wire code and RESP text.
//! - [`op`]: the protocol-neutral operations both protocols are translated into.
//! - [`forward`]: those operations in protobuf form, for running them on another node.
//! - [`shard`]: one worker's state and the execution of operations (no I/O; unit-testable).
//! - [`mesh`]: messages between workers and the bounded channels that carry them.
//! - [`worker`]: the worker thread: runtime, inbox, gossip timer, connection tasks.
//! - [`native`]: the native (protobuf) protocol connection handler.
//! - [`subscribe`]: subscriptions — pushing new versions of keys to connections.
//! - [`resp`]: the Redis protocol connection handler and commands.
//! - [`server`]: starting a node ([`Node::start`](server::Node::start)) and stopping it.
//! - [`routing`]: a routing node: a member without data answering "where is key k".
//!
//! Depends on `lattice`, `placement`, `store`, `wire`; used by the `latticekv` binary.
#![warn(missing_docs)]

pub mod cluster;
pub mod config;
pub mod durability;
pub mod error;
pub mod forward;
pub mod mesh;
pub mod native;
pub mod op;
pub mod resp;
pub mod routing;
pub mod server;
pub mod shard;
pub mod subscribe;
pub mod worker;

pub use config::{ClusterConfig, DiskConfig, Limits, NodeConfig, NodeTier};
pub use error::NodeError;
pub use server::{Node, NodeAddresses, PublishedAddresses};
