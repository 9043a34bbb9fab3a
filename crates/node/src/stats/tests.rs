//! The recorder's estimates against exact counts of known streams.

use std::collections::HashMap;

use super::*;

fn config(period_ms: u64, window_ms: u64, hot_keys: usize) -> StatsConfig {
    let c = StatsConfig {
        period_ms,
        window_ms,
        hot_keys,
    };
    c.validate().expect("a valid test configuration");
    c
}

fn key(i: u32) -> Vec<u8> {
    format!("key:{i:08}").into_bytes()
}

/// `len` draws of ranks 0..n from a Zipf distribution of exponent `s`.
fn zipf(n: u32, s: f64, len: usize, seed: u64) -> Vec<u32> {
    let weights: Vec<f64> = (1..=n).map(|r| 1.0 / f64::from(r).powf(s)).collect();
    let total: f64 = weights.iter().sum();
    let mut cdf = Vec::with_capacity(n as usize);
    let mut acc = 0.0;
    for w in weights {
        acc += w / total;
        cdf.push(acc);
    }
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..len)
        .map(|_| {
            let u = rng.f64();
            cdf.partition_point(|&c| c < u).min(n as usize - 1) as u32
        })
        .collect()
}

/// The worst overestimate documented for a window of `n` accesses: e/1024 of them.
fn cm_bound(n: u64) -> u64 {
    (std::f64::consts::E * n as f64 / sketch::CM_WIDTH as f64).ceil() as u64
}

#[test]
fn a_zipf_stream_finds_the_true_top_keys_within_the_error_bound() {
    let mut r = Recorder::new(config(1_000, 10_000, 32), 7, 0);
    let stream = zipf(50_000, 1.0, 300_000, 1);
    let mut truth: HashMap<u32, u64> = HashMap::new();
    // Three periods of 100,000 accesses each.
    for (period, chunk) in stream.chunks(100_000).enumerate() {
        for &k in chunk {
            r.access(&key(k));
            *truth.entry(k).or_default() += 1;
        }
        r.close((period as u64 + 1) * 1_000, Gauges::default());
    }
    let w = r.window().clone();
    assert_eq!(w.seq, 3);
    assert_eq!(w.window_ms, 3_000);
    assert_eq!(w.accesses, 300_000);
    assert_eq!(w.hot_keys.len(), 32);
    let mut top: Vec<(u32, u64)> = truth.iter().map(|(&k, &c)| (k, c)).collect();
    top.sort_by_key(|b| std::cmp::Reverse(b.1));
    let reported: Vec<&[u8]> = w.hot_keys.iter().map(|h| &h.key[..]).collect();
    for (k, _) in &top[..10] {
        assert!(
            reported.contains(&&key(*k)[..]),
            "true top key {k} not reported"
        );
    }
    let bound = cm_bound(w.accesses);
    for h in &w.hot_keys {
        let rank: u32 = std::str::from_utf8(&h.key[4..]).unwrap().parse().unwrap();
        let t = truth[&rank];
        assert!(
            h.accesses >= t && h.accesses - t <= bound,
            "{rank}: {} vs true {t}",
            h.accesses
        );
    }
    assert!(
        w.hot_keys
            .windows(2)
            .all(|p| p[0].accesses >= p[1].accesses),
        "most accessed first"
    );
    // Distinct keys (3.3% standard error) and Σ count² (3.1% standard deviation): within
    // three standard deviations.
    let distinct = truth.len() as f64;
    let f2: f64 = truth.values().map(|&c| (c * c) as f64).sum();
    let err = |got: u64, want: f64| (got as f64 - want).abs() / want;
    assert!(
        err(w.accessed_keys, distinct) < 0.10,
        "{} vs {distinct}",
        w.accessed_keys
    );
    assert!(
        err(w.access_sum_squares, f2) < 0.095,
        "{} vs {f2}",
        w.access_sum_squares
    );
}

#[test]
fn the_distinct_and_sum_of_squares_estimates_hold_on_a_flat_stream() {
    let mut r = Recorder::new(config(1_000, 10_000, 32), 11, 0);
    // 20,000 keys accessed 1 to 5 times each, shuffled.
    let mut stream: Vec<u32> = (0..20_000u32)
        .flat_map(|k| std::iter::repeat_n(k, 1 + (k % 5) as usize))
        .collect();
    fastrand::Rng::with_seed(3).shuffle(&mut stream);
    for &k in &stream {
        r.access(&key(k));
    }
    r.close(1_000, Gauges::default());
    let w = r.window();
    let f2: u64 = (0..20_000u64).map(|k| (1 + k % 5).pow(2)).sum();
    assert_eq!(w.accesses, stream.len() as u64);
    let err = |got: u64, want: u64| (got as f64 - want as f64).abs() / want as f64;
    assert!(err(w.accessed_keys, 20_000) < 0.10, "{}", w.accessed_keys);
    assert!(
        err(w.access_sum_squares, f2) < 0.095,
        "{} vs {f2}",
        w.access_sum_squares
    );
    // No key stands out of the sketch's noise: none is reported hot.
    assert!(w.hot_keys.is_empty(), "{:?}", w.hot_keys);
}

