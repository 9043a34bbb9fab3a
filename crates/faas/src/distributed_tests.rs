//! Tests of `distributed`: the spread of one call through its attempts (OPT, CON, HB).
use super::*;

fn vee() -> Plan {
    crate::dag::validate(&pb::Dag {
        name: "v".into(),
        functions: vec!["a".into(), "b".into(), "c".into()],
        edges: vec![
            pb::Edge {
                from: "a".into(),
                to: "c".into(),
            },
            pb::Edge {
                from: "b".into(),
                to: "c".into(),
            },
        ],
    })
    .unwrap()
}

fn done(s: &Spread, f: &str, value: &str, writes: &[&str]) -> pb::FnDone {
    pb::FnDone {
        run_id: 1,
        attempt: s.attempt(),
        function: f.into(),
        result: Some(pb::fn_done::Result::Value(Bytes::from(value.to_string()))),
        meta: Some(pb::EdgeMeta::default()),
        writes: writes
            .iter()
            .map(|k| pb::Write {
                key: Bytes::from(k.to_string()),
                value: Bytes::new(),
            })
            .collect(),
    }
}

#[test]
fn a_fan_in_runs_after_both_branches_with_their_results_and_writes() {
    let mut s = Spread::new(1, vee());
    assert_eq!(s.ready(), vec!["a", "b"]);
    s.placed("a", "h1");
    s.placed("b", "h2");
    assert!(s.ready().is_empty());
    assert_eq!(s.done("h2", done(&s, "a", "x", &[])), Event::Stale); // not a's host
    assert_eq!(s.done("h1", done(&s, "a", "ra", &["k1"])), Event::Progress);
    assert!(s.ready().is_empty());
    assert_eq!(s.done("h2", done(&s, "b", "rb", &["k2"])), Event::Progress);
    assert_eq!(s.ready(), vec!["c"]);
    let m = s.run_fn("c", &pb::RunDag::default(), &[], &[]);
    assert!(m.sink);
    assert_eq!(m.upstream, vec![Bytes::from("ra"), Bytes::from("rb")]);
    assert_eq!(m.writes.len(), 2);
    s.placed("c", "h1");
    assert_eq!(
        s.done("h1", done(&s, "c", "rc", &[])),
        Event::Finished(Bytes::from("rc"))
    );
}

#[test]
fn a_restart_takes_a_fresh_attempt_and_forgets_the_old_one() {
    let mut s = Spread::new(7, vee());
    s.placed("a", "h1");
    let old = done(&s, "a", "ra", &["k"]);
    let first = s.attempt();
    let (ended, hosts, running) = s.restart();
    assert_eq!(ended, first);
    assert_ne!(s.attempt(), first);
    assert_eq!(hosts, BTreeSet::from(["h1".to_string()]));
    assert_eq!(running.len(), 1);
    assert_eq!(s.attempts(), 2);
    assert_eq!(s.done("h1", old), Event::Stale);
    assert_eq!(s.ready(), vec!["a", "b"]);
    // CT pins under run ids; attempts never collide with them or each other.
    assert!(attempt_id(7, 0) > u64::from(u32::MAX) && attempt_id(7, 0) != attempt_id(7, 1));
}

#[test]
fn con_places_every_function_first_and_runs_them_once_every_snapshot_is_in() {
    let keys: BTreeMap<String, KeySet> = ["a", "b", "c"]
        .iter()
        .map(|f| {
            (
                f.to_string(),
                KeySet::from([cache::Key::from(f.as_bytes())]),
            )
        })
        .collect();
    let mut s = Spread::con(3, vee(), keys);
    assert!(s.needs_prepare());
    assert!(s.ready().is_empty());
    for (f, h) in [("a", "h1"), ("b", "h2"), ("c", "h1")] {
        s.prepared(f, h);
    }
    assert!(!s.needs_prepare());
    let snap = |s: &Spread, f: &str| pb::ConSnapshot {
        run_id: 3,
        attempt: s.attempt(),
        function: f.into(),
        ..Default::default()
    };
    assert_eq!(s.con_snapshot("h2", snap(&s, "a")), ConEvent::Stale);
    assert_eq!(s.con_snapshot("h1", snap(&s, "a")), ConEvent::Waiting);
    assert_eq!(s.con_snapshot("h2", snap(&s, "b")), ConEvent::Waiting);
    assert!(s.ready().is_empty());
    assert_eq!(s.con_snapshot("h1", snap(&s, "c")), ConEvent::Planned);
    assert_eq!(s.ready(), vec!["a", "b"]);
    assert_eq!(s.host_of("b"), Some("h2"));
    assert!(s.run_fn("a", &pb::RunDag::default(), &[], &[]).con);
    let mut failed = snap(&s, "a");
    failed.error = "staging failed".into();
    s.restart();
    assert!(s.needs_prepare());
    s.prepared("a", "h1");
    failed.attempt = s.attempt();
    assert_eq!(
        s.con_snapshot("h1", failed),
        ConEvent::Aborted("staging failed".into())
    );
}

