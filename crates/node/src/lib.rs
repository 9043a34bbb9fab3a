//! The latticekv storage node.
//!
//! A node runs one worker thread per core. Each worker drives a replica core
//! ([`core::Core`]): a state machine without I/O holding the worker's keys and making
//! every decision about them — client operations, acknowledgement levels, gossip, hand-off,
//! anti-entropy, tombstone reclamation. A thin tokio driver ([`driver`]) carries out what
//! the core asks: sockets, timers, the write-ahead log. The deterministic simulation
//! (`tests/simulation.rs`) drives the same core. Clients talk to the node on client ports
//! ([`front`]); nodes talk to each other on the peer port ([`peer`]).
//!
//! # Layout
//! From the bottom up (each module depends only on those above it):
//! - [`error`], [`op`], [`ack`], [`clock`]: errors, operations, acknowledgement levels,
//!   injected time;
//! - `glob`: Redis's glob patterns (channels, keys, fields, config parameters);
//! - [`view`]: what workers route by ([`view::ViewState`]);
//! - [`vectors`]: replication vectors — defaults per tier and explicit exceptions;
//! - [`stats`]: a worker's statistics for the elasticity policy (sketches, windows);
//! - [`config`]: node configuration and limits, with documented defaults;
//! - [`tls`]: certificates and TLS handshakes of every port;
//! - [`auth`]: users, permissions and password checks of the client ports;
//! - [`codec`]: records, journal entries and forwarded ops in protobuf form;
//! - [`script`]: Lua scripts — the script cache and the engine, without the commands;
//! - [`subscribe`]: subscription tables;
//! - [`writeback`]: write policies towards a backing store and TARDIS's modes;
//! - [`shard`]: one worker's keys and what is done to them (storage engines included);
//! - [`core`]: the replica core — events in, effects out;
//! - [`peer`]: the peer plane — its messages, transport and port;
//! - [`cluster`]: membership, failure detection, the cluster agent;
//! - [`driver`]: worker threads, effects, the write-ahead log;
//! - [`leave`]: leaving the cluster;
//! - [`metrics`]: the node's metrics in the Prometheus text format (rendering only);
//! - [`front`]: client ports — the connection pipeline, the native and Redis protocols;
//! - [`server`]: starting a node ([`Node::start`](server::Node::start)) and stopping it;
//! - [`routing`]: a routing node: a member without data answering "where is key k";
//! - `fuzzing` (hidden): entry points for the fuzz targets (`crates/fuzz`).
//!
//! Depends on `lattice`, `placement`, `store`, `backing`, `tls`, `wire`; used by the
//! `latticekv` binary (`crates/cli`) and the fuzz targets (`crates/fuzz`).
#![warn(missing_docs)]

pub mod ack;
pub mod auth;
pub mod clock;
pub mod cluster;
pub mod codec;
pub mod codec_journal;
pub mod config;
pub mod core;
pub mod driver;
pub mod error;
pub mod front;
#[doc(hidden)]
pub mod fuzzing;
pub(crate) mod glob;
pub mod leave;
pub mod metrics;
pub(crate) mod priority;
// ---- lists (helper B) ----
pub mod list_op;
pub mod op;
pub mod peer;
pub mod pubsub;
pub mod routing;
pub mod script;
pub mod server;
pub mod shard;
pub mod stats;
pub mod subscribe;
#[cfg(test)]
mod test_fixtures;
pub mod tls;
pub mod vectors;
pub mod view;
pub mod writeback;
// ---- keys and server (CLIENT LIST/KILL node-wide) ----
pub mod clients;
// Keyspace notifications.
pub mod notify;

pub use config::{ClusterConfig, DiskConfig, DiskCopy, Limits, NodeConfig, NodeTier};
pub use error::NodeError;
pub use server::{Node, NodeAddresses, PublishedAddresses};
