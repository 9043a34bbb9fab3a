//! Anti-entropy on a shard: digests of the keys it shares with a peer, bucket by bucket, and
//! its records of the buckets where the peer's digests differ, a bounded part at a time.
//!
//! A key's bucket is the top byte of its placement hash — also the partition of the stores
//! it lives in (`store::partition_of`), so a digest or the records of a few buckets touch
//! only those partitions, never the whole store. A digest sums a hash of every (key,
//! record) the two workers should both hold; equal sums mean (with overwhelming
//! probability) equal contents. The core's anti-entropy sessions walk the buckets in ranges,
//! paced, so no step holds the worker for long and no answer exceeds a bounded size.

use bytes::Bytes;
use placement::Replica;
use store::RecordRef;

use super::{GossipBatch, Shard};
use crate::codec_journal;

/// Where a repair answer stopped: the next bucket to read, and how many of its entries
/// were already sent (anti-entropy answers are bounded; the asker continues from here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RepairCursor {
    /// Bucket.
    pub bucket: u32,
    /// Entries of that bucket already sent.
    pub skip: u32,
}

/// Number of anti-entropy buckets (a key's bucket is the top 8 bits of its hash).
pub const BUCKETS: usize = store::PARTITIONS;

/// Per-bucket digests of the keys shared with one peer.
pub type AntiEntropyDigest = Vec<u64>;

/// The anti-entropy bucket of a key.
pub fn bucket_of(key: &[u8]) -> usize {
    store::partition_of(key)
}

/// Hash of one (key, record): of the key followed by the record's canonical protobuf
/// encoding (ordered maps), so equal states hash equal on every replica. `scratch` is
/// reused from entry to entry (a digest hashes every entry of its buckets).
fn entry_hash(scratch: &mut Vec<u8>, key: &[u8], record: RecordRef<'_>) -> u64 {
    scratch.clear();
    scratch.extend_from_slice(key);
    match record {
        RecordRef::Lww { ts, value } => codec_journal::put_lww_record(scratch, ts, value),
        RecordRef::Full(r) => codec_journal::put_record(scratch, r),
    }
    xxhash_rust::xxh3::xxh3_64(scratch)
}

impl Shard {
    /// True if `peer` and this worker should both hold `key` (and it is not a tombstone
    /// being reclaimed, which anti-entropy must not spread).
    fn shared_with(&self, key: &[u8], peer: Replica) -> bool {
        self.view.is_replica(key, peer) && self.is_replica(key) && !self.is_retiring(key)
    }

    /// Digests of buckets `first .. first + count` (clamped to [`BUCKETS`]) over the keys
    /// this worker shares with `peer`.
    pub fn digest_range(&self, peer: Replica, first: usize, count: usize) -> Vec<u64> {
        let end = first.saturating_add(count).min(BUCKETS);
        let mut scratch = Vec::new();
        (first.min(end)..end)
            .map(|bucket| {
                let mut sum = 0u64;
                self.for_each_ref_in_partition(bucket, |key, record| {
                    if self.shared_with(key, peer) {
                        sum = sum.wrapping_add(entry_hash(&mut scratch, key, record));
                    }
                    true
                });
                sum
            })
            .collect()
    }

    /// Per-bucket digests of every key shared with `peer`.
    pub fn digest(&self, peer: Replica) -> AntiEntropyDigest {
        self.digest_range(peer, 0, BUCKETS)
    }

    /// The buckets `first ..` where `theirs` (a peer's digests, one per bucket) differs
    /// from this worker's digests for that peer.
    pub fn differing_range(&self, peer: Replica, first: usize, theirs: &[u64]) -> Vec<u32> {
        let mine = self.digest_range(peer, first, theirs.len());
        mine.iter()
            .zip(theirs)
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .map(|(i, _)| (first + i) as u32)
            .collect()
    }

    /// The buckets where a peer's full digest differs from this worker's.
    pub fn differing(&self, peer: Replica, theirs: &[u64]) -> Vec<u32> {
        self.differing_range(peer, 0, theirs)
    }

