//! The backing store through the core, with the store played by the test (a map merged
//! into, as the real one merges rows): write-back answers at once and applies later,
//! write-through waits, read-through, failed mode (writes buffer, misses refused, probes),
//! recovery per technique, the buffer bound.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use lattice::{Lattice, Lww, Record, Timestamp, Value};
use placement::{node_key, NodeInfo, Replica, Replication, ReplicationVector, Tier};

use super::*;
use crate::clock::{Clock, ManualClock};
use crate::config::Limits;
use crate::op::{Condition, Op, OpResult};
use crate::shard::{Shard, ShardConfig};
use crate::view::{ReplicationTable, ViewState};
use crate::writeback::{BackingConfig, Mode, Technique, WritePolicy};

fn view() -> Arc<ViewState> {
    let info = NodeInfo {
        id: "m".into(),
        tier: Tier::Memory,
        workers: vec!["m/0".into()],
        front: "m/front".into(),
        resp: "m/resp".into(),
        peer: "m/peer".into(),
        vnodes: 32,
        placement: placement::PLACEMENT_HASH_TAGS,
    };
    Arc::new(ViewState::of(
        vec![info],
        ReplicationTable::new(),
        ReplicationVector {
            memory: Replication {
                global: 1,
                local: 1,
            },
            disk: Replication {
                global: 0,
                local: 1,
            },
        },
    ))
}

/// One worker in front of a store the test plays.
struct Rig {
    core: Core,
    clock: Arc<ManualClock>,
    store: HashMap<Bytes, Record>,
    /// The store answers (else it fails every request).
    up: bool,
    done: HashMap<Ticket, Vec<OpResult>>,
    applies: usize,
    fetches: usize,
}

impl Rig {
    fn new(policy: WritePolicy, technique: Technique, max_buffered: u64) -> Rig {
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        let mut shard = Shard::new(
            ShardConfig {
                me: Replica {
                    node: node_key("m"),
                    worker: 0,
                },
                limits: Limits::default(),
                memory_budget: 64 << 20,
                max_changeset_keys: 1 << 20,
                settle_ms: 0,
                tombstone_memory_ms: 1_000,
                disk_copy: Default::default(),
            },
            view(),
            7,
            clock.clone(),
        );
        let config = BackingConfig {
            url: Some("postgresql://test@localhost/db".into()),
            policy: Some(policy),
            technique,
            recovery_workers: 1,
            max_buffered_bytes: max_buffered,
            ..BackingConfig::default()
        };
        shard.set_backing(Arc::new(config), 1);
        let mut core = Core::new(shard, CoreConfig::default(), 7);
        core.start_backing();
        Rig {
            core,
            clock,
            store: HashMap::new(),
            up: true,
            done: HashMap::new(),
            applies: 0,
            fetches: 0,
        }
    }

    fn submit(&mut self, op: Op<Bytes>) -> Submitted {
        self.core
            .submit(vec![op], crate::ack::Ack::MERGED, Routing::Forward)
    }

    fn put(&mut self, key: &str, value: &[u8]) -> Submitted {
        self.submit(Op::Assign {
            key: Bytes::copy_from_slice(key.as_bytes()),
            value: Bytes::copy_from_slice(value),
            condition: Condition::Always,
        })
    }

    fn get(&mut self, key: &str) -> Submitted {
        self.submit(Op::Get {
            key: Bytes::copy_from_slice(key.as_bytes()),
        })
    }

    /// Carries out the core's effects against the store until none are left.
    fn play(&mut self) {
        loop {
            let effects = self.core.take_effects();
            if effects.is_empty() {
                return;
            }
            for e in effects {
                match e {
                    Effect::BackingApply { id, batch } => {
                        self.applies += 1;
                        let result = if self.up {
                            for (k, r) in batch {
                                match self.store.get_mut(&k) {
                                    Some(s) => {
                                        s.merge(r);
                                    }
                                    None => {
                                        self.store.insert(k, r);
                                    }
                                }
                            }
                            Ok(())
                        } else {
                            Err("connection refused".to_string())
                        };
                        self.core.on_backing_applied(id, result);
                    }
                    Effect::BackingFetch { id, keys } => {
                        self.fetches += 1;
                        let result = if self.up {
                            Ok(keys.iter().map(|k| self.store.get(k).cloned()).collect())
                        } else {
                            Err("connection refused".to_string())
                        };
                        self.core.on_backing_fetched(id, result);
                    }
                    Effect::Complete { ticket, results } => {
                        self.done.insert(ticket, results);
                    }
                    _ => {}
                }
            }
        }
    }