#[test]
fn counts_fall_to_zero_once_a_key_was_not_accessed_for_a_window() {
    // Five periods of 100 ms.
    let mut r = Recorder::new(config(100, 500, 4), 5, 0);
    for _ in 0..1_000 {
        r.access(b"hot");
    }
    for i in 0..10_000 {
        r.access(&key(i));
    }
    r.latency(2_000, 11_000);
    r.close(100, Gauges::default());
    let w = r.window().clone();
    assert_eq!(w.hot_keys[0].key, Bytes::from_static(b"hot"));
    let hot = w.hot_keys[0].accesses;
    assert!((1_000..=1_000 + cm_bound(11_000)).contains(&hot), "{hot}");
    assert_eq!(w.latency.count(), 11_000);
    // Still in the window for four more periods…
    for t in 2..=5 {
        r.close(t * 100, Gauges::default());
        let w = r.window();
        assert_eq!(w.accesses, 11_000, "period {t}");
        assert_eq!(w.hot_keys[0].accesses, hot);
        assert_eq!(w.window_ms, t * 100);
    }
    // …then gone.
    r.close(600, Gauges::default());
    let w = r.window();
    assert_eq!(w.seq, 6);
    assert_eq!(w.window_ms, 500);
    assert_eq!(w.accesses, 0);
    assert_eq!(w.accessed_keys, 0);
    assert_eq!(w.access_sum_squares, 0);
    assert!(w.hot_keys.is_empty(), "{:?}", w.hot_keys);
    assert_eq!(w.latency.count(), 0);
    assert_eq!(w.latency.max_ns, 0);
}

#[test]
fn a_key_hot_in_every_period_stays_reported_as_the_window_slides() {
    let mut r = Recorder::new(config(100, 300, 2), 9, 0);
    for t in 1..=10u64 {
        for _ in 0..50 {
            r.access(b"steady");
        }
        for i in 0..200 {
            r.access(&key(t as u32 * 1_000 + i));
        }
        r.close(t * 100, Gauges::default());
        let w = r.window();
        let periods = t.min(3);
        assert_eq!(w.hot_keys[0].key, Bytes::from_static(b"steady"), "at {t}");
        assert!(w.hot_keys[0].accesses >= 50 * periods);
        assert_eq!(w.accesses, 250 * periods);
    }
}

#[test]
fn memory_stays_bounded_whatever_the_keys() {
    let c = config(100, 1_000, 32);
    assert!(c.memory_bytes() < 750 * 1024, "{}", c.memory_bytes());
    let mut r = Recorder::new(c.clone(), 1, 0);
    let mut rng = fastrand::Rng::with_seed(2);
    let mut buf = Vec::new();
    for t in 1..=15u64 {
        for _ in 0..40_000 {
            // Keys of 1 to 400 bytes, a tenth of them from a hot set of eight (two longer
            // than a hot key may be).
            buf.clear();
            let (n, len) = if rng.u8(..10) == 0 {
                let n = rng.u64(0..8);
                (n, 1 + (n * 53 % 400) as usize)
            } else {
                let n = rng.u64(..);
                (n, 1 + (n % 400) as usize)
            };
            buf.extend(std::iter::repeat_n(n as u8, len));
            buf.extend_from_slice(&n.to_le_bytes());
            r.access(&buf);
        }
        r.close(t * 100, Gauges::default());
        assert!(
            r.held_bytes() <= c.memory_bytes(),
            "{} > {}",
            r.held_bytes(),
            c.memory_bytes()
        );
        let w = r.window();
        assert!(w.hot_keys.len() <= 32);
        assert!(w.hot_keys.iter().all(|h| h.key.len() <= MAX_HOT_KEY_BYTES));
        assert!(!w.hot_keys.is_empty(), "the hot set stands out");
    }
}

#[test]
fn occupancy_is_busy_time_over_the_window_wall_time() {
    let mut r = Recorder::new(config(1_000, 2_000, 8), 1, 0);
    r.start_busy(5_000_000_000);
    let at = |busy_ms: u64| Gauges {
        busy_ns: Some(5_000_000_000 + busy_ms * 1_000_000),
        ..Gauges::default()
    };
    r.close(1_000, at(250));
    assert!((r.window().occupancy - 0.25).abs() < 1e-9);
    r.close(2_000, at(1_000));
    assert!(
        (r.window().occupancy - 0.5).abs() < 1e-9,
        "(250 + 750) / 2000"
    );
    // The first period leaves the window.
    r.close(3_000, at(1_100));
    assert!(
        (r.window().occupancy - 0.425).abs() < 1e-9,
        "(750 + 100) / 2000"
    );
    // Without a meter, occupancy reads 0.
    r.close(4_000, Gauges::default());
    assert_eq!(r.window().occupancy, 0.0);
}

