//! The peer plane: how nodes talk to each other, on a port of their own.
//!
//! Replication, hand-off, anti-entropy, forwarded requests, tombstone reclamation and
//! cluster membership travel here, never on client ports — and the node uses its own small
//! transport, not the public client crate.
//!
//! # Layout
//! - [`convert`]: the messages on the wire (`PeerRequest` / `PeerResponse`);
//! - [`transport`]: a connection from the calling side (hello, pipelined requests,
//!   answers in any order);
//! - [`listen`]: the peer port (hellos, handing connections to workers and the agent);
//! - [`secret`]: the cluster secret's proof in every hello.
pub mod convert;
pub mod listen;
pub mod secret;
pub mod transport;
