//! Tests of `disk`.

use super::*;
use lattice::{Counter, Lww, Timestamp, Value};

fn ts(ms: u64) -> Timestamp {
    Timestamp::new(ms << 16, 1)
}

fn lww(ms: u64, v: &str) -> Record {
    Record::new(
        ts(ms),
        Some(Value::Lww(Lww::new(ts(ms), Box::from(v.as_bytes())))),
    )
}

fn text(r: &Record) -> String {
    match &r.value {
        Some(Value::Lww(l)) => String::from_utf8(l.value.to_vec()).unwrap(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn partitions_resume_after_a_key_and_tombstones_are_removed_by_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let db = DiskDb::open(dir.path(), &DiskOptions::default()).unwrap();
    let mut s = db.shard(0).unwrap();
    let keys: Vec<String> = (0..600).map(|i| format!("k{i}")).collect();
    for k in &keys {
        s.merge(k.as_bytes(), lww(1, k)).unwrap();
    }
    s.merge(b"e", Record::tombstone(ts(2))).unwrap();
    let mut seen = Vec::new();
    for p in 0..crate::PARTITIONS {
        let all: Vec<Box<[u8]>> = s.iter_partition(p, None).map(|r| r.unwrap().0).collect();
        assert!(all.iter().all(|k| partition_of(k) == p));
        assert!(
            all.windows(2).all(|w| w[0] < w[1]),
            "key order within a partition"
        );
        if all.len() >= 2 {
            let rest: Vec<Box<[u8]>> = s
                .iter_partition(p, Some(&all[0]))
                .map(|r| r.unwrap().0)
                .collect();
            assert_eq!(rest, all[1..].to_vec(), "resumes after a key");
        }
        seen.extend(all);
    }
    assert_eq!(seen.len(), 601);
    assert_eq!(s.iter().count(), 601);
    assert!(!s.remove_tombstone(b"e", ts(1)).unwrap());
    assert!(!s.remove_tombstone(b"a", ts(1)).unwrap());
    assert!(s.remove_tombstone(b"e", ts(2)).unwrap());
    assert_eq!(s.len(), 600);
}

/// A store written by the earlier layout (keyspace `w0`, keys without their partition
/// byte) is rewritten when opened, and reads the same.
#[test]
fn stores_of_the_earlier_layout_are_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = DiskDb::open(dir.path(), &DiskOptions::default()).unwrap();
        let old = db
            .db
            .keyspace("w0", KeyspaceCreateOptions::default)
            .unwrap();
        for i in 0..100 {
            let k = format!("k{i}");
            old.insert(k.as_bytes(), encode(&lww(1, &k))).unwrap();
        }
        db.persist(true).unwrap();
    }
    let db = DiskDb::open(dir.path(), &DiskOptions::default()).unwrap();
    let s = db.shard(0).unwrap();
    assert_eq!((s.len(), s.live_keys()), (100, 100));
    assert_eq!(s.get_owned(b"k7").unwrap(), Some(lww(1, "k7")));
    assert!(!db.db.keyspace_exists("w0"), "the old keyspace is gone");
    assert_eq!(db.orphan_shards(0), vec![0]);
    assert!(db.orphan_shards(1).is_empty());
}

#[test]
fn merges_persist_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = DiskDb::open(dir.path(), &DiskOptions::default()).unwrap();
        let mut s = db.shard(0).unwrap();
        assert!(s.merge(b"a", lww(10, "one")).unwrap().changed);
        assert!(s.merge(b"a", lww(20, "two")).unwrap().changed);
        // An older write changes nothing and is not rewritten.
        let out = s.merge(b"a", lww(15, "old")).unwrap();
        assert!(!out.changed && out.is_live);
        s.merge(b"b", lww(5, "bee")).unwrap();
        s.merge(b"gone", lww(5, "x")).unwrap();
        s.merge(b"gone", Record::new(ts(30), None)).unwrap();
        assert_eq!(s.live_keys(), 2);
        assert_eq!(s.len(), 3);
        db.persist(true).unwrap();
    }
    let db = DiskDb::open(dir.path(), &DiskOptions::default()).unwrap();
    let mut s = db.shard(0).unwrap();
    assert_eq!(s.live_keys(), 2, "counts are rebuilt on open");
    assert_eq!(s.len(), 3);
    assert_eq!(text(&s.get_owned(b"a").unwrap().unwrap()), "two");
    let got = s.get(b"b").unwrap().unwrap();
    assert!(got.is_live());
    assert!(!s.get(b"gone").unwrap().unwrap().is_live());
    assert!(s.get(b"never").unwrap().is_none());
    // Another worker's keyspace is separate.
    let other = db.shard(1).unwrap();
    assert!(other.is_empty());
    assert!(other.get_owned(b"a").unwrap().is_none());
}