#[test]
fn hb_queries_every_function_then_runs_opt_or_falls_back_to_con() {
    let keys: BTreeMap<String, KeySet> = ["a", "b", "c"]
        .iter()
        .map(|f| {
            (
                f.to_string(),
                KeySet::from([cache::Key::from(f.as_bytes())]),
            )
        })
        .collect();
    let mut s = Spread::hb(5, vee(), keys);
    assert!(s.is_hb() && s.needs_query() && !s.needs_prepare());
    assert!(s.ready().is_empty());
    for (f, h) in [("a", "h1"), ("b", "h2"), ("c", "h1")] {
        s.prepared(f, h);
    }
    // OPT does not wait for the simulation: the sources are ready once placed.
    assert!(!s.needs_query());
    assert_eq!(s.ready(), vec!["a", "b"]);
    let view = |s: &Spread, f: &str| pb::HbView {
        run_id: 5,
        attempt: s.attempt(),
        function: f.into(),
        cache_id: 1,
        table: None,
        keys: Vec::new(), // nothing cached: simulated as bottoms, OPT passes
    };
    assert_eq!(s.hb_view("h1", view(&s, "a")), HbEvent::Waiting);
    assert_eq!(s.hb_view("h1", view(&s, "b")), HbEvent::Stale); // b is on h2
    assert_eq!(s.hb_view("h2", view(&s, "b")), HbEvent::Waiting);
    // Nothing cached: c's key is to be staged from the store (the sources run now).
    assert_eq!(
        s.hb_view("h1", view(&s, "c")),
        HbEvent::Opt(vec![(
            "c".into(),
            KeySet::from([cache::Key::from(&b"c"[..])])
        )])
    );
    assert_eq!(s.ready(), vec!["a", "b"]);
    assert_eq!(s.host_of("b"), Some("h2")); // OPT runs where the views came from
    assert!(!s.run_fn("a", &pb::RunDag::default(), &[], &[]).con);
    // OPT aborted: the next attempt is CON.
    s.restart();
    s.to_con();
    assert!(s.needs_prepare() && !s.needs_query());
}

#[test]
fn hb_reuses_an_opt_result_when_con_binds_the_same_versions() {
    use cache::{CacheId, VectorClock, VersionRef};
    let key = |f: &str| cache::Key::from(f.as_bytes());
    let keys: BTreeMap<String, KeySet> = ["a", "b", "c"]
        .iter()
        .map(|f| (f.to_string(), KeySet::from([key(f)])))
        .collect();
    let at = |n: u64, c: u64| VersionRef::new(VectorClock::from_iter([(9, n)]), CacheId(c));
    let mut s = Spread::hb(5, vee(), keys);
    for (f, h) in [("a", "h1"), ("b", "h2"), ("c", "h1")] {
        s.prepared(f, h);
    }
    for (f, h) in [("a", "h1"), ("b", "h2"), ("c", "h1")] {
        let view = pb::HbView {
            run_id: 5,
            attempt: s.attempt(),
            function: f.into(),
            cache_id: 1,
            table: None,
            keys: Vec::new(),
        };
        s.hb_view(h, view);
    }
    // OPT: a read a@1, b read b@1; then c aborts.
    let opt_done = |s: &Spread, f: &str, n: u64| pb::FnDone {
        run_id: 5,
        attempt: s.attempt(),
        function: f.into(),
        result: Some(pb::fn_done::Result::Value(Bytes::from(format!("r{f}")))),
        meta: Some(edge_to_pb(&cache::opt::Upstream {
            abort: false,
            s: VersionSet::new(),
            r: VersionSet::from([(key(f), at(n, 1))]),
        })),
        writes: vec![pb::Write {
            key: Bytes::from(format!("w{f}")),
            value: Bytes::new(),
        }],
    };
    s.placed("a", "h1");
    s.placed("b", "h2");
    assert_eq!(s.done("h1", opt_done(&s, "a", 1)), Event::Progress);
    assert_eq!(s.done("h2", opt_done(&s, "b", 1)), Event::Progress);
    s.restart();
    s.to_con();
    for (f, h) in [("a", "h1"), ("b", "h2"), ("c", "h1")] {
        s.prepared(f, h);
    }
    // CON binds a at the version OPT read, b at a newer one.
    for (f, h, n) in [("a", "h1", 1), ("b", "h2", 2), ("c", "h1", 1)] {
        let snap = pb::ConSnapshot {
            run_id: 5,
            attempt: s.attempt(),
            function: f.into(),
            s: Some(refs_to_table(&VersionSet::from([(key(f), at(n, 2))]))),
            error: String::new(),
        };
        s.con_snapshot(h, snap);
    }
    assert_eq!(s.ready(), vec!["a", "b"]);
    assert_eq!(s.reuse("a").as_deref(), Some("h1"));
    assert_eq!(s.reuse("b"), None); // read another version
    assert_eq!(s.reuse("c"), None); // the sink always runs
    assert_eq!(s.reused(), 1);
    assert_eq!(s.ready(), vec!["b"]);
    // a's edge carries CON's binding (sources as CON planned them) and its writes.
    s.placed("b", "h2");
    let con_b = pb::FnDone {
        meta: Some(pb::EdgeMeta::default()),
        ..opt_done(&s, "b", 2)
    };
    assert_eq!(s.done("h2", con_b), Event::Progress);
    let m = s.run_fn("c", &pb::RunDag::default(), &[], &[]);
    assert_eq!(m.upstream, vec![Bytes::from("ra"), Bytes::from("rb")]);
    let a_edge = edge_from_pb(&m.upstream_meta[0]).unwrap().r;
    assert_eq!(a_edge[&key("a")].sources, BTreeSet::from([CacheId(2)]));
    assert_eq!(m.writes.len(), 2);
}

