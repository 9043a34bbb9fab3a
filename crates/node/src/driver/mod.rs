//! The tokio driver: threads, sockets, timers and disks around the replica cores.
//!
//! Each worker is a thread with a single-threaded runtime driving one [`Core`](crate::core)
//! — carrying out its effects, ticking it, feeding it what arrives. Nothing here decides
//! anything the core decides; what is left is I/O.
//!
//! # Layout
//! - [`worker`]: a worker, and what its connections ask of it;
//! - [`thread`]: a worker's thread and its tasks;
//! - [`effects`]: carrying out what its core asks;
//! - [`peers`]: its requests to other workers, and the connections they travel on;
//! - [`journal`]: the write-ahead log, the disk tier's journal, snapshots;
//! - [`mesh`]: the channels between a node's workers;
//! - [`peer_conn`]: serving a peer connection on its worker;
//! - [`shared`]: what a node's workers share;
//! - [`conns`]: connection accounting.

pub mod backing;
pub mod conns;
pub mod effects;
pub mod journal;
pub mod mesh;
pub mod peer_conn;
pub mod peers;
pub mod replay;
pub mod shared;
pub mod thread;
pub mod worker;
