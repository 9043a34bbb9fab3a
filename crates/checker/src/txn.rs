//! Transactional anomalies (Adya's G0, G1a, G1b, G1c) and item-cut isolation.
//!
//! Transactions are those of [`Index::txns`]: an op outside any transaction is a committed
//! transaction of its own. Graph nodes `0..txns.len()` are transactions; further nodes are hubs
//! that chain the write-write order of a key (see [`ww_graph`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::convergence::winners;
use crate::graph::Graph;
use crate::history::{Event, Observed, Ts, WriteId};
use crate::index::{show, Index};
use crate::report::{Anomaly, Report, FINALS_SESSION};

/// The write-write order among committed transactions: for each key, the committed
/// transactions' last writes of the key with a known timestamp, sorted by timestamp; every
/// transaction of one timestamp group gets an edge (through a hub node) to every transaction
/// of the next group. The transitive closure is exactly "T1 → T2 when ts(T1's write) <
/// ts(T2's write) on some key", with edges linear in the number of writes.
fn ww_graph(index: &Index<'_>) -> Graph {
    let mut by_key: HashMap<&[u8], Vec<(Ts, usize)>> = HashMap::new();
    for (t, txn) in index
        .txns
        .iter()
        .enumerate()
        .filter(|(_, txn)| txn.committed)
    {
        for (key, writes) in &txn.writes {
            if let Some(ts) = writes.last().and_then(|w| index.ts_of(*w)) {
                by_key.entry(key).or_default().push((ts, t));
            }
        }
    }
    let mut graph = Graph::new(index.txns.len());
    for mut list in by_key.into_values() {
        list.sort_unstable();
        let groups: Vec<&[(Ts, usize)]> = list.chunk_by(|a, b| a.0 == b.0).collect();
        for pair in groups.windows(2) {
            let hub = graph.add_node();
            for &(_, t) in pair[0] {
                graph.add_edge(t, hub);
            }
            for &(_, t) in pair[1] {
                graph.add_edge(hub, t);
            }
        }
    }
    graph
}

/// The transactions (not hubs) of each cyclic component of `graph`, by component number.
fn cycles(index: &Index<'_>, graph: &Graph, component: &[usize]) -> BTreeMap<usize, Vec<usize>> {
    let cyclic = graph.cyclic_components(component);
    let mut members: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for t in 0..index.txns.len() {
        if cyclic[component[t]] {
            members.entry(component[t]).or_default().push(t);
        }
    }
    members
}

/// Transactions for messages: `session/txn` (or `session/op` outside transactions).
fn show_txns(index: &Index<'_>, txns: &[usize]) -> String {
    let names: Vec<String> = txns
        .iter()
        .take(8)
        .map(|&t| {
            let txn = &index.txns[t];
            match txn.id {
                Some(id) => format!("s{}/t{id}", txn.session),
                None => format!("s{}/op{}", txn.session, txn.first_op),
            }
        })
        .collect();
    let more = if txns.len() > 8 {
        format!(" and {} more", txns.len() - 8)
    } else {
        String::new()
    };
    format!("[{}]{more}", names.join(", "))
}

/// [`Anomaly::G0`]: cycles of the write-write order, and split winners in the finals.
pub(crate) fn g0(index: &Index<'_>) -> Report {
    let mut report = Report::default();
    let graph = ww_graph(index);
    let component = graph.components();
    for members in cycles(index, &graph, &component).values() {
        let first = &index.txns[members[0]];
        let detail = format!("write-write cycle among {}", show_txns(index, members));
        report.push(Anomaly::G0, first.session, first.first_op, detail);
    }
    split_winners(index, &mut report);
    report
}

/// The split-winner rule of [`g0`]: committed transactions that wrote the same set of (two or
/// more) keys must win all of those keys together in every final state.
fn split_winners(index: &Index<'_>, report: &mut Report) {
    let mut by_keys: BTreeMap<Vec<&[u8]>, Vec<usize>> = BTreeMap::new();
    for (t, txn) in index.txns.iter().enumerate() {
        if txn.committed && txn.writes.len() > 1 {
            by_keys
                .entry(txn.writes.keys().copied().collect())
                .or_default()
                .push(t);
        }
    }
    for (r, state) in index.history.finals.iter().enumerate() {
        let won = winners(state);
        for (keys, group) in by_keys.iter().filter(|(_, g)| g.len() > 1) {
            let owners: BTreeSet<usize> = keys
                .iter()
                .filter_map(|k| won.get(k).and_then(|w| index.txn_of_write(*w)))
                .filter(|t| group.contains(t))
                .collect();
            if owners.len() > 1 {
                let owners: Vec<usize> = owners.into_iter().collect();
                let first = &index.txns[owners[0]];
                let detail = format!(
                    "replica {r}: the winners of keys written by each of {} belong to {}",
                    show_txns(index, group),
                    show_txns(index, &owners)
                );
                report.push(Anomaly::G0, first.session, first.first_op, detail);
            }
        }
    }
}