    /// Lets `ms` pass and runs what is due.
    fn wait(&mut self, ms: u64) {
        self.clock.advance(ms);
        self.core.tick();
        self.play();
    }

    fn result(&mut self, s: Submitted) -> Option<OpResult> {
        match s {
            Submitted::Done(mut r) => Some(r.remove(0)),
            Submitted::Pending(t) => {
                self.play();
                self.done.remove(&t).map(|mut r| r.remove(0))
            }
        }
    }

    fn stored(&self, key: &str) -> Option<Vec<u8>> {
        match self.store.get(key.as_bytes())?.value.as_ref()? {
            Value::Lww(l) => Some(l.value.to_vec()),
            other => panic!("{other:?}"),
        }
    }

    fn mode(&self) -> Mode {
        self.core.shard().backing_mode()
    }

    fn stats(&self) -> crate::shard::BackingStats {
        self.core.shard().backing_stats()
    }
}

fn lww(v: &[u8]) -> Record {
    let ts = Timestamp::new(1 << 16, 3);
    Record::new(ts, Some(Value::Lww(Lww::new(ts, Box::from(v)))))
}

#[test]
fn write_back_answers_at_once_and_applies_after_the_delay() {
    let mut rig = Rig::new(WritePolicy::WriteBack, Technique::Tardis, 1 << 30);
    let s = rig.put("k", b"v1");
    assert!(matches!(s, Submitted::Done(_)), "write-back waits: {s:?}");
    rig.play();
    assert_eq!(rig.applies, 0, "applied before its delay");
    assert_eq!(rig.stats().dirty_keys, 1);
    // Absorbed: a second write before the delay is over goes out in the same apply.
    assert!(matches!(rig.put("k", b"v2"), Submitted::Done(_)));
    rig.wait(150);
    assert_eq!(rig.applies, 1);
    assert_eq!(rig.stored("k").as_deref(), Some(&b"v2"[..]));
    let s = rig.stats();
    assert_eq!((s.dirty_keys, s.dirty_bytes, s.applied_keys), (0, 0, 1));
}

#[test]
fn write_through_answers_once_the_store_has_the_write() {
    let mut rig = Rig::new(WritePolicy::WriteThrough, Technique::Tardis, 1 << 30);
    let Submitted::Pending(t) = rig.put("k", b"v") else {
        panic!("a write-through write answered before the store had it");
    };
    assert!(rig.store.is_empty());
    rig.play();
    assert_eq!(rig.stored("k").as_deref(), Some(&b"v"[..]));
    assert_eq!(rig.done.remove(&t), Some(vec![OpResult::Int(1)]));
}

#[test]
fn write_around_leaves_ram_once_applied_and_reads_back_through() {
    let mut rig = Rig::new(WritePolicy::WriteAround, Technique::Tardis, 1 << 30);
    let s = rig.put("k", b"v");
    assert_eq!(rig.result(s), Some(OpResult::Int(1)));
    assert!(rig.core.shard().store().get(b"k").is_none(), "still in RAM");
    let s = rig.get("k");
    let Some(OpResult::Value(Some(Value::Lww(l)))) = rig.result(s) else {
        panic!("not read back through the store");
    };
    assert_eq!(&l.value[..], b"v");
    assert_eq!(rig.fetches, 1);
}

