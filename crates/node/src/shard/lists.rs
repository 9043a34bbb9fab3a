//! RESP lists on the [`List`] lattice: each [`ListOp`] runs as one op at a replica of the
//! key, in place on the stored list, and ships the small deltas it made (new entries, or a
//! removed element's dot) to the key's other replicas.
//!
//! Under multi-master replication (docs/protocol.md, "Lists"): pushes on two replicas both
//! survive, interleaved by their positions' dots the same way everywhere; an element popped
//! on two replicas before they exchange deltas is returned by both (at-least-once delivery)
//! and removed once; `LSET` is last-writer-wins per element and loses to a concurrent
//! removal of that element.

use lattice::list::ListError;
use lattice::{Blob, Lattice, LatticeType, List, Lww, Record, Timestamp, Value};
use store::RecordRef;

use super::Shard;
use crate::error::NodeError;
use crate::list_op::{notify_pushed, ListOp, MAX_POP};
use crate::op::OpResult;

/// One element as a reply item.
fn item(v: Blob) -> OpResult {
    OpResult::Value(Some(Value::Lww(Lww::new(Timestamp::ZERO, v))))
}

fn no_room(e: ListError) -> NodeError {
    NodeError::InvalidArgument(e.to_string())
}

/// Redis's index range `start..=stop` over a list of `len`, clamped; `None` if empty.
pub(crate) fn index_range(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        len + stop
    } else {
        stop.min(len - 1)
    };
    (start <= stop && start < len && stop >= 0).then_some((start as usize, stop as usize))
}

impl Shard {
    /// The live list at `key`: `None` if absent, WRONGTYPE if it holds something else.
    fn live_list(&self, key: &[u8]) -> Result<Option<&List>, NodeError> {
        self.check_type(key, LatticeType::List)?;
        Ok(match self.live_full(key) {
            Some(Value::List(l)) => Some(l),
            _ => None,
        })
    }

    /// True if `key` holds a list (empty or not) at `epoch`.
    fn holds_list_at(&self, key: &[u8], epoch: Timestamp) -> bool {
        matches!(self.store.get(key), Some(RecordRef::Full(r))
            if r.epoch == epoch && matches!(r.value, Some(Value::List(_))))
    }

    /// Runs `f` in place on the list stored at `key` (an empty one is created first in the
    /// key's current incarnation if it holds none), then logs the deltas `f` returns and
    /// queues them for the key's other replicas.
    fn with_list<R>(
        &mut self,
        key: &[u8],
        grown: usize,
        f: impl FnOnce(&mut List) -> (R, Vec<List>),
    ) -> Result<R, NodeError> {
        let max = self.config.limits.max_value_size;
        let total = grown + self.store.size_of(key);
        if grown > 0 && total > max {
            return Err(NodeError::ValueTooLarge { len: total, max });
        }
        let epoch = self.write_epoch(key, LatticeType::List);
        if !self.holds_list_at(key, epoch) {
            let empty = Record::new(epoch, Some(Value::List(Box::default())));
            self.merge_into_store(key, empty)?;
        }
        let updated = self
            .store
            .update(key, grown, |record| match &mut record.value {
                Some(Value::List(l)) => Some(f(l)),
                _ => None,
            });
        let Some((Some((result, deltas)), outcome)) = updated else {
            return Err(NodeError::Unavailable("the list moved; retry".into()));
        };
        self.track_liveness(key, outcome);
        self.write_through(key, outcome)?;
        self.note_backing_change(key);
        let mut merged: Option<List> = None;
        for d in deltas {
            match merged.as_mut() {
                Some(m) => {
                    m.merge(d);
                }
                None => merged = Some(d),
            }
        }
        if let Some(delta) = merged {
            let replicated = self.gossips_writes(key);
            if replicated || self.journal_enabled() {
                let record = Record::new(epoch, Some(Value::List(Box::new(delta))));
                self.log_change(key, &record);
                if replicated {
                    self.add_to_changeset(key, record);
                }
            }
        }
        Ok(result)
    }

