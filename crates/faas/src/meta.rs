//! OPT's metadata on the wire: [`cache::VersionSet`] / [`cache::opt::Upstream`] as the
//! `VersionRef` (cache-to-cache fetches) and `EdgeMeta` messages of `faas.proto` (rows of
//! a `reftable` table), and a pinned full version ([`MultiKeyCausal`]) as the store's
//! `Value` encoding. Pure conversions; everything that arrives from the network is checked
//! and refused with an [`MetaError`].

use bytes::Bytes;
use cache::hb::{KeyMeta, MetaView};
use cache::opt::Upstream;
use cache::{CacheId, Key, MultiKeyCausal, VectorClock, VersionRef, VersionSet};
use lattice::Value;
use prost::Message;

use crate::pb;
pub use crate::reftable::MetaError;
use crate::reftable::{rows_from_table, set_of, show, TableBuilder};

/// A versionset as messages.
pub fn refs_to_pb(v: &VersionSet) -> Vec<pb::VersionRef> {
    v.iter()
        .map(|(k, r)| pb::VersionRef {
            key: Bytes::copy_from_slice(k),
            clock: r
                .clock
                .iter()
                .map(|(actor, counter)| pb::ClockEntry { actor, counter })
                .collect(),
            sources: r.sources.iter().map(|c| c.0).collect(),
        })
        .collect()
}

/// Messages as a versionset.
///
/// # Errors
/// A key bound twice.
pub fn refs_from_pb(refs: &[pb::VersionRef]) -> Result<VersionSet, MetaError> {
    let mut out = VersionSet::new();
    for r in refs {
        let clock: VectorClock = r.clock.iter().map(|e| (e.actor, e.counter)).collect();
        let sources = if clock.is_empty() {
            Default::default()
        } else {
            r.sources.iter().map(|&c| CacheId(c)).collect()
        };
        let key = Key::from(&r.key[..]);
        if out.insert(key, VersionRef { clock, sources }).is_some() {
            return Err(MetaError::Duplicate(show(&r.key)));
        }
    }
    Ok(out)
}

/// An edge's metadata as a message: `S_u` and `R_u` as rows of one table.
pub fn edge_to_pb(up: &Upstream) -> pb::EdgeMeta {
    if up.s.is_empty() && up.r.is_empty() {
        // Nothing to say (a function without a causal cache): no table at all.
        return pb::EdgeMeta::default();
    }
    let mut t = TableBuilder::default();
    let s = t.rows(&up.s);
    let r = t.rows(&up.r);
    pb::EdgeMeta {
        table: Some(t.finish()),
        s,
        r,
    }
}

/// A message as an edge's metadata (never aborted: an aborted function sends no edge).
///
/// # Errors
/// A [`MetaError`] for a table or a row that does not decode (a bad index or count).
pub fn edge_from_pb(m: &pb::EdgeMeta) -> Result<Upstream, MetaError> {
    let rows = rows_from_table(m.table.as_ref().unwrap_or(&pb::RefTable::default()))?;
    Ok(Upstream {
        abort: false,
        s: set_of(&rows, &m.s)?,
        r: set_of(&rows, &m.r)?,
    })
}

/// A pinned version as a message.
pub fn pinned_to_pb(key: &[u8], value: &MultiKeyCausal) -> pb::PinnedValue {
    let v = wire::convert::value_to_pb(&Value::MultiKeyCausal(value.clone()));
    pb::PinnedValue {
        key: Bytes::copy_from_slice(key),
        value: v.encode_to_vec().into(),
    }
}

/// A message as a pinned version.
///
/// # Errors
/// The bytes do not decode, or hold another type.
pub fn pinned_from_pb(p: &pb::PinnedValue) -> Result<(Key, MultiKeyCausal), MetaError> {
    let v = wire::pb::Value::decode(&p.value[..]).map_err(|e| MetaError::Decode(e.to_string()))?;
    match wire::convert::value_from_pb(&v).map_err(|e| MetaError::Decode(e.to_string()))? {
        Value::MultiKeyCausal(c) => Ok((Key::from(&p.key[..]), c)),
        _ => Err(MetaError::NotCausal(show(&p.key))),
    }
}

