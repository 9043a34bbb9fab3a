//! The run: load-generator threads, connections, the coordinator and the progress line
//! (what the connections share is in [`setup`](crate::setup)).
//!
//! Each thread runs a tokio current-thread runtime with a `LocalSet` of connection tasks
//! (connection `c` belongs to thread `c % threads`); the coordinator runs on the caller's
//! runtime, flips the [`Phase`] (warm-up, measure, stop), prints progress, and collects each
//! thread's [`ThreadStats`] through a oneshot channel.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::args::{BenchArgs, Distribution, Protocol};
use crate::error::BenchError;
use crate::pace::{round_period, Pacer};
use crate::progress::Progress;
use crate::report::{Latency, LoadReport, Report, Timeline, TimelinePoint};
use crate::setup::{ClientLattice, ConnCtx, Route, Setup, Source};
use crate::stats::{Control, Interval, Phase, ThreadStats};

/// Requests per connection in flight during the load phase (at least).
const LOAD_PIPELINE: usize = 32;
/// How often the coordinator looks at the run.
const TICK: Duration = Duration::from_millis(50);
/// How often the progress line is refreshed.
/// How long connections may take to finish their last round after the run stops.
const GRACE: Duration = Duration::from_secs(10);
/// `--follow-topology`: the key placement is fetched again this often…
const FOLLOW_EVERY: Duration = Duration::from_secs(1);
/// …and this soon after a connection saw a redirect or lost a worker, but not sooner after
/// the previous fetch (a cluster in the middle of a change redirects many requests).
const FOLLOW_MIN_GAP: Duration = Duration::from_millis(100);
/// Longest a topology fetch may take (the coordinator waits for it).
const FOLLOW_TIMEOUT: Duration = Duration::from_secs(2);

/// Refreshes the native route of a run that follows the topology.
struct Follower {
    last: Instant,
}

impl Follower {
    fn new() -> Follower {
        Follower {
            last: Instant::now(),
        }
    }

    /// Fetches the topology again if it is time to, or a connection asked and the last
    /// fetch is not too recent. A failed fetch keeps the current route (tried again later).
    async fn tick(&mut self, setup: &Setup) {
        let Some(routes) = setup.route.as_ref().filter(|_| setup.follow) else {
            return;
        };
        let since = self.last.elapsed();
        if since < FOLLOW_MIN_GAP || (since < FOLLOW_EVERY && !routes.take_stale()) {
            return;
        }
        self.last = Instant::now();
        let fetch = Route::fetch(&setup.addr, &setup.keys);
        if let Ok(Ok(route)) = tokio::time::timeout(FOLLOW_TIMEOUT, fetch).await {
            routes.replace(route);
        }
    }
}

/// The coordinator's wait between two looks at the run: `d`, or less if a connection asked
/// for a newer route (`--follow-topology`: connections wait for it to send operations again).
async fn pause(setup: &Setup, d: Duration) {
    match setup.route.as_ref().filter(|_| setup.follow) {
        Some(routes) => {
            tokio::select! {
                () = tokio::time::sleep(d) => {}
                () = routes.asked() => {}
            }
        }
        None => tokio::time::sleep(d).await,
    }
}

/// Mixes a seed with a stream number (SplitMix64's finaliser).
pub(crate) fn seed_for(seed: u64, stream: u64) -> u64 {
    let mut z = seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What the threads of one phase do.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// The measured workload.
    Measure,
    /// Load keys `0..keys`.
    Load { keys: u64 },
}

/// The shape of one phase's threads.
#[derive(Clone, Copy, Debug)]
struct Plan {
    mode: Mode,
    connections: usize,
    threads: usize,
    /// Operations per connection per round.
    round: usize,
    /// `--rate`: operations per second in all (None: closed loop).
    rate: Option<f64>,
}

async fn conn_main(mut ctx: ConnCtx) {
    let result = match ctx.setup.protocol {
        Protocol::Resp => crate::resp::run(&mut ctx).await,
        Protocol::Native => crate::native::run(&mut ctx).await,
        Protocol::Session => crate::session::run(&mut ctx).await,
    };
    if let Err(e) = result {
        let mut stats = ctx.stats.borrow_mut();
        if stats.failure.is_none() {
            stats.failure = Some(e);
        }
        ctx.control.fail();
    }
}

