//! latticekv's serverless layer: Python functions and DAGs of them, run next to the store.
//!
//! A client registers functions (cloudpickle bytes) and DAGs with a **scheduler**, then
//! calls them. The scheduler places each call on a **compute host** (protocol CT: the whole
//! DAG on one host), which runs the functions on its Python **executor** processes, passing
//! results along the DAG's edges, and applies the functions' writes at the sink.
//! `docs/serverless.md` describes the layer for users.
//!
//! # Layout
//! - [`dag`]: DAG validation (acyclic, connected, one sink) and topological order. Pure.
//! - [`placement`]: which host runs a call — least loaded, ties to data locality. Pure.
//! - [`registry`]: functions and DAGs stored in the KVS under `lkv.faas/…`, cached.
//! - [`data`]: how a host reads key references and commits writes — the seam where the
//!   HydroCache crate plugs in; [`data::DirectStore`] is the "no cache" baseline.
//! - [`lwwcache`]: [`lwwcache::LwwCache`], the paper's LWW baseline: a cache per host,
//!   no causal protocol.
//! - [`hydro`]: [`hydro::CausalCache`], HydroCache in the host (protocol CT): the causal
//!   cut, pinned snapshots, causal commits at the sink, refresh by subscription.
//! - `mtcc`: protocol OPT in the host's cache (`data::OptPlane` for `hydro::CausalCache`);
//!   `fnrun`: one function of a DAG spread over hosts, on its host; [`peer`]: the caches'
//!   fetches of each other's pinned versions; [`meta`]: OPT's metadata on the wire;
//!   [`distributed`]: the scheduler's side of a DAG spread over hosts. Pure.
//! - [`scheduler`]: the scheduler server (clients and hosts on one port).
//! - [`metrics`]: a scheduler's and a host cache's counters as Prometheus text.
//! - [`host`]: a compute host: executor processes, DAG execution.
//! - [`client`]: the Rust client of a scheduler (used by the Python SDK and the CLI).
//! - [`conn`]: framed protobuf over TCP, shared by all of the above; [`shm`]: the shared
//!   region of each executor for large tasks and results, `exlink`: the host's end of the
//!   link to an executor (socket and region).
//! - [`error`]: the error type, [`FaasError`].
//!
//! The messages are `wire::faas` (`crates/wire/proto/faas.proto`).
//!
//! Depends on `wire`, `client`, `lattice`; used by `cli` and the Python package.
#![warn(missing_docs)]

pub mod client;
pub mod conn;
pub mod dag;
pub mod data;
pub mod distributed;
pub mod error;
mod executors;
mod exlink;
mod fnrun;
pub mod gc;
pub mod host;
pub mod hydro;
pub mod lwwcache;
pub mod meta;
pub mod metrics;
mod mtcc;
pub mod peer;
pub mod placement;
mod reftable;
pub mod registry;
pub mod scheduler;
pub mod shm;
mod values;

pub use error::FaasError;
pub use wire::faas as pb;

/// The key of the store's OR-set holding the addresses of running schedulers: the SDK
/// connects to the store and finds a scheduler there.
pub const SCHEDULERS_KEY: &str = "lkv.faas/schedulers";

/// Refuses a listen address other than loopback: the layer has no authentication yet, and
/// a function is arbitrary code.
///
/// # Errors
/// A message saying why, for a non-loopback address.
pub fn check_loopback(addr: &std::net::SocketAddr) -> Result<(), String> {
    if addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(format!(
            "{addr} is not a loopback address: the faas layer has no authentication yet and \
             runs arbitrary code, so it only listens on loopback (docs/serverless.md)"
        ))
    }
}
