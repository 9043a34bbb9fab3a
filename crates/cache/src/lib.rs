//! HydroCache's logic as a pure library (`spec/hydrocache.md`, issue 16): the strict causal
//! cut of one cache, the staging of fetched and pushed versions, per-request pinned versions,
//! and the MTCC protocols (CT, OPT, CON, HB), the sink's commit and a TCC anomaly checker.
//!
//! Nothing here does I/O, spawns tasks or reads a clock: time comes in as `now_ms` /
//! `deadline_ms`, fetches are *requested* (the caller performs them and hands the results
//! back), and every decision is a plain function of its inputs. The cache process (the I/O
//! shell: store client, subscriptions, cache-to-cache fetches, scheduler RPCs) and the
//! deterministic simulation both drive this crate; neither copies its logic.
//!
//! Values are [`lattice::MultiKeyCausal`]: an antichain of versions whose
//! [`clock`](MultiKeyCausal::clock) is the join of the versions' clocks and whose
//! [`deps`](MultiKeyCausal::deps) is the key-wise join of their dependencies. "`have`
//! supersedes `need`" is `need.leq(&have.clock())` ([`supersede`]). A key that does not exist
//! is the bottom, the empty `MultiKeyCausal`: it supersedes only the empty clock.
//!
//! # Layout
//! - [`versionset`]: [`VersionRef`] / [`VersionSet`] (key → clock + where the full versions
//!   are pinned), union (Def. 7), supersession, and the KOC check (Def. 6).
//! - [`cut`]: [`Cut`], the strict causal cut (Def. 3) with reverse-dependency index, byte
//!   accounting, capacity and LRU eviction of a key with all its dependents.
//! - [`staging`]: [`Staging`], the sans-I/O state machine that closes fetched or pushed
//!   versions under their dependencies before [`Cut::merge_staging`] exposes them at once.
//! - [`pins`]: [`Pins`], per-request pinned full versions with deadlines and bounds.
//! - [`snapshot`]: RetrieveCut (Alg. 2, with erratum E1), CreateSnapshot (Alg. 4) and CT's
//!   `C ∩ R̃_DAG`.
//! - [`opt`]: OPT's linear flow (Alg. 1) split into plan / validate / finish, and the
//!   parallel flow (Alg. 3).
//! - [`con`]: CON's scheduler-side planning (Alg. 5) and the cache-side binding of reads.
//! - [`hb`]: HB's metadata view, its simulation of OPT and the result-reuse test.
//! - [`dag`]: the shape of a DAG (read keysets and edges), shared by HB and the tests.
//! - [`commit`]: [`Executor`], the sink's commit (I1, I2, mutual dependencies, the
//!   per-executor latest-written merge, executor-id rotation).
//! - [`gc`]: the dependency-metadata GC rule ([`Stable`], pruning) and its rounds
//!   ([`Round`], [`Holdings`]).
//! - [`checker`]: the TCC anomaly checker and the metadata-in-payload encoding used for
//!   bare-store baselines.
//! - [`oracle`]: [`VersionLog`], every version ever written, which answers the transitive
//!   questions the KOC check needs (tests and simulations).
//!
//! Depends on `lattice` only. `docs/serverless.md` ("HydroCache internals") records the
//! decisions this crate takes where the paper is silent.

#![warn(missing_docs)]

use std::collections::BTreeSet;
use std::fmt;

pub mod checker;
pub mod commit;
pub mod con;
pub mod cut;
pub mod dag;
mod error;
pub mod gc;
pub mod hb;
pub mod opt;
pub mod oracle;
pub mod pins;
pub mod snapshot;
pub mod staging;
pub mod versionset;

#[cfg(test)]
mod tests;

pub use commit::Executor;
pub use cut::{Cut, Merged, Shared};
pub use dag::{Dag, FnSpec};
pub use error::Error;
pub use gc::{Holdings, Round, Stable};
pub use oracle::VersionLog;
pub use pins::{PinLimits, Pins};
pub use staging::{Fetch, Staging, Step};
pub use versionset::{supersede, VersionRef, VersionSet};

pub use lattice::{Blob, CausalVersion, MultiKeyCausal, VectorClock};

/// A key: the same byte string the store uses (and the key type of
/// [`MultiKeyCausal::deps`]).
pub type Key = Blob;

/// A keyset (Def. 5): keys without versions, such as a function's read set `R̃_i`.
pub type KeySet = BTreeSet<Key>;

/// The identity of one cache (one per compute node), as it appears in
/// [`VersionRef::sources`].
///
/// A plain `u64` chosen by whoever starts the caches (the shell maps it to an address); it
/// only has to be unique among the caches that can take part in one request. A number
/// rather than an address string keeps versionsets small on every DAG edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CacheId(pub u64);

impl fmt::Display for CacheId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cache-{}", self.0)
    }
}

/// The identity of one *attempt* of a DAG request: pins are held per `ReqId`.
///
/// An OPT retry or a fallback to CON takes a fresh id, so that nothing pinned by the
/// aborted attempt can be mistaken for a version of the new one; the old id is released.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReqId(pub u64);

impl fmt::Display for ReqId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "req-{}", self.0)
    }
}

/// Where a protocol step runs and for which request: the cache that pins, the request
/// attempt the pins belong to, and the deadline after which [`Pins::expire`] may drop them
/// (the sink died, or the release message was lost).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Here {
    /// This cache.
    pub cache: CacheId,
    /// The request attempt.
    pub req: ReqId,
    /// Pins made for the request live at least until this time (ms, caller's clock).
    pub deadline_ms: u64,
}

/// A key for messages: UTF-8 when it is, escaped bytes otherwise.
pub(crate) fn show(key: &[u8]) -> String {
    String::from_utf8(key.to_vec()).unwrap_or_else(|_| format!("{key:?}"))
}
