//! Gossip rounds take a bounded share of a large backlog and drain it over rounds.

use std::sync::Arc;

use super::tests::{config, fixed_clock, node};
use super::*;
use crate::op::{Condition, Op, OpResult};
use crate::view::{default_vector, ReplicationTable, ViewState};

#[test]
fn a_large_changeset_goes_out_in_bounded_rounds() {
    // Every key on both workers of the node: every write joins the changeset.
    let view = Arc::new(ViewState::of(
        vec![node("n", 2)],
        ReplicationTable::new(),
        default_vector(1, 2),
    ));
    let mut s = Shard::new(config("n", 0), view, 1, fixed_clock());
    let n = 3 * sync::MAX_ROUND_KEYS + 17;
    for i in 0..n {
        let key = format!("k{i}");
        let r = s.execute(Op::Assign {
            key: key.as_bytes(),
            value: &b"v"[..],
            condition: Condition::Always,
        });
        assert_eq!(r, OpResult::Int(1));
    }
    let mut total = 0;
    let mut rounds = 0;
    while s.has_gossip() {
        let out = s.take_gossip();
        let entries: usize = out.iter().map(|o| o.entries.len()).sum();
        assert!(
            entries <= sync::MAX_ROUND_KEYS,
            "a round took {entries} keys"
        );
        total += entries;
        rounds += 1;
        assert!(rounds < 100, "the backlog does not drain");
    }
    assert_eq!(total, n, "every key went out exactly once");
    assert_eq!(rounds, 4);
}
