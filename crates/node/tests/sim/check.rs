//! Which writes may be lost, and the checks at the end of a run.
//!
//! # Which writes may be missing
//! Gossip is lazy: a write acknowledged by one replica may still be only there when that
//! node crashes. The simulator decides this precisely, at the moment of every crash: a
//! write is *lost* if no copy that includes it (in the lattice order) remains anywhere the
//! cluster would still deliver it from — a live worker's store (a worker keeps every key
//! it writes, receives or hands off until each of its replicas acknowledged it), or a
//! message between two workers of a live node (the in-process mesh is reliable). A write
//! that any such copy includes must survive, even if later crashes take every copy: at
//! each crash only the writes whose *last* copies went with it are excused. Messages
//! between nodes in flight do not count (the network may drop them and a crashed sender
//! does not retry); if one arrives anyway, fine.
//!
//! A graceful leave must lose nothing: a write whose last copies were on a node when it
//! stopped after leaving fails the run if it is missing at the end.
//!
//! A reclaimed tombstone takes with it the writes it superseded: a write that ran before
//! the reclaim and is older than the tombstone (or is the delete itself) is *retired* and
//! must not be in the final state; every write after it must be.
//!
//! # Final checks (after quiescence)
//! - **Agreement.** Every replica of every key (under the final view, which every live node
//!   has) holds the same record, equal as values and byte for byte in the wire encoding.
//! - **No acknowledged write lost.** Every write not lost by the rule above is included in
//!   the final record (lattice order) — acknowledged or not, as it was applied somewhere.
//! - **Nothing from thin air.** The final record is included in the merge of every write
//!   ever executed on the key; for a key none of whose writes was lost, it equals it.
//! - **Values, not just lattice order.** The lattice order cannot see a write whose
//!   identity collides with another's (an OR-set dot or a counter entry reused by a
//!   worker that forgot its own earlier writes): so, in the key's final incarnation, each
//!   surviving counter increment must be counted (per writer, between the sum of the
//!   surviving increments and the sum of all of them), and each surviving OR-set add of a
//!   member that nothing removed must be present (every add adds a fresh member).
//! - **Hand-offs complete.** No live worker keeps a key it does not replicate.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use lattice::{Lattice, Record, Value};
use placement::replication::replication_key;
use prost::Message;

use super::client::{covers, key_name, show_op, Effect, Fate, Loss};
use super::world::{Status, World};

/// Marks every write whose copies all disappeared with a node that just crashed or left.
pub fn mark_lost(world: &mut World, cause: Loss) {
    let open: Vec<usize> = world
        .writes
        .iter()
        .filter(|w| w.lost.is_none())
        .map(|w| w.id)
        .collect();
    if open.is_empty() {
        return;
    }
    let keys: BTreeSet<Bytes> = open.iter().map(|&i| world.writes[i].key.clone()).collect();
    let copies = world.copies_of(&keys);
    let mut lost = 0;
    let what = match &cause {
        Loss::Crash(c) | Loss::Leave(c) => c.clone(),
    };
    for i in open {
        let w = &world.writes[i];
        let keeper = copies
            .get(&w.key)
            .and_then(|records| records.iter().find(|(_, r)| covers(r, &w.delta)));
        match keeper {
            Some((at, _)) => world.writes[i].kept = Some(format!("{at} after {what}")),
            None => {
                lost += 1;
                world.writes[i].lost = Some(cause.clone());
            }
        }
    }
    if lost > 0 {
        world.trace.notable(
            world.now,
            format!("{lost} writes had no copy left after: {what}"),
        );
    }
}

/// Every key a run may have stored: the user keys and the metadata keys of explicit
/// replication vectors.
fn all_keys(world: &World) -> BTreeSet<Bytes> {
    let mut keys: BTreeSet<Bytes> = (0..world.p.keys).map(key_name).collect();
    for key in world.truth.table.keys() {
        keys.insert(Bytes::from(replication_key(key)));
    }
    keys
}

/// The record of every replica of every key, under the final view. Errors if a replica
/// is not running or the live nodes do not share one view.
#[allow(clippy::type_complexity)]
fn final_records(world: &World) -> Result<BTreeMap<Bytes, Vec<(String, Option<Record>)>>, String> {
    let up: Vec<_> = world
        .nodes
        .values()
        .filter(|n| n.status == Status::Up)
        .collect();
    let view = &up.first().ok_or("no node is up")?.view;
    let mut out = BTreeMap::new();
    for key in all_keys(world) {
        let replicas = view.replicas(&key);
        if replicas.is_empty() {
            return Err(format!("{} has no replica", show(&key)));
        }
        let mut records = Vec::new();
        for r in replicas {
            let node = world
                .nodes
                .get(&r.node)
                .filter(|n| n.status == Status::Up)
                .ok_or_else(|| format!("a replica of {} is not up", show(&key)))?;
            let shard = node.workers[r.worker as usize].core.shard();
            if shard.view().version != node.view.version || shard.view().rings != view.rings {
                return Err(format!("{}/{} is not on the final view", node.id, r.worker));
            }
            let record = shard.store().get(&key).map(|r| r.to_record());
            records.push((format!("{}/{}", node.id, r.worker), record));
        }
        out.insert(key, records);
    }
    Ok(out)
}

