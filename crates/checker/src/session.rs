//! Session guarantees: read-your-writes, monotonic reads, monotonic writes and
//! writes-follow-reads. Each walks every session's ops in issue order with per-key state.
//!
//! Writes of aborted transactions never become visible, so they count as written only for reads
//! in their own transaction, and observations of them count as nothing (they are G1a's concern).

use std::collections::{HashMap, HashSet};

use crate::convergence::winners;
use crate::history::{Event, Observed, Ts, WriteId};
use crate::index::{show, show_versions, Index};
use crate::report::{Anomaly, Report};

/// [`Anomaly::ReadYourWrites`].
pub(crate) fn read_your_writes(index: &Index<'_>) -> Report {
    let mut report = Report::default();
    for (&session, ops) in &index.sessions {
        // Per key: the session's writes in order, with their transaction.
        let mut own: HashMap<&[u8], Vec<(WriteId, usize)>> = HashMap::new();
        // Per own write: its key and its position in `own[key]`.
        let mut position: HashMap<WriteId, (&[u8], usize)> = HashMap::new();
        for &i in ops {
            let txn = index.txn_of_op[i];
            match &index.history.ops[i].event {
                Event::Write { key, write, .. } => {
                    let list = own.entry(key.as_slice()).or_default();
                    position.insert(*write, (key.as_slice(), list.len()));
                    list.push((*write, txn));
                }
                Event::Read { key, observed } => {
                    let Some(list) = own.get(key.as_slice()) else {
                        continue;
                    };
                    let latest = list
                        .iter()
                        .enumerate()
                        .rev()
                        .find(|(_, (_, wt))| *wt == txn || index.txns[*wt].committed);
                    let Some((latest_pos, &(latest, _))) = latest else {
                        continue;
                    };
                    let older = observed.iter().find(|v| {
                        position
                            .get(&v.write)
                            .is_some_and(|&(k, p)| k == key.as_slice() && p < latest_pos)
                    });
                    let detail = if observed.is_empty() {
                        Some(format!(
                            "read of {} observed nothing after own {latest}",
                            show(key)
                        ))
                    } else if let Some(old) = older {
                        Some(format!(
                            "read of {} observed own older {} after own {latest}",
                            show(key),
                            old.write
                        ))
                    } else {
                        index.ts_of(latest).and_then(|own_ts| {
                            all_older(index, observed, own_ts).then(|| {
                                format!(
                                    "read of {} observed {} older than own {latest} at {own_ts:?}",
                                    show(key),
                                    show_versions(observed)
                                )
                            })
                        })
                    };
                    if let Some(detail) = detail {
                        report.push(Anomaly::ReadYourWrites, session, i, detail);
                    }
                }
                Event::Commit | Event::Abort => {}
            }
        }
    }
    report
}

/// Whether every version of `observed` has a known timestamp below `ts`.
fn all_older(index: &Index<'_>, observed: &[Observed], ts: Ts) -> bool {
    observed.iter().all(|v| {
        v.ts.or_else(|| index.ts_of(v.write))
            .is_some_and(|t| t < ts)
    })
}

/// [`Anomaly::MonotonicReads`].
pub(crate) fn monotonic_reads(index: &Index<'_>) -> Report {
    let mut report = Report::default();
    for (&session, ops) in &index.sessions {
        // Per key: whether an earlier read observed something, and the newest known version an
        // earlier read observed.
        let mut past: HashMap<&[u8], (bool, Option<Ts>)> = HashMap::new();
        for &i in ops {
            let Event::Read { key, observed } = &index.history.ops[i].event else {
                continue;
            };
            let (any, max) = index.max_visible_ts(observed);
            if !any && !observed.is_empty() {
                // Only versions of aborted transactions (e.g. the reader's own buffered
                // writes): nothing to order.
                continue;
            }
            let (seen_any, seen_max) = past.entry(key.as_slice()).or_insert((false, None));
            if *seen_any && !any {
                let detail = format!("read of {} observed nothing after a read saw it", show(key));
                report.push(Anomaly::MonotonicReads, session, i, detail);
            } else if let (Some(before), Some(now)) = (*seen_max, max) {
                if now < before {
                    let detail = format!(
                        "read of {} observed {} (newest {now:?}) after a read saw {before:?}",
                        show(key),
                        show_versions(observed)
                    );
                    report.push(Anomaly::MonotonicReads, session, i, detail);
                }
            }
            *seen_any |= any;
            *seen_max = (*seen_max).max(max);
        }
    }
    report
}

/// A session's committed (or outside-transaction) writes of each key, in issue order.
type SessionWrites<'h> = HashMap<&'h [u8], Vec<Written>>;

/// One entry of [`SessionWrites`].
#[derive(Clone, Copy, Debug)]
struct Written {
    write: WriteId,
    txn: usize,
    op: usize,
}

