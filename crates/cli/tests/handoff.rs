//! Hand-off between real `latticekv server` processes on 127.0.0.1 (free ports): a
//! recipient that crashes right after acknowledging, the same crash against a sender
//! broken on purpose (`LATTICEKV_FAULT=drop-after-first-ack`) to show the check catches
//! it, and a leave under write load.

mod common;

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use client::routing::Layout;
use common::cluster::*;
use common::{eventually, serial, Native, NodeProc};
use wire::convert::value_to_pb;
use wire::pb::{self, request::Op, response::Result as R};

// ---- a hand-off recipient that crashes right after acknowledging --------------------------

/// The fault that makes a node abort right after it acknowledged its first hand-off batch,
/// as a `kill -9` at the worst moment for the sender would.
const ABORT_AFTER_ACK: (&str, &str) = ("LATTICEKV_FAULT", "abort-after-handoff-ack");

/// The fault that makes a sender drop a handed-off key once the first of its new replicas
/// acknowledged it, instead of all of them (a deliberate bug).
const DROP_AFTER_FIRST_ACK: (&str, &str) = ("LATTICEKV_FAULT", "drop-after-first-ack");

fn assert_aborted(status: ExitStatus, who: &str) {
    assert_eq!(
        status.signal(),
        Some(libc::SIGABRT),
        "{who} should have aborted right after acknowledging a hand-off batch, it exited \
         with {status}"
    );
}

/// Waits until every one of `nodes` sees member `id` as dead.
fn wait_dead(nodes: &[&NodeProc], id: &str) {
    for n in nodes {
        assert!(
            eventually(Duration::from_secs(20), || status_of(n, id)
                == Some(pb::NodeStatus::Dead)),
            "{} does not see {id} dead: {:?}",
            n.native,
            status_of(n, id)
        );
    }
}

/// Replication 1: a node `c` joins two nodes holding 2,000 keys, acknowledges the first
/// batch of keys handed to it (durably: it has a write-ahead log), and aborts. The senders
/// dropped the keys it acknowledged, and kept the others. So once `c` is declared dead the
/// survivors miss only keys placed on `c`; restarted on its data directory (without the
/// fault), `c` brings them back, and every key is readable with its value.
#[test]
fn a_hand_off_recipient_killed_right_after_acknowledging_loses_no_key() {
    let _serial = serial();
    let f = flags("1", "3000");
    let nodes = cluster(&["a", "b"], &f, &[]);
    let survivors: Vec<&NodeProc> = nodes.iter().collect();
    let keys = keys("key", 2_000);
    write_all(nodes[0].native, &keys);
    assert!(unreadable(nodes[0].native, &keys).is_empty());

    let data = tempfile::tempdir().unwrap();
    let dir = data.path().to_str().unwrap().to_string();
    let c_flags = with(&f, &["--data-dir", &dir]);
    let mut c = NodeProc::server_env("c", Some(nodes[0].native), &c_flags, &[ABORT_AFTER_ACK]);
    assert_aborted(wait_exit(&mut c, Duration::from_secs(20)), "c");
    drop(c);

    // The ring settles without c.
    wait_dead(&survivors, "c");
    let missing = unreadable(nodes[0].native, &keys);
    eprintln!(
        "{} keys only on the crashed recipient's disk while it is down",
        missing.len()
    );
    // The senders dropped what c acknowledged (its answer goes out 20 ms before it
    // aborts): what follows is a recovery from c's disk, not a no-op.
    assert!(
        !missing.is_empty(),
        "the survivors still hold every key: the crash came before any acknowledgement \
         reached a sender"
    );

    // c comes back on its data directory, without the fault.
    let c = NodeProc::server("c", Some(nodes[0].native), &c_flags);
    let all: Vec<&NodeProc> = vec![&nodes[0], &nodes[1], &c];
    for n in &all {
        assert!(
            eventually(Duration::from_secs(20), || alive_members(n) == 3),
            "{} does not see c back",
            n.native
        );
    }
    // What the survivors missed is what c had acknowledged: keys placed on c.
    let layout = Layout::from_topology(&topology(nodes[0].native));
    let on_c: BTreeSet<String> = c.workers.iter().map(|w| w.to_string()).collect();
    for &i in &missing {
        let owners: Vec<String> = layout
            .replicas(keys[i].as_bytes())
            .into_iter()
            .map(|r| layout.addr(r).unwrap().to_string())
            .collect();
        assert!(
            owners.iter().all(|o| on_c.contains(o)),
            "{} was lost by the survivors though it is not placed on c: {owners:?}",
            keys[i]
        );
    }
    let mut bad = Vec::new();
    let ok = eventually(Duration::from_secs(20), || {
        bad = unreadable(nodes[0].native, &keys);
        bad.is_empty()
    });
    assert!(
        ok,
        "{} keys unreadable after the recipient came back, e.g. {:?}",
        bad.len(),
        bad.iter().take(5).map(|&i| &keys[i]).collect::<Vec<_>>()
    );
}