/// The keys every write of which a reclaimed delete superseded (all *retired*): at the
/// end, no replica may hold them.
pub fn retired_keys(world: &World) -> BTreeSet<Bytes> {
    let mut open: BTreeMap<&Bytes, bool> = BTreeMap::new();
    for w in &world.writes {
        let retired = w.fate(&world.reclaims, world.p.tombstone_grace_ms) == Fate::Retired;
        *open.entry(&w.key).or_insert(true) &= retired;
    }
    open.into_iter()
        .filter(|(_, all)| *all)
        .map(|(k, _)| k.clone())
        .collect()
}

/// Every replica of every key holds the same record (values and wire bytes).
pub fn replicas_agree(world: &World) -> Result<(), String> {
    for (key, records) in final_records(world)? {
        let (first_at, first) = &records[0];
        let first_bytes = first.as_ref().map(encode);
        for (at, record) in &records[1..] {
            if record != first || record.as_ref().map(encode) != first_bytes {
                return Err(format!(
                    "replicas of {} differ: {first_at} has {first:?}, {at} has {record:?}",
                    show(&key)
                ));
            }
        }
    }
    Ok(())
}

/// The checks at the end of a run (see the module docs).
pub fn final_checks(world: &mut World) -> Result<(), String> {
    replicas_agree(world)?;
    let records = final_records(world)?;

    // Hand-offs complete: nothing left on workers that do not replicate it (and nothing
    // but the keys the run wrote).
    let view = records_view(world);
    for node in world.nodes.values().filter(|n| n.status == Status::Up) {
        for (w, sh) in node.workers.iter().enumerate() {
            for (key, _) in sh.core.shard().store().iter() {
                if !records.contains_key(key) {
                    return Err(format!(
                        "{}/{w} stores an unknown key {}",
                        node.id,
                        show(key)
                    ));
                }
                if !view.is_replica(key, sh.core.shard().me()) {
                    return Err(format!(
                        "{}/{w} still stores {} but does not replicate it",
                        node.id,
                        show(key)
                    ));
                }
            }
        }
    }

    // Writes, per key.
    let mut by_key: BTreeMap<Bytes, Vec<usize>> = BTreeMap::new();
    for w in &world.writes {
        by_key.entry(w.key.clone()).or_default().push(w.id);
    }
    for (key, ids) in &by_key {
        let all: Vec<_> = ids.iter().map(|&i| &world.writes[i]).collect();
        let fates: BTreeMap<usize, Fate> = all
            .iter()
            .map(|w| (w.id, w.fate(&world.reclaims, world.p.tombstone_grace_ms)))
            .collect();
        let writes: Vec<_> = all
            .iter()
            .copied()
            .filter(|w| fates[&w.id] != Fate::Retired)
            .collect();
        world.report.retired += (all.len() - writes.len()) as u64;
        let racing = writes.iter().any(|w| fates[&w.id] == Fate::Racing);
        world.report.racing += writes
            .iter()
            .filter(|w| fates[&w.id] == Fate::Racing)
            .count() as u64;
        let last = records
            .get(key)
            .and_then(|r| r[0].1.clone())
            .ok_or_else(|| format!("{} was written but no replica has it", show(key)));
        if writes.is_empty() {
            // Every write was superseded by a reclaimed delete: the key must be gone.
            if let Ok(last) = &last {
                let at: Vec<&str> = records[key].iter().map(|(at, _)| at.as_str()).collect();
                return Err(format!(
                    "{} holds {last:?} (at {}), but every write to it was reclaimed with a delete",
                    show(key),
                    at.join(", ")
                ));
            }
            continue;
        }

        // Surviving writes are included.
        for w in &writes {
            let must = match &w.lost {
                None | Some(Loss::Leave(_)) => fates[&w.id] == Fate::Kept,
                Some(Loss::Crash(_)) => false,
            };
            if !must {
                continue;
            }
            world.report.checked += 1;
            let included = last.as_ref().is_ok_and(|f| covers(f, &w.delta));
            if !included {
                let kept = match &w.kept {
                    Some(kept) => format!("; a copy was in {kept}"),
                    None => String::new(),
                };
                let why = match &w.lost {
                    Some(Loss::Leave(l)) => format!(" (its last copies went when {l}{kept})"),
                    _ if !kept.is_empty() => format!(" ({})", &kept[2..]),
                    _ => String::new(),
                };
                return Err(format!(
                    "write #{} ({}, at {} at {}ms) is missing{why}: final record {:?}, \
                     its delta {:?}",
                    w.id,
                    show_op(&w.op),
                    w.at,
                    w.time,
                    last,
                    w.delta
                ));
            }
        }
        let Ok(last) = last else { continue };

        // Nothing from thin air; all of it if nothing was lost.
        let mut joined = writes[0].delta.clone();
        for w in &writes[1..] {
            joined.merge(w.delta.clone());
        }
        if !covers(&joined, &last) {
            return Err(format!(
                "{} holds {last:?}, which its writes do not explain (their merge: {joined:?})",
                show(key)
            ));
        }
        if !racing && writes.iter().all(|w| w.lost.is_none()) && joined != last {
            return Err(format!(
                "{} holds {last:?}, not the merge of its writes {joined:?} (none was lost)",
                show(key)
            ));
        }

        // Values: counters and OR-sets of the final incarnation.
        let current: Vec<_> = writes
            .iter()
            .filter(|w| w.delta.epoch == last.epoch)
            .collect();
        match &last.value {
            Some(Value::Counter(c)) => {
                let mut sums: BTreeMap<u64, [u64; 4]> = BTreeMap::new();
                for w in &current {
                    if let Effect::Counter { actor, inc, dec } = w.effect {
                        let s = sums.entry(actor).or_default();
                        s[2] += inc;
                        s[3] += dec;
                        if w.lost.is_none() {
                            s[0] += inc;
                            s[1] += dec;
                        }
                    }
                }
                for (actor, (inc, dec)) in c.entries() {
                    let [min_inc, min_dec, max_inc, max_dec] =
                        sums.get(&actor).copied().unwrap_or_default();
                    if inc < min_inc || dec < min_dec || inc > max_inc || dec > max_dec {
                        return Err(format!(
                            "counter {} has ({inc}, {dec}) from writer {actor:x}: its surviving \
                             writes add up to ({min_inc}, {min_dec}), all its writes to \
                             ({max_inc}, {max_dec})",
                            show(key)
                        ));
                    }
                }
                for (actor, [min_inc, min_dec, ..]) in &sums {
                    if (*min_inc, *min_dec) != (0, 0) && c.get(*actor) == (0, 0) {
                        return Err(format!(
                            "counter {} lost every surviving increment of writer {actor:x}",
                            show(key)
                        ));
                    }
                }
            }
            Some(Value::OrSet(set)) => {
                let removed: BTreeSet<&Bytes> = current
                    .iter()
                    .filter_map(|w| match &w.effect {
                        Effect::Remove { member } => Some(member),
                        _ => None,
                    })
                    .collect();
                let added: BTreeSet<&Bytes> = current
                    .iter()
                    .filter_map(|w| match &w.effect {
                        Effect::Add { member } => Some(member),
                        _ => None,
                    })
                    .collect();
                for w in &current {
                    if let (Effect::Add { member }, None) = (&w.effect, &w.lost) {
                        if !removed.contains(member) && !set.contains(&member[..]) {
                            return Err(format!(
                                "set {} lacks {} (write #{} at {}, never removed)",
                                show(key),
                                show(member),
                                w.id,
                                w.at
                            ));
                        }
                    }
                }
                for member in set.iter() {
                    if !added.iter().any(|m| m[..] == member[..]) {
                        return Err(format!(
                            "set {} holds {}, which no write added in its incarnation",
                            show(key),
                            show(member)
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    world.report.lost_on_leave = world
        .writes
        .iter()
        .filter(|w| matches!(w.lost, Some(Loss::Leave(_))))
        .count() as u64;
    world.report.excused = world
        .writes
        .iter()
        .filter(|w| matches!(w.lost, Some(Loss::Crash(_))))
        .count() as u64;
    Ok(())
}

/// The final view (every up node has it, checked by `final_records`).
fn records_view(world: &World) -> std::sync::Arc<node::view::ViewState> {
    world
        .nodes
        .values()
        .find(|n| n.status == Status::Up)
        .map(|n| n.view.clone())
        .expect("a node is up")
}

fn encode(record: &Record) -> Vec<u8> {
    wire::convert::record_to_pb(record).encode_to_vec()
}

fn show(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}