/// A session's write order of one key, for [`monotonic_writes`]. Writes in one transaction
/// are not ordered against each other (they may share the transaction's timestamp).
struct WriteOrder {
    /// The newest known write of the earlier transactions.
    before: Option<(Ts, WriteId)>,
    /// The transaction of the latest write.
    txn: usize,
    /// The newest known write of `txn`.
    current: Option<(Ts, WriteId)>,
}

/// What a session has read of one key, for [`writes_follow_reads`]: the visible versions
/// other sessions wrote, and the newest known one.
#[derive(Default)]
struct ReadSoFar {
    versions: HashSet<WriteId>,
    newest: Option<(Ts, WriteId)>,
}

/// [`Anomaly::MonotonicWrites`].
pub(crate) fn monotonic_writes(index: &Index<'_>) -> Report {
    let mut report = Report::default();
    let winners: Vec<_> = index.history.finals.iter().map(winners).collect();
    for (&session, ops) in &index.sessions {
        let mut writes: SessionWrites<'_> = HashMap::new();
        let mut newest: HashMap<&[u8], WriteOrder> = HashMap::new();
        for &i in ops {
            let Event::Write { key, write, .. } = &index.history.ops[i].event else {
                continue;
            };
            if index.is_aborted(*write) {
                continue;
            }
            let txn = index.txn_of_op[i];
            let order = newest.entry(key.as_slice()).or_insert(WriteOrder {
                before: None,
                txn,
                current: None,
            });
            if order.txn != txn {
                order.before = order.before.max(order.current);
                order.txn = txn;
                order.current = None;
            }
            let ts = index.ts_of(*write);
            if let (Some((prev_ts, prev)), Some(ts)) = (order.before, ts) {
                if ts <= prev_ts {
                    let detail = format!(
                        "{write} to {} at {ts:?} is not newer than own earlier {prev} at {prev_ts:?}",
                        show(key)
                    );
                    report.push(Anomaly::MonotonicWrites, session, i, detail);
                }
            }
            order.current = order.current.max(ts.map(|t| (t, *write)));
            writes.entry(key.as_slice()).or_default().push(Written {
                write: *write,
                txn,
                op: i,
            });
        }
        for (r, won) in winners.iter().enumerate() {
            for (key, list) in &writes {
                let Some(winner) = won.get(key) else { continue };
                let Some(at) = list.iter().position(|w| w.write == *winner) else {
                    continue;
                };
                let txn = list[at].txn;
                if let Some(later) = list[at + 1..].iter().find(|w| w.txn != txn) {
                    let detail = format!(
                        "replica {r} holds own earlier {winner} for {}, not the later {}",
                        show(key),
                        later.write
                    );
                    report.push(Anomaly::MonotonicWrites, session, later.op, detail);
                }
            }
        }
    }
    report
}

/// [`Anomaly::WritesFollowReads`].
pub(crate) fn writes_follow_reads(index: &Index<'_>) -> Report {
    let mut report = Report::default();
    let winners: Vec<_> = index.history.finals.iter().map(winners).collect();
    for (&session, ops) in &index.sessions {
        let mut read: HashMap<&[u8], ReadSoFar> = HashMap::new();
        for &i in ops {
            match &index.history.ops[i].event {
                Event::Read { key, observed } => {
                    let so_far = read.entry(key.as_slice()).or_default();
                    for v in observed {
                        let own = index
                            .writes
                            .get(&v.write)
                            .is_some_and(|w| w.session == session);
                        if own || index.is_aborted(v.write) {
                            continue;
                        }
                        so_far.versions.insert(v.write);
                        let ts = v.ts.or_else(|| index.ts_of(v.write));
                        so_far.newest = so_far.newest.max(ts.map(|t| (t, v.write)));
                    }
                }
                Event::Write { key, write, .. } => {
                    if index.is_aborted(*write) {
                        continue;
                    }
                    let Some(so_far) = read.get(key.as_slice()) else {
                        continue;
                    };
                    if let (Some((read_ts, v)), Some(ts)) = (so_far.newest, index.ts_of(*write)) {
                        if ts <= read_ts {
                            let detail = format!(
                                "{write} to {} at {ts:?} is not newer than {v} read at {read_ts:?}",
                                show(key)
                            );
                            report.push(Anomaly::WritesFollowReads, session, i, detail);
                        }
                    }
                    for (r, won) in winners.iter().enumerate() {
                        let Some(winner) = won.get(key.as_slice()) else {
                            continue;
                        };
                        if *winner != *write && so_far.versions.contains(winner) {
                            let detail = format!(
                                "replica {r} holds {winner} for {}, which the session read \
                                 before writing {write}",
                                show(key)
                            );
                            report.push(Anomaly::WritesFollowReads, session, i, detail);
                        }
                    }
                }
                Event::Commit | Event::Abort => {}
            }
        }
    }
    report
}
