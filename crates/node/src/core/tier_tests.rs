//! Tiering through the core: eviction of clean records only, fetches of evicted keys from
//! the disk tier (shared, merged with partial records, for every lattice type), promotion
//! of warm keys, back-pressure and the hard ceiling, anti-entropy declined with the disk.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use lattice::{Counter, Lattice, Lww, OrSet, Record, Timestamp, Value};
use placement::{node_key, NodeInfo, Replica, Replication, ReplicationVector, Tier};

use super::*;
use crate::clock::ManualClock;
use crate::config::Limits;
use crate::op::{Condition, Op, OpResult};
use crate::shard::{Shard, ShardConfig};
use crate::view::{ReplicationTable, ViewState};

const KIB: usize = 1024;

fn info(id: &str, tier: Tier) -> NodeInfo {
    NodeInfo {
        id: id.to_string(),
        tier,
        workers: vec![format!("{id}/0")],
        front: format!("{id}/front"),
        resp: format!("{id}/resp"),
        peer: format!("{id}/peer"),
        vnodes: 32,
        placement: placement::PLACEMENT_HASH_TAGS,
    }
}

fn disk() -> Replica {
    Replica {
        node: node_key("d"),
        worker: 0,
    }
}

/// One memory node and one disk node; every key has one replica on each.
fn view() -> Arc<ViewState> {
    view_of(vec![info("m", Tier::Memory), info("d", Tier::Disk)])
}

/// A view of `nodes` where every key has one replica in each tier.
fn view_of(nodes: Vec<NodeInfo>) -> Arc<ViewState> {
    let one = Replication {
        global: 1,
        local: 1,
    };
    Arc::new(ViewState::of(
        nodes,
        ReplicationTable::new(),
        ReplicationVector {
            memory: one,
            disk: one,
        },
    ))
}

/// The memory node's worker with a budget of `budget` bytes, and the disk replica's
/// contents as the test plays it.
struct Rig {
    core: Core,
    clock: Arc<ManualClock>,
    disk: HashMap<Bytes, Record>,
    /// Completed client requests.
    done: HashMap<Ticket, Vec<OpResult>>,
    /// Fetches answered.
    fetches: usize,
}

impl Rig {
    fn new(budget: usize) -> Rig {
        Rig::with(budget, CoreConfig::default())
    }

    fn with(budget: usize, config: CoreConfig) -> Rig {
        Rig::build(budget, config, crate::config::DiskCopy::EveryWrite)
    }

    fn build(budget: usize, config: CoreConfig, disk_copy: crate::config::DiskCopy) -> Rig {
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        let shard = Shard::new(
            ShardConfig {
                me: Replica {
                    node: node_key("m"),
                    worker: 0,
                },
                limits: Limits::default(),
                memory_budget: budget,
                max_changeset_keys: 1 << 20,
                settle_ms: 0,
                tombstone_memory_ms: 1_000,
                disk_copy,
            },
            view(),
            7,
            clock.clone(),
        );
        Rig {
            core: Core::new(shard, config, 7),
            clock,
            disk: HashMap::new(),
            done: HashMap::new(),
            fetches: 0,
        }
    }

    fn submit(&mut self, ops: Vec<Op<Bytes>>) -> Submitted {
        self.core
            .submit(ops, crate::ack::Ack::MERGED, Routing::Forward)
    }

    fn assign(&mut self, key: &str, value: &[u8]) -> OpResult {
        let op = Op::Assign {
            key: Bytes::copy_from_slice(key.as_bytes()),
            value: Bytes::copy_from_slice(value),
            condition: Condition::Always,
        };
        match self.submit(vec![op]) {
            Submitted::Done(mut r) => r.remove(0),
            other => panic!("an unconditional assign waits: {other:?}"),
        }
    }

    /// Runs `op` and plays the world until it completes.
    fn run(&mut self, op: Op<Bytes>) -> OpResult {
        match self.submit(vec![op]) {
            Submitted::Done(mut r) => r.remove(0),
            Submitted::Pending(t) => {
                self.play(false);
                self.done.remove(&t).expect("completed").remove(0)
            }
        }
    }

    fn get(&mut self, key: &str) -> Option<Value> {
        match self.run(Op::Get {
            key: Bytes::copy_from_slice(key.as_bytes()),
        }) {
            OpResult::Value(v) => v,
            other => panic!("{other:?}"),
        }
    }