    /// This worker's records of the keys it shares with `peer` in `buckets` (in increasing
    /// order), from `cursor` on, up to about `max_bytes` (at least one record). Returns them
    /// and, if it stopped before the end, where to continue.
    pub fn bucket_entries_from(
        &self,
        peer: Replica,
        buckets: &[u32],
        cursor: RepairCursor,
        max_bytes: usize,
    ) -> (GossipBatch, Option<RepairCursor>) {
        let mut out = GossipBatch::new();
        let mut bytes = 0usize;
        let start = buckets.partition_point(|&b| b < cursor.bucket);
        for (i, &bucket) in buckets.iter().enumerate().skip(start) {
            let skip = if bucket == cursor.bucket {
                cursor.skip
            } else {
                0
            };
            let mut seen = 0u32;
            let mut stopped = None;
            self.for_each_in_partition(bucket as usize, None, |key, record| {
                if !self.shared_with(key, peer) {
                    return true;
                }
                seen += 1;
                if seen <= skip {
                    return true;
                }
                if bytes >= max_bytes && !out.is_empty() {
                    stopped = Some(seen - 1);
                    return false;
                }
                bytes += key.len() + record.approx_size();
                out.push((Bytes::copy_from_slice(key), record));
                true
            });
            if let Some(done) = stopped {
                return (out, Some(RepairCursor { bucket, skip: done }));
            }
            if bytes >= max_bytes {
                let next = buckets
                    .get(i + 1)
                    .map(|&b| RepairCursor { bucket: b, skip: 0 });
                return (out, next);
            }
        }
        (out, None)
    }

    /// All of this worker's records of the keys it shares with `peer` in `buckets`.
    pub fn bucket_entries(&self, peer: Replica, buckets: &[u32]) -> GossipBatch {
        let mut sorted = buckets.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let start = RepairCursor {
            bucket: sorted.first().copied().unwrap_or(0),
            skip: 0,
        };
        self.bucket_entries_from(peer, &sorted, start, usize::MAX).0
    }

    /// Entries in bucket range `first .. first + count` (what a digest of that range
    /// costs): to size anti-entropy steps.
    pub fn entries_in_buckets(&self, first: usize, count: usize) -> usize {
        let end = first.saturating_add(count).min(BUCKETS);
        (first.min(end)..end)
            .map(|b| self.partition_entries(b))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use lattice::{Expiry, Lww, Record, Timestamp, Value};
    use prost::Message;
    use store::RecordRef;

    use super::entry_hash;

    /// The hash as the first versions computed it: nodes of different versions must agree
    /// on digests, or every anti-entropy session repairs buckets that are equal.
    fn hash_as_before(key: &[u8], record: &Record) -> u64 {
        let mut bytes = key.to_vec();
        bytes.extend_from_slice(&wire::convert::record_to_pb(record).encode_to_vec());
        xxhash_rust::xxh3::xxh3_64(&bytes)
    }

    #[test]
    fn entry_hashes_are_those_of_earlier_versions() {
        let ts = Timestamp::new(1 << 40, 7);
        let lww = Record::new(ts, Some(Value::Lww(Lww::new(ts, Box::from(&b"v"[..])))));
        let mut expiring = lww.clone();
        expiring.expiry = Some(Box::new(Expiry::new(ts, Some(1_900_000_000_000))));
        let set = Record::new(ts, Some(Value::Set(Default::default())));
        let mut scratch = vec![1, 2, 3];
        for record in [&lww, &expiring, &set, &Record::tombstone(ts)] {
            assert_eq!(
                entry_hash(&mut scratch, b"key", RecordRef::Full(record)),
                hash_as_before(b"key", record),
                "{record:?}"
            );
        }
        let packed = RecordRef::Lww { ts, value: b"v" };
        assert_eq!(
            entry_hash(&mut scratch, b"key", packed),
            hash_as_before(b"key", &lww)
        );
    }
}
