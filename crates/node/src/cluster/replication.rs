//! The replication table between nodes: its entries in protobuf form, and which of them a
//! `SyncCluster` exchange carries.
//!
//! Each side of an exchange sends the digests of its table's [`BUCKETS`] buckets. Entries
//! travel only for the buckets whose digests differ — the answer to a push carries the
//! answering node's entries of the buckets that differ from the pusher's, and a push
//! carries the entries of the buckets that differed in the last answer from that peer — at
//! most [`MAX_SYNC_ENTRIES`] entries or [`MAX_SYNC_BYTES`] bytes per message; the rest
//! follows in later rounds. A change to one key therefore costs one bucket's entries
//! (~1/256 of the table) per exchange until every node has it, never the whole table.

use bytes::Bytes;
use placement::{Replication, ReplicationVector};
use wire::convert::{timestamp_from_pb, timestamp_to_pb};
use wire::pb;

use crate::vectors::{self, Entry, ReplicationTable, BUCKETS};

/// Most replication entries in one `ClusterState`.
pub const MAX_SYNC_ENTRIES: usize = 16_384;
/// Most bytes of keys in the replication entries of one `ClusterState`.
pub const MAX_SYNC_BYTES: usize = 1 << 20;

/// Encodes one entry.
pub fn entry_to_pb(key: &[u8], e: &Entry) -> pb::ReplicationEntry {
    let v = e.vector.unwrap_or(ReplicationVector {
        memory: Replication {
            global: 0,
            local: 0,
        },
        disk: Replication {
            global: 0,
            local: 0,
        },
    });
    pb::ReplicationEntry {
        key: Bytes::copy_from_slice(key),
        ts: Some(timestamp_to_pb(e.ts)),
        memory_global: v.memory.global,
        memory_local: v.memory.local,
        disk_global: v.disk.global,
        disk_local: v.disk.local,
        removed: e.vector.is_none(),
        by_policy: e.by_policy,
    }
}

/// Decodes one entry (`None` without a timestamp).
pub fn entry_from_pb(e: &pb::ReplicationEntry) -> Option<Entry> {
    let ts = timestamp_from_pb(e.ts.as_ref()?);
    let vector = (!e.removed).then_some(ReplicationVector {
        memory: Replication {
            global: e.memory_global,
            local: e.memory_local,
        },
        disk: Replication {
            global: e.disk_global,
            local: e.disk_local,
        },
    });
    Some(Entry {
        ts,
        vector,
        by_policy: e.by_policy,
    })
}

/// The bucket digests as sent (empty for an empty table).
pub fn buckets_to_pb(table: &ReplicationTable) -> Vec<u64> {
    if table.stored() == 0 {
        Vec::new()
    } else {
        table.buckets().to_vec()
    }
}

/// The buckets of `table` whose digests differ from `theirs` (a peer's digests as sent:
/// empty means an empty table; any other length is ignored — nothing differs).
pub fn differing(table: &ReplicationTable, theirs: &[u64]) -> Vec<usize> {
    let mine = table.buckets();
    match theirs.len() {
        0 => (0..BUCKETS).filter(|&b| mine[b] != 0).collect(),
        BUCKETS => (0..BUCKETS).filter(|&b| mine[b] != theirs[b]).collect(),
        _ => Vec::new(),
    }
}

/// The entries of `buckets`, within the per-message bounds.
pub fn entries_of(table: &ReplicationTable, buckets: &[usize]) -> Vec<pb::ReplicationEntry> {
    let mut out = Vec::new();
    let mut bytes = 0usize;
    for &b in buckets {
        for (key, e) in table.bucket(b) {
            if out.len() >= MAX_SYNC_ENTRIES || bytes + key.len() > MAX_SYNC_BYTES {
                return out;
            }
            bytes += key.len();
            out.push(entry_to_pb(key, e));
        }
    }
    out
}

/// Merges entries from a peer. Keys the table does not hold are taken only while it holds
/// fewer than `max_entries` entries (the rest are skipped and logged: a peer cannot grow it
/// without bound); removals older than their time to live are not taken. Returns true if
/// the table changed.
pub fn merge_pb(
    table: &mut ReplicationTable,
    entries: &[pb::ReplicationEntry],
    max_entries: usize,
    now_ms: u64,
) -> bool {
    let mut changed = false;
    let mut skipped = 0usize;
    for e in entries {
        let Some(entry) = entry_from_pb(e) else {
            continue;
        };
        if vectors::expired(&entry, now_ms) {
            continue;
        }
        if table.stored() >= max_entries && table.entry(&e.key).is_none() {
            skipped += 1;
            continue;
        }
        changed |= table.merge(&e.key, entry);
    }
    if skipped > 0 {
        tracing::warn!(
            skipped,
            max_entries,
            "replication vectors from a peer ignored: the table is full"
        );
    }
    changed
}

#[cfg(test)]
mod tests {
    use lattice::Timestamp;

    use super::*;

    fn v(global: u32) -> ReplicationVector {
        crate::view::default_vector(global, 1)
    }