#[test]
fn the_configuration_bounds_are_enforced() {
    assert!(StatsConfig::default().validate().is_ok());
    let bad = [
        (50, 500, 32),
        (1_000, 1_500, 32),
        (1_000, 61_000, 32),
        (1_000, 0, 32),
        (1_000, 10_000, 0),
        (1_000, 10_000, 2_000),
    ];
    for (period_ms, window_ms, hot_keys) in bad {
        let c = StatsConfig {
            period_ms,
            window_ms,
            hot_keys,
        };
        assert!(c.validate().is_err(), "{c:?} accepted");
    }
}

/// A recorder of 10 periods of 100 ms; `periods` closed after it saw `accesses`.
fn reused(periods: &[Vec<u32>]) -> Window {
    let mut r = Recorder::new(config(100, 1_000, 8), 13, 0);
    for (t, keys) in periods.iter().enumerate() {
        for &k in keys {
            r.access(&key(k));
        }
        r.close((t as u64 + 1) * 100, Gauges::default());
    }
    Window::clone(r.window())
}

#[test]
fn a_scan_touching_each_key_once_has_no_keys_accessed_twice() {
    // 40,000 keys (ten times what the sample tracks one by one), each once, over 8 periods.
    let keys: Vec<u32> = (0..40_000).collect();
    let w = reused(&keys.chunks(5_000).map(<[u32]>::to_vec).collect::<Vec<_>>());
    let err = |got: u64, want: f64| (got as f64 - want).abs() / want;
    assert!(err(w.accessed_keys, 40_000.0) < 0.10, "{}", w.accessed_keys);
    assert_eq!(w.reused_keys, 0, "a scan reuses nothing");
}

#[test]
fn keys_accessed_twice_count_in_full() {
    // Few keys: all tracked, exact. Each of 1,000 keys once in period 1, again in period 5.
    let few: Vec<u32> = (0..1_000).collect();
    let mut periods = vec![few.clone(), vec![], vec![], vec![], few.clone()];
    assert_eq!(reused(&periods).reused_keys, 1_000);
    // Accessed twice within one period counts too; a third period of other keys adds none.
    periods = vec![
        few.iter().flat_map(|&k| [k, k]).collect(),
        (5_000..6_000).collect(),
    ];
    assert_eq!(reused(&periods).reused_keys, 1_000);
    // Many keys: sampled. 40,000 keys each accessed twice (shuffled, over 4 periods) plus
    // 40,000 others once: about 40,000, within the sample's error.
    let mut stream: Vec<u32> = (0..40_000)
        .flat_map(|k| [k, k])
        .chain(100_000..140_000)
        .collect();
    fastrand::Rng::with_seed(4).shuffle(&mut stream);
    let w = reused(
        &stream
            .chunks(30_000)
            .map(<[u32]>::to_vec)
            .collect::<Vec<_>>(),
    );
    let got = w.reused_keys as f64;
    assert!((got - 40_000.0).abs() / 40_000.0 < 0.10, "{got}");
    assert!(
        w.accessed_keys as f64 > 1.5 * got,
        "{} distinct",
        w.accessed_keys
    );
}

#[test]
fn accesses_count_as_reused_only_while_both_are_in_the_window() {
    let few: Vec<u32> = (0..500).collect();
    // Once in period 1 and once in period 11: the first left the 10-period window.
    let mut periods = vec![few.clone()];
    periods.extend(std::iter::repeat_n(vec![], 9));
    periods.push(few.clone());
    assert_eq!(reused(&periods).reused_keys, 0);
    // Once in period 2 and once in period 11: both in it.
    periods[0] = vec![];
    periods[1] = few.clone();
    assert_eq!(reused(&periods).reused_keys, 500);
    // Twice in period 1, then nothing for ten periods: gone with the window.
    let mut r = Recorder::new(config(100, 1_000, 8), 13, 0);
    for &k in few.iter().chain(&few) {
        r.access(&key(k));
    }
    for t in 1..=10 {
        r.close(t * 100, Gauges::default());
        assert_eq!(r.window().reused_keys, 500, "period {t}");
    }
    r.close(1_100, Gauges::default());
    assert_eq!(r.window().reused_keys, 0);
}

#[test]
fn the_sample_grows_back_when_fewer_keys_are_accessed() {
    let mut r = Recorder::new(config(100, 300, 8), 17, 0);
    // 100,000 distinct keys: the sample thins out to stay within its bound.
    for i in 0..100_000 {
        r.access(&key(i));
    }
    r.close(100, Gauges::default());
    assert!(r.reuse.rate() < 0.1, "{}", r.reuse.rate());
    assert!(r.reuse.tracked() <= reuse::MAX_TRACKED);
    assert!(r.reuse.allocated_bytes() <= reuse::REUSE_BYTES);
    // Then 300 keys, each accessed twice per period: once the large load has left the
    // window, the sample tracks every key again and the count is exact.
    for t in 2..=40u64 {
        for i in 0..600 {
            r.access(&key(i / 2));
        }
        r.close(t * 100, Gauges::default());
    }
    assert_eq!(r.reuse.rate(), 1.0);
    assert_eq!(r.window().reused_keys, 300);
}
