//! The latticekv Rust client.
//!
//! [`Client::connect`] asks the node's front port for its topology (worker addresses, ring
//! parameters, explicit replication vectors), then sends every request straight to a worker
//! holding the key, over one pipelined connection per worker shared by all tasks using the
//! client. A `REDIRECT` answer (the topology changed) refreshes the topology and retries.
//!
//! ```no_run
//! # async fn demo() -> Result<(), client::ClientError> {
//! let c = client::Client::connect("127.0.0.1:7700").await?;
//! c.assign("greeting", "hello").await?;
//! assert_eq!(c.get_lww("greeting").await?.as_deref(), Some(&b"hello"[..]));
//! c.counter_add("visits", 1).await?;
//! c.set_add("tags", ["a", "b"]).await?;
//! # Ok(()) }
//! ```
//!
//! # Layout
//! - [`error`]: [`ClientError`] and its classification (retryable, redirect, caller's fault).
//! - [`connection`]: one pipelined connection to one address.
//! - [`placement`](crate::routing): the client's copy of the node layout.
//! - [`client`](crate::Client): the typed API.
//! - [`session`]: sessions and transactions at every consistency level
//!   (`docs/consistency.md`).
//! - [`Subscription`]: a stream of new versions of keys ([`Client::subscribe`]).
//!
//! Connections use TLS when [`ClientOptions::tls`] is set ([`ClientTls`]: the CA that
//! signed the node's certificate, or the system's).
//!
//! Depends on `lattice`, `placement`, `tls`, `wire` only.
#![warn(missing_docs)]

mod api;
pub mod connection;
pub mod error;
pub mod routing;
pub mod session;
mod subscribe;

pub use api::{Client, ClientOptions, Condition, Delta};
pub use connection::{ClientTls, Credentials};
pub use error::ClientError;
pub use lattice::{LatticeType, Value};
pub use session::{Level, Session, SessionOptions, Transaction};
pub use subscribe::{value_version, Notification, Subscription};
pub use tls::TlsError;
