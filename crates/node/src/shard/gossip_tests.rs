//! The changeset between gossip rounds.

use std::sync::Arc;

use super::tests::{config, fixed_clock, node};
use super::*;
use crate::op::{Condition, Op};
use crate::view::{default_vector, ReplicationTable, ViewState};

/// A bulk load through a replicated worker grows its changeset; once drained, it keeps a
/// round's worth of capacity, not the load's.
#[test]
fn a_drained_changeset_gives_back_a_bulk_loads_capacity() {
    let view = Arc::new(ViewState::of(
        vec![node("n", 2)],
        ReplicationTable::new(),
        default_vector(1, 2),
    ));
    let mut a = Shard::new(config("n", 0), view, 100, fixed_clock());
    let keys: Vec<String> = (0..100_000).map(|i| format!("k{i}")).collect();
    for k in &keys {
        a.execute(Op::Assign {
            key: k.as_bytes(),
            value: &b"v"[..],
            condition: Condition::Always,
        });
    }
    assert!(a.changeset.capacity() >= keys.len());
    let mut sent = 0;
    while a.has_gossip() {
        sent += a
            .take_gossip()
            .iter()
            .map(|o| o.entries.len())
            .sum::<usize>();
    }
    assert_eq!(sent, keys.len(), "every key gossiped once");
    assert!(
        a.changeset.capacity() <= 4 * super::sync::MAX_ROUND_KEYS,
        "capacity {} kept after the load",
        a.changeset.capacity()
    );
}