/// Every read in the history and in the finals: (op index, session, reader transaction, key,
/// observed). Final reads have no transaction.
fn all_reads<'h>(
    index: &'h Index<'h>,
) -> impl Iterator<Item = (usize, u64, Option<usize>, &'h [u8], &'h [Observed])> + 'h {
    let in_ops = index
        .history
        .ops
        .iter()
        .enumerate()
        .filter_map(|(i, op)| match &op.event {
            Event::Read { key, observed } => Some((
                i,
                op.session,
                Some(index.txn_of_op[i]),
                key.as_slice(),
                observed.as_slice(),
            )),
            _ => None,
        });
    let in_finals = index.history.finals.iter().flat_map(move |state| {
        state.iter().map(move |(key, observed)| {
            (
                index.finals_op(),
                FINALS_SESSION,
                None,
                key.as_slice(),
                observed.as_slice(),
            )
        })
    });
    in_ops.chain(in_finals)
}

/// [`Anomaly::G1a`] and [`Anomaly::G1b`]: reads of aborted or intermediate writes of other
/// transactions.
pub(crate) fn g1ab(index: &Index<'_>) -> Report {
    let mut report = Report::default();
    for (i, session, reader, key, observed) in all_reads(index) {
        for v in observed {
            let Some(writer) = index.txn_of_write(v.write) else {
                continue;
            };
            if Some(writer) == reader {
                continue;
            }
            let names = show_txns(index, &[writer]);
            if !index.txns[writer].committed {
                let detail = format!(
                    "read of {} observed {} of aborted {names}",
                    show(key),
                    v.write
                );
                report.push(Anomaly::G1a, session, i, detail);
            } else if !index.is_last_in_txn(v.write) {
                let detail = format!(
                    "read of {} observed intermediate {} of {names}",
                    show(key),
                    v.write
                );
                report.push(Anomaly::G1b, session, i, detail);
            }
        }
    }
    report
}

/// [`Anomaly::G1c`]: cycles of write-write and write-read dependencies that contain a
/// write-read edge (cycles of write-write edges alone are G0).
pub(crate) fn g1c(index: &Index<'_>) -> Report {
    let mut report = Report::default();
    let mut graph = ww_graph(index);
    // Write-read edges: (writer transaction, reader transaction, read op).
    let mut wr = Vec::new();
    for (i, op) in index.history.ops.iter().enumerate() {
        let Event::Read { observed, .. } = &op.event else {
            continue;
        };
        let reader = index.txn_of_op[i];
        if !index.txns[reader].committed {
            continue;
        }
        for v in observed {
            let Some(writer) = index.txn_of_write(v.write) else {
                continue;
            };
            if writer != reader && index.txns[writer].committed {
                graph.add_edge(writer, reader);
                wr.push((writer, reader, i));
            }
        }
    }
    let component = graph.components();
    let members = cycles(index, &graph, &component);
    let mut reported = BTreeSet::new();
    for (writer, reader, i) in wr {
        let c = component[writer];
        if c == component[reader] && reported.insert(c) {
            let cycle = members.get(&c).map(Vec::as_slice).unwrap_or_default();
            let detail = format!(
                "read of {} closes a dependency cycle among {}",
                index.history.ops[i].key().map(show).unwrap_or_default(),
                show_txns(index, cycle)
            );
            report.push(Anomaly::G1c, index.history.ops[i].session, i, detail);
        }
    }
    report
}

/// [`Anomaly::ItemCut`]: a transaction's reads of a key observe one set of writes, until the
/// transaction writes the key.
pub(crate) fn item_cut(index: &Index<'_>) -> Report {
    let mut report = Report::default();
    let mut last_read: HashMap<(usize, &[u8]), BTreeSet<WriteId>> = HashMap::new();
    for (i, op) in index.history.ops.iter().enumerate() {
        if op.txn.is_none() {
            continue;
        }
        let t = index.txn_of_op[i];
        match &op.event {
            Event::Read { key, observed } => {
                let now: BTreeSet<WriteId> = observed.iter().map(|v| v.write).collect();
                if let Some(before) = last_read.get(&(t, key.as_slice())) {
                    if *before != now {
                        let detail = format!(
                            "read of {} observed {now:?}; the transaction read {before:?} before",
                            show(key)
                        );
                        report.push(Anomaly::ItemCut, op.session, i, detail);
                    }
                }
                last_read.insert((t, key.as_slice()), now);
            }
            Event::Write { key, .. } => {
                last_read.remove(&(t, key.as_slice()));
            }
            Event::Commit | Event::Abort => {}
        }
    }
    report
}
