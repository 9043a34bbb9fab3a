//! Reads of a key's causal metadata without its payload (`GetMany.metadata_only`), and
//! the fingerprint of a value the subscription rounds compare instead of encoding it.

use lattice::{Blob, Lww, Value, VectorClock};
use store::RecordRef;
use xxhash_rust::xxh3::Xxh3;

use super::Shard;

impl Shard {
    /// A hash of everything `key`'s live value on this worker holds, read in place, for
    /// the subscription rounds (equal for equal values; a tombstone reads as absent).
    /// `None` on the disk tier (a read there may fault the key in) and for types other
    /// than LWW and the causal ones: the round then reads the value as before.
    pub fn watched_fingerprint(&self, key: &[u8]) -> Option<u64> {
        if self.is_disk() {
            return None;
        }
        fingerprint_of(self.live(key).as_ref())
    }

    /// A count that stays the same only while no read of this worker's memory store could
    /// change its answer: the store's changes (merges that changed a record, updates in
    /// place, removals), and whether a deadline has passed that its expiry sweep has not
    /// reclaimed yet (such a key reads as absent without a change to the store). `None`
    /// while such a deadline is pending, and on the disk tier.
    pub fn quiet_mark(&self) -> Option<u64> {
        if self.is_disk() {
            return None;
        }
        let expiring = self
            .expiries
            .first()
            .is_some_and(|(at, _)| *at <= self.clock.wall_ms());
        (!expiring).then(|| self.store.changes())
    }
}

/// The metadata of a live record: causal versions with empty payloads, an LWW register's
/// timestamp with an empty value, any other type in full (it has no payload apart from its
/// state). `None` for a tombstone.
pub(super) fn metadata_of(r: &RecordRef<'_>) -> Option<Value> {
    match r {
        RecordRef::Lww { ts, .. } => Some(Value::Lww(Lww::new(*ts, Blob::default()))),
        RecordRef::Full(rec) => rec.value.as_ref().map(|v| match v {
            Value::MultiKeyCausal(m) => Value::MultiKeyCausal(m.metadata()),
            Value::SingleKeyCausal(s) => Value::SingleKeyCausal(s.metadata()),
            other => other.clone(),
        }),
    }
}

/// Feeds a clock into `h`: its entries, then their count.
fn hash_clock(h: &mut Xxh3, c: &VectorClock) {
    let mut n = 0u64;
    for (actor, count) in c.iter() {
        h.update(&actor.to_le_bytes());
        h.update(&count.to_le_bytes());
        n += 1;
    }
    h.update(&n.to_le_bytes());
}

/// Feeds a byte string into `h`, length first (so that concatenations differ).
fn hash_bytes(h: &mut Xxh3, b: &[u8]) {
    h.update(&(b.len() as u64).to_le_bytes());
    h.update(b);
}

/// A hash of everything a live record's value holds, read in place (no copy, no encoding),
/// for the subscription rounds: equal for equal values, so a key whose fingerprint did not
/// change since its last push needs no new version computed (`Subscriptions::round_with`).
/// `None` for the types it does not cover (the round then computes the version as
/// before). A tombstone or an absent key has its own fingerprint.
pub(super) fn fingerprint_of(r: Option<&RecordRef<'_>>) -> Option<u64> {
    let mut h = Xxh3::new();
    match r {
        None => h.update(b"absent"),
        Some(RecordRef::Lww { ts, value }) => {
            h.update(b"lww");
            h.update(&ts.time.to_le_bytes());
            h.update(&ts.writer.to_le_bytes());
            hash_bytes(&mut h, value);
        }
        Some(RecordRef::Full(rec)) => match &rec.value {
            None => h.update(b"absent"),
            Some(Value::MultiKeyCausal(m)) => {
                h.update(b"mkc");
                for v in m.versions() {
                    hash_clock(&mut h, &v.clock);
                    h.update(&(v.deps.len() as u64).to_le_bytes());
                    for (k, c) in &v.deps {
                        hash_bytes(&mut h, k);
                        hash_clock(&mut h, c);
                    }
                    hash_bytes(&mut h, &v.value);
                }
            }
            Some(Value::SingleKeyCausal(s)) => {
                h.update(b"skc");
                for (c, v) in s.versions() {
                    hash_clock(&mut h, c);
                    hash_bytes(&mut h, v);
                }
            }
            Some(_) => return None,
        },
    }
    Some(h.digest())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lattice::{CausalVersion, MultiKeyCausal, Record, Timestamp};

    fn mkc(counter: u64, dep: &str, value: &[u8]) -> Value {
        Value::MultiKeyCausal(MultiKeyCausal::new(CausalVersion {
            clock: [(1, counter)].into_iter().collect(),
            deps: [(Blob::from(dep.as_bytes()), [(2, 1)].into_iter().collect())]
                .into_iter()
                .collect(),
            value: value.into(),
        }))
    }

    fn fp(v: Option<Value>) -> Option<u64> {
        let rec = Record::new(Timestamp::new(1, 1), v);
        fingerprint_of(Some(&RecordRef::Full(&rec)))
    }

    #[test]
    fn fingerprints_follow_every_part_of_a_causal_value() {
        let base = fp(Some(mkc(1, "d", b"v")));
        assert!(base.is_some());
        assert_eq!(base, fp(Some(mkc(1, "d", b"v"))));
        assert_ne!(base, fp(Some(mkc(2, "d", b"v"))), "clock");
        assert_ne!(base, fp(Some(mkc(1, "e", b"v"))), "deps");
        assert_ne!(base, fp(Some(mkc(1, "d", b"w"))), "payload");
        assert_eq!(
            fp(None),
            fingerprint_of(None),
            "a tombstone reads as absent"
        );
        let lww = |time, v: &'static [u8]| {
            fingerprint_of(Some(&RecordRef::Lww {
                ts: Timestamp::new(time, 1),
                value: v,
            }))
        };
        assert_eq!(lww(5, b"a"), lww(5, b"a"));
        assert_ne!(lww(5, b"a"), lww(6, b"a"));
        assert_ne!(lww(5, b"a"), lww(5, b"b"), "same timestamp, another value");
        assert_eq!(fp(Some(Value::Counter(Default::default()))), None);
    }
}
