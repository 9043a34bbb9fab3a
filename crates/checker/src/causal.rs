//! Causal consistency, multi-key and per key, with vector clocks over sessions.
//!
//! Happens-before is the transitive closure of session order and reads-from. Since session
//! order is total per session, an op's causal past is downward closed in every session and is
//! stored as a vector clock: entry `s` is the number of ops of session `s` in the past (the op
//! itself included). Clocks are computed in a topological order of the session-order and
//! reads-from edges; reads-from edges inside a strongly connected component close a cycle, are
//! reported as [`Anomaly::CausalCycle`] and left out of the clocks.

use std::collections::{BTreeMap, HashMap};

use crate::graph::Graph;
use crate::history::{Event, Observed, WriteId};
use crate::index::{show, Index};
use crate::report::{Anomaly, Report};

/// Which ops count for happens-before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// All reads and writes (multi-key causal consistency).
    AllKeys,
    /// Each key on its own: session order restricted to the key's ops, reads-from on the key.
    PerKey,
}

/// [`Anomaly::CausalMissing`], [`Anomaly::CausalOverwritten`] and [`Anomaly::CausalCycle`].
pub(crate) fn check(index: &Index<'_>, scope: Scope) -> Report {
    let mut report = Report::default();
    let ops = &index.history.ops;
    match scope {
        Scope::AllKeys => {
            let nodes: Vec<usize> = (0..ops.len()).filter(|&i| ops[i].key().is_some()).collect();
            analyze(index, &nodes, &mut report);
        }
        Scope::PerKey => {
            let mut by_key: BTreeMap<&[u8], Vec<usize>> = BTreeMap::new();
            for (i, op) in ops.iter().enumerate() {
                if let Some(key) = op.key() {
                    by_key.entry(key).or_default().push(i);
                }
            }
            for nodes in by_key.values() {
                analyze(index, nodes, &mut report);
            }
        }
    }
    report
}

/// One write of a key by one session, as seen by [`analyze`].
#[derive(Clone, Copy, Debug)]
struct KeyWrite {
    /// The write's position among its session's nodes.
    seq: u32,
    /// The write's node.
    node: usize,
}

/// Checks the reads among `nodes` (op indices in history order) against the happens-before
/// relation of `nodes` alone.
fn analyze(index: &Index<'_>, nodes: &[usize], report: &mut Report) {
    let ops = &index.history.ops;
    let n = nodes.len();

    // Sessions numbered locally; each node's session and position in it.
    let mut session_number: HashMap<u64, usize> = HashMap::new();
    let mut session_of = Vec::with_capacity(n);
    let mut seq = Vec::with_capacity(n);
    let mut session_len: Vec<u32> = Vec::new();
    let mut last_of_session: Vec<usize> = Vec::new();
    let mut graph = Graph::new(n);
    let mut session_edges = Vec::new();
    let mut write_node: HashMap<WriteId, usize> = HashMap::new();
    // The non-aborted writes of each (key, local session), in session order.
    let mut key_writes: HashMap<(&[u8], usize), Vec<KeyWrite>> = HashMap::new();
    for (node, &i) in nodes.iter().enumerate() {
        let next = session_number.len();
        let s = *session_number.entry(ops[i].session).or_insert(next);
        if s == session_len.len() {
            session_len.push(0);
            last_of_session.push(node);
        } else {
            graph.add_edge(last_of_session[s], node);
            session_edges.push((last_of_session[s], node));
            last_of_session[s] = node;
        }
        session_of.push(s);
        seq.push(session_len[s]);
        if let Event::Write { key, write, .. } = &ops[i].event {
            write_node.entry(*write).or_insert(node);
            if !index.is_aborted(*write) {
                let entry = KeyWrite {
                    seq: session_len[s],
                    node,
                };
                key_writes
                    .entry((key.as_slice(), s))
                    .or_default()
                    .push(entry);
            }
        }
        session_len[s] += 1;
    }
    let sessions = session_len.len();

    // Reads-from edges: (writer node, reader node).
    let mut reads_from = Vec::new();
    for (node, &i) in nodes.iter().enumerate() {
        if let Event::Read { observed, .. } = &ops[i].event {
            for v in observed {
                if let Some(&w) = write_node.get(&v.write) {
                    reads_from.push((w, node));
                    graph.add_edge(w, node);
                }
            }
        }
    }

    // Reads-from edges that close a cycle are reported and dropped.
    let component = graph.components();
    let mut acyclic = Graph::new(n);
    for &(a, b) in &session_edges {
        acyclic.add_edge(a, b);
    }
    for &(w, r) in &reads_from {
        if component[w] == component[r] {
            let (wi, ri) = (nodes[w], nodes[r]);
            let write = match &ops[wi].event {
                Event::Write { write, .. } => *write,
                _ => continue,
            };
            let detail = format!("read observed {write} (op {wi}), which happens after the read");
            report.push(Anomaly::CausalCycle, ops[ri].session, ri, detail);
        } else {
            acyclic.add_edge(w, r);
        }
    }

    // Vector clocks in topological order. The clock of every op is needed only while its
    // session's next op is processed, except for writes, whose clocks readers join.
    let mut current: Vec<Vec<u32>> = vec![vec![0; sessions]; sessions];
    let mut write_clock: HashMap<usize, Vec<u32>> = HashMap::new();
    for node in acyclic.topological_order() {
        let i = nodes[node];
        let s = session_of[node];
        let mut clock = current[s].clone();
        if let Event::Read { observed, .. } = &ops[i].event {
            for v in observed {
                let Some(&w) = write_node.get(&v.write) else {
                    continue;
                };
                // Invariant: a writer whose edge was kept precedes its reader in the order; a
                // writer on a cycle with the reader has no clock yet and is skipped.
                if component[w] == component[node] {
                    continue;
                }
                if let Some(wc) = write_clock.get(&w) {
                    for (c, x) in clock.iter_mut().zip(wc) {
                        *c = (*c).max(*x);
                    }
                }
            }
        }
        clock[s] = seq[node] + 1;
        match &ops[i].event {
            Event::Read { key, observed } => {
                let lookup = Lookup {
                    index,
                    nodes,
                    session_of: &session_of,
                    seq: &seq,
                    write_node: &write_node,
                    key_writes: &key_writes,
                    write_clock: &write_clock,
                };
                check_read(&lookup, node, key, observed, &clock, report);
            }
            Event::Write { .. } => {
                write_clock.insert(node, clock.clone());
            }
            Event::Commit | Event::Abort => {}
        }
        current[s] = clock;
    }
}