    /// Executes a list op on `key`.
    pub(super) fn list_op<B: AsRef<[u8]>>(
        &mut self,
        key: &[u8],
        op: ListOp<B>,
    ) -> Result<OpResult, NodeError> {
        match op {
            ListOp::Push {
                values,
                front,
                if_exists,
            } => self.list_push(key, &values, front, if_exists),
            ListOp::Pop { front, count } => self.list_pop(key, front, count),
            ListOp::Range { start, stop } => {
                let Some(l) = self.live_list(key)? else {
                    return Ok(OpResult::Multi(Vec::new()));
                };
                let items = match index_range(start, stop, l.len()) {
                    None => Vec::new(),
                    Some((a, b)) => l
                        .values()
                        .skip(a)
                        .take(b - a + 1)
                        .map(|v| item(v.clone()))
                        .collect(),
                };
                Ok(OpResult::Multi(items))
            }
            ListOp::Len => Ok(OpResult::Int(
                self.live_list(key)?.map_or(0, |l| l.len() as i64),
            )),
            ListOp::Index { index } => {
                let l = self.live_list(key)?;
                let v = l.and_then(|l| l.pos_at(index).and_then(|p| l.get(p)));
                Ok(match v {
                    Some(e) => item(e.value.clone()),
                    None => OpResult::Value(None),
                })
            }
            ListOp::Set { index, value } => self.list_set(key, index, value.as_ref()),
            ListOp::Rem { count, value } => self.list_rem(key, count, value.as_ref()),
            ListOp::Trim { start, stop } => self.list_trim(key, start, stop),
            ListOp::Insert {
                after,
                pivot,
                value,
            } => self.list_insert(key, after, pivot.as_ref(), value.as_ref()),
            ListOp::Move {
                dest,
                from_front,
                to_front,
            } => self.list_move(key, dest.as_ref(), from_front, to_front),
            ListOp::Pos {
                value,
                rank,
                count,
                maxlen,
            } => {
                let value = value.as_ref();
                let Some(l) = self.live_list(key)? else {
                    return Ok(match count {
                        None => OpResult::Value(None),
                        Some(_) => OpResult::Multi(Vec::new()),
                    });
                };
                let len = l.len();
                let scan = if maxlen == 0 {
                    len
                } else {
                    (maxlen as usize).min(len)
                };
                let skip = (rank.unsigned_abs() - 1) as usize;
                let want = match count {
                    None => 1,
                    Some(0) => usize::MAX,
                    Some(c) => usize::try_from(c).unwrap_or(usize::MAX),
                };
                let hit = |(i, v): (usize, &Blob)| (**v == *value).then_some(i as i64);
                let found: Vec<i64> = if rank > 0 {
                    l.values()
                        .enumerate()
                        .take(scan)
                        .filter_map(hit)
                        .skip(skip)
                        .take(want)
                        .collect()
                } else {
                    l.values()
                        .rev()
                        .enumerate()
                        .map(|(j, v)| (len - 1 - j, v))
                        .take(scan)
                        .filter_map(hit)
                        .skip(skip)
                        .take(want)
                        .collect()
                };
                Ok(match count {
                    None => found
                        .first()
                        .map_or(OpResult::Value(None), |&i| OpResult::Int(i)),
                    Some(_) => OpResult::Multi(found.into_iter().map(OpResult::Int).collect()),
                })
            }
        }
    }

    fn list_push<B: AsRef<[u8]>>(
        &mut self,
        key: &[u8],
        values: &[B],
        front: bool,
        if_exists: bool,
    ) -> Result<OpResult, NodeError> {
        if self.live_list(key)?.is_none() && if_exists {
            return Ok(OpResult::Int(0));
        }
        let actor = self.actor;
        let ts = self.hlc.tick(self.clock_ms());
        let grown = values.iter().map(|v| v.as_ref().len() + 96).sum();
        let len = self.with_list(key, grown, |l| {
            let mut deltas = Vec::with_capacity(values.len());
            for v in values {
                let v: Blob = Box::from(v.as_ref());
                let d = if front {
                    l.push_front(actor, ts, v)
                } else {
                    l.push_back(actor, ts, v)
                };
                match d {
                    Ok(d) => deltas.push(d),
                    Err(e) => return (Err(no_room(e)), deltas),
                }
            }
            (Ok(l.len() as i64), deltas)
        })??;
        notify_pushed();
        Ok(OpResult::Int(len))
    }

    fn list_pop(
        &mut self,
        key: &[u8],
        front: bool,
        count: Option<u64>,
    ) -> Result<OpResult, NodeError> {
        if self.live_list(key)?.is_none() {
            return Ok(OpResult::Value(None));
        }
        let n = count.unwrap_or(1).min(MAX_POP) as usize;
        if n == 0 {
            return Ok(OpResult::Multi(Vec::new()));
        }
        let popped = self.with_list(key, 0, |l| {
            let mut out = Vec::new();
            let mut deltas = Vec::new();
            while out.len() < n {
                let pos = if front {
                    l.iter().next()
                } else {
                    l.iter().next_back()
                };
                let Some(pos) = pos.map(|(p, _)| p.clone()) else {
                    break;
                };
                if let Some((entry, d)) = l.remove(&pos) {
                    out.push(entry.value);
                    deltas.push(d);
                }
            }
            (out, deltas)
        })?;
        Ok(match count {
            None => popped
                .into_iter()
                .next()
                .map_or(OpResult::Value(None), item),
            Some(_) => OpResult::Multi(popped.into_iter().map(item).collect()),
        })
    }