/// Two nodes `a` and `d` hold 2,000 keys at replication 2; `d` is killed, and while it is
/// not yet declared dead a node `c` joins, acknowledges its first hand-off batch and
/// aborts. The keys that moved from {a, d} to {c, d} went from `a` to both `c` and `d`:
/// `a` must keep each until both acknowledged — `d` never does — so once `c` and `d` are
/// declared dead every key is still on `a`. Returns the keys (indexes) that are not
/// readable with their value from `a` then: the check.
fn crash_a_recipient_during_hand_off(sender_env: &[(&str, &str)], keys: &[String]) -> Vec<usize> {
    // Long enough a failure timeout that `d` is still in the ring when `c` joins.
    let f = flags("2", "4000");
    let mut nodes = cluster(&["a", "d"], &f, sender_env);
    write_all(nodes[0].native, keys);
    let both: Vec<&NodeProc> = nodes.iter().collect();
    assert!(
        eventually(Duration::from_secs(20), || replica_counts(&both, keys)
            .values()
            .all(|&n| n == 2)),
        "not every key reached its 2 replicas"
    );
    let mut d = nodes.pop().unwrap();
    let _ = d.child.kill();
    let _ = d.child.wait();
    let a = &nodes[0];
    let mut c = NodeProc::server_env("c", Some(a.native), &f, &[ABORT_AFTER_ACK]);
    // Only a hand-off batch makes c abort, and `a` hands keys off to c only if `d` is
    // still in its ring (with a and c alone, `a` replicates every key): so this also
    // shows the crash came while d was a replica.
    assert_aborted(wait_exit(&mut c, Duration::from_secs(20)), "c");
    drop(c);
    wait_dead(&[a], "c");
    wait_dead(&[a], "d");
    let mut lost = Vec::new();
    eventually(Duration::from_secs(5), || {
        lost = unreadable(a.native, keys);
        lost.is_empty()
    });
    lost
}

/// The deliberate break: the same crash as in [`crash_a_recipient_during_hand_off`], once
/// with a correct sender and once with a sender started with
/// `LATTICEKV_FAULT=drop-after-first-ack`. The correct one loses nothing; the broken one
/// drops the keys `c` acknowledged though `d` never did, and they are gone for good (`a`,
/// the only process left, holds none of them). The same check passes on correct code and
/// fails on broken code.
///
/// The loss is deterministic: every hand-off batch `a` sends to `c` carries keys whose
/// other new replica is the dead `d` (the keys leaving `a` are exactly those moving from
/// {a, d} to {c, d}), and `c` aborts only after acknowledging such a batch.
#[test]
fn a_deliberately_broken_hand_off_loses_keys_and_the_check_sees_it() {
    let _serial = serial();
    let keys = keys("key", 2_000);
    let lost = crash_a_recipient_during_hand_off(&[], &keys);
    assert!(
        lost.is_empty(),
        "a correct sender lost {} keys, e.g. {:?}",
        lost.len(),
        lost.iter().take(5).map(|&i| &keys[i]).collect::<Vec<_>>()
    );
    let lost = crash_a_recipient_during_hand_off(&[DROP_AFTER_FIRST_ACK], &keys);
    eprintln!(
        "the broken sender lost {} of {} keys",
        lost.len(),
        keys.len()
    );
    assert!(
        !lost.is_empty(),
        "the sender broken on purpose lost no key: the check would not catch the bug"
    );
}

