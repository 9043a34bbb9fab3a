//! A worker's client requests always get their results, even when the core completes them
//! while the worker carries out the effects of their submission.

use std::sync::Arc;

use bytes::Bytes;
use placement::node_key;

use super::{Answer, Worker};
use crate::ack::Ack;
use crate::clock::ManualClock;
use crate::config::NodeConfig;
use crate::core::{Core, CoreConfig, Routing};
use crate::driver::journal::Journal;
use crate::op::{Op, OpResult};
use crate::shard::Shard;
use crate::test_fixtures::{memory_node, memory_view, shard_config};

/// The leave of issue 14: node "seed" took over the keys of node "gone", whose address is
/// in no view it knows (here: never advertised; in a cluster: the view no longer holds a
/// node that left or died). A read of one of its keys that misses while the view change
/// settles asks "gone" for it: the send fails on the spot, inside the effects of the
/// read's own submission, and the read is answered from what is here. That answer used to
/// be dropped (the ticket was registered after the effects ran): the client waited
/// forever, with nothing in flight anywhere.
#[test]
fn a_read_answered_while_its_submission_runs_its_effects_gets_its_answer() {
    let config = NodeConfig {
        node_id: "seed".into(),
        workers: 1,
        ..NodeConfig::default()
    };
    let users = config.validate().expect("a valid configuration");
    let before = memory_view(
        vec![memory_node("seed", "seed/peer"), memory_node("gone", "")],
        1,
    );
    let after = memory_view(vec![memory_node("seed", "seed/peer")], 1);
    let (shared, _publish, _inboxes) =
        crate::fuzzing::in_memory_shared(&config, users, after.clone());
    let me = placement::Replica {
        node: node_key("seed"),
        worker: 0,
    };
    let shard = Shard::new(
        shard_config(me, config.limits),
        before.clone(),
        7,
        Arc::new(ManualClock::new(1_700_000_000_000)),
    );
    let w = Worker::new(
        shared,
        0,
        Core::new(shard, CoreConfig::default(), 7),
        Journal::None,
    );
    w.with_core(|c| c.set_view(after));
    assert!(w.core().shard().settling().is_some());

    let key = (0..)
        .map(|i| Bytes::from(format!("key:{i}")))
        .find(|k| before.replicas(k)[0].node == node_key("gone"))
        .expect("a key of the node that left");
    let answer = w.submit(vec![Op::Get { key }], Ack::MERGED, Routing::Forward);
    let results = match answer {
        Answer::Ready(results) => results,
        // Everything happened within the call: the results must be there already.
        Answer::Wait(mut rx) => rx
            .try_recv()
            .expect("the read's results reached whoever waits for them"),
    };
    assert_eq!(results, vec![OpResult::Value(None)]);
    assert_eq!(w.core().stats().jobs, 0, "no request left in progress");
}
