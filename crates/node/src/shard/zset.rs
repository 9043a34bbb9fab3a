//! Redis sorted sets on the [`SortedSet`] lattice: `ZADD` (NX/XX/GT/LT/CH/INCR),
//! `ZINCRBY`, `ZSCORE`, `ZMSCORE`, `ZREM`, `ZCARD`, `ZCOUNT`, `ZLEXCOUNT`,
//! `ZRANK`/`ZREVRANK`, the `ZRANGE` family, `ZPOPMIN`/`ZPOPMAX`, `ZREMRANGEBY*`, `ZSCAN`.
//!
//! As for hashes (`shard::hash`): a write is a delta of the members it scores or removes,
//! stamped by the worker's clock; conditional and incremental writes (`NX`, `GT`, `INCR`,
//! `ZINCRBY`, pops) decide at this replica from its state, and concurrent writes of one
//! member on two replicas converge to the later one. Emptying the set clears its deadline.

use lattice::{FieldReg, LatticeType, Record, Score, SortedSet, Value};

use super::coll::{bulk, invalid, scan_page, scored, NIL};
use super::zset_parse::{parse_zset, AddFlags, RangeBy, RangeSpec, ZsetCmd};
use super::Shard;
use crate::error::NodeError;
use crate::op::OpResult;

impl Shard {
    /// Runs sorted-set command `args[0]` with `args[1..]` on `key`.
    pub(super) fn zset_op<B: AsRef<[u8]>>(&mut self, key: &[u8], args: &[B]) -> OpResult {
        let args: Vec<&[u8]> = args.iter().map(AsRef::as_ref).collect();
        let Some((name, rest)) = args.split_first() else {
            return OpResult::Error(invalid("sorted-set op without a command"));
        };
        let cmd = match parse_zset(name, rest) {
            Ok(c) => c,
            Err(e) => return OpResult::Error(invalid(&e)),
        };
        if let Err(e) = self.check_type(key, LatticeType::SortedSet) {
            return OpResult::Error(e);
        }
        self.run_zset(key, cmd).into()
    }

    /// The live sorted set at `key`, if any.
    fn zset_at(&self, key: &[u8]) -> Option<&SortedSet> {
        self.live(key)?;
        match self.live_full(key) {
            Some(Value::SortedSet(z)) => Some(z),
            _ => None,
        }
    }

    fn run_zset(&mut self, key: &[u8], cmd: ZsetCmd<'_>) -> Result<OpResult, NodeError> {
        let z = self.zset_at(key);
        let score = |m: &[u8]| z.and_then(|z| z.score(m));
        Ok(match cmd {
            ZsetCmd::Score(m) => score(m).map_or(NIL, |s| scored(b"", s)),
            ZsetCmd::MScore(ms) => OpResult::Multi(
                ms.iter()
                    .map(|m| score(m).map_or(NIL, |s| scored(b"", s)))
                    .collect(),
            ),
            ZsetCmd::Card => OpResult::Int(z.map_or(0, SortedSet::len) as i64),
            ZsetCmd::Count(by) => {
                OpResult::Int(z.map_or(0, |z| select(z, &by, false).count()) as i64)
            }
            ZsetCmd::Rank(m, rev) => match (z, score(m)) {
                (Some(z), Some(_)) => {
                    let r = z.rank(m).unwrap_or(0);
                    OpResult::Int(if rev { z.len() - 1 - r } else { r } as i64)
                }
                _ => NIL,
            },
            ZsetCmd::Range(spec) => {
                let picked = z.map(|z| range(z, &spec)).unwrap_or_default();
                OpResult::Multi(
                    picked
                        .into_iter()
                        .map(|(m, s)| {
                            if spec.withscores {
                                scored(m, s)
                            } else {
                                bulk(m)
                            }
                        })
                        .collect(),
                )
            }
            ZsetCmd::Scan(scan) => {
                let Some(z) = z else {
                    return Ok(OpResult::Multi(vec![bulk(b"0")]));
                };
                let (next, page) = scan_page(z.iter_by_member_from(b""), z.len(), &scan);
                let mut out = vec![bulk(next.to_string().as_bytes())];
                out.extend(page.into_iter().map(|(m, s)| scored(m, s)));
                OpResult::Multi(out)
            }
            ZsetCmd::Add { flags, pairs } => self.zadd(key, flags, &pairs)?,
            ZsetCmd::Rem(ms) => {
                let mut gone: Vec<&[u8]> = ms.into_iter().filter(|m| score(m).is_some()).collect();
                gone.sort_unstable();
                gone.dedup();
                self.remove_members(key, gone)?
            }
            ZsetCmd::Pop { max, count } => {
                let Some(z) = z else {
                    return Ok(OpResult::Multi(Vec::new()));
                };
                let n = count.unwrap_or(1);
                let picked: Vec<(Vec<u8>, f64)> = if max {
                    z.iter()
                        .rev()
                        .take(n)
                        .map(|(m, s)| (m.to_vec(), s))
                        .collect()
                } else {
                    z.iter().take(n).map(|(m, s)| (m.to_vec(), s)).collect()
                };
                self.remove_members(key, picked.iter().map(|(m, _)| &m[..]).collect())?;
                OpResult::Multi(picked.iter().map(|(m, s)| scored(m, *s)).collect())
            }
            ZsetCmd::RemRange(by) => {
                let Some(z) = z else {
                    return Ok(OpResult::Int(0));
                };
                let picked: Vec<Vec<u8>> = select(z, &by, false).map(|(m, _)| m.to_vec()).collect();
                self.remove_members(key, picked.iter().map(|m| &m[..]).collect())?
            }
        })
    }