// ---- a leave under write load ------------------------------------------------------------

/// Three nodes at replication 1 hold 2,000 keys; a writer keeps writing new keys through
/// the first node while the third leaves (`latticekv leave`), and goes on after it exited.
/// The leave succeeds, the node exits with success, and every key acknowledged to the
/// writer — before, during and after the leave — is on exactly one remaining node and
/// readable with its value.
#[test]
fn a_leave_under_load_hands_off_every_key() {
    let _serial = serial();
    let f = flags("1", "3000");
    let mut nodes = cluster(&["n1", "n2", "n3"], &f, &[]);
    let before = keys("key", 2_000);
    write_all(nodes[0].native, &before);
    let mut leaving = nodes.pop().unwrap();
    let held: usize = holders(&[&leaving], &before)
        .values()
        .map(BTreeSet::len)
        .sum();
    assert!(held > 300, "the leaving node held {held} keys");

    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicUsize::new(0));
    let writer = {
        let (stop, acked) = (stop.clone(), acked.clone());
        let front = nodes[0].native;
        std::thread::spawn(move || {
            let mut c = Native::connect(front);
            let (mut ok, mut errors) = (Vec::new(), Vec::new());
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let resp = c.call(Op::Put(pb::Put {
                    key: format!("live:{i:06}").into(),
                    value: Some(value_to_pb(&value(i))),
                }));
                match resp.result {
                    Some(R::Ack(_)) => {
                        ok.push(i);
                        acked.fetch_add(1, Ordering::Relaxed);
                    }
                    other => errors.push(format!("live:{i:06}: {other:?}")),
                }
                i += 1;
            }
            (ok, errors)
        })
    };
    assert!(
        eventually(Duration::from_secs(10), || acked.load(Ordering::Relaxed)
            >= 100),
        "the writer does not get going"
    );
    let at_leave = acked.load(Ordering::Relaxed);
    let started = Instant::now();
    let out = leaving.cli(&["leave", "--addr", &leaving.native.to_string()]);
    assert!(
        out.status.success(),
        "leave: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let during = acked.load(Ordering::Relaxed) - at_leave;
    let status = wait_exit(&mut leaving, Duration::from_secs(15));
    eprintln!(
        "leave took {:?}; {during} writes acknowledged meanwhile",
        started.elapsed()
    );
    assert!(status.success(), "the node that left exited with {status}");
    // Writes go on after it is gone.
    let at_exit = acked.load(Ordering::Relaxed);
    assert!(
        eventually(Duration::from_secs(10), || acked.load(Ordering::Relaxed)
            >= at_exit + 100),
        "writes stalled after the leave"
    );
    stop.store(true, Ordering::Relaxed);
    let (ok, errors) = writer.join().unwrap();
    assert!(during > 0, "no write was acknowledged during the leave");
    assert!(
        errors.is_empty(),
        "{} writes failed, e.g. {:?}",
        errors.len(),
        &errors[..errors.len().min(3)]
    );

    let live: Vec<(String, usize)> = ok.iter().map(|&i| (format!("live:{i:06}"), i)).collect();
    let mut items: Vec<(String, usize)> = before.iter().cloned().zip(0..).collect();
    items.extend(live);
    let all_keys: Vec<String> = items.iter().map(|(k, _)| k.clone()).collect();
    let rest: Vec<&NodeProc> = nodes.iter().collect();
    let mut bad = Vec::new();
    let settled = eventually(Duration::from_secs(20), || {
        bad = unreadable_items(nodes[0].native, &items);
        bad.is_empty() && replica_counts(&rest, &all_keys).values().all(|&n| n == 1)
    });
    let counts = replica_counts(&rest, &all_keys);
    assert!(
        settled,
        "{} of {} acknowledged keys unreadable (e.g. {:?}); {} not on exactly one node",
        bad.len(),
        items.len(),
        bad.iter().take(5).map(|&i| &items[i].0).collect::<Vec<_>>(),
        counts.values().filter(|&&n| n != 1).count()
    );
    for n in &nodes {
        assert_eq!(status_of(n, "n3"), Some(pb::NodeStatus::Left));
    }
}
