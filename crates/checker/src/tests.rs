//! Hand-built histories for every guarantee, and random sequentially consistent histories that
//! every guarantee must accept.

use std::collections::{BTreeMap, HashMap};

use crate::{check, Anomaly, Event, FinalState, Guarantee, History, Observed, Op, WriteId};

/// Write `id` of `key` by session `s`, stamped `(t, 0)`.
fn w(s: u64, key: &str, id: u64, t: u64) -> Op {
    let event = Event::Write {
        key: key.into(),
        write: WriteId(id),
        ts: Some((t, 0)),
    };
    Op {
        session: s,
        span: None,
        txn: None,
        event,
    }
}

/// Write `id` of `key` by session `s` with an unknown timestamp.
fn wu(s: u64, key: &str, id: u64) -> Op {
    Op {
        session: s,
        span: None,
        txn: None,
        event: Event::Write {
            key: key.into(),
            write: WriteId(id),
            ts: None,
        },
    }
}

/// Read of `key` by session `s` observing LWW versions `(id, t)`.
fn r(s: u64, key: &str, observed: &[(u64, u64)]) -> Op {
    let observed = observed
        .iter()
        .map(|&(id, t)| Observed::lww(WriteId(id), (t, 0)))
        .collect();
    Op {
        session: s,
        span: None,
        txn: None,
        event: Event::Read {
            key: key.into(),
            observed,
        },
    }
}

/// Read of `key` by session `s` observing causal versions `ids`.
fn rc(s: u64, key: &str, ids: &[u64]) -> Op {
    let observed = ids
        .iter()
        .map(|&id| Observed::causal(WriteId(id)))
        .collect();
    Op {
        session: s,
        span: None,
        txn: None,
        event: Event::Read {
            key: key.into(),
            observed,
        },
    }
}

/// `op` inside transaction `txn`.
fn t(txn: u64, op: Op) -> Op {
    Op {
        txn: Some(txn),
        ..op
    }
}

fn commit(s: u64, txn: u64) -> Op {
    Op {
        session: s,
        span: None,
        txn: Some(txn),
        event: Event::Commit,
    }
}

fn abort(s: u64, txn: u64) -> Op {
    Op {
        session: s,
        span: None,
        txn: Some(txn),
        event: Event::Abort,
    }
}

fn history(ops: Vec<Op>) -> History {
    History {
        ops,
        finals: Vec::new(),
    }
}

/// A final map of `(key, [(id, t)])`.
fn state(entries: &[(&str, &[(u64, u64)])]) -> FinalState {
    entries
        .iter()
        .map(|(k, vs)| {
            let vs = vs
                .iter()
                .map(|&(id, t)| Observed::lww(WriteId(id), (t, 0)))
                .collect();
            (k.as_bytes().to_vec(), vs)
        })
        .collect()
}

/// The anomalies `check` reports, in report order.
fn found(g: Guarantee, h: &History) -> Vec<Anomaly> {
    check(g, h).violations.iter().map(|v| v.anomaly).collect()
}

/// The op indices `check` reports.
fn at(g: Guarantee, h: &History) -> Vec<usize> {
    check(g, h).violations.iter().map(|v| v.op_index).collect()
}

#[test]
fn thin_air_is_flagged_by_every_guarantee() {
    let mut h = history(vec![w(1, "k", 1, 1), r(2, "k", &[(9, 5)])]);
    h.finals = vec![state(&[("k", &[(8, 1)])])];
    for g in Guarantee::ALL {
        let report = check(g, &h);
        assert_eq!(report.count_of(Anomaly::ThinAir), 2, "{g}: {report}");
        assert_eq!(report.violations[0].op_index, 1);
        assert_eq!(report.violations[1].op_index, 2);
        assert_eq!(report.violations[1].session, crate::FINALS_SESSION);
    }
}