    /// `ZADD` (and `ZINCRBY`): Redis's rules per pair, judged at this replica.
    fn zadd(
        &mut self,
        key: &[u8],
        flags: AddFlags,
        pairs: &[(f64, &[u8])],
    ) -> Result<OpResult, NodeError> {
        let z = self.zset_at(key);
        // Scores as the pairs change them, in order (a member may come twice).
        let mut pending: std::collections::BTreeMap<&[u8], f64> = Default::default();
        let (mut added, mut updated, mut processed) = (0, 0, 0);
        let mut last = None;
        for &(mut s, m) in pairs {
            let current = pending
                .get(m)
                .copied()
                .or_else(|| z.and_then(|z| z.score(m)));
            match current {
                Some(cur) => {
                    if flags.nx {
                        continue;
                    }
                    if flags.incr {
                        s += cur;
                        if s.is_nan() {
                            return Err(invalid("resulting score is not a number (NaN)"));
                        }
                    }
                    if (flags.lt && s >= cur) || (flags.gt && s <= cur) {
                        continue;
                    }
                    processed += 1;
                    last = Some(s);
                    if s != cur {
                        updated += 1;
                        pending.insert(m, s);
                    }
                }
                None if flags.xx => continue,
                None => {
                    added += 1;
                    processed += 1;
                    last = Some(s);
                    pending.insert(m, s);
                }
            }
        }
        if !pending.is_empty() {
            let incoming: usize = pending.keys().map(|m| m.len() + 16).sum();
            self.check_coll_size(key, incoming)?;
            let ts = self.hlc.tick(self.clock_ms());
            let delta = SortedSet::from_entries(
                pending
                    .into_iter()
                    .map(|(m, s)| (Box::from(m), FieldReg::new(ts, Some(Score(s))))),
            );
            self.write_zset(key, delta)?;
            let event = if flags.incr { "zincr" } else { "zadd" };
            self.note_event(crate::notify::ZSET, event, key);
        }
        Ok(if flags.incr {
            match (processed, last) {
                (1.., Some(s)) => scored(b"", s),
                _ => NIL,
            }
        } else {
            OpResult::Int(if flags.ch { added + updated } else { added })
        })
    }

    /// Removes live `members` (distinct) in one delta; clears the deadline if that empties
    /// the set. → the number removed.
    fn remove_members(&mut self, key: &[u8], members: Vec<&[u8]>) -> Result<OpResult, NodeError> {
        let n = members.len();
        if n == 0 {
            return Ok(OpResult::Int(0));
        }
        let empties = self.zset_at(key).is_some_and(|z| z.len() == n);
        let ts = self.hlc.tick(self.clock_ms());
        let delta = SortedSet::from_entries(
            members
                .into_iter()
                .map(|m| (Box::from(m), FieldReg::new(ts, None))),
        );
        self.write_zset(key, delta)?;
        if empties {
            self.forget_deadline(key)?;
        }
        Ok(OpResult::Int(n as i64))
    }

    fn write_zset(&mut self, key: &[u8], delta: SortedSet) -> Result<(), NodeError> {
        let epoch = self.write_epoch(key, LatticeType::SortedSet);
        self.apply(
            key,
            Record::new(epoch, Some(Value::SortedSet(Box::new(delta)))),
        )
    }
}

/// Ranks `start..=stop` normalised as Redis does: `None` if empty.
fn rank_span(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 { start + len } else { start }.max(0);
    let stop = if stop < 0 { stop + len } else { stop };
    if start > stop || start >= len {
        return None;
    }
    Some((start as usize, stop.min(len - 1) as usize))
}

/// The members `by` selects, lowest first (highest first if `rev`), lazily.
fn select<'z: 'r, 'a: 'r, 'r>(
    z: &'z SortedSet,
    by: &RangeBy<'a>,
    rev: bool,
) -> Box<dyn Iterator<Item = (&'z [u8], f64)> + 'r> {
    let it: Box<dyn Iterator<Item = (&'z lattice::Blob, f64)> + 'r> = match by {
        RangeBy::Rank(start, stop) => {
            let Some((a, b)) = rank_span(*start, *stop, z.len()) else {
                return Box::new(std::iter::empty());
            };
            if rev {
                Box::new(z.iter().rev().skip(a).take(b - a + 1))
            } else {
                Box::new(z.iter().skip(a).take(b - a + 1))
            }
        }
        RangeBy::Score(min, max) => {
            let it = z.range_by_score(*min, *max);
            if rev {
                Box::new(it.rev())
            } else {
                Box::new(it)
            }
        }
        RangeBy::Lex(min, max) => {
            let (min, max) = (*min, *max);
            let keep = move |m: &lattice::Blob| min.below(m) && max.above(m);
            if rev {
                Box::new(z.iter().rev().filter(move |(m, _)| keep(m)))
            } else {
                Box::new(z.iter().filter(move |(m, _)| keep(m)))
            }
        }
    };
    Box::new(it.map(|(m, s)| (&m[..], s)))
}

/// A `ZRANGE`-family read: the selection, then `LIMIT` (ignored for ranks, as Redis does).
fn range<'z>(z: &'z SortedSet, spec: &RangeSpec<'_>) -> Vec<(&'z [u8], f64)> {
    let all = select(z, &spec.by, spec.rev);
    if matches!(spec.by, RangeBy::Rank(..)) {
        return all.collect();
    }
    if spec.offset < 0 {
        return Vec::new();
    }
    let skip = usize::try_from(spec.offset).unwrap_or(usize::MAX);
    let take = usize::try_from(spec.limit).unwrap_or(usize::MAX);
    all.skip(skip).take(take).collect()
}