fn thread_main(
    setup: Arc<Setup>,
    control: Arc<Control>,
    plan: Plan,
    thread: usize,
    actor: u64,
) -> ThreadStats {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            control.fail();
            return ThreadStats {
                failure: Some(BenchError::Thread(format!("cannot start a runtime: {e}"))),
                ..ThreadStats::default()
            };
        }
    };
    let stats = Rc::new(RefCell::new(ThreadStats::default()));
    let lattice = Rc::new(RefCell::new(ClientLattice::new(actor, &setup)));
    let start = Instant::now();
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let mut tasks = Vec::new();
        for c in (thread..plan.connections).step_by(plan.threads) {
            let source = match plan.mode {
                Mode::Measure => Source::Random {
                    rng: fastrand::Rng::with_seed(seed_for(setup.seed, c as u64)),
                    round: plan.round,
                },
                Mode::Load { keys } => Source::Load {
                    next: c as u64,
                    step: plan.connections as u64,
                    end: keys,
                    round: plan.round,
                },
            };
            // Paced connections start staggered over one period, so rounds are spread out.
            let pacer = plan.rate.map(|rate| {
                let period = round_period(rate, plan.connections, plan.round);
                let offset = period.mul_f64(c as f64 / plan.connections as f64);
                Pacer::new(start + offset, period)
            });
            let ctx = ConnCtx {
                setup: setup.clone(),
                control: control.clone(),
                stats: stats.clone(),
                lattice: lattice.clone(),
                source,
                pacer,
            };
            tasks.push(tokio::task::spawn_local(conn_main(ctx)));
        }
        let all = async {
            for t in tasks {
                let _ = t.await;
            }
        };
        let stopped = async {
            while control.phase() != Phase::Stop {
                tokio::time::sleep(TICK).await;
            }
            tokio::time::sleep(GRACE).await;
        };
        tokio::select! {
            () = all => {}
            () = stopped => {}
        }
    });
    // Tasks still running after the grace period are dropped here, with the runtime.
    drop(local);
    drop(rt);
    let out = std::mem::take(&mut *stats.borrow_mut());
    out
}

/// Starts the threads of a phase; each sends its stats when done.
fn spawn_threads(
    setup: &Arc<Setup>,
    control: &Arc<Control>,
    plan: Plan,
) -> Result<Vec<oneshot::Receiver<ThreadStats>>, BenchError> {
    // Actor / writer ids of client-built lattice values: fresh each run, so cumulative
    // counter entries and dots never collide with an earlier run's.
    let actor_base = fastrand::u64(1..u64::MAX / 2);
    let mut receivers = Vec::with_capacity(plan.threads);
    for t in 0..plan.threads {
        let (tx, rx) = oneshot::channel();
        let (setup, control) = (setup.clone(), control.clone());
        std::thread::Builder::new()
            .name(format!("bench-{t}"))
            .spawn(move || {
                let stats = thread_main(setup, control, plan, t, actor_base + t as u64);
                let _ = tx.send(stats);
            })
            .map_err(|e| BenchError::Thread(format!("cannot spawn: {e}")))?;
        receivers.push(rx);
    }
    Ok(receivers)
}

/// Waits for every thread's stats, refreshing the progress line meanwhile.
async fn collect(
    receivers: Vec<oneshot::Receiver<ThreadStats>>,
    control: &Control,
    progress: &mut Progress,
    label: &str,
) -> Result<ThreadStats, BenchError> {
    let mut total = ThreadStats::default();
    for mut rx in receivers {
        let stats = loop {
            tokio::select! {
                r = &mut rx => break r,
                () = tokio::time::sleep(TICK) => progress.tick(label, control),
            }
        };
        match stats {
            Ok(s) => total.merge(s),
            Err(_) => {
                control.fail();
                return Err(BenchError::Thread(
                    "a load-generator thread panicked".into(),
                ));
            }
        }
    }
    Ok(total)
}

