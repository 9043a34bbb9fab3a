//! Unit and property tests, one file per module, plus `world` (a toy store and helpers to
//! drive stagings against it) and `props` (properties over random histories).

mod checker;
mod commit;
mod con;
mod cut;
mod examples;
mod gc;
mod hb;
mod opt;
mod pins;
mod props;
mod snapshot;
mod staging;
mod versionset;
mod world;

use std::collections::BTreeMap;

use lattice::{CausalVersion, MultiKeyCausal, VectorClock};

use crate::{CacheId, Here, Key, KeySet, ReqId};

/// A key from a string.
pub(crate) fn k(s: &str) -> Key {
    Key::from(s.as_bytes())
}

/// A keyset from strings.
pub(crate) fn ks(keys: &[&str]) -> KeySet {
    keys.iter().map(|s| k(s)).collect()
}

/// A clock from `(actor, counter)` pairs.
pub(crate) fn vc(entries: &[(u64, u64)]) -> VectorClock {
    entries.iter().copied().collect()
}

/// A single-version value with these deps.
pub(crate) fn ver(clock: VectorClock, deps: &[(&str, VectorClock)], value: &str) -> MultiKeyCausal {
    MultiKeyCausal::new(CausalVersion {
        clock,
        deps: deps
            .iter()
            .map(|(d, c)| (k(d), c.clone()))
            .collect::<BTreeMap<_, _>>(),
        value: Key::from(value.as_bytes()),
    })
}

/// A request context at `cache` for request `req`, deadline 1000.
pub(crate) fn here(cache: u64, req: u64) -> Here {
    Here {
        cache: CacheId(cache),
        req: ReqId(req),
        deadline_ms: 1000,
    }
}