#[test]
fn reads_of_keys_not_in_ram_fill_from_the_store() {
    let mut rig = Rig::new(WritePolicy::WriteThrough, Technique::Tardis, 1 << 30);
    rig.store
        .insert(Bytes::from_static(b"old"), lww(b"from sql"));
    let s = rig.get("old");
    let Some(OpResult::Value(Some(Value::Lww(l)))) = rig.result(s) else {
        panic!("not read through");
    };
    assert_eq!(&l.value[..], b"from sql");
    // Now cached: the next read needs no fetch. An absent key is asked each time.
    let s = rig.get("old");
    assert!(matches!(s, Submitted::Done(_)));
    let s = rig.get("nothing");
    assert_eq!(rig.result(s), Some(OpResult::Value(None)));
    assert_eq!(rig.fetches, 2);
}

#[test]
fn failed_mode_buffers_writes_refuses_misses_and_recovers_by_probing() {
    let mut rig = Rig::new(WritePolicy::WriteThrough, Technique::Tardis, 1 << 30);
    rig.up = false;
    // The first write-through write finds the store down: answered anyway (buffered).
    let s = rig.put("a", b"1");
    assert_eq!(rig.result(s), Some(OpResult::Int(1)));
    assert_eq!(rig.mode(), Mode::Failed);
    // Writes keep succeeding at once; all of them are on the failed list.
    for k in ["b", "c"] {
        let s = rig.put(k, b"2");
        assert!(matches!(s, Submitted::Done(_)), "a failed-mode write waits");
    }
    assert_eq!(rig.stats().failed_keys, 3);
    // Cached keys read; a key not in RAM is refused without asking the store.
    let fetches = rig.fetches;
    let s = rig.get("a");
    assert!(matches!(s, Submitted::Done(_)));
    let s = rig.get("elsewhere");
    match rig.result(s) {
        Some(OpResult::Error(NodeError::Unavailable(why))) => {
            assert!(why.contains("backing store is unavailable"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(rig.fetches, fetches);
    // Probes back off while the store stays down.
    let applies = rig.applies;
    rig.wait(100);
    rig.wait(100);
    rig.wait(100);
    assert!(rig.applies - applies <= 2, "probes do not back off");
    // The store is back: the next probe succeeds, recovery drains the list, normal mode.
    rig.up = true;
    for _ in 0..20 {
        rig.wait(500);
    }
    assert_eq!(rig.mode(), Mode::Normal);
    assert_eq!(rig.stats().failed_keys, 0);
    for k in ["a", "b", "c"] {
        assert!(rig.stored(k).is_some(), "{k} never reached the store");
    }
}

/// Puts a rig in recovery, keys "a", "b", "c" written in failed mode, its recovery workers
/// off (the probe applied one of the keys).
fn recovering(technique: Technique) -> Rig {
    let mut rig = Rig::new(WritePolicy::WriteBack, technique, 1 << 30);
    rig.up = false;
    for k in ["a", "b", "c"] {
        let s = rig.put(k, b"1");
        rig.result(s);
    }
    rig.wait(200);
    assert_eq!(rig.mode(), Mode::Failed);
    rig.up = true;
    // Stops the recovery workers from draining before the test looks.
    let mut core_config = rig.core.shard().backing_config().as_ref().clone();
    core_config.recovery_workers = 0;
    rig.core.shard_mut().set_backing(Arc::new(core_config), 1);
    rig.wait(5_000);
    assert_eq!(rig.mode(), Mode::Recovery, "{:?}", rig.stats());
    rig
}

#[test]
fn recovery_writes_apply_at_once_under_tardis_and_buffer_under_tar() {
    let mut rig = recovering(Technique::Tardis);
    let s = rig.put("w", b"x");
    assert!(
        matches!(s, Submitted::Pending(_)),
        "a TARDIS recovery write buffered"
    );
    rig.result(s);
    assert!(rig.stored("w").is_some());
    assert_eq!(rig.mode(), Mode::Recovery);
    assert_eq!(rig.stats().failed_keys, 2, "the probe applies one key");
    // Writes to the keys on the failed list apply their buffered state too; once none is
    // left, recovery is over (and write-back writes are answered at once again).
    for k in ["a", "b", "c"] {
        let s = rig.put(k, b"2");
        rig.result(s);
    }
    rig.wait(150);
    for k in ["a", "b", "c"] {
        assert_eq!(rig.stored(k).as_deref(), Some(&b"2"[..]), "{k}");
    }
    assert_eq!(rig.mode(), Mode::Normal, "the failed list drained");

    let mut rig = recovering(Technique::Tar);
    let s = rig.put("w", b"x");
    assert!(
        matches!(s, Submitted::Done(_)),
        "a TAR recovery write waits"
    );
    assert!(rig.stored("w").is_none());
    // TAR refuses misses during recovery; TARDIS reads through.
    let s = rig.get("elsewhere");
    assert!(matches!(rig.result(s), Some(OpResult::Error(_))));
    let mut rig = recovering(Technique::Tardis);
    let s = rig.get("elsewhere");
    assert_eq!(rig.result(s), Some(OpResult::Value(None)));
}

#[test]
fn a_full_buffer_refuses_writes_while_the_store_is_down() {
    let mut rig = Rig::new(WritePolicy::WriteBack, Technique::Tardis, 4 * 1024);
    rig.up = false;
    let s = rig.put("first", b"x");
    rig.result(s);
    rig.wait(200);
    assert_eq!(rig.mode(), Mode::Failed);
    let value = vec![b'v'; 1024];
    let mut refused = 0;
    for i in 0..16 {
        let s = rig.put(&format!("k{i}"), &value);
        if let Some(OpResult::Error(NodeError::Unavailable(why))) = rig.result(s) {
            assert!(why.contains("write-back buffer is full"), "{why}");
            refused += 1;
        }
    }
    assert!(refused > 0, "nothing refused beyond the bound");
    assert_eq!(rig.stats().refused_writes, refused);
    // Refused writes were not applied: nothing beyond the bound is held.
    assert!(rig.stats().dirty_bytes <= 4 * 1024 + 1100);
}

#[test]
fn in_place_counter_and_set_updates_reach_the_store() {
    let mut rig = Rig::new(WritePolicy::WriteBack, Technique::Tardis, 1 << 30);
    let add = |delta| Op::CounterAdd {
        key: Bytes::from_static(b"ctr"),
        delta,
    };
    let member = |m: &'static [u8]| Op::SetAdd {
        key: Bytes::from_static(b"set"),
        members: vec![Bytes::from_static(m)],
    };
    // The first write of each creates it; the next ones update it in place.
    for op in [add(1), member(b"a")] {
        let s = rig.submit(op);
        rig.result(s);
    }
    rig.wait(150);
    for op in [add(2), add(3), member(b"b")] {
        let s = rig.submit(op);
        rig.result(s);
    }
    rig.wait(150);
    assert_eq!(rig.stats().dirty_keys, 0);
    match rig.store[&b"ctr"[..]].value.as_ref() {
        Some(Value::Counter(c)) => assert_eq!(c.value(), 6, "increments in place were lost"),
        other => panic!("{other:?}"),
    }
    match rig.store[&b"set"[..]].value.as_ref() {
        Some(Value::OrSet(s)) => assert!(s.contains(&b"b"[..]), "a set add was lost"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_write_through_write_goes_out_at_once_behind_many_buffered_write_back_keys() {
    let mut rig = Rig::new(WritePolicy::WriteThrough, Technique::Tardis, 1 << 30);
    let mut config = rig.core.shard().backing_config().as_ref().clone();
    config.prefixes = vec![crate::writeback::PrefixPolicy {
        prefix: "wb:".into(),
        policy: WritePolicy::WriteBack,
    }];
    config.apply_delay_ms = 60_000;
    rig.core.shard_mut().set_backing(Arc::new(config), 1);
    for i in 0..3_000 {
        let s = rig.put(&format!("wb:{i}"), b"x");
        assert!(matches!(s, Submitted::Done(_)));
    }
    rig.play();
    assert_eq!(rig.applies, 0, "write-back keys applied before their delay");
    let s = rig.put("now", b"y");
    assert_eq!(rig.result(s), Some(OpResult::Int(1)));
    assert_eq!(
        rig.applies, 1,
        "the write-through write waited for other batches"
    );
    assert_eq!(rig.store.len(), 1);
    assert_eq!(rig.stats().dirty_keys, 3_000);
}

#[test]
fn recovery_without_workers_answers_writes_behind_a_long_failed_list_and_sleeps() {
    let mut rig = Rig::new(WritePolicy::WriteThrough, Technique::Tardis, 1 << 30);
    let mut config = rig.core.shard().backing_config().as_ref().clone();
    config.recovery_workers = 0;
    rig.core.shard_mut().set_backing(Arc::new(config), 1);
    rig.up = false;
    for i in 0..2_000 {
        let s = rig.put(&format!("k{i}"), b"x");
        rig.result(s);
    }
    assert_eq!(rig.mode(), Mode::Failed);
    rig.up = true;
    rig.wait(5_000);
    assert_eq!(rig.mode(), Mode::Recovery);
    // Nothing can go out (no recovery workers, no client waiting): the worker sleeps
    // rather than waking at once for keys nothing may take.
    let now = rig.clock.mono_ms();
    assert!(
        rig.core.next_deadline() > now,
        "the worker spins in recovery without workers"
    );
    // Writes are applied at once (TARDIS), wherever their key is on the failed list, and
    // new keys too.
    let applies = rig.applies;
    for key in ["k1999", "k0", "new"] {
        let s = rig.put(key, b"y");
        assert_eq!(
            rig.result(s),
            Some(OpResult::Int(1)),
            "{key} never answered"
        );
        assert_eq!(rig.stored(key).as_deref(), Some(&b"y"[..]));
    }
    assert_eq!(rig.applies - applies, 3);
}

#[test]
fn a_write_waiting_when_the_store_failed_does_not_strand_the_next_one() {
    let mut rig = Rig::new(WritePolicy::WriteThrough, Technique::Dis, 1 << 30);
    let mut config = rig.core.shard().backing_config().as_ref().clone();
    config.recovery_workers = 0;
    rig.core.shard_mut().set_backing(Arc::new(config), 1);
    // Two write-through writes are in flight (one batch each) when the store fails: both
    // are answered (buffered).
    rig.up = false;
    let first = [rig.put("k1", b"1"), rig.put("k2", b"1")];
    for s in first {
        assert_eq!(rig.result(s), Some(OpResult::Int(1)));
    }
    assert_eq!(rig.mode(), Mode::Failed);
    rig.up = true;
    // The probe applies one of them; recovery without workers leaves the other dirty.
    rig.wait(5_000);
    assert_eq!(rig.mode(), Mode::Recovery);
    assert_eq!(rig.stats().failed_keys, 1);
    // The next writes of the keys, in recovery under DIS without workers, go out.
    for k in ["k1", "k2"] {
        let s = rig.put(k, b"2");
        assert_eq!(rig.result(s), Some(OpResult::Int(1)), "{k} stranded");
        assert_eq!(rig.stored(k).as_deref(), Some(&b"2"[..]));
    }
}

#[test]
fn a_read_of_many_uncached_keys_asks_the_store_in_bounded_reads() {
    let mut rig = Rig::new(WritePolicy::WriteThrough, Technique::Tardis, 1 << 30);
    let keys: Vec<Op<Bytes>> = (0..1_000)
        .map(|i| Op::Get {
            key: Bytes::from(format!("k{i}")),
        })
        .collect();
    let s = rig
        .core
        .submit(keys, crate::ack::Ack::MERGED, Routing::Forward);
    let Submitted::Pending(t) = s else {
        panic!("uncached keys answered without the store");
    };
    rig.play();
    assert_eq!(rig.done.remove(&t).map(|r| r.len()), Some(1_000));
    // batch_keys is 256: four reads, and the worker stays in normal mode.
    assert_eq!(rig.fetches, 4);
    assert_eq!(rig.mode(), Mode::Normal);
}
