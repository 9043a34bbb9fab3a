//! What the connection drivers (`resp`, `native`, `session`) share with the runner: the
//! run's read-only [`Setup`] (with the native protocol's [`Route`]), a thread's
//! [`ClientLattice`], and a connection's [`ConnCtx`] and operation [`Source`].

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use client::routing::Layout;
use lattice::Hlc;

use crate::args::{BenchArgs, Protocol, WriteType};
use crate::error::BenchError;
use crate::keys::{Keys, Values};
use crate::pace::Pacer;
use crate::stats::{Control, Phase, ThreadStats};
use crate::workload::{Mix, OpKind, Slot};
use crate::zipf::KeyChooser;

/// Marks a key whose worker is chosen per request (a key with several replicas).
/// In [`Route::key_worker`]: a key placed on several workers (one is chosen per request).
const DYNAMIC: u32 = u32::MAX;
/// In [`Route::key_worker`]: a key not placed yet.
const UNPLACED: u32 = 0;

#[derive(Debug)]
pub(crate) struct Route {
    /// Every worker address of the cluster (indexes below point into it).
    addrs: Vec<String>,
    /// Index of each address in `addrs`.
    index: std::collections::HashMap<String, u32>,
    /// Per key id: its worker + 1, [`DYNAMIC`], or [`UNPLACED`]. Filled as keys are
    /// used, not when the route is fetched: a run that follows the topology waits for a
    /// new route at every join or leave, and placing a million keys up front took
    /// ~0.4 s (every connection with a redirected operation waited that long).
    key_worker: Vec<AtomicU32>,
    layout: Layout,
}

impl Route {
    /// Fetches the topology from the node's front port (keys are placed on first use).
    pub(crate) async fn fetch(front: &str, keys: &Keys) -> Result<Route, BenchError> {
        let client = client::Client::connect(front).await?;
        let layout = Layout::clone(&client.layout());
        drop(client);
        let mut addrs: Vec<String> = layout
            .worker_addrs()
            .into_iter()
            .map(str::to_string)
            .collect();
        if addrs.is_empty() {
            // A node without worker ports: everything goes to the front port.
            addrs.push(front.to_string());
        }
        let index = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| (a.clone(), i as u32))
            .collect();
        let key_worker = (0..keys.len()).map(|_| AtomicU32::new(UNPLACED)).collect();
        Ok(Route {
            addrs,
            index,
            key_worker,
            layout,
        })
    }

    /// Places key `key` under this route: its only serving replica's worker + 1, or
    /// [`DYNAMIC`] (several serving replicas, or one whose address is unknown).
    fn place(&self, key: &[u8]) -> u32 {
        // Requests go to serving replicas only (memory, else disk): a key with one of
        // those has a fixed worker whatever its disk replicas.
        match self.layout.serving_replicas(key).as_slice() {
            [r] => self
                .layout
                .addr(*r)
                .and_then(|a| self.index.get(a))
                .map_or(DYNAMIC, |&w| w + 1),
            _ => DYNAMIC,
        }
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
        let placed = match self.key_worker.get(id as usize) {
            Some(slot) => match slot.load(Ordering::Relaxed) {
                UNPLACED => {
                    // Two threads placing one key store the same value.
                    let w = self.place(key);
                    slot.store(w, Ordering::Relaxed);
                    w
                }
                w => w,
            },
            None => DYNAMIC,
        };
        let w = match placed {
            DYNAMIC => self
                .layout
                .addr_for(key)
                .and_then(|a| self.index.get(a).copied())
                .unwrap_or(0),
            w => w - 1,
        };
        (w as usize).min(self.addrs.len() - 1)
    }
}

/// The native protocol's current [`Route`], replaced while the run goes when it follows the
/// topology (`--follow-topology`).
#[derive(Debug)]
pub(crate) struct Routes {
    current: RwLock<Arc<Route>>,
    /// +1 per replacement: a connection compares it with the route it holds (one atomic
    /// load per round).
    generation: AtomicU64,
    /// A connection saw a redirect or lost a worker: refresh soon.
    stale: AtomicBool,
    /// Wakes the connections waiting for a newer route ([`newer_than`](Self::newer_than)).
    changed: tokio::sync::Notify,
    /// Wakes the coordinator when a refresh is asked for ([`asked`](Self::asked)).
    asked: tokio::sync::Notify,
}