#[test]
fn convergence() {
    let ops = vec![
        w(1, "a", 1, 1),
        w(2, "b", 2, 2),
        t(0, w(3, "c", 3, 3)),
        abort(3, 0),
    ];
    let same = state(&[("a", &[(1, 1)]), ("b", &[(2, 2)])]);
    let mut h = history(ops);
    h.finals = vec![same.clone(), same.clone(), same.clone()];
    assert_eq!(found(Guarantee::Convergence, &h), vec![]);

    h.finals = vec![same.clone(), state(&[("a", &[(1, 1)]), ("b", &[(1, 1)])])];
    assert_eq!(found(Guarantee::Convergence, &h), vec![Anomaly::Divergence]);

    let short = state(&[("a", &[(1, 1)])]);
    h.finals = vec![short.clone(), short.clone()];
    assert_eq!(
        found(Guarantee::Convergence, &h),
        vec![Anomaly::MissingKey; 2]
    );

    h.finals = vec![same.clone(), short.clone()];
    let mut got = found(Guarantee::Convergence, &h);
    got.sort();
    assert_eq!(got, vec![Anomaly::Divergence, Anomaly::MissingKey]);

    // One map: nothing to compare.
    h.finals = vec![short];
    assert_eq!(found(Guarantee::Convergence, &h), vec![]);
}

#[test]
fn read_your_writes() {
    let g = Guarantee::ReadYourWrites;
    let ok = history(vec![
        r(1, "k", &[]),
        w(1, "k", 1, 5),
        r(1, "k", &[(1, 5)]),
        w(2, "k", 2, 7),
        r(1, "k", &[(2, 7)]),
        // Own write inside a transaction, then its abort: the earlier write is the latest.
        t(0, w(1, "k", 3, 9)),
        t(0, r(1, "k", &[(3, 9)])),
        abort(1, 0),
        r(1, "k", &[(1, 5)]),
    ]);
    assert_eq!(found(g, &ok), vec![]);

    let missing = history(vec![w(1, "k", 1, 5), r(1, "k", &[])]);
    assert_eq!(found(g, &missing), vec![Anomaly::ReadYourWrites]);

    // Own older write with unknown timestamps.
    let own_older = history(vec![wu(1, "k", 1), wu(1, "k", 2), rc(1, "k", &[1])]);
    assert_eq!(found(g, &own_older), vec![Anomaly::ReadYourWrites]);

    let older_ts = history(vec![w(2, "k", 1, 3), w(1, "k", 2, 5), r(1, "k", &[(1, 3)])]);
    assert_eq!(at(g, &older_ts), vec![2]);

    // Another session's own-older write is fine for this session.
    let others = history(vec![wu(2, "k", 1), wu(1, "k", 2), rc(1, "k", &[1, 2])]);
    assert_eq!(found(g, &others), vec![]);
}

#[test]
fn monotonic_reads() {
    let g = Guarantee::MonotonicReads;
    let ok = history(vec![
        w(2, "k", 1, 3),
        w(2, "k", 2, 5),
        r(1, "k", &[]),
        r(1, "k", &[(1, 3)]),
        r(1, "k", &[(2, 5)]),
        r(1, "k", &[(2, 5)]),
        r(1, "j", &[]),
    ]);
    assert_eq!(found(g, &ok), vec![]);

    let vanished = history(vec![w(2, "k", 1, 3), r(1, "k", &[(1, 3)]), r(1, "k", &[])]);
    assert_eq!(at(g, &vanished), vec![2]);

    let back = history(vec![
        w(2, "k", 1, 3),
        w(2, "k", 2, 5),
        r(1, "k", &[(2, 5)]),
        r(1, "k", &[(1, 3)]),
    ]);
    assert_eq!(found(g, &back), vec![Anomaly::MonotonicReads]);

    // Going back after seeing a version of an aborted transaction is fine.
    let aborted = history(vec![
        w(2, "k", 1, 3),
        t(0, w(1, "k", 2, 5)),
        t(0, r(1, "k", &[(2, 5)])),
        abort(1, 0),
        r(1, "k", &[(1, 3)]),
    ]);
    assert_eq!(found(g, &aborted), vec![]);
}