    #[test]
    fn entries_from_peers_stop_at_the_table_limit() {
        let mut source = ReplicationTable::new();
        for k in 0..10u8 {
            source.insert(Box::from(&[k][..]), (Timestamp::new(5, 1), v(2)));
        }
        let all: Vec<usize> = (0..BUCKETS).collect();
        let mut t = ReplicationTable::new();
        assert!(merge_pb(&mut t, &entries_of(&source, &all), 4, 0));
        assert_eq!(t.stored(), 4, "new keys beyond the limit are skipped");
        // Keys it holds still take newer settings, and removals.
        let (key, _) = t.vectors().next().map(|(k, v)| (Box::from(k), v)).unwrap();
        let mut update = ReplicationTable::new();
        update.merge(
            &key,
            Entry {
                ts: Timestamp::new(6, 1),
                vector: None,
                by_policy: false,
            },
        );
        assert!(merge_pb(&mut t, &entries_of(&update, &all), 4, 0));
        assert_eq!(t.get(&key), None);
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn only_the_buckets_that_differ_travel_and_they_converge() {
        let mut a = ReplicationTable::new();
        for i in 0..5_000u32 {
            a.insert(
                Box::from(&i.to_le_bytes()[..]),
                (Timestamp::new(5 << 16, 1), v(2)),
            );
        }
        let mut b = a.clone();
        b.insert(Box::from(&b"hot"[..]), (Timestamp::new(9 << 16, 2), v(3)));
        let diff = differing(&a, &buckets_to_pb(&b));
        assert_eq!(diff.len(), 1);
        let sent = entries_of(&b, &diff);
        assert!(
            sent.len() < 5_000 / 100,
            "{} entries for one change",
            sent.len()
        );
        assert!(merge_pb(&mut a, &sent, usize::MAX, 0));
        assert_eq!(a.digest(), b.digest());
        assert!(differing(&a, &buckets_to_pb(&b)).is_empty());
        // A peer with an empty table: every non-empty bucket differs.
        assert_eq!(differing(&a, &[]).len(), BUCKETS);
        assert!(differing(&ReplicationTable::new(), &[]).is_empty());
        // Malformed digests: nothing is sent.
        assert!(differing(&a, &[1, 2, 3]).is_empty());
    }

    #[test]
    fn a_large_table_is_sent_in_bounded_messages() {
        let mut a = ReplicationTable::new();
        for i in 0..(MAX_SYNC_ENTRIES as u32 + 1_000) {
            a.insert(
                Box::from(&i.to_le_bytes()[..]),
                (Timestamp::new(5 << 16, 1), v(2)),
            );
        }
        let mut b = ReplicationTable::new();
        let mut rounds = 0;
        loop {
            let diff = differing(&a, &buckets_to_pb(&b));
            if diff.is_empty() {
                break;
            }
            let sent = entries_of(&a, &diff);
            assert!(sent.len() <= MAX_SYNC_ENTRIES);
            merge_pb(&mut b, &sent, usize::MAX, 0);
            rounds += 1;
            assert!(rounds < 5, "no progress");
        }
        assert_eq!(rounds, 2);
        assert_eq!(b.len(), a.len());
    }

    #[test]
    fn the_policy_mark_travels_and_differs_in_the_digest() {
        let v = ReplicationVector {
            memory: Replication {
                global: 2,
                local: 1,
            },
            disk: Replication {
                global: 1,
                local: 1,
            },
        };
        let entry = |by_policy| Entry {
            ts: Timestamp::new(5 << 16, 1),
            vector: Some(v),
            by_policy,
        };
        let pb = entry_to_pb(b"k", &entry(true));
        assert!(pb.by_policy);
        assert_eq!(entry_from_pb(&pb), Some(entry(true)));
        // Two tables that differ only in the mark are not in sync.
        let (mut a, mut b) = (ReplicationTable::new(), ReplicationTable::new());
        a.merge(b"k", entry(true));
        b.merge(b"k", entry(false));
        assert_ne!(a.buckets(), b.buckets());
        // And they converge the same way whatever the order.
        a.merge(b"k", entry(false));
        b.merge(b"k", entry(true));
        assert_eq!(a.buckets(), b.buckets());
        assert_eq!(a.entry(b"k"), b.entry(b"k"));
    }

    #[test]
    fn expired_removals_are_not_taken() {
        let mut a = ReplicationTable::new();
        a.merge(
            b"k",
            Entry {
                ts: Timestamp::new(1 << 16, 1),
                vector: None,
                by_policy: false,
            },
        );
        let all: Vec<usize> = (0..BUCKETS).collect();
        let mut b = ReplicationTable::new();
        let late = 1 + vectors::REMOVAL_TTL_MS + 1;
        assert!(!merge_pb(&mut b, &entries_of(&a, &all), usize::MAX, late));
        assert!(merge_pb(&mut b, &entries_of(&a, &all), usize::MAX, 2));
        assert_eq!(b.stored(), 1);
    }
}