impl Routes {
    pub(crate) fn new(route: Route) -> Routes {
        Routes {
            current: RwLock::new(Arc::new(route)),
            generation: AtomicU64::new(0),
            stale: AtomicBool::new(false),
            changed: tokio::sync::Notify::new(),
            asked: tokio::sync::Notify::new(),
        }
    }

    /// The generation of the current route.
    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The current route and its generation.
    pub(crate) fn current(&self) -> (u64, Arc<Route>) {
        let route = match self.current.read() {
            Ok(r) => r.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        // Read after the route: a generation newer than the route only makes the
        // connection look again next round.
        (self.generation(), route)
    }

    /// Installs a freshly fetched route.
    pub(crate) fn replace(&self, route: Route) {
        let route = Arc::new(route);
        match self.current.write() {
            Ok(mut r) => *r = route,
            Err(poisoned) => *poisoned.into_inner() = route,
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_waiters();
    }

    /// Asks for a refresh and waits until a route newer than `generation` is installed, or
    /// `bound` passed (the fetch failed or is slow: the caller goes on with what it has).
    /// Works from any runtime: the route is replaced by the coordinator's.
    pub(crate) async fn newer_than(&self, generation: u64, bound: Duration) {
        let changed = self.changed.notified();
        tokio::pin!(changed);
        // Registered before the generation is read: a replacement in between still wakes it.
        changed.as_mut().enable();
        if self.generation() != generation {
            return;
        }
        self.mark_stale();
        let _ = tokio::time::timeout(bound, changed).await;
    }

    /// Asks for a refresh (a redirect, or a worker connection lost).
    pub(crate) fn mark_stale(&self) {
        self.stale.store(true, Ordering::Release);
        self.asked.notify_one();
    }

    /// Resolves when a refresh was asked for (at once if one was asked since the last
    /// call), so the coordinator fetches without waiting for its next tick.
    pub(crate) async fn asked(&self) {
        self.asked.notified().await;
    }

    /// Whether a refresh was asked for since the last call.
    pub(crate) fn take_stale(&self) -> bool {
        self.stale.swap(false, Ordering::AcqRel)
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
    pub route: Option<Routes>,
    /// Native protocol: follow topology changes (`--follow-topology`).
    pub follow: bool,
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
            follow: args.follow_topology && protocol == Protocol::Native,
            level: client::Level::from_name(&args.level).unwrap_or(client::Level::Eventual),
        }
    }

    /// The full setup; for the native protocol this fetches the topology.
    pub(crate) async fn new(args: &BenchArgs) -> Result<Setup, BenchError> {
        let mut setup = Setup::local(args, args.protocol);
        if args.protocol == Protocol::Native {
            setup.route = Some(Routes::new(Route::fetch(&setup.addr, &setup.keys).await?));
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
    pub(crate) fn new(actor: u64, setup: &Setup) -> ClientLattice {
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
    /// `--rate`: the connection's schedule (None: closed loop, a round as soon as the
    /// last one is answered).
    pub pacer: Option<Pacer>,
}

impl ConnCtx {
    /// The next round's operations into `slots`, once it is due (paced runs); false when
    /// the run stops or the source is exhausted. A paced round that starts late begins with
    /// that delay as its operations' latency.
    pub(crate) async fn next_round(&mut self, slots: &mut Vec<Slot>) -> bool {
        if self.control.phase() == Phase::Stop {
            return false;
        }
        let late = match &mut self.pacer {
            Some(p) => p.wait().await,
            None => 0,
        };
        if self.control.phase() == Phase::Stop || !self.source.fill(&self.setup, slots) {
            return false;
        }
        if late > 0 {
            for s in slots.iter_mut() {
                s.latency_us = late;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