#[test]
fn monotonic_writes() {
    let g = Guarantee::MonotonicWrites;
    let mut ok = history(vec![
        w(1, "k", 1, 3),
        w(1, "k", 2, 5),
        // Writes of one transaction share its timestamp.
        t(0, w(1, "k", 3, 7)),
        t(0, w(1, "k", 4, 7)),
        commit(1, 0),
        // A server-stamped write whose timestamp a read reveals.
        wu(1, "k", 5),
        r(2, "k", &[(5, 8)]),
    ]);
    ok.finals = vec![state(&[("k", &[(5, 8)])])];
    assert_eq!(found(g, &ok), vec![]);

    let reordered = history(vec![
        wu(1, "k", 1),
        wu(1, "k", 2),
        r(2, "k", &[(1, 5)]),
        r(2, "k", &[(2, 4)]),
    ]);
    assert_eq!(at(g, &reordered), vec![1]);

    let mut lost = history(vec![wu(1, "k", 1), wu(1, "k", 2)]);
    lost.finals = vec![state(&[("k", &[(1, 5)])])];
    assert_eq!(at(g, &lost), vec![1]);
    assert_eq!(found(g, &lost), vec![Anomaly::MonotonicWrites]);

    // An aborted later write may lose.
    let mut aborted = history(vec![wu(1, "k", 1), t(0, wu(1, "k", 2)), abort(1, 0)]);
    aborted.finals = vec![state(&[("k", &[(1, 5)])])];
    assert_eq!(found(g, &aborted), vec![]);
}

#[test]
fn writes_follow_reads() {
    let g = Guarantee::WritesFollowReads;
    let mut ok = history(vec![w(2, "k", 1, 3), r(1, "k", &[(1, 3)]), w(1, "k", 2, 5)]);
    ok.finals = vec![state(&[("k", &[(2, 5)])])];
    assert_eq!(found(g, &ok), vec![]);

    let before = history(vec![w(2, "k", 1, 6), r(1, "k", &[(1, 6)]), w(1, "k", 2, 5)]);
    assert_eq!(found(g, &before), vec![Anomaly::WritesFollowReads]);
    assert_eq!(at(g, &before), vec![2]);

    let mut lost = history(vec![wu(2, "k", 1), rc(1, "k", &[1]), wu(1, "k", 2)]);
    lost.finals = vec![state(&[("k", &[(1, 6)])])];
    assert_eq!(found(g, &lost), vec![Anomaly::WritesFollowReads]);

    // Reading another key does not order the write.
    let other_key = history(vec![w(2, "j", 1, 6), r(1, "j", &[(1, 6)]), w(1, "k", 2, 5)]);
    assert_eq!(found(g, &other_key), vec![]);
}

#[test]
fn pram_is_the_union_of_its_parts() {
    let mut h = history(vec![
        w(1, "a", 1, 5),
        r(1, "a", &[]), // read-your-writes
        w(2, "b", 2, 3),
        w(2, "b", 3, 5),
        r(1, "b", &[(3, 5)]),
        r(1, "b", &[(2, 3)]), // monotonic reads
        w(1, "c", 4, 5),
        w(1, "c", 5, 4), // monotonic writes
    ]);
    h.finals = vec![];
    let mut got = found(Guarantee::Pram, &h);
    got.sort();
    assert_eq!(
        got,
        vec![
            Anomaly::ReadYourWrites,
            Anomaly::MonotonicReads,
            Anomaly::MonotonicWrites
        ]
    );
    assert_eq!(found(Guarantee::CausalPerKey, &h).len(), 2);
}

#[test]
fn causal_accepts_siblings_and_causal_chains() {
    let h = history(vec![
        wu(1, "k", 1),
        wu(2, "k", 2),
        rc(3, "k", &[1, 2]), // concurrent siblings
        rc(1, "k", &[1, 2]),
        wu(1, "k", 3),       // overwrites both in its past
        rc(3, "k", &[1, 2]), // session 3 has not seen 3 yet: fine
        rc(3, "k", &[3]),
        rc(2, "k", &[3]),
        wu(2, "j", 4),
        rc(4, "j", &[4]),
        rc(4, "k", &[3]),
    ]);
    for g in [Guarantee::Causal, Guarantee::CausalPerKey] {
        assert_eq!(found(g, &h), vec![], "{g}");
    }
}

#[test]
fn causal_overwritten_on_one_key() {
    // Session 2 read 1 and overwrote it with 2; session 3 reads 2, then 1 again.
    let h = history(vec![
        wu(1, "k", 1),
        rc(2, "k", &[1]),
        wu(2, "k", 2),
        rc(3, "k", &[2]),
        rc(3, "k", &[1]),
    ]);
    for g in [Guarantee::Causal, Guarantee::CausalPerKey] {
        assert_eq!(found(g, &h), vec![Anomaly::CausalOverwritten], "{g}");
        assert_eq!(at(g, &h), vec![4]);
    }
    // Siblings where one is in the other's past.
    let h = history(vec![
        wu(1, "k", 1),
        rc(2, "k", &[1]),
        wu(2, "k", 2),
        rc(3, "k", &[1, 2]),
    ]);
    assert_eq!(
        found(Guarantee::CausalPerKey, &h),
        vec![Anomaly::CausalOverwritten]
    );
}

