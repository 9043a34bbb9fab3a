//! How the host's causal cache represents store values and shows them to functions:
//! [`causal_of`] (any lattice value as a `MultiKeyCausal`, see "Other lattice types" in
//! [`crate::hydro`]) and what a function receives for a key it read. Pure.

use std::collections::BTreeMap;

use bytes::Bytes;
use cache::checker::{embed, ReadMeta};
use cache::{CausalVersion, MultiKeyCausal, Shared, VectorClock};
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

/// [`key_read`] of a value shared with the cache (a pinned snapshot's value): each payload
/// is handed on as a view of the shared allocation, which it keeps alive, not copied.
pub(crate) fn key_read_shared(key: Bytes, value: Shared) -> pb::KeyRead {
    if value.is_empty() {
        return key_read(key, &value);
    }
    let meta = Bytes::from(embed(&ReadMeta::of(&value), &[]));
    // The sibling values, sorted and without duplicates, as `MultiKeyCausal::values`: the
    // index of the first version holding each.
    let mut firsts: BTreeMap<&[u8], usize> = BTreeMap::new();
    for (i, v) in value.versions().iter().enumerate() {
        firsts.entry(&v.value[..]).or_insert(i);
    }
    let order: Vec<usize> = firsts.into_values().collect();
    pb::KeyRead {
        key,
        found: true,
        values: order
            .into_iter()
            .map(|version| {
                Bytes::from_owner(Payload {
                    value: value.clone(),
                    version,
                })
            })
            .collect(),
        meta,
    }
}

/// One version's payload of a shared value, as the owner of a [`Bytes`] view of it.
struct Payload {
    value: Shared,
    version: usize,
}

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        &self.value.versions()[self.version].value
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
    fn a_shared_key_read_equals_the_borrowed_one_and_views_the_shared_payloads() {
        let version = |c: u64, value: &[u8]| CausalVersion {
            clock: VectorClock::from_iter([(c, 1)]),
            deps: [(Key::from(&b"d"[..]), VectorClock::from_iter([(3, c)]))].into(),
            value: Box::from(value),
        };
        let k = Bytes::from_static(b"k");
        // Siblings out of order and a duplicate value: sorted and deduplicated.
        let v = MultiKeyCausal::from_versions([
            version(2, &[9u8; 3000]),
            version(1, b"x"),
            version(4, b"x"),
        ]);
        let shared = Shared::new(v.clone());
        let read = key_read_shared(k.clone(), shared.clone());
        assert_eq!(read, key_read(k.clone(), &v));
        // Every payload is a view of the shared value, which the reply keeps alive.
        let payloads: Vec<*const u8> = shared.versions().iter().map(|x| x.value.as_ptr()).collect();
        for r in &read.values {
            assert!(payloads.contains(&r.as_ptr()), "a payload was copied");
        }
        assert!(Shared::strong_count(&shared) > 1);
        drop(shared);
        assert!(read.values.contains(&Bytes::from(vec![9u8; 3000])));
        let empty = Shared::default();
        assert_eq!(
            key_read_shared(k.clone(), empty),
            key_read(k, &MultiKeyCausal::default())
        );
    }
}
