//! The run: shared setup, load-generator threads, connections, the coordinator and the
//! progress line.
//!
//! Each thread runs a tokio current-thread runtime with a `LocalSet` of connection tasks
//! (connection `c` belongs to thread `c % threads`); the coordinator runs on the caller's
//! runtime, flips the [`Phase`] (warm-up, measure, stop), prints progress, and collects each
//! thread's [`ThreadStats`] through a oneshot channel.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use client::routing::Layout;
use lattice::Hlc;
use tokio::sync::oneshot;

use crate::args::{BenchArgs, Distribution, Protocol, WriteType};
use crate::error::BenchError;
use crate::keys::{Keys, Values};
use crate::report::{Latency, LoadReport, Report};
use crate::stats::{Control, Phase, ThreadStats};
use crate::workload::{Mix, OpKind, Slot};
use crate::zipf::KeyChooser;

/// Requests per connection in flight during the load phase (at least).
const LOAD_PIPELINE: usize = 32;
/// How often the coordinator looks at the run.
const TICK: Duration = Duration::from_millis(50);
/// How often the progress line is refreshed.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);
/// How long connections may take to finish their last round after the run stops.
const GRACE: Duration = Duration::from_secs(10);

/// Microseconds in `d`, rounded to the nearest.
#[inline]
pub(crate) fn micros(d: Duration) -> u64 {
    ((d.as_nanos() + 500) / 1000) as u64
}