#[test]
fn cross_key_violations_are_causal_but_not_per_key() {
    // Session 1 writes x then y; session 2 sees y, then misses x.
    let missing = history(vec![
        wu(1, "x", 1),
        wu(1, "y", 2),
        rc(2, "y", &[2]),
        rc(2, "x", &[]),
    ]);
    assert_eq!(
        found(Guarantee::Causal, &missing),
        vec![Anomaly::CausalMissing]
    );
    assert_eq!(found(Guarantee::CausalPerKey, &missing), vec![]);

    // Session 1 writes x=1, session 2 sees it and writes x=2 then y=3; session 3 sees y=3, then
    // x=1.
    let overwritten = history(vec![
        wu(1, "x", 1),
        rc(2, "x", &[1]),
        wu(2, "x", 2),
        wu(2, "y", 3),
        rc(3, "y", &[3]),
        rc(3, "x", &[1]),
    ]);
    assert_eq!(
        found(Guarantee::Causal, &overwritten),
        vec![Anomaly::CausalOverwritten]
    );
    assert_eq!(found(Guarantee::CausalPerKey, &overwritten), vec![]);
}

#[test]
fn causal_missing_own_write_and_aborted_writes() {
    let h = history(vec![wu(1, "k", 1), rc(1, "k", &[])]);
    assert_eq!(
        found(Guarantee::CausalPerKey, &h),
        vec![Anomaly::CausalMissing]
    );
    let h = history(vec![t(0, wu(1, "k", 1)), abort(1, 0), rc(1, "k", &[])]);
    assert_eq!(found(Guarantee::CausalPerKey, &h), vec![]);
}

#[test]
fn causal_cycles() {
    // A read observes its own session's later write.
    let h = history(vec![rc(1, "k", &[1]), wu(1, "k", 1)]);
    for g in [Guarantee::Causal, Guarantee::CausalPerKey] {
        assert_eq!(found(g, &h), vec![Anomaly::CausalCycle], "{g}");
    }
    // Two sessions each read the other's later write, across keys.
    let h = history(vec![
        rc(1, "x", &[2]),
        wu(1, "y", 1),
        rc(2, "y", &[1]),
        wu(2, "x", 2),
    ]);
    // Both reads-from edges close the cycle.
    assert_eq!(found(Guarantee::Causal, &h), vec![Anomaly::CausalCycle; 2]);
    assert_eq!(at(Guarantee::Causal, &h), vec![0, 2]);
    assert_eq!(found(Guarantee::CausalPerKey, &h), vec![]);
}

#[test]
fn read_uncommitted() {
    let g = Guarantee::ReadUncommitted;
    let mut ok = history(vec![
        t(0, w(1, "x", 1, 1)),
        t(0, w(1, "y", 2, 1)),
        commit(1, 0),
        t(0, w(2, "x", 3, 2)),
        t(0, w(2, "y", 4, 2)),
        commit(2, 0),
        // Dirty reads are allowed.
        t(1, w(3, "x", 5, 3)),
        r(1, "x", &[(5, 3)]),
        abort(3, 1),
    ]);
    ok.finals = vec![state(&[("x", &[(3, 2)]), ("y", &[(4, 2)])])];
    assert_eq!(found(g, &ok), vec![]);

    let cycle = history(vec![
        t(0, w(1, "x", 1, 1)),
        t(0, w(1, "y", 2, 4)),
        commit(1, 0),
        t(0, w(2, "x", 3, 2)),
        t(0, w(2, "y", 4, 3)),
        commit(2, 0),
    ]);
    assert_eq!(found(g, &cycle), vec![Anomaly::G0]);

    // An aborted transaction takes no part in the write-write order.
    let mut aborted = cycle.clone();
    aborted.ops[5] = abort(2, 0);
    assert_eq!(found(g, &aborted), vec![]);

    // Split winners need no timestamps.
    let mut split = history(vec![
        t(0, wu(1, "x", 1)),
        t(0, wu(1, "y", 2)),
        commit(1, 0),
        t(0, wu(2, "x", 3)),
        t(0, wu(2, "y", 4)),
        commit(2, 0),
    ]);
    split.finals = vec![[
        ("x".into(), vec![Observed::causal(WriteId(3))]),
        ("y".into(), vec![Observed::causal(WriteId(4))]),
    ]
    .into_iter()
    .collect()];
    assert_eq!(found(g, &split), vec![]);
    split.finals[0].insert("y".into(), vec![Observed::causal(WriteId(2))]);
    assert_eq!(found(g, &split), vec![Anomaly::G0]);
}