/// The per-subset tables [`check_read`] consults.
struct Lookup<'a, 'h> {
    index: &'a Index<'h>,
    nodes: &'a [usize],
    session_of: &'a [usize],
    seq: &'a [u32],
    write_node: &'a HashMap<WriteId, usize>,
    key_writes: &'a HashMap<(&'h [u8], usize), Vec<KeyWrite>>,
    write_clock: &'a HashMap<usize, Vec<u32>>,
}

impl Lookup<'_, '_> {
    /// The last non-aborted write of `key` by local session `s` within the first `count` ops of
    /// `s`.
    fn last_write_before(&self, key: &[u8], s: usize, count: u32) -> Option<KeyWrite> {
        let list = self.key_writes.get(&(key, s))?;
        let end = list.partition_point(|w| w.seq < count);
        end.checked_sub(1).map(|at| list[at])
    }
}

/// Checks the read at `node` with causal past `clock`.
fn check_read(
    lookup: &Lookup<'_, '_>,
    node: usize,
    key: &[u8],
    observed: &[Observed],
    clock: &[u32],
    report: &mut Report,
) {
    let (ops, nodes) = (&lookup.index.history.ops, lookup.nodes);
    let i = nodes[node];
    let session = ops[i].session;
    if observed.is_empty() {
        let missed = (clock.iter().enumerate())
            .find_map(|(s, &count)| lookup.last_write_before(key, s, count));
        if let Some(w) = missed {
            let detail = format!(
                "read of {} observed nothing, but the write at op {} happens before it",
                show(key),
                nodes[w.node]
            );
            report.push(Anomaly::CausalMissing, session, i, detail);
        }
        return;
    }
    for v in observed {
        let Some(&x) = lookup.write_node.get(&v.write) else {
            continue;
        };
        let (sx, px) = (lookup.session_of[x], lookup.seq[x]);
        for (s, &count) in clock.iter().enumerate() {
            let Some(w) = lookup.last_write_before(key, s, count) else {
                continue;
            };
            if w.node == x {
                continue;
            }
            let after_x = lookup
                .write_clock
                .get(&w.node)
                .is_some_and(|wc| wc[sx] > px);
            if after_x {
                let detail = format!(
                    "read of {} observed {}, which the write at op {} overwrote in the read's past",
                    show(key),
                    v.write,
                    nodes[w.node]
                );
                report.push(Anomaly::CausalOverwritten, session, i, detail);
                break;
            }
        }
    }
}
