//! The anomaly checker and the embedded-metadata encoding.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::{k, vc};
use crate::checker::{check, embed, extract, DecodeError, Kind, ReadMeta, EMBED_VERSION};
use crate::{Key, VectorClock};

fn meta(clock: VectorClock, deps: &[(&str, VectorClock)]) -> ReadMeta {
    ReadMeta {
        clock,
        deps: deps.iter().map(|(d, c)| (k(d), c.clone())).collect(),
    }
}

/// A fractured read: one commit of executor 1 wrote a and b (same counter, mutually
/// dependent); the reader sees the new b and the old a.
#[test]
fn a_fractured_read_is_caught() {
    let new_a = vc(&[(1, 5)]);
    let new_b = vc(&[(1, 5), (2, 3)]);
    let reads: BTreeMap<Key, ReadMeta> = [
        (k("a"), meta(vc(&[(1, 4)]), &[])),
        (k("b"), meta(new_b.clone(), &[("a", new_a.clone())])),
    ]
    .into();
    let r = check(&reads);
    assert_eq!(r.strict.len(), 1);
    assert_eq!(r.causal.len(), 1, "the old a happened before the new a");
    assert_eq!(r.atomic.len(), 1);
    assert_eq!(r.atomic[0].kind, Kind::AtomicVisibility);
    assert_eq!(
        (r.atomic[0].key.clone(), r.atomic[0].dep.clone()),
        (k("b"), k("a"))
    );
    assert!(!r.is_clean());
}

/// Strict versus Def. 2: a version of a *concurrent* with the one b depends on breaks the
/// strict snapshot only; an older one breaks both; a newer one neither. A dependency read as
/// absent breaks both.
#[test]
fn strict_and_def_2_are_reported_separately() {
    let need = vc(&[(1, 2)]);
    let with = |a: VectorClock| -> BTreeMap<Key, ReadMeta> {
        [
            (k("a"), meta(a, &[])),
            (k("b"), meta(vc(&[(3, 1)]), &[("a", need.clone())])),
        ]
        .into()
    };
    let concurrent = check(&with(vc(&[(1, 1), (2, 1)])));
    assert_eq!((concurrent.strict.len(), concurrent.causal.len()), (1, 0));
    assert!(concurrent.atomic.is_empty(), "not written by b's commit");
    let older = check(&with(vc(&[(1, 1)])));
    assert_eq!((older.strict.len(), older.causal.len()), (1, 1));
    assert!(check(&with(vc(&[(1, 3)]))).is_clean());
    assert!(check(&with(need.clone())).is_clean());
    let absent = check(&with(VectorClock::new()));
    assert_eq!((absent.strict.len(), absent.causal.len()), (1, 1));
    // Dependencies on keys outside the read set, or on the key itself, are not pairs.
    let alone: BTreeMap<Key, ReadMeta> = [(
        k("b"),
        meta(vc(&[(3, 1)]), &[("a", need.clone()), ("b", vc(&[(9, 9)]))]),
    )]
    .into();
    assert!(check(&alone).is_clean());
}

#[test]
fn embedded_metadata_round_trips() {
    let m = meta(
        vc(&[(1, 2), (u64::MAX, 7)]),
        &[("a", vc(&[(3, 4)])), ("", vc(&[]))],
    );
    let bytes = embed(&m, b"payload");
    assert_eq!(&bytes[..4], b"HCM\x01");
    let (got, payload) = extract(&bytes).unwrap();
    assert_eq!(got, m);
    assert_eq!(payload, b"payload");
    let mut joined = got.clone();
    joined.join(&meta(vc(&[(1, 3)]), &[("a", vc(&[(5, 1)]))]));
    assert_eq!(joined.clock, vc(&[(1, 3), (u64::MAX, 7)]));
    assert_eq!(joined.deps[&k("a")], vc(&[(3, 4), (5, 1)]));
}

#[test]
fn bad_embedded_metadata_is_refused() {
    assert_eq!(extract(b"plain value"), Err(DecodeError::BadMagic));
    assert_eq!(extract(b"HCM"), Err(DecodeError::Truncated));
    assert_eq!(extract(b"HCM\x09...."), Err(DecodeError::UnknownVersion(9)));
    let bytes = embed(&meta(vc(&[(1, 2)]), &[("a", vc(&[(3, 4)]))]), b"");
    for cut in 4..bytes.len() {
        assert_eq!(
            extract(&bytes[..cut]),
            Err(DecodeError::Truncated),
            "cut at {cut}"
        );
    }
    // A hostile count is refused before anything is allocated for it.
    let mut hostile = b"HCM".to_vec();
    hostile.push(EMBED_VERSION);
    hostile.extend_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(extract(&hostile), Err(DecodeError::Truncated));
    assert!(!DecodeError::BadMagic.to_string().is_empty());
}

proptest! {
    #[test]
    fn any_metadata_round_trips(
        clock in prop::collection::vec((any::<u64>(), 1u64..), 0..6),
        deps in prop::collection::btree_map(
            prop::collection::vec(any::<u8>(), 0..6),
            prop::collection::vec((any::<u64>(), 1u64..), 0..4),
            0..5,
        ),
        payload in prop::collection::vec(any::<u8>(), 0..32),
    ) {
        let m = ReadMeta {
            clock: clock.into_iter().collect(),
            deps: deps
                .into_iter()
                .map(|(k, c)| (Key::from(k), c.into_iter().collect()))
                .collect(),
        };
        let bytes = embed(&m, &payload);
        let (got, rest) = extract(&bytes).unwrap();
        prop_assert_eq!(got, m);
        prop_assert_eq!(rest, &payload[..]);
    }

    #[test]
    fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let mut framed = b"HCM\x01".to_vec();
        framed.extend_from_slice(&bytes);
        let _ = extract(&framed);
        let _ = extract(&bytes);
    }
}
