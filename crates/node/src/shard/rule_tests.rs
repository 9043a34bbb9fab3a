//! A start under the other hash-tag rule: keys the log replayed where the other rule put
//! them move to their workers by hand-off, and every one reads back (see
//! `Shard::check_rule_placement`).

use std::sync::Arc;

use bytes::Bytes;
use lattice::Value;

use super::tests::{config, fixed_clock, node};
use super::*;
use crate::codec::JournalEntry;
use crate::op::{Op, OpResult};
use crate::view::{default_vector, ReplicationTable, ViewState};

const WORKERS: usize = 4;

/// A one-node view of [`WORKERS`] workers with the hash-tag rule in force.
fn tagged_view() -> Arc<ViewState> {
    Arc::new(ViewState::single_node(
        "n",
        WORKERS,
        32,
        default_vector(1, 1),
    ))
}

fn get(s: &mut Shard, key: &[u8]) -> Option<Value> {
    match s.execute(Op::Get { key }) {
        OpResult::Value(v) => v,
        other => panic!("unexpected {other:?}"),
    }
}

fn shards(view: &Arc<ViewState>) -> Vec<Shard> {
    (0..WORKERS as u32)
        .map(|w| Shard::new(config("n", w), view.clone(), 7 + w as u64, fixed_clock()))
        .collect()
}

/// Delivers every queued gossip and hand-off between `shards` until none is left.
fn exchange(shards: &mut [Shard]) {
    for _ in 0..16 {
        let mut sent = false;
        for from in 0..shards.len() {
            for out in shards[from].take_gossip() {
                sent = true;
                let to = out.to.worker as usize;
                let handoffs = out.handoffs.clone();
                shards[to].merge_handoff(out.entries).unwrap();
                shards[from].delivered(out.to, &handoffs);
            }
        }
        if !sent {
            return;
        }
    }
    panic!("gossip never settled");
}

/// The keys of a tag the whole-key rule puts on several workers, and some untagged keys.
fn keys(whole: &ViewState) -> Vec<String> {
    let tag = (0..100)
        .map(|i| format!("q{i}"))
        .find(|t| {
            let owners: std::collections::BTreeSet<_> = ["wait", "active", "done", "id"]
                .iter()
                .map(|s| whole.replicas(format!("bull:{{{t}}}:{s}").as_bytes())[0])
                .collect();
            owners.len() > 1
        })
        .expect("a tag spread by whole keys");
    let mut keys: Vec<String> = ["wait", "active", "done", "id"]
        .iter()
        .map(|s| format!("bull:{{{tag}}}:{s}"))
        .collect();
    keys.extend((0..20).map(|i| format!("plain:{i}")));
    keys
}

/// Writes each key (a counter of its index + 1) on its replica under `view`, then starts
/// again under `next`: a new set of shards replaying what each old one held. Returns them
/// and each key's value as written.
fn write_then_restart(
    view: &Arc<ViewState>,
    next: &Arc<ViewState>,
    keys: &[String],
) -> (Vec<Shard>, Vec<Value>) {
    let mut before = shards(view);
    for (i, k) in keys.iter().enumerate() {
        let w = view.replicas(k.as_bytes())[0].worker as usize;
        let r = before[w].execute(Op::CounterAdd {
            key: k.as_bytes(),
            delta: i as i64 + 1,
        });
        assert_eq!(r, OpResult::Int(i as i64 + 1));
    }
    let written = keys
        .iter()
        .map(|k| {
            let w = view.replicas(k.as_bytes())[0].worker as usize;
            get(&mut before[w], k.as_bytes()).expect("written")
        })
        .collect();
    let mut after = shards(next);
    for (old, new) in before.iter_mut().zip(after.iter_mut()) {
        let entries = keys
            .iter()
            .filter_map(|k| {
                let record = old.record_of(k.as_bytes()).unwrap()?;
                Some(JournalEntry::Merge(Bytes::from(k.clone()), record))
            })
            .collect();
        new.restore(entries);
    }
    (after, written)
}

/// What a start does ([`place_by_rule`]). Returns how many copies moved.
fn start(shards: &mut [Shard]) -> usize {
    place_by_rule(shards).unwrap()
}

