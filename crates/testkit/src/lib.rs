//! Helpers shared by latticekv's integration tests (a dev-dependency only; never published).
//!
//! The tests drive real processes and real sockets: [`NodeProc`] starts the `latticekv`
//! binary on ephemeral ports (port 0, never fixed ones) and reads back the addresses it
//! prints; [`Resp`] and [`Native`] are blocking connections that speak raw bytes and raw
//! protobuf frames, so tests can send exactly what they mean, including garbage; [`Tmpfs`]
//! mounts a small filesystem to fill up.
//!
//! The kit does not know where the binary is: `env!("CARGO_BIN_EXE_latticekv")` exists only
//! inside the `cli` crate's tests, so every starter takes the path (`cli`'s
//! `tests/common/mod.rs` passes it; other crates find the built binary themselves).
//!
//! ```no_run
//! use testkit::{NodeProc, Resp};
//!
//! let node = NodeProc::start_bin("target/debug/latticekv", &["--workers", "2"]);
//! node.cli_ok(&["put", "k", "v"]);
//! let mut resp = Resp::connect(node.resp);
//! resp.roundtrip(&[b"GET", b"k"], b"$1\r\nv\r\n");
//! ```
//!
//! # Layout
//! - [`node`]: [`NodeProc`], a running `latticekv local` / `server` process; the signals
//!   tests stop it with ([`SIGINT`], [`SIGTERM`]).
//! - [`resp`]: [`Resp`], a raw blocking RESP connection.
//! - [`native`]: [`Native`], a raw blocking native-protocol connection.
//! - [`wait`]: [`eventually`], [`closed_by_peer`], [`serial`].
//! - [`pki`]: [`Pki`], a throwaway CA and certificates for TLS tests.
//! - [`tmpfs`]: [`Tmpfs`], a tmpfs mount for full-disk tests (needs root: tests that use it
//!   fail without it, they never skip).
//! - [`values`]: one lattice value of every type.
//! - [`pg`]: [`PgServer`], a throwaway PostgreSQL server (Debian's package, installed by
//!   `make deps`) for the backing-store tests; stopped and restarted at will.
//!
//! Depends on `wire` (frames and protobuf types) and `lattice` (values) and nothing else of
//! latticekv: it starts the node as a process, never links it.
#![warn(missing_docs)]

pub mod native;
pub mod node;
pub mod pg;
pub mod pki;
pub mod resp;
pub mod tmpfs;
pub mod values;
pub mod wait;

pub use native::Native;
pub use node::{NodeProc, SIGINT, SIGTERM};
pub use pg::PgServer;
pub use pki::Pki;
pub use resp::Resp;
pub use tmpfs::Tmpfs;
pub use wait::{closed_by_peer, eventually, serial};

/// A single-threaded tokio runtime with I/O and timers, for tests that drive the async
/// clients from a synchronous `#[test]`.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}