#[test]
fn read_committed_accepts_clean_histories() {
    let g = Guarantee::ReadCommitted;
    let h = history(vec![
        t(0, w(1, "x", 1, 1)),
        t(0, w(1, "x", 2, 1)),
        t(0, r(1, "x", &[(1, 1)])), // own intermediate write: not G1b
        t(0, w(1, "y", 3, 1)),
        commit(1, 0),
        r(2, "x", &[(2, 1)]),
        t(0, r(3, "y", &[(3, 1)])),
        t(0, w(3, "x", 4, 2)),
        commit(3, 0),
        r(2, "x", &[(4, 2)]),
    ]);
    assert_eq!(found(g, &h), vec![]);
}

#[test]
fn read_committed_violations() {
    let g = Guarantee::ReadCommitted;
    let aborted = history(vec![
        t(0, w(1, "x", 1, 1)),
        abort(1, 0),
        r(2, "x", &[(1, 1)]),
    ]);
    assert_eq!(found(g, &aborted), vec![Anomaly::G1a]);
    assert_eq!(found(Guarantee::ReadUncommitted, &aborted), vec![]);

    // A transaction without an end counts as aborted.
    let unended = history(vec![t(0, w(1, "x", 1, 1)), r(2, "x", &[(1, 1)])]);
    assert_eq!(found(g, &unended), vec![Anomaly::G1a]);

    let intermediate = history(vec![
        t(0, w(1, "x", 1, 1)),
        t(0, w(1, "x", 2, 1)),
        commit(1, 0),
        r(2, "x", &[(1, 1)]),
    ]);
    assert_eq!(found(g, &intermediate), vec![Anomaly::G1b]);

    // Aborted and intermediate writes in the finals.
    let mut finals = history(vec![t(0, w(1, "x", 1, 1)), abort(1, 0)]);
    finals.finals = vec![state(&[("x", &[(1, 1)])])];
    assert_eq!(found(g, &finals), vec![Anomaly::G1a]);

    // T1 reads T2's write and T2 reads T1's: circular information flow.
    let circular = history(vec![
        t(0, w(1, "x", 1, 1)),
        t(0, w(2, "y", 2, 2)),
        t(0, r(1, "y", &[(2, 2)])),
        t(0, r(2, "x", &[(1, 1)])),
        commit(1, 0),
        commit(2, 0),
    ]);
    assert_eq!(found(g, &circular), vec![Anomaly::G1c]);

    // A write-read edge against the write-write order.
    let against = history(vec![
        t(0, w(1, "x", 1, 2)),
        t(0, r(1, "y", &[(2, 1)])),
        commit(1, 0),
        t(0, w(2, "x", 3, 1)),
        t(0, w(2, "y", 2, 1)),
        t(0, r(2, "x", &[(1, 2)])),
        commit(2, 0),
    ]);
    assert_eq!(found(g, &against), vec![Anomaly::G1c]);
    assert_eq!(found(Guarantee::ReadUncommitted, &against), vec![]);
}

#[test]
fn item_cut() {
    let g = Guarantee::ItemCut;
    let ok = history(vec![
        t(0, r(1, "x", &[(1, 1)])),
        w(2, "x", 2, 2),
        t(0, r(1, "x", &[(1, 1)])),
        t(0, w(1, "x", 3, 3)),
        t(0, r(1, "x", &[(3, 3)])),
        commit(1, 0),
        // A new transaction may see something new.
        t(1, r(1, "x", &[(2, 2)])),
        commit(1, 1),
        w(3, "x", 1, 1),
    ]);
    assert_eq!(found(g, &ok), vec![]);

    let changed = history(vec![
        w(3, "x", 1, 1),
        t(0, r(1, "x", &[(1, 1)])),
        w(2, "x", 2, 2),
        t(0, r(1, "x", &[(2, 2)])),
        commit(1, 0),
    ]);
    assert_eq!(found(g, &changed), vec![Anomaly::ItemCut]);
    assert_eq!(at(g, &changed), vec![3]);
}

