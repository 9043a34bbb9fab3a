//! Facts every checker needs, computed once per history: who wrote each write id, each write's
//! known timestamp, the transactions and their outcome, and each session's ops in order.

use std::collections::{BTreeMap, HashMap};

use crate::history::{Event, History, Observed, Ts, WriteId};
use crate::report::{Anomaly, Report, FINALS_SESSION};

/// Where a write id was written.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WriteInfo<'h> {
    /// The writing session.
    pub session: u64,
    /// Index into [`Index::txns`] of the writing transaction.
    pub txn: usize,
    /// The key written.
    pub key: &'h [u8],
}

/// A transaction; an op outside any transaction forms one of its own, which is committed.
#[derive(Clone, Debug)]
pub(crate) struct TxnInfo<'h> {
    /// The session the transaction belongs to.
    pub session: u64,
    /// The transaction id within the session; `None` for a single op outside a transaction.
    pub id: Option<u64>,
    /// Whether it committed (a `Commit` op exists); otherwise it aborted or never ended.
    pub committed: bool,
    /// Index of its first op.
    pub first_op: usize,
    /// Its writes to each key, in issue order.
    pub writes: BTreeMap<&'h [u8], Vec<WriteId>>,
}

/// The per-history facts; see the module documentation.
pub(crate) struct Index<'h> {
    /// The history indexed.
    pub history: &'h History,
    /// The writer of each write id. If a workload wrote an id twice, the first write counts.
    pub writes: HashMap<WriteId, WriteInfo<'h>>,
    /// The known timestamp of each write: from its write event, otherwise from the first
    /// observation of it (in op order, then the finals) that carries one.
    pub ts: HashMap<WriteId, Ts>,
    /// All transactions.
    pub txns: Vec<TxnInfo<'h>>,
    /// The transaction (index into `txns`) of each op.
    pub txn_of_op: Vec<usize>,
    /// Each session's op indices in issue order.
    pub sessions: BTreeMap<u64, Vec<usize>>,
}

impl<'h> Index<'h> {
    /// Indexes `history`.
    pub fn new(history: &'h History) -> Self {
        let mut writes = HashMap::new();
        let mut ts = HashMap::new();
        let mut txns: Vec<TxnInfo<'h>> = Vec::new();
        let mut txn_of_op = Vec::with_capacity(history.ops.len());
        let mut sessions: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        let mut open: HashMap<(u64, u64), usize> = HashMap::new();

        for (i, op) in history.ops.iter().enumerate() {
            sessions.entry(op.session).or_default().push(i);
            let t = match op.txn {
                Some(id) => *open.entry((op.session, id)).or_insert_with(|| {
                    txns.push(TxnInfo {
                        session: op.session,
                        id: Some(id),
                        committed: false,
                        first_op: i,
                        writes: BTreeMap::new(),
                    });
                    txns.len() - 1
                }),
                None => {
                    txns.push(TxnInfo {
                        session: op.session,
                        id: None,
                        committed: true,
                        first_op: i,
                        writes: BTreeMap::new(),
                    });
                    txns.len() - 1
                }
            };
            txn_of_op.push(t);
            match &op.event {
                Event::Write {
                    key,
                    write,
                    ts: stamped,
                } => {
                    writes.entry(*write).or_insert(WriteInfo {
                        session: op.session,
                        txn: t,
                        key: key.as_slice(),
                    });
                    txns[t]
                        .writes
                        .entry(key.as_slice())
                        .or_default()
                        .push(*write);
                    if let Some(stamped) = stamped {
                        ts.insert(*write, *stamped);
                    }
                }
                Event::Commit if op.txn.is_some() => txns[t].committed = true,
                Event::Read { .. } | Event::Commit | Event::Abort => {}
            }
        }
        let observed = history
            .ops
            .iter()
            .filter_map(|op| match &op.event {
                Event::Read { observed, .. } => Some(observed.as_slice()),
                _ => None,
            })
            .chain(
                history
                    .finals
                    .iter()
                    .flat_map(|f| f.values().map(Vec::as_slice)),
            );
        for versions in observed {
            for v in versions {
                if let Some(stamp) = v.ts {
                    ts.entry(v.write).or_insert(stamp);
                }
            }
        }
        Self {
            history,
            writes,
            ts,
            txns,
            txn_of_op,
            sessions,
        }
    }

    /// The op index violations found in the finals report.
    pub fn finals_op(&self) -> usize {
        self.history.ops.len()
    }

    /// The known timestamp of `write`.
    pub fn ts_of(&self, write: WriteId) -> Option<Ts> {
        self.ts.get(&write).copied()
    }

    /// The writing transaction of `write`, if some op wrote it.
    pub fn txn_of_write(&self, write: WriteId) -> Option<usize> {
        self.writes.get(&write).map(|w| w.txn)
    }

    /// Whether `write` was written by an aborted (or never ended) transaction. Unknown (thin
    /// air) writes are not aborted.
    pub fn is_aborted(&self, write: WriteId) -> bool {
        self.txn_of_write(write)
            .is_some_and(|t| !self.txns[t].committed)
    }

    /// Whether `write` is its transaction's last write of its key (always true outside
    /// transactions; false for unknown writes).
    pub fn is_last_in_txn(&self, write: WriteId) -> bool {
        let Some(info) = self.writes.get(&write) else {
            return false;
        };
        self.txns[info.txn]
            .writes
            .get(info.key)
            .and_then(|ws| ws.last())
            == Some(&write)
    }

    /// The largest known timestamp among `observed` that are not written by aborted
    /// transactions, and whether any such version was observed at all.
    pub fn max_visible_ts(&self, observed: &[Observed]) -> (bool, Option<Ts>) {
        let mut any = false;
        let mut max = None;
        for v in observed.iter().filter(|v| !self.is_aborted(v.write)) {
            any = true;
            max = max.max(v.ts.or_else(|| self.ts_of(v.write)));
        }
        (any, max)
    }
}

/// [`Anomaly::ThinAir`]: every read (and every final read) that observed a write id no op wrote.
pub(crate) fn thin_air(index: &Index<'_>) -> Report {
    let mut report = Report::default();
    for (i, op) in index.history.ops.iter().enumerate() {
        if let Event::Read { key, observed } = &op.event {
            for v in observed
                .iter()
                .filter(|v| !index.writes.contains_key(&v.write))
            {
                let detail = format!(
                    "read of {} observed {} that no op wrote",
                    show(key),
                    v.write
                );
                report.push(Anomaly::ThinAir, op.session, i, detail);
            }
        }
    }
    for (r, state) in index.history.finals.iter().enumerate() {
        for (key, observed) in state {
            for v in observed
                .iter()
                .filter(|v| !index.writes.contains_key(&v.write))
            {
                let detail = format!(
                    "replica {r} holds {} for {} that no op wrote",
                    v.write,
                    show(key)
                );
                report.push(Anomaly::ThinAir, FINALS_SESSION, index.finals_op(), detail);
            }
        }
    }
    report
}

/// A key for messages: as text when printable, otherwise in hex.
pub(crate) fn show(key: &[u8]) -> String {
    match std::str::from_utf8(key) {
        Ok(s) if s.chars().all(|c| !c.is_control()) => format!("{s:?}"),
        _ => key.iter().map(|b| format!("{b:02x}")).collect::<String>(),
    }
}

/// Write ids of `observed`, for messages.
pub(crate) fn show_versions(observed: &[Observed]) -> String {
    let ids: Vec<String> = observed.iter().map(|v| v.write.to_string()).collect();
    format!("{{{}}}", ids.join(", "))
}