    fn list_set(&mut self, key: &[u8], index: i64, value: &[u8]) -> Result<OpResult, NodeError> {
        let Some(l) = self.live_list(key)? else {
            return Err(NodeError::InvalidArgument("no such key".into()));
        };
        let Some(pos) = l.pos_at(index).cloned() else {
            return Err(NodeError::InvalidArgument("index out of range".into()));
        };
        let ts = self.hlc.tick(self.clock_ms());
        let v: Blob = Box::from(value);
        self.with_list(key, value.len(), |l| {
            ((), l.set(&pos, ts, v).into_iter().collect())
        })?;
        Ok(OpResult::Done)
    }

    /// Removes the elements at `positions` (in one op).
    fn remove_positions(
        &mut self,
        key: &[u8],
        positions: Vec<lattice::list::Pos>,
    ) -> Result<usize, NodeError> {
        if positions.is_empty() {
            return Ok(0);
        }
        self.with_list(key, 0, |l| {
            let deltas: Vec<List> = positions
                .iter()
                .filter_map(|p| l.remove(p).map(|(_, d)| d))
                .collect();
            (deltas.len(), deltas)
        })
    }

    fn list_rem(&mut self, key: &[u8], count: i64, value: &[u8]) -> Result<OpResult, NodeError> {
        let Some(l) = self.live_list(key)? else {
            return Ok(OpResult::Int(0));
        };
        let limit = if count == 0 {
            usize::MAX
        } else {
            count.unsigned_abs().try_into().unwrap_or(usize::MAX)
        };
        let matching = |(p, e): (&lattice::list::Pos, &lattice::list::Entry)| {
            (&*e.value == value).then(|| p.clone())
        };
        let positions: Vec<_> = if count < 0 {
            l.iter().rev().filter_map(matching).take(limit).collect()
        } else {
            l.iter().filter_map(matching).take(limit).collect()
        };
        Ok(OpResult::Int(self.remove_positions(key, positions)? as i64))
    }

    fn list_trim(&mut self, key: &[u8], start: i64, stop: i64) -> Result<OpResult, NodeError> {
        let Some(l) = self.live_list(key)? else {
            return Ok(OpResult::Done);
        };
        let keep = index_range(start, stop, l.len());
        let positions = l
            .iter()
            .enumerate()
            .filter(|(i, _)| !keep.is_some_and(|(a, b)| (a..=b).contains(i)))
            .map(|(_, (p, _))| p.clone())
            .collect();
        self.remove_positions(key, positions)?;
        Ok(OpResult::Done)
    }

    fn list_insert(
        &mut self,
        key: &[u8],
        after: bool,
        pivot: &[u8],
        value: &[u8],
    ) -> Result<OpResult, NodeError> {
        let Some(l) = self.live_list(key)? else {
            return Ok(OpResult::Int(0));
        };
        let Some(pos) = l
            .iter()
            .find(|(_, e)| &*e.value == pivot)
            .map(|(p, _)| p.clone())
        else {
            return Ok(OpResult::Int(-1));
        };
        let actor = self.actor;
        let ts = self.hlc.tick(self.clock_ms());
        let v: Blob = Box::from(value);
        let len = self.with_list(key, value.len() + 96 + pos.len() * 24, |l| {
            match l.insert_at(&pos, after, actor, ts, v) {
                Ok(d) => (Ok(l.len() as i64), vec![d]),
                Err(e) => (Err(no_room(e)), Vec::new()),
            }
        })??;
        notify_pushed();
        Ok(OpResult::Int(len))
    }

    fn list_move(
        &mut self,
        src: &[u8],
        dest: &[u8],
        from_front: bool,
        to_front: bool,
    ) -> Result<OpResult, NodeError> {
        if dest != src && !self.is_replica(dest) {
            return Err(NodeError::InvalidArgument(
                "CROSSSLOT LMOVE's source and destination must be held by one worker; these \
                 are not, and nothing was moved (see docs/protocol.md, Lists)"
                    .into(),
            ));
        }
        if self.live_list(src)?.is_none() {
            return Ok(OpResult::Value(None));
        }
        if dest != src {
            self.check_key(dest)?;
            self.fault_in(dest)?;
            self.reap_if_expired(dest)?;
        }
        self.check_type(dest, LatticeType::List)?;
        let OpResult::Value(Some(Value::Lww(moved))) = self.list_pop(src, from_front, None)? else {
            return Ok(OpResult::Value(None));
        };
        self.list_push(dest, &[&moved.value[..]], to_front, false)?;
        Ok(OpResult::Value(Some(Value::Lww(moved))))
    }
}

#[cfg(test)]
mod tests {
    use super::index_range;

    #[test]
    fn index_ranges_follow_redis() {
        assert_eq!(index_range(0, -1, 3), Some((0, 2)));
        assert_eq!(index_range(-100, 100, 3), Some((0, 2)));
        assert_eq!(index_range(2, 1, 3), None);
        assert_eq!(index_range(5, 10, 3), None);
        assert_eq!(index_range(-1, -1, 3), Some((2, 2)));
        assert_eq!(index_range(0, -4, 3), None);
        assert_eq!(index_range(0, 0, 0), None);
    }
}
