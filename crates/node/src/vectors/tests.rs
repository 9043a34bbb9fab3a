use lattice::Timestamp;
use placement::{Replication, ReplicationVector};

use super::*;

fn vector(global: u32, local: u32) -> ReplicationVector {
    ReplicationVector {
        memory: Replication { global, local },
        disk: Replication {
            global: 1,
            local: 1,
        },
    }
}

fn set(ms: u64, v: ReplicationVector) -> Entry {
    Entry {
        ts: Timestamp::new(ms << 16, 1),
        vector: Some(v),
        by_policy: false,
    }
}

fn removal(ms: u64) -> Entry {
    Entry {
        ts: Timestamp::new(ms << 16, 1),
        vector: None,
        by_policy: false,
    }
}

#[test]
fn the_newest_setting_wins_in_any_order() {
    let mut a = ReplicationTable::new();
    assert!(a.merge(b"k", set(1, vector(2, 1))));
    assert!(a.merge(b"k", set(3, vector(3, 1))));
    assert!(!a.merge(b"k", set(2, vector(1, 4))), "older setting taken");
    assert!(
        !a.merge(b"k", set(3, vector(3, 1))),
        "a duplicate changed the table"
    );
    let mut b = ReplicationTable::new();
    b.merge(b"k", set(3, vector(3, 1)));
    b.merge(b"k", set(2, vector(1, 4)));
    b.merge(b"k", set(1, vector(2, 1)));
    assert_eq!(a.get(b"k"), Some(vector(3, 1)));
    assert_eq!(a.digest(), b.digest());
    assert_eq!(a.buckets(), b.buckets());
    // Ties on the timestamp resolve by the vector, alike everywhere.
    let mut c = ReplicationTable::new();
    c.merge(b"t", set(5, vector(1, 1)));
    c.merge(b"t", set(5, vector(2, 1)));
    let mut d = ReplicationTable::new();
    d.merge(b"t", set(5, vector(2, 1)));
    d.merge(b"t", set(5, vector(1, 1)));
    assert_eq!(c.get(b"t"), d.get(b"t"));
}

#[test]
fn a_removal_returns_the_key_to_the_default_and_outlives_older_settings() {
    let mut t = ReplicationTable::new();
    t.merge(b"hot", set(1, vector(3, 2)));
    assert_eq!((t.len(), t.stored()), (1, 1));
    assert!(t.merge(b"hot", removal(2)));
    assert_eq!(t.get(b"hot"), None);
    assert!(t.is_empty(), "a removal counts as an explicit vector");
    assert_eq!(t.stored(), 1);
    assert!(
        !t.merge(b"hot", set(1, vector(3, 2))),
        "a stale setting came back"
    );
    assert!(t.merge(b"hot", set(4, vector(2, 1))));
    assert_eq!(t.get(b"hot"), Some(vector(2, 1)));
    assert_eq!((t.len(), t.stored()), (1, 1));
}

#[test]
fn removals_are_purged_after_their_ttl_and_the_digest_follows() {
    let mut t = ReplicationTable::new();
    t.merge(b"kept", set(1, vector(2, 1)));
    t.merge(b"gone", removal(1_000));
    let fresh = 1_000 + REMOVAL_TTL_MS;
    assert_eq!(t.purge_removals(fresh), 0, "purged before its time");
    assert_eq!(t.purge_removals(fresh + 1), 1);
    let mut only = ReplicationTable::new();
    only.merge(b"kept", set(1, vector(2, 1)));
    assert_eq!(t.digest(), only.digest());
    assert_eq!(t.stored(), 1);
    assert!(expired(&removal(1), fresh + 1));
    assert!(!expired(&set(1, vector(1, 1)), u64::MAX));
}

#[test]
fn buckets_hold_their_keys_and_digests_tell_which_differ() {
    let mut a = ReplicationTable::new();
    for i in 0..2_000u32 {
        a.merge(format!("key{i}").as_bytes(), set(1, vector(2, 1)));
    }
    let total: usize = (0..BUCKETS).map(|b| a.bucket(b).count()).sum();
    assert_eq!(total, 2_000);
    for b in 0..BUCKETS {
        for (key, _) in a.bucket(b) {
            assert_eq!(bucket_of(table_hash(key)), b);
        }
    }
    let mut b = a.clone();
    b.merge(b"key7", set(2, vector(3, 1)));
    let differ: Vec<usize> = (0..BUCKETS)
        .filter(|&i| a.buckets()[i] != b.buckets()[i])
        .collect();
    assert_eq!(differ, vec![bucket_of(table_hash(b"key7"))]);
}

#[test]
fn changed_keys_of_a_large_table_are_exactly_the_changes() {
    let mut old = ReplicationTable::new();
    for i in 0..200_000u32 {
        old.merge(&i.to_le_bytes(), set(1, vector(2, 1)));
    }
    let mut new = old.clone();
    new.merge(&7u32.to_le_bytes(), set(2, vector(3, 1)));
    new.merge(b"added", set(2, vector(2, 2)));
    new.merge(&9u32.to_le_bytes(), removal(2));
    let mut changed = new.changed_keys(&old);
    changed.sort();
    let mut expected: Vec<Blob> = vec![
        Box::from(&7u32.to_le_bytes()[..]),
        Box::from(&b"added"[..]),
        Box::from(&9u32.to_le_bytes()[..]),
    ];
    expected.sort();
    assert_eq!(changed, expected);
    assert!(old.changed_keys(&old).is_empty());
    assert_eq!(new.len(), 200_000);
}