#[test]
fn report_summarises() {
    let h = history(vec![w(1, "k", 1, 5), r(1, "k", &[]), r(1, "k", &[(7, 9)])]);
    let report = check(Guarantee::ReadYourWrites, &h);
    assert_eq!(report.count(), 2);
    let by = report.by_anomaly();
    assert_eq!(by.get(&Anomaly::ReadYourWrites), Some(&1));
    assert_eq!(by.get(&Anomaly::ThinAir), Some(&1));
    let text = report.to_string();
    assert!(text.starts_with("2 violations"), "{text}");
    assert!(
        text.contains("ReadYourWrites at op 1 (session 1)"),
        "{text}"
    );
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// A sequentially consistent history of about `len` ops: one global serial order in which each
/// transaction runs without interruption against a single LWW state; reads see the latest
/// committed version (or their transaction's own buffered write); aborted transactions' writes
/// are never applied. With `lww` false no timestamps are recorded (causal types).
fn serial_history(seed: u64, len: usize, sessions: u64, keys: u64, lww: bool) -> History {
    let mut rng = Rng(seed | 1);
    let mut ops = Vec::with_capacity(len + 8);
    let mut state: BTreeMap<Vec<u8>, Observed> = BTreeMap::new();
    let mut next_txn: HashMap<u64, u64> = HashMap::new();
    let (mut clock, mut next_write) = (0u64, 0u64);
    let stamp = |v: Observed| if lww { v } else { Observed::causal(v.write) };
    while ops.len() < len {
        let s = rng.below(sessions);
        let in_txn = rng.below(3) == 0;
        let txn = in_txn.then(|| {
            let id = next_txn.entry(s).or_insert(0);
            *id += 1;
            *id
        });
        let count = if in_txn { 1 + rng.below(5) } else { 1 };
        let mut buffer: BTreeMap<Vec<u8>, Observed> = BTreeMap::new();
        let mut buffered = Vec::new();
        for _ in 0..count {
            let key = format!("k{}", rng.below(keys)).into_bytes();
            if rng.below(2) == 0 {
                let seen = buffer.get(&key).or_else(|| state.get(&key));
                let observed = seen.map(|v| vec![stamp(*v)]).unwrap_or_default();
                ops.push(Op {
                    session: s,
                    span: None,
                    txn,
                    event: Event::Read { key, observed },
                });
            } else {
                clock += 1;
                next_write += 1;
                let version = Observed::lww(WriteId(next_write), (clock, s));
                let ts = (lww && rng.below(2) == 0).then_some((clock, s));
                let event = Event::Write {
                    key: key.clone(),
                    write: version.write,
                    ts,
                };
                ops.push(Op {
                    session: s,
                    span: None,
                    txn,
                    event,
                });
                if in_txn {
                    buffer.insert(key.clone(), version);
                    buffered.push((key, version));
                } else {
                    state.insert(key, version);
                }
            }
        }
        if in_txn {
            match rng.below(20) {
                0..=15 => {
                    ops.push(Op {
                        session: s,
                        span: None,
                        txn,
                        event: Event::Commit,
                    });
                    state.extend(buffered);
                }
                16..=18 => ops.push(Op {
                    session: s,
                    span: None,
                    txn,
                    event: Event::Abort,
                }),
                _ => {} // never ends: aborted
            }
        }
    }
    let finals: FinalState = state
        .into_iter()
        .map(|(k, v)| (k, vec![stamp(v)]))
        .collect();
    History {
        ops,
        finals: vec![finals.clone(), finals],
    }
}

#[test]
fn serial_histories_satisfy_every_guarantee() {
    for seed in 1..=20 {
        for lww in [true, false] {
            let h = serial_history(seed, 2_000, 1 + seed % 6, 1 + seed % 9, lww);
            for g in Guarantee::ALL {
                let report = check(g, &h);
                assert!(report.is_ok(), "seed {seed} lww {lww} {g}: {report}");
            }
        }
    }
}

#[test]
fn large_serial_history_is_accepted() {
    let h = serial_history(7, 50_000, 16, 200, true);
    for g in Guarantee::ALL {
        let started = std::time::Instant::now();
        let report = check(g, &h);
        assert!(report.is_ok(), "{g}: {report}");
        eprintln!("{g}: {:?} for {} ops", started.elapsed(), h.ops.len());
    }
}