/// The load phase: writes keys `0..n` with pipelined writes.
async fn load_phase(
    setup: &Arc<Setup>,
    args: &BenchArgs,
    n: u64,
    progress: &mut Progress,
) -> Result<LoadReport, BenchError> {
    let control = Arc::new(Control::new(Phase::Measure, None));
    let connections = args.connections.min(n as usize).max(1);
    let plan = Plan {
        mode: Mode::Load { keys: n },
        connections,
        threads: args.threads.min(connections),
        round: args.pipeline.max(LOAD_PIPELINE) * setup.batch,
        rate: None,
    };
    progress.restart("load", &control, Some(n));
    let start = Instant::now();
    let receivers = spawn_threads(setup, &control, plan)?;
    let stats = collect(receivers, &control, progress, "load").await;
    let secs = start.elapsed().as_secs_f64();
    progress.clear();
    let stats = stats?;
    if let Some(e) = stats.failure {
        return Err(e);
    }
    if stats.errors > 0 {
        return Err(BenchError::Load {
            errors: stats.errors,
            keys: n,
            first: stats.first_error.unwrap_or_default(),
        });
    }
    Ok(LoadReport {
        keys: n,
        secs,
        ops_per_sec: n as f64 / secs.max(1e-9),
    })
}

/// What the measured phase returns: the merged stats, its length in seconds and, with a
/// timeline, the wall-clock ms when it began.
type Measured = (ThreadStats, f64, u64);

/// The measured phase (after its warm-up).
async fn measure_phase(
    setup: &Arc<Setup>,
    args: &BenchArgs,
    progress: &mut Progress,
) -> Result<Measured, BenchError> {
    let warmup = Duration::from_secs_f64(args.warmup);
    let initial = if warmup.is_zero() {
        Phase::Measure
    } else {
        Phase::Warmup
    };
    let mut control = Control::new(initial, args.ops);
    if let Some(t) = args.timeline {
        control = control.with_timeline(Duration::from_secs_f64(t));
    }
    let control = Arc::new(control);
    let plan = Plan {
        mode: Mode::Measure,
        connections: args.connections,
        threads: args.threads,
        round: args.pipeline * setup.batch,
        rate: args.rate,
    };
    progress.restart("warmup", &control, None);
    let mut follower = Follower::new();
    let receivers = spawn_threads(setup, &control, plan)?;
    let started = Instant::now();
    while control.phase() == Phase::Warmup {
        let left = warmup.saturating_sub(started.elapsed());
        if left.is_zero() {
            control.start_measuring();
            break;
        }
        pause(setup, left.min(TICK)).await;
        progress.tick("warmup", &control);
        follower.tick(setup).await;
    }
    let measure_start = Instant::now();
    // The wall clock when the control's measured phase began (it flipped just before).
    let began = control.measure_started_at().unwrap_or(measure_start);
    let start_unix_ms = crate::clock::physical_ms()
        .saturating_sub(measure_start.saturating_duration_since(began).as_millis() as u64);
    progress.restart("measure", &control, args.ops);
    let deadline = match args.ops {
        Some(_) => None,
        None => Some(measure_start + Duration::from_secs_f64(args.duration)),
    };
    while control.phase() == Phase::Measure {
        let now = Instant::now();
        let sleep = match deadline {
            Some(d) if now >= d => break,
            Some(d) => (d - now).min(TICK),
            None => TICK,
        };
        pause(setup, sleep).await;
        progress.tick("measure", &control);
        follower.tick(setup).await;
    }
    let end = control.target_reached_at().unwrap_or_else(Instant::now);
    control.set_phase(Phase::Stop);
    let secs = end.saturating_duration_since(measure_start).as_secs_f64();
    let stats = collect(receivers, &control, progress, "stopping").await;
    progress.clear();
    let stats = stats?;
    if let Some(e) = stats.failure {
        return Err(e);
    }
    Ok((stats, secs, start_unix_ms))
}

/// The latency summary of a histogram (zeros if it is empty).
fn latency_of(h: &hdrhistogram::Histogram<u64>) -> Latency {
    if h.is_empty() {
        return Latency::default();
    }
    Latency {
        p50: h.value_at_quantile(0.5) as f64,
        p99: h.value_at_quantile(0.99) as f64,
        p999: h.value_at_quantile(0.999) as f64,
        max: h.max() as f64,
        mean: h.mean(),
    }
}

