//! A join under a large store: the worker hands its keys off in small steps, so its
//! driver can serve requests between them (issue 14: a join of a second node under load
//! over 100,000 keys stalled every client for about 200 ms while the seed's worker compared,
//! queued, sent and dropped 50,000 keys in steps of 16,384 entries and rounds of 8,192
//! keys, one after the other).

use std::sync::Arc;

use bytes::Bytes;
use lattice::{Lww, Record, Timestamp, Value};
use placement::{node_key, Replica};

use super::*;
use crate::clock::ManualClock;
use crate::config::Limits;
use crate::shard::Shard;
use crate::test_fixtures::{memory_view_of, shard_config};
use crate::view::ViewState;

/// Keys the worker holds when the second node joins.
const KEYS: usize = 60_000;

/// Most keys one tick may queue for hand-off, or send, while the join is handed off: what
/// the worker's requests wait for at most between two ticks.
const MOST_PER_TICK: u64 = 2_500;

fn view(nodes: &[&str]) -> Arc<ViewState> {
    memory_view_of(nodes, 1)
}

#[test]
fn a_join_is_handed_off_in_steps_of_a_few_thousand_keys() {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let a = Replica {
        node: node_key("a"),
        worker: 0,
    };
    let shard = Shard::new(
        shard_config(a, Limits::default()),
        view(&["a"]),
        7,
        clock.clone(),
    );
    let mut core = Core::new(shard, CoreConfig::default(), 7);
    let ts = Timestamp::new(5 << 16, 1);
    let value = || Some(Value::Lww(Lww::new(ts, Box::from(&b"value"[..]))));
    let records = (0..KEYS).map(|i| (Bytes::from(format!("key:{i}")), Record::new(ts, value())));
    core.shard_mut()
        .merge_gossip(records.collect())
        .expect("stored");
    core.take_effects();

    // Node b joins and takes about half of the keys.
    let next = view(&["a", "b"]);
    let staying = (0..KEYS)
        .filter(|i| next.is_replica(format!("key:{i}").as_bytes(), a))
        .count() as u64;
    assert!(staying > KEYS as u64 / 4 && staying < KEYS as u64 * 3 / 4);
    core.set_view(next);

    let (mut most_queued, mut most_sent, mut ticks) = (0, 0, 0);
    while core.stats().shard.stored_keys > staying {
        ticks += 1;
        assert!(
            ticks < 100_000,
            "the hand-off does not end: {:?}",
            core.stats()
        );
        let queued_before = core.stats().shard.handoff_keys;
        core.tick();
        most_queued = most_queued.max(core.stats().shard.handoff_keys - queued_before);
        // b acknowledges every batch (durably) before the next tick.
        let mut sent = 0;
        for e in core.take_effects() {
            if let Effect::Send {
                req,
                msg: PeerMsg::Replicate { entries, .. },
                ..
            } = e
            {
                sent += entries.len() as u64;
                core.on_reply(req, Ok(PeerReply::Ack(entries.len() as u64)));
            }
        }
        most_sent = most_sent.max(sent);
        core.take_effects();
        let now = core.now();
        clock.advance(core.next_deadline().saturating_sub(now));
    }
    assert_eq!(core.stats().shard.handoff_keys, 0);
    assert!(
        most_queued <= MOST_PER_TICK && most_sent <= MOST_PER_TICK,
        "a tick queued up to {most_queued} keys for hand-off and sent up to {most_sent} \
         ({ticks} ticks for {} keys)",
        KEYS as u64 - staying
    );
}