/// An HB view as a message: its table and its keys.
pub fn view_to_pb(v: &MetaView) -> (pb::RefTable, Vec<pb::HbKey>) {
    let mut t = TableBuilder::default();
    let keys = v
        .keys
        .iter()
        .map(|(k, m)| pb::HbKey {
            row: t.row(
                k,
                &VersionRef {
                    clock: m.clock.clone(),
                    sources: Default::default(),
                },
            ),
            cut: t.rows(&m.cut),
        })
        .collect();
    (t.finish(), keys)
}

/// A message as an HB view of cache `cache`.
///
/// # Errors
/// A [`MetaError`] for a table or a row that does not decode (a bad index or count).
pub fn view_from_pb(
    cache: u64,
    table: Option<&pb::RefTable>,
    keys: &[pb::HbKey],
) -> Result<MetaView, MetaError> {
    let rows = rows_from_table(table.unwrap_or(&pb::RefTable::default()))?;
    let mut out = MetaView {
        cache: CacheId(cache),
        keys: Default::default(),
    };
    for m in keys {
        let (key, at) = rows
            .get(m.row as usize)
            .ok_or_else(|| MetaError::Malformed("a row index out of range".into()))?;
        let meta = KeyMeta {
            clock: at.clock.clone(),
            cut: set_of(&rows, &m.cut)?,
        };
        if out.keys.insert(key.clone(), meta).is_some() {
            return Err(MetaError::Duplicate(show(key)));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cache::CausalVersion;

    #[test]
    fn versionsets_and_values_round_trip() {
        let mut v = VersionSet::new();
        v.insert(
            Key::from(&b"a"[..]),
            VersionRef::new(VectorClock::from_iter([(1, 2), (3, 4)]), CacheId(7)),
        );
        v.insert(Key::from(&b"b"[..]), VersionRef::bottom());
        assert_eq!(refs_from_pb(&refs_to_pb(&v)).unwrap(), v);
        let up = Upstream {
            abort: false,
            s: v.clone(),
            r: v,
        };
        assert_eq!(edge_from_pb(&edge_to_pb(&up)).unwrap(), up);
        let none = Upstream::source();
        assert_eq!(edge_to_pb(&none).encoded_len(), 0);
        assert_eq!(edge_from_pb(&edge_to_pb(&none)).unwrap(), none);
        let value = MultiKeyCausal::new(CausalVersion {
            clock: VectorClock::from_iter([(1, 2)]),
            deps: [(Key::from(&b"d"[..]), VectorClock::from_iter([(3, 4)]))].into(),
            value: Box::from(&b"x"[..]),
        });
        let (k, back) = pinned_from_pb(&pinned_to_pb(b"k", &value)).unwrap();
        assert_eq!((&k[..], back), (&b"k"[..], value));
    }

    #[test]
    fn bad_metadata_is_refused() {
        let dup = vec![
            pb::VersionRef {
                key: Bytes::from_static(b"a"),
                ..Default::default()
            };
            2
        ];
        assert!(matches!(refs_from_pb(&dup), Err(MetaError::Duplicate(_))));
        let garbage = pb::PinnedValue {
            key: Bytes::from_static(b"a"),
            value: Bytes::from_static(b"\xff\xff\xff"),
        };
        assert!(pinned_from_pb(&garbage).is_err());
        let lww = wire::convert::value_to_pb(&Value::Lww(lattice::Lww {
            ts: lattice::Timestamp::new(1, 1),
            value: Box::from(&b"v"[..]),
        }));
        let other = pb::PinnedValue {
            key: Bytes::from_static(b"a"),
            value: lww.encode_to_vec().into(),
        };
        assert_eq!(
            pinned_from_pb(&other),
            Err(MetaError::NotCausal("a".into()))
        );
    }

    // ---- RefTable (crate::reftable) ----

    fn key(i: u64) -> Key {
        Key::from(format!("k{i:06}").as_bytes())
    }

    /// A versionset of `n` keys whose clocks have `width` entries of large actor ids (as
    /// the hosts' `base << 32 | epoch`), from 1–2 of 3 caches.
    fn set(n: u64, width: u64) -> VersionSet {
        (0..n)
            .map(|i| {
                let clock: VectorClock = (0..width)
                    .map(|a| ((0x9e37_79b9 + a) << 32 | 1, 100 + i * 7 + a))
                    .collect();
                let mut r = VersionRef::new(clock, CacheId(0xdead_beef_0000 + i % 3));
                if i % 2 == 0 {
                    r.sources.insert(CacheId(0xdead_beef_0000 + (i + 1) % 3));
                }
                (key(i), r)
            })
            .collect()
    }

    #[test]
    fn versionsets_round_trip_and_shared_rows_are_written_once() {
        let s = set(6, 5);
        let mut r: VersionSet = s
            .iter()
            .take(4)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        r.insert(key(99), VersionRef::bottom());
        let up = Upstream {
            abort: false,
            s: s.clone(),
            r: r.clone(),
        };
        let m = edge_to_pb(&up);
        // The 4 versions R shares with S are rows of S; the bottom is one more.
        assert_eq!(m.table.as_ref().unwrap().keys.len(), 7);
        assert_eq!(m.table.as_ref().unwrap().actors.len(), 5);
        assert_eq!(m.table.as_ref().unwrap().caches.len(), 3);
        assert_eq!(edge_from_pb(&m).unwrap(), up);
        assert_eq!(
            crate::reftable::refs_from_table(&crate::reftable::refs_to_table(&s)).unwrap(),
            s
        );
        assert_eq!(
            crate::reftable::refs_from_table(&crate::reftable::refs_to_table(&VersionSet::new()))
                .unwrap(),
            VersionSet::new()
        );
    }

    #[test]
    fn a_table_is_a_fraction_of_the_per_version_encoding() {
        // A 3-function line's last edge: 6 keys read, clocks of 6 writers.
        let s = set(6, 6);
        let up = Upstream {
            abort: false,
            s: s.clone(),
            r: s.clone(),
        };
        let table = edge_to_pb(&up).encoded_len();
        let lists: usize = refs_to_pb(&s)
            .iter()
            .map(Message::encoded_len)
            .sum::<usize>()
            * 2;
        assert!(
            table * 4 < lists,
            "table {table} B, version lists {lists} B"
        );
    }

    #[test]
    fn malformed_tables_are_refused() {
        let good = crate::reftable::refs_to_table(&set(2, 2));
        assert!(rows_from_table(&good).is_ok());
        let mut short = good.clone();
        short.rows.pop();
        let mut long = good.clone();
        long.rows.push(0);
        let mut actor = good.clone();
        actor.rows[1] = 7; // the first entry's actor index
        let mut cache = good.clone();
        let last = cache.rows.len() - 1;
        cache.rows[last] = 9; // the last row's last source
        let mut huge = good.clone();
        huge.rows[0] = u64::MAX;
        for bad in [short, long, actor, cache, huge] {
            assert!(
                matches!(rows_from_table(&bad), Err(MetaError::Malformed(_))),
                "{bad:?}"
            );
        }
        let rows = rows_from_table(&good).unwrap();
        assert!(matches!(set_of(&rows, &[2]), Err(MetaError::Malformed(_))));
        assert!(matches!(
            set_of(&rows, &[1, 1]),
            Err(MetaError::Duplicate(_))
        ));
        let edge = pb::EdgeMeta {
            table: Some(good),
            s: vec![0, 5],
            r: Vec::new(),
        };
        assert!(edge_from_pb(&edge).is_err());
    }
}
