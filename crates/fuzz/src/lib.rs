//! latticekv's fuzz targets: one function per kind of untrusted input, each driving the
//! real code in memory and checking what it can. None may panic, hang or allocate without
//! bound for any input; a panic is a bug (in the product, or in a property checked here).
//!
//! | target | input | reaches |
//! |---|---|---|
//! | [`native()`] | a client connection's bytes (length-prefixed protobuf frames) | the native codec, auth, dispatch and the replica cores of a two-worker node in memory |
//! | [`resp()`] | a client connection's bytes (RESP, multibulk or inline) | the incremental command parser, then the RESP codec, commands and cores of that node |
//! | [`peer()`] | a script of peer-port messages: hellos, requests, answers, ticks | the hello's proof, peer message decoding, `on_peer`/`on_reply` of real cores, the cluster agent's membership and replication merge and the views it publishes |
//! | [`wal()`] | a write-ahead log directory: records written by the real log, then damaged, or raw segment bytes | log recovery (`inspect`, `Wal::open`), the node's replay into a shard, repair |
//! | [`config()`] | a TOML configuration file | `NodeConfig` parsing and validation, `[[users]]` included |
//!
//! Two runners share these functions: `cargo test -p fuzz-targets` runs each over its seed
//! corpus (`corpus/<target>/`) and a bounded number of deterministic mutations (part of
//! `make test`); `bench/fuzz` runs the cargo-fuzz targets in `fuzz/` (libFuzzer) for long
//! runs. See the "Fuzzing" section of `docs/security.md`.
//!
//! # Layout
//! - [`input`]: reading structured choices out of fuzz bytes;
//! - one module per target; [`mutate`]: the mutations of the short runs; [`seeds`]: the
//!   hand-made valid inputs of `corpus/`.
//!
//! Depends on `node`, `store`, `wire`, `lattice`, `placement`; used by `fuzz/` and its own
//! tests.
#![warn(missing_docs)]

pub mod config;
pub mod input;
pub mod mutate;
pub mod native;
pub mod peer;
pub mod resp;
pub mod seeds;
pub mod wal;

pub use config::config;
pub use native::native;
pub use peer::peer;
pub use resp::resp;
pub use wal::wal;

/// A target: takes any bytes; panics only on a bug.
pub type Target = fn(&[u8]);

/// Every target, by name (as in `corpus/<name>/` and `fuzz/fuzz_targets/<name>.rs`).
pub const TARGETS: [(&str, Target); 5] = [
    ("native", native),
    ("resp", resp),
    ("peer", peer),
    ("wal", wal),
    ("config", config),
];
