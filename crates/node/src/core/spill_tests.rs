//! `disk_copy = on_eviction`: live values stay in RAM (and the log) until they are
//! evicted; eviction demotes LRU records to the disk tier first and drops them once
//! acknowledged; deletes still reach the disk tier at once.

use super::*;
use crate::config::DiskCopy;

fn spilling(budget: usize) -> Rig {
    Rig::build(budget, CoreConfig::default(), DiskCopy::OnEviction)
}

#[test]
fn live_writes_stay_in_memory_and_deletes_reach_the_disk() {
    let mut rig = spilling(1 << 20);
    for k in names("k", 20) {
        assert_eq!(rig.assign(&k, &kib(1)), OpResult::Int(1));
    }
    rig.gossip(true);
    rig.gossip(true);
    assert!(rig.disk.is_empty(), "live values went to the disk tier");
    assert_eq!(rig.core.shard().store().len(), 20);
    // A delete goes to the disk replica: a copy there (from an earlier eviction) must not
    // outlive the tombstone's reclamation.
    let r = rig.run(Op::Delete {
        key: Bytes::from_static(b"k3"),
    });
    assert_eq!(r, OpResult::Int(1));
    rig.gossip(true);
    assert_eq!(rig.disk.len(), 1);
    assert!(rig.disk[&Bytes::from_static(b"k3")].value.is_none());
}

#[test]
fn eviction_demotes_then_drops_and_every_key_reads_back() {
    let mut rig = spilling(32 * KIB);
    // The tier tests' load (key i holds kib(i)), and a round for the last demotions.
    spill(&mut rig, 96);
    rig.gossip(true);
    let keys = names("k", 96);
    let stats = rig.stats();
    assert!(rig.core.shard().spilled());
    assert!(stats.evictions > 0, "{stats:?}");
    // Only what was evicted went to the disk, and it is all there.
    let gone = evicted(&rig, &keys);
    assert!(gone.len() >= 48, "{} evicted", gone.len());
    for k in &gone {
        assert!(
            rig.disk.contains_key(k.as_bytes()),
            "{k} evicted, not on disk"
        );
    }
    assert!(
        rig.disk.len() <= gone.len() + 32,
        "{} on disk for {} evicted: demoted far more than needed",
        rig.disk.len(),
        gone.len()
    );
    assert!(rig.core.shard().store().bytes() <= 32 * KIB);
    // Every key reads back its own value, from RAM or from the disk tier.
    for (i, k) in keys.iter().enumerate() {
        match rig.get(k) {
            Some(Value::Lww(l)) => assert_eq!(&*l.value, &kib(i as u8)[..], "{k}"),
            other => panic!("{k}: {other:?}"),
        }
    }
}

#[test]
fn a_record_written_while_being_demoted_is_not_dropped() {
    let mut rig = spilling(16 * KIB);
    // Past the budget, within the hard ceiling (no gossip round yet).
    let keys = names("k", 24);
    for k in &keys {
        assert_eq!(rig.assign(k, &kib(1)), OpResult::Int(1));
    }
    // The eviction step demoted the coldest records; their batch is not answered yet.
    let pending = rig.gossip(false);
    assert!(!pending.is_empty(), "nothing was demoted");
    let demoted: Vec<String> = keys
        .iter()
        .filter(|k| rig.core.shard().store().is_synced(k.as_bytes()))
        .cloned()
        .collect();
    assert!(!demoted.is_empty());
    // One of them is written again before the disk answers.
    let again = &demoted[0];
    assert_eq!(rig.assign(again, &kib(9)), OpResult::Int(1));
    assert!(!rig.core.shard().store().is_synced(again.as_bytes()));
    for req in pending {
        rig.core.on_reply(req, Ok(PeerReply::Ack(0)));
    }
    rig.play(true);
    assert!(
        rig.cached(again),
        "a record written since its demotion was dropped"
    );
    // The disk holds the old value; the new one is read back, and reaches the disk when the
    // key is demoted again.
    match rig.get(again) {
        Some(Value::Lww(l)) => assert_eq!(&*l.value, &kib(9)[..]),
        other => panic!("{other:?}"),
    }
    for k in names("x", 40) {
        assert_eq!(rig.assign(&k, &kib(2)), OpResult::Int(1));
        rig.gossip(true);
    }
    rig.gossip(true);
    if !rig.cached(again) {
        match &rig.disk[&Bytes::from(again.clone())].value {
            Some(Value::Lww(l)) => assert_eq!(&*l.value, &kib(9)[..]),
            other => panic!("{other:?}"),
        }
    }
    match rig.get(again) {
        Some(Value::Lww(l)) => assert_eq!(&*l.value, &kib(9)[..]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_cold_read_is_dropped_without_a_copy_back() {
    let mut rig = spilling(16 * KIB);
    let keys = names("k", 48);
    for k in &keys {
        assert_eq!(rig.assign(k, &kib(3)), OpResult::Int(1));
        rig.gossip(true);
    }
    rig.gossip(true);
    let gone = evicted(&rig, &keys);
    assert!(!gone.is_empty());
    let on_disk = rig.disk.len();
    let demotions = rig.stats().demotions;
    // Read once: fetched, answered, dropped again (it is what the disk has).
    assert!(rig.get(&gone[0]).is_some());
    assert!(!rig.cached(&gone[0]));
    rig.gossip(true);
    assert_eq!(rig.stats().demotions, demotions);
    assert_eq!(rig.disk.len(), on_disk);
}

#[test]
fn anti_entropy_with_the_disk_tier_is_declined_before_any_eviction() {
    let mut rig = spilling(1 << 20);
    rig.assign("x", b"1");
    assert!(!rig.core.shard().spilled());
    rig.core.on_peer(
        disk(),
        PeerMsg::Digest {
            first: 0,
            digests: vec![1; 4],
        },
        Token(1),
    );
    let answered = rig.core.take_effects().into_iter().find_map(|e| match e {
        Effect::Respond {
            result: Ok(PeerReply::Repair { differing, .. }),
            ..
        } => Some(differing.len()),
        _ => None,
    });
    assert_eq!(answered, Some(0));
}

#[test]
fn writers_wait_for_demotions_only_past_halfway_to_the_ceiling() {
    let mut rig = spilling(16 * KIB);
    let keys = names("k", 28);
    for k in &keys[..20] {
        assert_eq!(rig.assign(k, &kib(1)), OpResult::Int(1));
    }
    // Over the budget, demotions queued, below halfway (24 KiB): writers run freely.
    assert!(rig.core.shard().store().bytes() > 16 * KIB);
    assert!(!rig.core.shard().memory_pressure());
    for k in &keys[20..] {
        assert_eq!(rig.assign(k, &kib(1)), OpResult::Int(1));
    }
    // Past halfway with demotions unanswered: writers wait (instead of meeting the
    // ceiling's error); once the disk acknowledges, the records leave and they go on.
    assert!(rig.core.shard().store().bytes() > 24 * KIB);
    assert!(rig.core.shard().memory_pressure());
    rig.gossip(true);
    rig.gossip(true);
    assert!(rig.core.shard().store().bytes() <= 16 * KIB);
    assert!(!rig.core.shard().memory_pressure());
}