/// Wall-clock milliseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn physical_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Mixes a seed with a stream number (SplitMix64's finaliser).
pub(crate) fn seed_for(seed: u64, stream: u64) -> u64 {
    let mut z = seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Marks a key whose worker is chosen per request (a key with several replicas).
const DYNAMIC: u32 = u32::MAX;

/// Where each key's requests go (native protocol).
#[derive(Debug)]
pub(crate) struct Route {
    /// Every worker address of the cluster (indexes below point into it).
    addrs: Vec<String>,
    /// Index of each address in `addrs`.
    index: std::collections::HashMap<String, u32>,
    /// Worker (address index) of each key id, or [`DYNAMIC`].
    key_worker: Vec<u32>,
    layout: Layout,
}

impl Route {
    /// Fetches the topology from the node's front port and places every key.
    async fn fetch(front: &str, keys: &Keys) -> Result<Route, BenchError> {
        let client = client::Client::connect(front).await?;
        let layout = Layout::clone(&client.layout());
        drop(client);
        let mut addrs: Vec<String> = Vec::new();
        let mut index = std::collections::HashMap::new();
        let mut key_worker = Vec::with_capacity(keys.len());
        for id in 0..keys.len() as u32 {
            let replicas = layout.replicas(keys.get(id));
            let w = match replicas.as_slice() {
                [r] => match layout.addr(*r) {
                    Some(addr) => *index.entry(addr.to_string()).or_insert_with(|| {
                        addrs.push(addr.to_string());
                        addrs.len() as u32 - 1
                    }),
                    None => DYNAMIC,
                },
                _ => {
                    for r in &replicas {
                        if let Some(addr) = layout.addr(*r) {
                            index.entry(addr.to_string()).or_insert_with(|| {
                                addrs.push(addr.to_string());
                                addrs.len() as u32 - 1
                            });
                        }
                    }
                    DYNAMIC
                }
            };
            key_worker.push(w);
        }
        if addrs.is_empty() {
            // A node without worker ports: everything goes to the front port.
            addrs.push(front.to_string());
        }
        Ok(Route {
            addrs,
            index,
            key_worker,
            layout,
        })
    }

    /// Number of worker addresses.
    pub(crate) fn workers(&self) -> usize {
        self.addrs.len()
    }

    /// Address of worker `w`.
    pub(crate) fn addr(&self, w: usize) -> &str {
        &self.addrs[w.min(self.addrs.len() - 1)]
    }

    /// The worker for key `id` (bytes `key`): its only replica, or (for a key replicated on
    /// several workers) one chosen by [`Layout::addr_for`].
    #[inline]
    pub(crate) fn worker(&self, id: u32, key: &[u8]) -> usize {
        let w = match self.key_worker.get(id as usize) {
            Some(&w) if w != DYNAMIC => w,
            _ => self
                .layout
                .addr_for(key)
                .and_then(|a| self.index.get(a).copied())
                .unwrap_or(0),
        };
        (w as usize).min(self.addrs.len() - 1)
    }
}

/// Everything the connections of a run share, read-only.
#[derive(Debug)]
pub(crate) struct Setup {
    pub protocol: Protocol,
    pub addr: String,
    pub keys: Keys,
    pub values: Values,
    pub chooser: KeyChooser,
    pub mix: Mix,
    pub write_type: WriteType,
    pub batch: usize,
    pub seed: u64,
    /// Native protocol only.
    pub route: Option<Route>,
    /// Session protocol: the sessions' level.
    pub level: client::Level,
}

impl Setup {
    /// The setup without a topology (RESP runs, tests).
    pub(crate) fn local(args: &BenchArgs, protocol: Protocol) -> Setup {
        let n = args.keys.clamp(1, u64::from(u32::MAX)) as u32;
        Setup {
            protocol,
            addr: args.address(),
            keys: Keys::new(n as usize, args.key_size),
            values: Values::new(args.value_size, args.seed),
            chooser: KeyChooser::new(n, args.distribution, args.zipf_theta, args.seed),
            mix: Mix::of(args.workload),
            write_type: args.write_type,
            batch: args.batch.max(1),
            seed: args.seed,
            route: None,
            level: client::Level::from_name(&args.level).unwrap_or(client::Level::Eventual),
        }
    }

    /// The full setup; for the native protocol this fetches the topology.
    async fn new(args: &BenchArgs) -> Result<Setup, BenchError> {
        let mut setup = Setup::local(args, args.protocol);
        if args.protocol == Protocol::Native {
            setup.route = Some(Route::fetch(&setup.addr, &setup.keys).await?);
        }
        Ok(setup)
    }
}

/// Client-side lattice state of a thread, for `PutMany` writes (`--batch` > 1).
#[derive(Debug)]
pub(crate) struct ClientLattice {
    hlc: Hlc,
    actor: u64,
    next_dot: u64,
    /// Cumulative increments of this thread's actor per key (counter writes only).
    counts: Vec<u64>,
}

impl ClientLattice {
    fn new(actor: u64, setup: &Setup) -> ClientLattice {
        let batched_counter = setup.batch > 1 && setup.write_type == WriteType::Counter;
        ClientLattice {
            hlc: Hlc::new(actor),
            actor,
            next_dot: 0,
            counts: if batched_counter {
                vec![0; setup.keys.len()]
            } else {
                Vec::new()
            },
        }
    }

    /// The numbers of the next write of `key`: LWW `(hlc time, writer)`, counter
    /// `(actor, cumulative increments)` after adding one, OR-set `(actor, fresh dot counter)`.
    pub(crate) fn next_write(&mut self, t: WriteType, key: u32, now_ms: u64) -> (u64, u64) {
        match t {
            WriteType::Lww => {
                let ts = self.hlc.tick(now_ms);
                (ts.time, ts.writer)
            }
            WriteType::Counter => {
                let total = match self.counts.get_mut(key as usize) {
                    Some(c) => {
                        *c += 1;
                        *c
                    }
                    None => 1,
                };
                (self.actor, total)
            }
            WriteType::Orset => {
                self.next_dot += 1;
                (self.actor, self.next_dot)
            }
        }
    }
}

/// Where a connection's operations come from.
#[derive(Debug)]
pub(crate) enum Source {
    /// The workload: `round` random operations per round.
    Random { rng: fastrand::Rng, round: usize },
    /// The load phase: writes of keys `next, next + step, …` below `end`.
    Load {
        next: u64,
        step: u64,
        end: u64,
        round: usize,
    },
}

impl Source {
    /// Replaces `slots` with the next round's operations; false when there are none.
    #[inline]
    pub(crate) fn fill(&mut self, setup: &Setup, slots: &mut Vec<Slot>) -> bool {
        slots.clear();
        match self {
            Source::Random { rng, round } => {
                for _ in 0..*round {
                    let key = setup.chooser.next(rng);
                    let kind = setup.mix.pick(rng);
                    slots.push(Slot::new(key, kind, rng.u16(..)));
                }
            }
            Source::Load {
                next,
                step,
                end,
                round,
            } => {
                while slots.len() < *round && *next < *end {
                    slots.push(Slot::new(*next as u32, OpKind::Write, *next as u16));
                    *next += *step;
                }
            }
        }
        !slots.is_empty()
    }
}

/// What a connection task works with.
pub(crate) struct ConnCtx {
    pub setup: Arc<Setup>,
    pub control: Arc<Control>,
    pub stats: Rc<RefCell<ThreadStats>>,
    pub lattice: Rc<RefCell<ClientLattice>>,
    pub source: Source,
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
            let ctx = ConnCtx {
                setup: setup.clone(),
                control: control.clone(),
                stats: stats.clone(),
                lattice: lattice.clone(),
                source,
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

/// The progress line on stderr.
struct Progress {
    enabled: bool,
    phase_start: Instant,
    last_print: Instant,
    last_completed: u64,
    /// Operations completed before this phase.
    base: u64,
    width: usize,
}

impl Progress {
    fn new(enabled: bool) -> Progress {
        let now = Instant::now();
        Progress {
            enabled,
            phase_start: now,
            last_print: now,
            last_completed: 0,
            base: 0,
            width: 0,
        }
    }

    /// Starts counting a new phase from `control`'s current count.
    fn restart(&mut self, control: &Control) {
        self.phase_start = Instant::now();
        self.last_print = self.phase_start;
        self.last_completed = control.completed();
        self.base = self.last_completed;
    }

    fn tick(&mut self, label: &str, control: &Control) {
        let now = Instant::now();
        let dt = now - self.last_print;
        if !self.enabled || dt < PROGRESS_EVERY {
            return;
        }
        let completed = control.completed();
        let rate = completed.saturating_sub(self.last_completed) as f64 / dt.as_secs_f64();
        self.last_print = now;
        self.last_completed = completed;
        let line = format!(
            "{label:<8} {:>6.1}s  {:>11} ops/s  {:>12} ops  {} errors",
            (now - self.phase_start).as_secs_f64(),
            group_digits(rate.round() as u64),
            group_digits(completed.saturating_sub(self.base)),
            control.errors(),
        );
        self.width = self.width.max(line.len());
        eprint!("\r{line:<w$}", w = self.width);
    }

    fn clear(&mut self) {
        if self.enabled && self.width > 0 {
            eprint!("\r{:w$}\r", "", w = self.width);
            self.width = 0;
        }
    }
}

/// `1234567` → `1,234,567`.
pub(crate) fn group_digits(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
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
    };
    progress.restart(&control);
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

/// The measured phase (after its warm-up).
async fn measure_phase(
    setup: &Arc<Setup>,
    args: &BenchArgs,
    progress: &mut Progress,
) -> Result<(ThreadStats, f64), BenchError> {
    let warmup = Duration::from_secs_f64(args.warmup);
    let initial = if warmup.is_zero() {
        Phase::Measure
    } else {
        Phase::Warmup
    };
    let control = Arc::new(Control::new(initial, args.ops));
    let plan = Plan {
        mode: Mode::Measure,
        connections: args.connections,
        threads: args.threads,
        round: args.pipeline * setup.batch,
    };
    progress.restart(&control);
    let receivers = spawn_threads(setup, &control, plan)?;
    let started = Instant::now();
    while control.phase() == Phase::Warmup {
        let left = warmup.saturating_sub(started.elapsed());
        if left.is_zero() {
            control.start_measuring();
            break;
        }
        tokio::time::sleep(left.min(TICK)).await;
        progress.tick("warmup", &control);
    }
    let measure_start = Instant::now();
    progress.restart(&control);
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
        tokio::time::sleep(sleep).await;
        progress.tick("measure", &control);
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
    Ok((stats, secs))
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
    let (stats, secs) = measure_phase(&setup, &args, &mut progress).await?;
    match (&stats.first_error, args.quiet) {
        (Some(e), false) if stats.errors > 0 => eprintln!(
            "note: {} measured operations got error replies; the first: {e}",
            stats.errors
        ),
        (Some(e), false) => eprintln!("note: error replies during the warm-up; the first: {e}"),
        _ => {}
    }
    let h = &stats.histogram;
    let latency = if h.is_empty() {
        Latency::default()
    } else {
        Latency {
            p50: h.value_at_quantile(0.5) as f64,
            p99: h.value_at_quantile(0.99) as f64,
            p999: h.value_at_quantile(0.999) as f64,
            max: h.max() as f64,
            mean: h.mean(),
        }
    };
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
        latency_us: latency,
        load,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(999), "999");
        assert_eq!(group_digits(1000), "1,000");
        assert_eq!(group_digits(1_234_567), "1,234,567");
        assert_eq!(micros(Duration::from_nanos(1499)), 1);
        assert_eq!(micros(Duration::from_nanos(1500)), 2);
        assert_ne!(seed_for(1, 0), seed_for(1, 1));
    }

    #[test]
    fn load_source_covers_every_key_once() {
        let args = BenchArgs {
            keys: 1000,
            ..BenchArgs::default()
        };
        let setup = Setup::local(&args, Protocol::Resp);
        let mut seen = vec![0u32; 1000];
        let mut slots = Vec::new();
        for c in 0..7 {
            let mut src = Source::Load {
                next: c,
                step: 7,
                end: 1000,
                round: 32,
            };
            while src.fill(&setup, &mut slots) {
                assert!(slots.len() <= 32);
                for s in &slots {
                    assert_eq!(s.kind, OpKind::Write);
                    seen[s.key as usize] += 1;
                }
            }
        }
        assert!(seen.iter().all(|&n| n == 1));
    }

    #[test]
    fn client_lattice_numbers() {
        let args = BenchArgs {
            keys: 10,
            batch: 4,
            protocol: Protocol::Native,
            write_type: WriteType::Counter,
            ..BenchArgs::default()
        };
        let setup = Setup::local(&args, Protocol::Native);
        let mut l = ClientLattice::new(77, &setup);
        assert_eq!(l.next_write(WriteType::Counter, 3, 0), (77, 1));
        assert_eq!(l.next_write(WriteType::Counter, 3, 0), (77, 2));
        assert_eq!(l.next_write(WriteType::Counter, 4, 0), (77, 1));
        assert_eq!(l.next_write(WriteType::Orset, 4, 0), (77, 1));
        assert_eq!(l.next_write(WriteType::Orset, 5, 0), (77, 2));
        let (t1, w) = l.next_write(WriteType::Lww, 0, 1000);
        let (t2, _) = l.next_write(WriteType::Lww, 0, 1000);
        assert_eq!(w, 77);
        assert!(t2 > t1 && t1 >= 1000 << 16);
    }
}
