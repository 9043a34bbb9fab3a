//! The simulated clients: which operations they send, and the record of every write the
//! cluster executed (from the shards' audit logs), with its delta reconstructed for the
//! checks.

use bytes::Bytes;
use fastrand::Rng;
use lattice::{Counter, Lattice, Max, OrSet, Record, Set, Value};
use node::op::{Condition, Op, OpResult};

/// What a write did, for the checks that look inside values.
#[derive(Clone, Debug)]
pub enum Effect {
    /// A counter change by `actor`.
    Counter { actor: u64, inc: u64, dec: u64 },
    /// An OR-set add of a member no other write adds.
    Add { member: Bytes },
    /// An OR-set remove.
    Remove { member: Bytes },
    /// Anything else (checked through the lattice order only).
    Other,
}

/// Why a write may be missing at the end.
#[derive(Clone, Debug)]
pub enum Loss {
    /// Every copy of it was on a node that crashed (allowed).
    Crash(String),
    /// Every copy of it was on a node that left gracefully and stopped (never allowed).
    Leave(String),
}

/// One write executed by a shard.
pub struct WriteRec {
    /// Index in the history.
    pub id: usize,
    /// The key.
    pub key: Bytes,
    /// Where it ran ("node/worker").
    pub at: String,
    /// When (ms since start).
    pub time: u64,
    /// The op.
    pub op: Op<Bytes>,
    /// Its delta: the record it merged into the key (reconstructed from the states around
    /// it with the lattice crate's own delta constructors).
    pub delta: Record,
    /// What it did, for value-level checks.
    pub effect: Effect,
    /// Set when every copy of the write was lost (see [`Loss`]).
    pub lost: Option<Loss>,
    /// Where a copy was when a node last crashed or left without losing it.
    pub kept: Option<String>,
}

/// A tombstone reclaimed by a worker.
pub struct ReclaimRec {
    /// The key.
    pub key: Bytes,
    /// The tombstone's epoch.
    pub epoch: lattice::Timestamp,
    /// When (ms since start).
    pub time: u64,
}

/// What a reclaimed tombstone did to a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Untouched: the write must survive (unless lost with crashed nodes).
    Kept,
    /// Superseded: it ran before the tombstone was reclaimed anywhere and is older than the
    /// tombstone (or is the delete itself): it must not survive.
    Retired,
    /// It is older than a reclaimed tombstone and ran after the reclamation started, while
    /// replicas still remembered the delete: refused if it reached them then, kept if it
    /// reached them later. Either outcome is right.
    Racing,
}

impl WriteRec {
    /// What reclaimed tombstones did to this write, replicas remembering a reclaimed
    /// delete for `memory_ms`.
    pub fn fate(&self, reclaims: &[ReclaimRec], memory_ms: u64) -> Fate {
        let mut fate = Fate::Kept;
        let mut tombstones: Vec<(lattice::Timestamp, u64, u64)> = Vec::new();
        for r in reclaims.iter().filter(|r| r.key == self.key) {
            match tombstones.iter_mut().find(|t| t.0 == r.epoch) {
                Some(t) => {
                    t.1 = t.1.min(r.time);
                    t.2 = t.2.max(r.time);
                }
                None => tombstones.push((r.epoch, r.time, r.time)),
            }
        }
        for (epoch, first, last) in tombstones {
            let older = self.delta.epoch < epoch
                || (self.delta.epoch == epoch && self.delta.value.is_none());
            if !older {
                continue;
            }
            if self.time < first {
                return Fate::Retired;
            }
            if self.time <= last + memory_ms {
                fate = Fate::Racing;
            }
        }
        fate
    }
}

/// The name of user key `i`: every other key has one of three hash tags, so a change of
/// the hash-tag rule (a member placing whole keys joining or going) moves keys.
pub fn key_name(i: usize) -> Bytes {
    if i.is_multiple_of(2) {
        Bytes::from(format!("{{t{}}}:k{i}", i % 3))
    } else {
        Bytes::from(format!("k{i}"))
    }
}

/// True if key `i`, once written, stays live while no client deletes: every kind of op but
/// the OR-set's, whose members can all be removed again.
pub fn stays_live(i: usize) -> bool {
    i % 5 != 2
}

/// True if `holder` already includes `delta` in the lattice order (`delta ⊑ holder`).
pub fn covers(holder: &Record, delta: &Record) -> bool {
    let mut merged = holder.clone();
    merged.merge(delta.clone());
    merged == *holder
}

/// Makes the clients' ops: unique values and members, removes of members added before.
#[derive(Default)]
pub struct OpMaker {
    next_value: u64,
    /// Members added per key (removes pick one).
    added: std::collections::BTreeMap<Bytes, Vec<Bytes>>,
}

