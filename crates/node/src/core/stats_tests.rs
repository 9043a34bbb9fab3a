//! The statistics a core keeps, driven on a manual clock: which accesses count where,
//! when windows close, occupancy and latency.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use super::{Core, Effect, PeerFailure, Routing, Token};
use crate::ack::Ack;
use crate::clock::{Clock, ManualClock};
use crate::op::{Condition, Op, OpResult};
use crate::shard::Route;

/// Two cores of one node on a manual clock (the fuzz targets' in-memory node).
fn two_workers() -> (Vec<Core>, Arc<ManualClock>) {
    let config = crate::fuzzing::config(false);
    let clock = Arc::new(ManualClock::new(crate::fuzzing::START_MS));
    let view = Arc::new(crate::view::ViewState::single_node(
        &config.node_id,
        2,
        config.vnodes,
        config.default_vector(),
    ));
    (crate::fuzzing::cores(2, view, clock.clone()), clock)
}

/// Delivers messages between the cores until none are left (the mesh, without loss).
fn deliver(cores: &mut [Core]) {
    let mut token = 0;
    let mut asked = std::collections::HashMap::new();
    loop {
        let mut quiet = true;
        for i in 0..cores.len() {
            for e in cores[i].take_effects() {
                quiet = false;
                match e {
                    Effect::Send { req, to, msg, .. } => {
                        token += 1;
                        asked.insert(token, (i, req));
                        let from = cores[i].me();
                        cores[to.worker as usize].on_peer(from, msg, Token(token));
                    }
                    Effect::Respond { token, result } => {
                        let (asker, req) = asked.remove(&token.0).expect("a known request");
                        cores[asker].on_reply(req, result.map_err(PeerFailure::Refused));
                    }
                    _ => {}
                }
            }
        }
        if quiet {
            return;
        }
    }
}

/// Ticks every core at every deadline until `until` (monotonic ms).
fn run_until(cores: &mut [Core], clock: &ManualClock, until: u64) {
    loop {
        let next = cores.iter().map(Core::next_deadline).min().unwrap_or(until);
        let now = clock.mono_ms();
        if next > until {
            clock.advance(until.saturating_sub(now));
            break;
        }
        clock.advance(next.saturating_sub(now));
        for c in cores.iter_mut() {
            c.tick();
        }
        deliver(cores);
    }
    for c in cores.iter_mut() {
        c.tick();
    }
    deliver(cores);
}

/// A key worker `w` holds.
fn key_of(core: &mut Core, prefix: &str) -> Bytes {
    (0..)
        .map(|i| Bytes::from(format!("{prefix}{i}")))
        .find(|k| core.shard_mut().route(k) == Route::Local)
        .expect("some key is local")
}

#[test]
fn accesses_count_at_the_worker_that_serves_them() {
    let (mut cores, clock) = two_workers();
    let here = key_of(&mut cores[0], "a");
    let there = key_of(&mut cores[1], "b");
    let put = |k: &Bytes| Op::Assign {
        key: k.clone(),
        value: Bytes::from_static(b"v"),
        condition: Condition::Always,
    };
    // Worker 0 serves `here` three times (fast path, zero-copy read, general path) and
    // forwards two ops on `there` to worker 1; a redirect serves nothing.
    assert!(cores[0]
        .try_local(put(&here), Ack::MERGED, Routing::Forward)
        .is_ok());
    assert!(cores[0].read_local(&here, |_| ()).is_some());
    cores[0].submit(
        vec![
            Op::Get { key: here.clone() },
            put(&there),
            Op::Get { key: there.clone() },
        ],
        Ack::MERGED,
        Routing::Forward,
    );
    deliver(&mut cores);
    let redirected = cores[0].try_local(
        Op::Get { key: there.clone() },
        Ack::MERGED,
        Routing::Redirect,
    );
    assert!(matches!(redirected, Ok(OpResult::Error(_))));
    assert_eq!(cores[0].window().seq, 0, "no window closed yet");
    let period = cores[0].config().stats.period_ms;
    let start = clock.mono_ms();
    run_until(&mut cores, &clock, start + period);
    let (w0, w1) = (cores[0].window(), cores[1].window());
    assert_eq!((w0.seq, w1.seq), (1, 1));
    assert_eq!(w0.accesses, 3);
    assert_eq!(w1.accesses, 2, "forwarded ops count where they ran");
    assert_eq!(w0.accessed_keys, 1);
    assert_eq!(w0.access_sum_squares, 9);
    assert_eq!(w0.hot_keys.len(), 1);
    assert_eq!(w0.hot_keys[0].key, here);
    assert_eq!(w0.hot_keys[0].accesses, 3);
    assert!(w0.memory_bytes > 0, "worker 0 holds a value");
    assert_eq!(w0.disk_bytes, None);
    // A window later, nothing is left.
    let window = cores[0].config().stats.window_ms;
    run_until(&mut cores, &clock, start + period + window);
    let w0 = cores[0].window();
    assert_eq!(w0.accesses, 0);
    assert!(w0.hot_keys.is_empty());
}

#[test]
fn occupancy_and_latency_follow_the_meter_and_the_driver() {
    let (mut cores, clock) = two_workers();
    let busy = Arc::new(AtomicU64::new(7_000));
    let meter = busy.clone();
    cores[0].set_busy_meter(Box::new(move || meter.load(Ordering::Relaxed)));
    let period = cores[0].config().stats.period_ms;
    let start = clock.mono_ms();
    // A fifth of the period busy, and 100 requests answered in 2 µs, one in 3 ms.
    busy.fetch_add(period * 200_000, Ordering::Relaxed);
    cores[0].record_latency(2_000, 100);
    cores[0].record_latency(3_000_000, 1);
    run_until(&mut cores, &clock, start + period);
    let w = cores[0].window();
    assert_eq!(w.seq, 1);
    assert_eq!(w.window_ms, period);
    assert!((w.occupancy - 0.2).abs() < 1e-9, "{}", w.occupancy);
    assert_eq!(w.latency.count(), 101);
    assert_eq!(w.latency.mean_ns(), (2_000 * 100 + 3_000_000) / 101);
    assert!((2_000..=2_125).contains(&w.latency.quantile_ns(0.5)));
    assert_eq!(
        w.latency.quantile_ns(0.999),
        3_000_000,
        "capped by the maximum"
    );
    // Worker 1 has no meter: occupancy unknown, reported 0.
    assert_eq!(cores[1].window().occupancy, 0.0);
    // An idle period halves the window's occupancy.
    run_until(&mut cores, &clock, start + 2 * period);
    let w = cores[0].window();
    assert_eq!(w.seq, 2);
    assert!((w.occupancy - 0.1).abs() < 1e-9, "{}", w.occupancy);
}