fn check_every_key_on_its_worker(
    shards: &mut [Shard],
    view: &ViewState,
    keys: &[String],
    written: &[Value],
) {
    for (k, value) in keys.iter().zip(written) {
        let owner = view.replicas(k.as_bytes())[0].worker as usize;
        for (w, s) in shards.iter().enumerate() {
            assert_eq!(s.stores(k.as_bytes()), w == owner, "{k} on worker {w}");
        }
        assert_eq!(
            get(&mut shards[owner], k.as_bytes()).as_ref(),
            Some(value),
            "{k}"
        );
    }
}

#[test]
fn keys_written_by_whole_keys_move_to_their_tag_s_worker_at_start() {
    let tags = tagged_view();
    assert!(tags.view.hash_tags());
    let whole = Arc::new(tags.under_rule(false));
    assert_ne!(whole.rings, tags.rings);
    let keys = keys(&whole);
    let (mut after, written) = write_then_restart(&whole, &tags, &keys);
    let moved = start(&mut after);
    assert!((1..=4).contains(&moved), "{moved}");
    assert!(
        after.iter().all(|s| s.settling().is_none()),
        "all moves are local"
    );
    // Before any hand-off: every key reads back on its new worker.
    for (k, value) in keys.iter().zip(&written) {
        let owner = tags.replicas(k.as_bytes())[0].worker as usize;
        assert_eq!(
            get(&mut after[owner], k.as_bytes()).as_ref(),
            Some(value),
            "{k}"
        );
    }
    exchange(&mut after);
    check_every_key_on_its_worker(&mut after, &tags, &keys, &written);
    // One worker holds the whole tag.
    let owners: std::collections::BTreeSet<u32> = keys[..4]
        .iter()
        .map(|k| tags.replicas(k.as_bytes())[0].worker)
        .collect();
    assert_eq!(owners.len(), 1);
}

#[test]
fn keys_written_under_tags_move_back_when_a_start_keeps_whole_keys() {
    let tags = tagged_view();
    let whole = Arc::new(tags.under_rule(false));
    let keys = keys(&whole);
    let (mut after, written) = write_then_restart(&tags, &whole, &keys);
    assert!(start(&mut after) > 0);
    exchange(&mut after);
    check_every_key_on_its_worker(&mut after, &whole, &keys, &written);
}

#[test]
fn a_start_under_the_rule_the_keys_were_written_by_moves_nothing() {
    let tags = tagged_view();
    let keys = keys(&tags.under_rule(false));
    let (mut after, written) = write_then_restart(&tags, &tags, &keys);
    assert_eq!(start(&mut after), 0);
    assert!(after
        .iter()
        .all(|s| s.settling().is_none() && !s.has_gossip()));
    check_every_key_on_its_worker(&mut after, &tags, &keys, &written);
}

/// Two nodes: the rule needs both, so a node that does not advertise it keeps whole keys.
#[test]
fn an_older_member_keeps_whole_keys_for_the_cluster() {
    let old = placement::NodeInfo {
        placement: 0,
        ..node("m", 2)
    };
    let mixed = ViewState::of(
        vec![node("n", 2), old],
        ReplicationTable::new(),
        default_vector(1, 1),
    );
    assert!(!mixed.view.hash_tags());
    let both = ViewState::of(
        vec![node("n", 2), node("m", 2)],
        ReplicationTable::new(),
        default_vector(1, 1),
    );
    assert!(both.view.hash_tags());
    assert_ne!(mixed.rings, both.rings);
}

/// On a node that evicted to the disk tier before this start, what the log held of a key
/// may be part of it: the copy on its new worker is partial too (its reads complete it
/// from the disk tier), as the key replayed on the old worker is.
#[test]
fn a_copy_on_a_node_that_evicted_is_partial() {
    let tags = tagged_view();
    let whole = Arc::new(tags.under_rule(false));
    let keys = keys(&whole);
    let mut before = shards(&whole);
    let mut after = shards(&tags);
    for s in after.iter_mut() {
        s.mark_spilled();
    }
    for k in &keys {
        let w = whole.replicas(k.as_bytes())[0].worker as usize;
        before[w].execute(Op::CounterAdd {
            key: k.as_bytes(),
            delta: 1,
        });
        let record = before[w].record_of(k.as_bytes()).unwrap().unwrap();
        after[w].restore(vec![JournalEntry::Merge(Bytes::from(k.clone()), record)]);
    }
    assert!(start(&mut after) > 0);
    for k in &keys[..4] {
        let owner = tags.replicas(k.as_bytes())[0].worker as usize;
        assert!(after[owner].store.is_partial(k.as_bytes()), "{k}");
    }
}