    /// Carries out the core's effects: the disk replica merges and acknowledges replication
    /// (if `ack`, else it is left unanswered) and answers fetches from what it holds.
    fn play(&mut self, ack: bool) -> Vec<ReqId> {
        let mut unanswered = Vec::new();
        loop {
            let effects = self.core.take_effects();
            if effects.is_empty() {
                return unanswered;
            }
            for e in effects {
                match e {
                    Effect::Send { req, to, msg, .. } => {
                        assert_eq!(to, disk(), "everything goes to the disk replica");
                        match msg {
                            PeerMsg::Replicate { entries, durable } => {
                                assert!(durable, "batches to the disk tier are durable");
                                if !ack {
                                    unanswered.push(req);
                                    continue;
                                }
                                let n = entries.len() as u64;
                                for (k, r) in entries {
                                    self.merge_on_disk(k, r);
                                }
                                self.core.on_reply(req, Ok(PeerReply::Ack(n)));
                            }
                            PeerMsg::Fetch { keys } => {
                                self.fetches += 1;
                                let found = keys
                                    .into_iter()
                                    .filter_map(|k| self.disk.get(&k).map(|r| (k, r.clone())))
                                    .collect();
                                self.core.on_reply(req, Ok(PeerReply::Records(found)));
                            }
                            other => panic!("unexpected {other:?}"),
                        }
                    }
                    Effect::Complete { ticket, results } => {
                        self.done.insert(ticket, results);
                    }
                    Effect::Journal(_) | Effect::Sync { .. } | Effect::Respond { .. } => {}
                    Effect::Unreachable { .. } => panic!("nothing times out here"),
                    Effect::BackingApply { .. } | Effect::BackingFetch { .. } => {
                        panic!("no backing store here")
                    }
                }
            }
        }
    }

    fn merge_on_disk(&mut self, key: Bytes, record: Record) {
        match self.disk.get_mut(&key) {
            Some(r) => {
                r.merge(record);
            }
            None => {
                self.disk.insert(key, record);
            }
        }
    }

    /// A gossip round, acknowledged (or not) by the disk replica.
    fn gossip(&mut self, ack: bool) -> Vec<ReqId> {
        self.clock.advance(self.core.config().gossip_period_ms + 1);
        self.core.tick();
        self.play(ack)
    }

    fn cached(&self, key: &str) -> bool {
        self.core.shard().store().get(key.as_bytes()).is_some()
    }

    fn stats(&self) -> crate::shard::ShardStats {
        self.core.shard().stats()
    }
}

fn kib(tag: u8) -> Vec<u8> {
    vec![tag; KIB]
}