#[test]
fn hb_runs_opt_while_it_simulates_and_aborts_early_only_before_the_sink() {
    let key = |k: &str| cache::Key::from(k.as_bytes());
    let keys: BTreeMap<String, KeySet> = BTreeMap::from([
        ("a".to_string(), KeySet::from([key("x")])),
        ("b".to_string(), KeySet::from([key("y")])),
        ("c".to_string(), KeySet::new()),
    ]);
    use cache::hb::{KeyMeta, MetaView};
    use cache::{CacheId, VectorClock, VersionRef};
    let clock = |n: u64| VectorClock::from_iter([(9, n)]);
    let at = |n: u64| VersionRef::new(clock(n), CacheId(1));
    let meta = |k: &str, n: u64, cut: VersionSet| {
        let keys = BTreeMap::from([(
            key(k),
            KeyMeta {
                clock: clock(n),
                cut,
            },
        )]);
        crate::meta::view_to_pb(&MetaView {
            cache: CacheId(1),
            keys,
        })
    };
    // a's cache holds x@1; b's holds y@1, which depends on x@2: the branches meet at c
    // with incompatible versions of x, so the simulation aborts at the fan-in.
    let a_keys = meta("x", 1, VersionSet::from([(key("x"), at(1))]));
    let b_keys = meta(
        "y",
        1,
        VersionSet::from([(key("y"), at(1)), (key("x"), at(2))]),
    );
    let none = (pb::RefTable::default(), Vec::new());
    let view = |s: &Spread, f: &str, keys: &(pb::RefTable, Vec<pb::HbKey>)| pb::HbView {
        run_id: 5,
        attempt: s.attempt(),
        function: f.into(),
        cache_id: 1,
        table: Some(keys.0.clone()),
        keys: keys.1.clone(),
    };
    let ok = |s: &Spread, f: &str| pb::FnDone {
        run_id: 5,
        attempt: s.attempt(),
        function: f.into(),
        result: Some(pb::fn_done::Result::Value(Bytes::from("r"))),
        meta: Some(pb::EdgeMeta::default()),
        writes: Vec::new(),
    };
    for sink_sent in [false, true] {
        let mut s = Spread::hb(5, vee(), keys.clone());
        for (f, h) in [("a", "h1"), ("b", "h2"), ("c", "h1")] {
            s.prepared(f, h);
        }
        assert_eq!(s.ready(), vec!["a", "b"]);
        s.placed("a", "h1");
        s.placed("b", "h2");
        // a finished before its cache's view came in: the view still counts.
        assert_eq!(s.done("h1", ok(&s, "a")), Event::Progress);
        if sink_sent {
            assert_eq!(s.done("h2", ok(&s, "b")), Event::Progress);
            assert_eq!(s.ready(), vec!["c"]);
            s.placed("c", "h1");
        }
        assert_eq!(s.hb_view("h2", view(&s, "a", &a_keys)), HbEvent::Stale);
        assert_eq!(s.hb_view("h1", view(&s, "a", &a_keys)), HbEvent::Waiting);
        assert_eq!(s.hb_view("h2", view(&s, "b", &b_keys)), HbEvent::Waiting);
        let event = s.hb_view("h1", view(&s, "c", &none));
        if sink_sent {
            // Too late to save anything: OPT goes on, and the next view is stale.
            assert!(matches!(event, HbEvent::TooLate(_)), "{event:?}");
            assert_eq!(s.hb_view("h1", view(&s, "c", &none)), HbEvent::Stale);
        } else {
            assert!(matches!(event, HbEvent::EarlyAbort(_)), "{event:?}");
            // The scheduler ends the attempt; CON reuses a's OPT result if it binds the
            // versions a read.
            s.restart();
            s.to_con();
            assert!(s.needs_prepare() && !s.needs_query());
        }
    }
}