/// The timeline of a run of `secs` measured seconds cut into `interval`-second intervals:
/// one point per interval up to the end of the run (intervals without a completed round
/// included), the last one ending with the run.
pub(crate) fn timeline(
    intervals: &[Interval],
    interval: f64,
    secs: f64,
    start_unix_ms: u64,
) -> Timeline {
    let count = ((secs / interval).ceil() as usize)
        .max(intervals.len())
        .max(1);
    let empty = Interval::default();
    let points = (0..count)
        .map(|i| {
            let it = intervals.get(i).unwrap_or(&empty);
            let begin = i as f64 * interval;
            let end = ((i + 1) as f64 * interval).min(secs.max(begin));
            let len = end - begin;
            TimelinePoint {
                end_secs: end,
                ops: it.ops,
                ops_per_sec: if len > 0.0 { it.ops as f64 / len } else { 0.0 },
                errors: it.errors,
                resent: it.resent,
                latency_us: latency_of(&it.histogram),
            }
        })
        .collect();
    Timeline {
        interval_secs: interval,
        start_unix_ms,
        points,
    }
}

/// Runs the benchmark described by `args`: optional load phase, warm-up, measured phase.
pub(crate) async fn run(args: BenchArgs) -> Result<Report, BenchError> {
    args.validate()?;
    let setup = Arc::new(Setup::new(&args).await?);
    let mut progress = Progress::new(!args.quiet);
    let load = match args.load_keys() {
        0 => None,
        n => Some(load_phase(&setup, &args, n, &mut progress).await?),
    };
    let (stats, secs, start_unix_ms) = measure_phase(&setup, &args, &mut progress).await?;
    match (&stats.first_error, args.quiet) {
        (Some(e), false) if stats.errors > 0 => eprintln!(
            "note: {} measured operations got error replies; the first: {e}",
            stats.errors
        ),
        (Some(e), false) => eprintln!("note: error replies during the warm-up; the first: {e}"),
        _ => {}
    }
    let latency = latency_of(&stats.histogram);
    let timeline = args
        .timeline
        .map(|t| timeline(&stats.timeline, t, secs, start_unix_ms));
    Ok(Report {
        protocol: args.protocol,
        workload: args.workload,
        distribution: args.distribution,
        zipf_theta: match args.distribution {
            Distribution::Zipf => args.zipf_theta,
            Distribution::Uniform => 0.0,
        },
        keys: args.keys,
        value_size: args.value_size,
        connections: args.connections,
        pipeline: args.pipeline,
        batch: args.batch,
        threads: args.threads,
        duration_secs: secs,
        ops: stats.ops,
        ops_per_sec: stats.ops as f64 / secs.max(1e-9),
        errors: stats.errors,
        resends: stats.resends,
        latency_us: latency,
        load,
        timeline,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_for_separates_streams() {
        assert_ne!(seed_for(1, 0), seed_for(1, 1));
    }

    #[test]
    fn timeline_points_cover_the_run() {
        let mut a = Interval::default();
        for us in [10, 20, 30, 40] {
            a.histogram.record(us).unwrap();
        }
        a.ops = 4;
        let mut c = Interval::default();
        c.histogram.record(1_000).unwrap();
        c.ops = 1;
        c.errors = 1;
        // 1.2 s in 0.5 s intervals: the third is 0.2 s long; the second saw nothing.
        let t = timeline(&[a, Interval::default(), c], 0.5, 1.2, 42);
        assert_eq!(
            (t.interval_secs, t.start_unix_ms, t.points.len()),
            (0.5, 42, 3)
        );
        let ends: Vec<f64> = t.points.iter().map(|p| p.end_secs).collect();
        assert_eq!(ends, [0.5, 1.0, 1.2]);
        assert_eq!(t.points[0].ops_per_sec, 8.0);
        assert_eq!(t.points[0].latency_us.mean, 25.0);
        assert_eq!(t.points[0].latency_us.max, 40.0);
        assert_eq!((t.points[1].ops, t.points[1].latency_us.mean), (0, 0.0));
        assert!((t.points[2].ops_per_sec - 5.0).abs() < 1e-9);
        assert_eq!(t.points[2].errors, 1);
        // A run whose last intervals saw no round still gets a point for each of them.
        let t = timeline(&[], 0.5, 1.0, 0);
        assert_eq!(t.points.len(), 2);
    }
}
