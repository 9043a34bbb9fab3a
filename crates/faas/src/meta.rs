//! OPT's metadata on the wire: [`cache::VersionSet`] / [`cache::opt::Upstream`] as the
//! `VersionRef` / `EdgeMeta` messages of `faas.proto`, and a pinned full version
//! ([`MultiKeyCausal`]) as the store's `Value` encoding. Pure conversions; everything that
//! arrives from the network is checked and refused with an [`MetaError`].

use bytes::Bytes;
use cache::hb::{KeyMeta, MetaView};
use cache::opt::Upstream;
use cache::{CacheId, Key, MultiKeyCausal, VectorClock, VersionRef, VersionSet};
use lattice::Value;
use prost::Message;

use crate::pb;

/// Why received metadata is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MetaError {
    /// A pinned value that does not decode as a store value.
    #[error("a pinned value does not decode: {0}")]
    Decode(String),
    /// A pinned value of another type than `MultiKeyCausal`.
    #[error("a pinned value of key {0:?} is not a multi-key causal value")]
    NotCausal(String),
    /// A key bound twice in one versionset.
    #[error("key {0:?} is bound twice in one versionset")]
    Duplicate(String),
}

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

/// An edge's metadata as a message.
pub fn edge_to_pb(up: &Upstream) -> pb::EdgeMeta {
    pb::EdgeMeta {
        s: refs_to_pb(&up.s),
        r: refs_to_pb(&up.r),
    }
}

/// A message as an edge's metadata (never aborted: an aborted function sends no edge).
///
/// # Errors
/// As [`refs_from_pb`].
pub fn edge_from_pb(m: &pb::EdgeMeta) -> Result<Upstream, MetaError> {
    Ok(Upstream {
        abort: false,
        s: refs_from_pb(&m.s)?,
        r: refs_from_pb(&m.r)?,
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

/// An HB view as a message.
pub fn view_to_pb(v: &MetaView) -> Vec<pb::KeyMeta> {
    v.keys
        .iter()
        .map(|(k, m)| pb::KeyMeta {
            key: Bytes::copy_from_slice(k),
            clock: m
                .clock
                .iter()
                .map(|(actor, counter)| pb::ClockEntry { actor, counter })
                .collect(),
            cut: refs_to_pb(&m.cut),
        })
        .collect()
}

/// A message as an HB view of cache `cache`.
///
/// # Errors
/// As [`refs_from_pb`].
pub fn view_from_pb(cache: u64, keys: &[pb::KeyMeta]) -> Result<MetaView, MetaError> {
    let mut out = MetaView {
        cache: CacheId(cache),
        keys: Default::default(),
    };
    for m in keys {
        let meta = KeyMeta {
            clock: m.clock.iter().map(|e| (e.actor, e.counter)).collect(),
            cut: refs_from_pb(&m.cut)?,
        };
        if out.keys.insert(Key::from(&m.key[..]), meta).is_some() {
            return Err(MetaError::Duplicate(show(&m.key)));
        }
    }
    Ok(out)
}

fn show(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
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
}