#[test]
fn update_remove_and_tombstone_collection() {
    let dir = tempfile::tempdir().unwrap();
    let db = DiskDb::open(dir.path(), &DiskOptions::default()).unwrap();
    let mut s = db.shard(0).unwrap();
    let mut c = Counter::new();
    let _ = c.add(7, 5);
    s.merge(b"c", Record::new(ts(1), Some(Value::Counter(c))))
        .unwrap();
    let (_, out) = s
        .update(b"c", |r| {
            if let Some(Value::Counter(c)) = &mut r.value {
                let _ = c.add(7, 2);
            }
        })
        .unwrap()
        .unwrap();
    assert!(out.is_live);
    match s.get_owned(b"c").unwrap().unwrap().value {
        Some(Value::Counter(c)) => assert_eq!(c.value(), 7),
        other => panic!("{other:?}"),
    }
    assert!(s.update(b"absent", |_| ()).unwrap().is_none());
    s.merge(b"t1", Record::new(ts(100), None)).unwrap();
    s.merge(b"t2", Record::new(ts(5_000), None)).unwrap();
    assert_eq!(s.collect_tombstones(1_000).unwrap(), 1);
    assert!(!s.contains(b"t1").unwrap());
    assert!(s.contains(b"t2").unwrap());
    assert!(s.remove(b"c").unwrap().is_some());
    assert!(s.remove(b"c").unwrap().is_none());
    assert!(!s.contains(b"c").unwrap());
    assert_eq!(s.live_keys(), 0);
    assert_eq!(s.len(), 1);
    let keys: Vec<Box<[u8]>> = s.iter().map(|r| r.unwrap().0).collect();
    assert_eq!(keys, vec![Box::from(&b"t2"[..])]);
}

#[test]
fn io_errors_are_classified_by_cause() {
    let full = classify_io(io::Error::from_raw_os_error(ENOSPC));
    assert!(matches!(full, StoreError::DiskFull(_)) && full.is_disk_failure());
    assert!(matches!(
        classify_io(io::Error::from_raw_os_error(EROFS)),
        StoreError::ReadOnly(_)
    ));
    assert!(matches!(
        classify_io(io::Error::from_raw_os_error(5)),
        StoreError::Io(_)
    ));
    assert!(!StoreError::Locked.is_disk_failure());
    let nested = fjall::Error::Storage(fjall::LsmError::Io(io::Error::from_raw_os_error(ENOSPC)));
    assert!(matches!(StoreError::from(nested), StoreError::DiskFull(_)));
    assert!(matches!(
        StoreError::from(fjall::Error::Poisoned),
        StoreError::Poisoned
    ));
}

/// `put_merged` stores a caller's merged copy as it is and keeps the counts `merge` would
/// have: the disk shard's write-through path, which no longer reads the record back.
#[test]
fn put_merged_stores_the_copy_and_keeps_the_counts() {
    let dir = tempfile::tempdir().unwrap();
    let db = DiskDb::open(dir.path(), &DiskOptions::default()).unwrap();
    let mut s = db.shard(0).unwrap();
    // The caller's copy, kept in step with what it wrote through.
    let mut cache = crate::MemStore::default();
    let writes = [
        ("a", lww(10, "one")),
        ("a", lww(20, "two")),
        ("b", lww(5, "bee")),
        ("gone", lww(5, "x")),
        ("gone", Record::new(ts(30), None)),
        ("gone", lww(40, "back")),
        ("c", Record::new(ts(7), None)),
    ];
    for (k, r) in writes {
        let out = cache.merge(k.as_bytes(), r);
        let copy = cache.get(k.as_bytes()).unwrap().to_record();
        s.put_merged(k.as_bytes(), &copy, out).unwrap();
    }
    assert_eq!((s.len(), s.live_keys()), (4, 3));
    assert_eq!(text(&s.get_owned(b"a").unwrap().unwrap()), "two");
    assert_eq!(text(&s.get_owned(b"gone").unwrap().unwrap()), "back");
    assert!(!s.get(b"c").unwrap().unwrap().is_live());
    db.persist(true).unwrap();
    drop(s);
    let s = db.shard(0).unwrap();
    assert_eq!(
        (s.len(), s.live_keys()),
        (4, 3),
        "the counts a reopen rebuilds"
    );
}

/// A keyspace created with small memtables flushes them to level-0 tables as it fills,
/// and `table_counts` sees them; the size stays the one the keyspace was created with.
#[test]
fn small_memtables_flush_to_tables_that_table_counts_sees() {
    let dir = tempfile::tempdir().unwrap();
    let options = DiskOptions {
        memtable_bytes: 1 << 20,
        ..DiskOptions::default()
    };
    let db = DiskDb::open(dir.path(), &options).unwrap();
    let mut s = db.shard(0).unwrap();
    assert_eq!(db.table_counts(), (0, 0));
    let value = "v".repeat(1000);
    // About 4 MiB: several memtables of 1 MiB.
    for i in 0..4_000 {
        s.merge(format!("key{i}").as_bytes(), lww(1, &value))
            .unwrap();
    }
    // Flushes run on fjall's background threads: wait for the first table.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while db.table_counts().0 == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no table after 4 MiB of writes into 1 MiB memtables"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let (all, l0) = db.table_counts();
    assert!(all >= l0, "{all} tables, {l0} in level 0");
}
