//! CON (spec §4.3): the scheduler builds a distributed snapshot of `R̃_DAG` before any
//! function runs, so the request never aborts.
//!
//! 1. Each involved cache runs CreateSnapshot (Alg. 4, [`crate::snapshot::create_snapshot`])
//!    for its functions' `R̃_i` and answers `S_i` (key + clock), pinned.
//! 2. The scheduler runs [`plan`] (Alg. 5 l.3–12): `S = ∪ S_i` (a KOC by Thm 1), each
//!    function reads `S ∩ R̃_i`, and `R_remote[i]` lists what function `i`'s cache must fetch
//!    because its own `S_i` binds an older (or concurrent) version.
//! 3. Each cache fetches its `R_remote[i]` from the sources (l.13–14) and [`bind`]s the
//!    reads: the full versions of `S ∩ R̃_i`, pinned as the function's read versions.
//! 4. The scheduler starts the DAG once every bind finished.

use std::collections::BTreeMap;

use lattice::MultiKeyCausal;

use crate::opt::assemble;
use crate::pins::Pins;
use crate::versionset::{restrict, union_into, VersionSet};
use crate::{Error, Here, Key, KeySet};

/// One function's part of the plan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Part {
    /// `R_i = S ∩ R̃_i`: what the function reads.
    pub reads: VersionSet,
    /// `R_remote[i]`: the reads its cache's `S_i` does not already bind to the same
    /// version; fetch them from their sources before [`bind`].
    pub remote: VersionSet,
}

/// The scheduler's plan (Alg. 5).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConPlan {
    /// `S = ∪ S_i`, a KOC for `R̃_DAG`.
    pub s: VersionSet,
    /// One part per function, in the order given to [`plan`].
    pub parts: Vec<Part>,
}

/// Alg. 5 l.3–12 over the answers of CreateSnapshot: one `(S_i, R̃_i)` per function (a
/// function's `S_i` is the one its cache answered).
pub fn plan(snapshots: &[(VersionSet, KeySet)]) -> ConPlan {
    let mut s = VersionSet::new();
    for (s_i, _) in snapshots {
        union_into(&mut s, s_i);
    }
    let parts = snapshots
        .iter()
        .map(|(s_i, ri)| {
            let reads = restrict(&s, ri);
            let remote = reads
                .iter()
                .filter(|(k, r)| s_i.get(*k).is_none_or(|mine| !mine.supersedes(r)))
                .map(|(k, r)| (k.clone(), r.clone()))
                .collect();
            Part { reads, remote }
        })
        .collect();
    ConPlan { s, parts }
}

/// Binds function `i`'s reads at its cache (Alg. 5 l.13–14, cache side): the full version
/// of each key of `part.reads`, from what this cache pinned for the request merged with
/// `fetched` (the other caches' answers to the fetches of `part.remote`), checked against
/// the clock `S` names and pinned as the read version. Returns what the function reads.
///
/// # Errors
/// [`Error::MissingRemote`] / [`Error::RemoteMismatch`]: a version did not arrive or is not
/// the one named (a source released its pins); [`Error::PinsFull`]. Either way the attempt
/// cannot start: release and run CON again under a new request id.
pub fn bind<I>(
    pins: &mut Pins,
    here: Here,
    part: &Part,
    fetched: I,
) -> Result<BTreeMap<Key, MultiKeyCausal>, Error>
where
    I: IntoIterator<Item = (Key, MultiKeyCausal)>,
{
    let reads = assemble(pins, here, &part.reads, fetched)?;
    pins.pin(here.req, here.deadline_ms, reads.clone())?;
    Ok(reads)
}