/// Keys evicted (or never cached) among `keys`.
fn evicted(rig: &Rig, keys: &[String]) -> Vec<String> {
    keys.iter().filter(|k| !rig.cached(k)).cloned().collect()
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

#[test]
fn eviction_takes_cold_clean_records_and_never_dirty_ones() {
    let mut rig = Rig::new(64 * KIB);
    let clean = names("c", 40);
    for k in &clean {
        assert_eq!(rig.assign(k, &kib(1)), OpResult::Int(1));
    }
    rig.gossip(true);
    // The first ten are read again: recent.
    for k in &clean[..10] {
        assert!(rig.get(k).is_some());
    }
    assert_eq!(rig.stats().evictions, 0);
    assert!(!rig.core.shard().spilled());
    // Dirty writes past the budget: room is made from the cold clean records.
    let dirty = names("d", 30);
    for k in &dirty {
        assert_eq!(rig.assign(k, &kib(2)), OpResult::Int(1));
    }
    let gone = evicted(&rig, &clean);
    assert!(rig.stats().evictions > 0 && rig.core.shard().spilled());
    assert_eq!(gone.len() as u64, rig.stats().evictions);
    assert!(
        evicted(&rig, &dirty).is_empty(),
        "a dirty record was evicted"
    );
    assert!(
        evicted(&rig, &clean[..10]).is_empty(),
        "recently read records went before cold ones: {gone:?}"
    );
    assert!(rig.core.shard().store().bytes() <= 64 * KIB);

    // Nothing clean left to evict: writes go on past the budget while the core gossips
    // early, and fail only at the hard ceiling.
    let more = names("e", 200);
    let mut refused = None;
    for (i, k) in more.iter().enumerate() {
        match rig.assign(k, &kib(3)) {
            OpResult::Int(1) => {}
            OpResult::Error(crate::error::NodeError::MemoryLimit { used, budget }) => {
                assert_eq!(budget, 64 * KIB);
                assert!(used >= crate::shard::HARD_CEILING_FACTOR * budget, "{used}");
                refused = Some(i);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(refused.is_some(), "the hard ceiling was never reached");
    assert!(rig.core.shard().memory_pressure());
    assert!(evicted(&rig, &dirty).is_empty() && evicted(&rig, &more[..10]).is_empty());
    // Once the disk tier acknowledges them, they become evictable: below the budget again.
    let unacked = rig.gossip(true);
    assert!(unacked.is_empty());
    rig.core.tick();
    while rig.core.shard().store().bytes() > 64 * KIB {
        rig.core.tick();
    }
    assert!(!rig.core.shard().memory_pressure());
    assert_eq!(rig.assign("after", &kib(4)), OpResult::Int(1));
}

#[test]
fn batches_to_the_disk_tier_stay_within_the_byte_bound() {
    // Room for about 16 records of 1 KiB in flight: the second batch of 10 must wait.
    let config = CoreConfig {
        max_bytes_in_flight: 16 * KIB,
        ..CoreConfig::default()
    };
    let mut rig = Rig::with(1 << 20, config);
    for k in names("a", 10) {
        assert_eq!(rig.assign(&k, &kib(1)), OpResult::Int(1));
    }
    let first = rig.gossip(false);
    assert_eq!(first.len(), 1, "one batch went out");
    for k in names("b", 10) {
        assert_eq!(rig.assign(&k, &kib(2)), OpResult::Int(1));
    }
    assert!(
        rig.gossip(false).is_empty(),
        "a batch went out beyond the byte bound"
    );
    assert_eq!(rig.core.stats().batches_in_flight, 1);
    // The first answered: the waiting records go out.
    rig.core.on_reply(first[0], Ok(PeerReply::Ack(10)));
    let second = rig.gossip(false);
    assert_eq!(second.len(), 1, "the waiting batch did not go out");
    // A single batch larger than the bound still goes (else nothing would ever move).
    rig.core.on_reply(second[0], Ok(PeerReply::Ack(10)));
    for k in names("c", 40) {
        assert_eq!(rig.assign(&k, &kib(3)), OpResult::Int(1));
    }
    assert_eq!(rig.gossip(true), Vec::<ReqId>::new());
    assert_eq!(rig.core.stats().batches_in_flight, 0);
    assert!(names("c", 40)
        .iter()
        .all(|k| rig.disk.contains_key(k.as_bytes())));
}

/// Fills the worker past its budget with acknowledged records; returns the keys evicted.
fn spill(rig: &mut Rig, n: usize) -> Vec<String> {
    let keys = names("k", n);
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(rig.assign(k, &kib(i as u8)), OpResult::Int(1));
        if i % 8 == 7 {
            rig.gossip(true);
        }
    }
    rig.gossip(true);
    rig.core.tick();
    assert!(rig.core.shard().spilled());
    let gone = evicted(rig, &keys);
    assert!(gone.len() > 4, "{gone:?}");
    gone
}

#[test]
fn reads_of_evicted_keys_fetch_once_and_promote_warm_keys() {
    let mut rig = Rig::new(32 * KIB);
    let gone = spill(&mut rig, 64);
    let (a, b) = (&gone[0], &gone[1]);
    let want = rig.disk[&Bytes::from(a.clone())].value.clone();
    // First read: fetched, answered, not kept (read once while cold).
    assert_eq!(rig.get(a), want);
    assert_eq!((rig.fetches, rig.stats().disk_fetches), (1, 1));
    assert!(!rig.cached(a));
    // Second read: warm (fetched a second time within the window), kept.
    assert_eq!(rig.get(a), want);
    assert_eq!(rig.fetches, 2);
    assert!(rig.cached(a));
    // Then served from RAM: no fetch.
    assert_eq!(rig.get(a), want);
    assert_eq!(rig.fetches, 2);
    assert_eq!(rig.stats().disk_fetches, 2);
    // Concurrent reads of one evicted key share one fetch.
    let get = |k: &String| Op::Get {
        key: Bytes::from(k.clone()),
    };
    let Submitted::Pending(t) = rig.submit(vec![get(b), get(b), get(b)]) else {
        panic!("an evicted key is fetched")
    };
    rig.play(true);
    assert_eq!(rig.fetches, 3);
    let results = rig.done.remove(&t).unwrap();
    let want = rig.disk[&Bytes::from(b.clone())].value.clone();
    assert_eq!(results, vec![OpResult::Value(want); 3]);
    // A key that exists nowhere reads as absent after asking the disk tier.
    assert_eq!(rig.get("never-written"), None);
    assert_eq!(rig.fetches, 4);
}

#[test]
fn a_worker_that_never_evicted_answers_misses_at_once() {
    let mut rig = Rig::new(1 << 20);
    rig.assign("x", b"1");
    let r = rig.submit(vec![Op::Get {
        key: Bytes::from_static(b"missing"),
    }]);
    assert_eq!(r, Submitted::Done(vec![OpResult::Value(None)]));
    assert_eq!(rig.fetches, 0);
}

fn lww_at(ms: u64, v: &[u8]) -> Record {
    let ts = Timestamp::new(ms << 16, 99);
    Record::new(ts, Some(Value::Lww(Lww::new(ts, Box::from(v)))))
}

#[test]
fn writes_to_evicted_keys_merge_with_the_disk_record() {
    let mut rig = Rig::new(32 * KIB);
    let gone = spill(&mut rig, 64);
    let now = 1_700_000_000_000u64;

    // LWW: a blind write, answered at once; the partial record merges with the disk's.
    let (older, newer) = (&gone[0], &gone[1]);
    assert_eq!(rig.assign(older, b"mine"), OpResult::Int(1));
    assert!(rig.core.shard().store().is_partial(older.as_bytes()));
    assert_eq!(rig.fetches, 0, "a blind write reads nothing");
    assert_eq!(
        rig.get(older),
        Some(Value::Lww(Lww::new(
            match rig.core.shard().store().get(older.as_bytes()).unwrap() {
                store::RecordRef::Lww { ts, .. } => ts,
                other => panic!("{other:?}"),
            },
            Box::from(&b"mine"[..])
        )))
    );
    assert!(!rig.core.shard().store().is_partial(older.as_bytes()));
    // The disk holds a newer write (another writer's): it wins over the partial record.
    rig.disk
        .insert(Bytes::from(newer.clone()), lww_at(now + 60_000, b"theirs"));
    assert_eq!(rig.assign(newer, b"mine"), OpResult::Int(1));
    assert_eq!(
        rig.get(newer),
        lww_at(now + 60_000, b"theirs").value,
        "the disk's newer write is lost"
    );

    // Counter: the increment waits for the disk's state, then adds to it.
    let counter = Counter::new().add_delta(99, 5).unwrap();
    rig.disk.insert(
        Bytes::from_static(b"ctr"),
        Record::new(Timestamp::ZERO, Some(Value::Counter(counter))),
    );
    let r = rig.run(Op::CounterAdd {
        key: Bytes::from_static(b"ctr"),
        delta: 2,
    });
    assert_eq!(r, OpResult::Int(7));

    // OR-set (re-created after a delete: a non-zero epoch), an add waits for the disk's
    // set and joins it.
    let epoch = Timestamp::new(now << 16, 99);
    let set = OrSet::new().add_delta(99, Box::from(&b"a"[..]));
    rig.disk.insert(
        Bytes::from_static(b"set"),
        Record::new(epoch, Some(Value::OrSet(Box::new(set)))),
    );
    let r = rig.run(Op::SetAdd {
        key: Bytes::from_static(b"set"),
        members: vec![Bytes::from_static(b"b")],
    });
    assert_eq!(r, OpResult::Int(1));
    let r = rig.run(Op::SetLen {
        key: Bytes::from_static(b"set"),
    });
    assert_eq!(r, OpResult::Int(2));
    // The merged state reaches the disk with the next round.
    rig.gossip(true);
    match &rig.disk[&Bytes::from_static(b"set")].value {
        Some(Value::OrSet(s)) => assert_eq!(s.len(), 2),
        other => panic!("{other:?}"),
    }
    match &rig.disk[&Bytes::from_static(b"ctr")].value {
        Some(Value::Counter(c)) => assert_eq!(c.value(), 7),
        other => panic!("{other:?}"),
    }

    // A delete of an evicted key deletes it.
    let victim = &gone[2];
    let r = rig.run(Op::Delete {
        key: Bytes::from(victim.clone()),
    });
    assert_eq!(r, OpResult::Int(1));
    assert_eq!(rig.get(victim), None);
}

#[test]
fn a_spilled_worker_declines_anti_entropy_with_the_disk_tier() {
    let mut rig = Rig::new(32 * KIB);
    rig.assign("x", b"1");
    // Before it spilled: digests are compared.
    rig.core.on_peer(
        disk(),
        PeerMsg::Digest {
            first: 0,
            digests: vec![1; 4],
        },
        Token(1),
    );
    let differing = |effects: Vec<Effect>| {
        effects
            .into_iter()
            .find_map(|e| match e {
                Effect::Respond {
                    result: Ok(PeerReply::Repair { differing, .. }),
                    ..
                } => Some(differing.len()),
                _ => None,
            })
            .expect("an answer")
    };
    assert!(differing(rig.core.take_effects()) > 0);
    spill(&mut rig, 64);
    rig.core.on_peer(
        disk(),
        PeerMsg::Digest {
            first: 0,
            digests: vec![1; 4],
        },
        Token(2),
    );
    assert_eq!(differing(rig.core.take_effects()), 0);
}

/// The same worker copying live values to the disk tier on eviction only.
#[path = "spill_tests.rs"]
mod spill;

/// The memory tier's membership changing under a worker.
#[path = "join_tests.rs"]
mod join;
