//! The crate's error type. Protocol outcomes that are part of normal operation (an OPT
//! abort, a staging step that must wait) are not errors: they are values of their own
//! enums ([`crate::opt::Abort`], [`crate::Step`]).

use thiserror::Error;

use crate::{show, Key, ReqId};

/// What can go wrong when the shell drives the cache logic.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum Error {
    /// Merging the staged versions would need more memory than the cut may hold, even after
    /// evicting everything that may be evicted. The paper reschedules the function on
    /// another node (P:125); nothing was changed.
    #[error(
        "the staged versions need {needed} bytes but the cut holds at most {capacity} \
         (after evicting what it could); reschedule the function"
    )]
    WouldExceedCapacity {
        /// Bytes the cut would hold after the merge.
        needed: usize,
        /// The cut's capacity.
        capacity: usize,
    },
    /// [`crate::Cut::merge_staging`] was called before the staging was closed: fetches are
    /// outstanding or a dependency is not yet superseded (step the staging again).
    #[error("the staging is not closed yet: {unresolved} key(s) still to fetch")]
    NotReady {
        /// Keys that still need a (re)fetch.
        unresolved: usize,
    },
    /// The staging was already merged into the cut.
    #[error("the staging was already merged")]
    AlreadyMerged,
    /// A key a protocol step needs is not in the cut (it was never staged, or was evicted
    /// since): stage it and call the step again.
    #[error("{} key(s) not in the cut, first {}", keys.len(), keys.first().map_or(String::new(), |k| show(k)))]
    NotCached {
        /// The keys to stage.
        keys: Vec<Key>,
    },
    /// The pin store is full (too many versions or bytes pinned); pinning was refused and
    /// nothing was pinned. The request should be retried later or elsewhere.
    #[error("pins full: {versions} versions / {bytes} bytes pinned, limits {max_versions} / {max_bytes}")]
    PinsFull {
        /// Versions pinned now.
        versions: usize,
        /// Bytes pinned now.
        bytes: usize,
        /// The version limit.
        max_versions: usize,
        /// The byte limit.
        max_bytes: usize,
    },
    /// A version to be read from other caches did not arrive (its pins were released or
    /// expired, or a source did not answer): the attempt cannot complete; abort and retry.
    #[error("no pinned version of {} for {req} from its sources", show(key))]
    MissingRemote {
        /// The request attempt.
        req: ReqId,
        /// The key.
        key: Key,
    },
    /// The versions fetched for a key merge to another clock than the versionset names (a
    /// source answered with something else): the attempt cannot complete; abort and retry.
    #[error(
        "the versions fetched for {} do not merge to the expected clock",
        show(key)
    )]
    RemoteMismatch {
        /// The key.
        key: Key,
    },
    /// The sink writes a key it read, but was not given the full version it read (needed to
    /// inherit its dependencies, I2), or was given another version than the read set names.
    #[error(
        "commit: no full read version of written key {} matching the read set",
        show(key)
    )]
    MissingReadVersion {
        /// The key.
        key: Key,
    },
    /// The executor used up its 2^32 ids; it needs a new base id.
    #[error("executor {base} has no fresh id left")]
    EpochsExhausted {
        /// The executor's base id.
        base: u32,
    },
}