impl OpMaker {
    /// A random op on key `k`, a delete with probability `deletes`.
    pub fn make(&mut self, rng: &mut Rng, k: usize, deletes: f64) -> Op<Bytes> {
        let key = key_name(k);
        self.next_value += 1;
        let n = self.next_value;
        if rng.f64() < deletes {
            return Op::Delete { key };
        }
        match k % 5 {
            0 => {
                let condition = match rng.u32(0..10) {
                    0 => Condition::IfAbsent,
                    1 => Condition::IfPresent,
                    _ => Condition::Always,
                };
                Op::Assign {
                    key,
                    value: Bytes::from(format!("v{n}")),
                    condition,
                }
            }
            1 => {
                let mut delta = rng.i64(-3..=5);
                if delta == 0 {
                    delta = 1;
                }
                Op::CounterAdd { key, delta }
            }
            2 => {
                let added = self.added.get(&key).map_or(0, Vec::len);
                if added > 0 && rng.f64() < 0.35 {
                    let member = self.added[&key][rng.usize(..added)].clone();
                    Op::SetRemove {
                        key,
                        members: vec![member],
                    }
                } else {
                    let member = Bytes::from(format!("m{n}"));
                    self.added
                        .entry(key.clone())
                        .or_default()
                        .push(member.clone());
                    Op::SetAdd {
                        key,
                        members: vec![member],
                    }
                }
            }
            3 => Op::Put {
                key,
                value: Value::Max(Max(rng.i64(0..1_000))),
            },
            _ => Op::Put {
                key,
                value: Value::Set(
                    [Box::from(format!("g{n}").as_bytes())]
                        .into_iter()
                        .collect(),
                ),
            },
        }
    }
}

/// True if the result means the op changed the replica.
pub fn wrote(op: &Op<Bytes>, result: &OpResult) -> bool {
    match (op, result) {
        (_, OpResult::Error(_)) => false,
        (Op::Assign { .. } | Op::Delete { .. } | Op::SetRemove { .. }, r) => *r == OpResult::Int(1),
        (Op::CounterAdd { .. } | Op::SetAdd { .. }, OpResult::Int(_)) => true,
        (Op::Put { .. }, OpResult::Done) => true,
        _ => false,
    }
}

/// An op as the trace shows it.
pub fn show_op(op: &Op<Bytes>) -> String {
    let k = |k: &Bytes| String::from_utf8_lossy(k).into_owned();
    match op {
        Op::Assign {
            key,
            value,
            condition,
        } => format!("ASSIGN {} {} {condition:?}", k(key), k(value)),
        Op::Delete { key } => format!("DEL {}", k(key)),
        Op::CounterAdd { key, delta } => format!("INCR {} {delta}", k(key)),
        Op::SetAdd { key, members } => format!("SADD {} {}", k(key), k(&members[0])),
        Op::SetRemove { key, members } => format!("SREM {} {}", k(key), k(&members[0])),
        Op::Put { key, value } => format!("PUT {} {value:?}", k(key)),
        other => format!("{other:?}"),
    }
}

/// Reconstructs a write's delta from the key's record before and after it, with the
/// lattice crate's own delta constructors, and checks the state after includes it.
pub fn derive(
    op: &Op<Bytes>,
    pre: Option<&Record>,
    post: &Record,
    actor: u64,
) -> Result<(Record, Effect), String> {
    let epoch = post.epoch;
    let same_epoch_set = || match pre {
        Some(Record {
            epoch: e,
            value: Some(Value::OrSet(s)),
            ..
        }) if *e == epoch => Some((**s).clone()),
        _ => None,
    };
    let (delta, effect) = match op {
        Op::Assign { value, .. } => match &post.value {
            Some(Value::Lww(l)) if l.value[..] == value[..] => (post.clone(), Effect::Other),
            other => return Err(format!("an assignment left {other:?}")),
        },
        Op::Delete { .. } => {
            if post.value.is_some() {
                return Err("a delete left a value".into());
            }
            (post.clone(), Effect::Other)
        }
        Op::CounterAdd { delta, .. } => match &post.value {
            Some(Value::Counter(c)) => {
                let mine = Counter::from_entries([(actor, c.get(actor))]);
                let effect = Effect::Counter {
                    actor,
                    inc: (*delta).max(0) as u64,
                    dec: (-*delta).max(0) as u64,
                };
                (Record::new(epoch, Some(Value::Counter(mine))), effect)
            }
            other => return Err(format!("an increment left {other:?}")),
        },
        Op::SetAdd { members, .. } => {
            let member = &members[0];
            let base = same_epoch_set().unwrap_or_else(OrSet::new);
            let d = base.add_delta(actor, Box::from(&member[..]));
            (
                Record::new(epoch, Some(Value::OrSet(Box::new(d)))),
                Effect::Add {
                    member: member.clone(),
                },
            )
        }
        Op::SetRemove { members, .. } => {
            let member = &members[0];
            let base = same_epoch_set().ok_or_else(|| "a remove from no set".to_string())?;
            let d = base.remove_delta(&member[..]);
            (
                Record::new(epoch, Some(Value::OrSet(Box::new(d)))),
                Effect::Remove {
                    member: member.clone(),
                },
            )
        }
        Op::Put { value, .. } => match value {
            Value::Max(m) => (
                Record::new(epoch, Some(Value::Max(Max(m.0)))),
                Effect::Other,
            ),
            Value::Set(s) => {
                let set: Set<Box<[u8]>> = s.iter().cloned().collect();
                (Record::new(epoch, Some(Value::Set(set))), Effect::Other)
            }
            other => return Err(format!("the simulation does not put {other:?}")),
        },
        other => return Err(format!("not a write: {other:?}")),
    };
    if !covers(post, &delta) {
        return Err(format!(
            "the reconstructed delta {delta:?} is not in the state after, {post:?}"
        ));
    }
    Ok((delta, effect))
}
