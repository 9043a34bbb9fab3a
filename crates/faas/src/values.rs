//! How the host's causal cache represents store values and shows them to functions:
//! [`causal_of`] (any lattice value as a `MultiKeyCausal`, see "Other lattice types" in
//! [`crate::hydro`]) and what a function receives for a key it read. Pure.

use std::collections::BTreeMap;

use bytes::Bytes;
use cache::checker::{embed, ReadMeta};
use cache::{CausalVersion, MultiKeyCausal, VectorClock};
use lattice::Value;

use crate::pb;

/// The actor id under which an LWW register's timestamp appears in the clock it is read
/// at (see the module docs).
pub const LWW_ACTOR: u64 = u64::MAX;

/// What a function sees of a key read at `value`.
pub(crate) fn key_read(key: Bytes, value: &MultiKeyCausal) -> pb::KeyRead {
    if value.is_empty() {
        return pb::KeyRead {
            key,
            ..Default::default()
        };
    }
    pb::KeyRead {
        key,
        found: true,
        values: value.values().map(|b| Bytes::copy_from_slice(b)).collect(),
        meta: Bytes::from(embed(&ReadMeta::of(value), &[])),
    }
}

/// [`key_read`] of a value the caller owns: the payloads move into the reply instead of
/// being copied (a snapshot's values are the host's own copies already).
pub(crate) fn key_read_owned(key: Bytes, value: MultiKeyCausal) -> pb::KeyRead {
    if value.is_empty() {
        return key_read(key, &value);
    }
    let meta = Bytes::from(embed(&ReadMeta::of(&value), &[]));
    // The sibling values, sorted and without duplicates, as `MultiKeyCausal::values`.
    let values: std::collections::BTreeSet<lattice::Blob> =
        value.into_versions().into_iter().map(|v| v.value).collect();
    pb::KeyRead {
        key,
        found: true,
        values: values.into_iter().map(Bytes::from).collect(),
        meta,
    }
}

/// A store value as the cache holds it (see "Other lattice types" in the module docs).
pub fn causal_of(value: Value) -> MultiKeyCausal {
    let plain = |clock: VectorClock, value: lattice::Blob| CausalVersion {
        clock,
        deps: BTreeMap::new(),
        value,
    };
    match value {
        Value::MultiKeyCausal(c) => c,
        Value::Lww(l) => MultiKeyCausal::new(plain(
            VectorClock::from_iter([(LWW_ACTOR, l.ts.time)]),
            l.value,
        )),
        Value::SingleKeyCausal(c) => MultiKeyCausal::from_versions(
            c.versions()
                .iter()
                .map(|(clock, v)| plain(clock.clone(), v.clone())),
        ),
        other => MultiKeyCausal::new(plain(
            VectorClock::new(),
            format!("{other:?}").into_bytes().into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cache::Key;
    use lattice::{Lattice, Lww, Timestamp};

    fn lww(time: u64, v: &[u8]) -> Value {
        Value::Lww(Lww {
            ts: Timestamp::new(time, 1),
            value: v.into(),
        })
    }

    #[test]
    fn an_lww_value_reads_at_its_timestamp_and_a_newer_one_supersedes_it() {
        let old = causal_of(lww(5, b"a"));
        assert_eq!(old.clock(), VectorClock::from_iter([(LWW_ACTOR, 5)]));
        assert!(old.deps().is_empty());
        let mut merged = old.clone();
        merged.merge(causal_of(lww(9, b"b")));
        assert_eq!(
            merged.values().collect::<Vec<_>>(),
            vec![&Box::from(&b"b"[..])]
        );
    }

    #[test]
    fn a_causal_value_is_kept_and_other_types_render() {
        let v = MultiKeyCausal::new(CausalVersion {
            clock: VectorClock::from_iter([(1, 2)]),
            deps: [(Key::from(&b"d"[..]), VectorClock::from_iter([(3, 4)]))].into(),
            value: Box::from(&b"x"[..]),
        });
        assert_eq!(causal_of(Value::MultiKeyCausal(v.clone())), v);
        let counter = causal_of(Value::Counter(Default::default()));
        assert!(counter.clock().is_empty() && counter.values().count() == 1);
    }

    #[test]
    fn a_key_read_carries_the_metadata_of_the_version() {
        let v = causal_of(lww(7, b"a"));
        let r = key_read(Bytes::from_static(b"k"), &v);
        assert!(r.found);
        assert_eq!(r.values, vec![Bytes::from_static(b"a")]);
        let (meta, rest) = cache::checker::extract(&r.meta).unwrap();
        assert_eq!(meta, ReadMeta::of(&v));
        assert!(rest.is_empty());
        let absent = key_read(Bytes::from_static(b"k"), &MultiKeyCausal::default());
        assert!(!absent.found && absent.meta.is_empty() && absent.values.is_empty());
    }

    #[test]
    fn an_owned_key_read_equals_the_borrowed_one_and_moves_the_payload() {
        let version = |c: u64, value: &[u8]| CausalVersion {
            clock: VectorClock::from_iter([(c, 1)]),
            deps: [(Key::from(&b"d"[..]), VectorClock::from_iter([(3, c)]))].into(),
            value: Box::from(value),
        };
        // Two concurrent siblings, one value twice: sorted and deduplicated as `values()`.
        let v =
            MultiKeyCausal::from_versions([version(2, b"y"), version(1, b"x"), version(4, b"x")]);
        let k = Bytes::from_static(b"k");
        assert_eq!(
            key_read_owned(k.clone(), v.clone()),
            key_read(k.clone(), &v)
        );
        let empty = MultiKeyCausal::default();
        assert_eq!(
            key_read_owned(k.clone(), empty.clone()),
            key_read(k.clone(), &empty)
        );
        // The payload is handed on, not copied.
        let one = MultiKeyCausal::new(version(1, &[7u8; 4096]));
        let at = one.versions()[0].value.as_ptr();
        assert_eq!(key_read_owned(k, one).values[0].as_ptr(), at);
    }
}
