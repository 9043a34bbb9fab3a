//! The backing store from a worker's side: batches of dirty keys to apply, clients waiting
//! for the store, reads through it, and TARDIS's modes (see `crate::writeback`).
//!
//! Batches are of two kinds. *Foreground* batches carry keys a client waits for
//! (write-through and write-around writes; every write in recovery under DIS and
//! TARDIS): they go out at once, `appliers` at a time. *Background* batches carry
//! write-back keys whose delay is over (normal mode, `appliers` at a time) or keys on the
//! failed list (recovery, `recovery_workers` at a time). In failed mode one *probe* at a
//! time goes out — a batch of failed keys, or a ping when there are none — paced by an
//! exponential backoff; its success starts recovery. Any failed batch or read puts the
//! worker in failed mode, and the clients waiting for it are answered: their writes are
//! buffered, as every write is in failed mode.

use bytes::Bytes;
use lattice::Record;

use super::{Core, Effect, Map};
use crate::op::OpResult;
use crate::writeback::{Mode, ModeMachine};

/// What a batch sent to the store was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Foreground,
    Background,
    Probe,
}

/// A batch being applied.
struct Applying {
    kind: Kind,
    /// The keys and the generations taken.
    taken: Vec<(Bytes, u64)>,
}

/// A client waiting for its write to reach the store.
struct Waiter {
    job: u64,
    pos: usize,
    result: OpResult,
    /// The key's generation after the write.
    gen: u64,
}

/// A worker's side of the backing store.
pub(super) struct BackingState {
    machine: ModeMachine,
    applying: Map<u64, Applying>,
    /// Keys being read through, per request.
    fetching: Map<u64, Vec<Bytes>>,
    waiters: Map<Bytes, Vec<Waiter>>,
    /// Keys applied per second over the last [`RATE_WINDOW_MS`]: (second, keys).
    applied: std::collections::VecDeque<(u64, u64)>,
}

/// Keys a failed-mode probe applies: one, as TARDIS's recovery workers try one document
/// (none: a ping).
const PROBE_KEYS: usize = 1;

/// The window of the applied-keys rate, ms.
const RATE_WINDOW_MS: u64 = 10_000;

impl BackingState {
    pub(super) fn new(hasher: foldhash::fast::FixedState, now: u64) -> BackingState {
        BackingState {
            machine: ModeMachine::new(now, 5_000),
            applying: Map::with_hasher(hasher.clone()),
            fetching: Map::with_hasher(hasher.clone()),
            waiters: Map::with_hasher(hasher),
            applied: std::collections::VecDeque::new(),
        }
    }

    fn in_flight(&self, kind: Kind) -> usize {
        self.applying.values().filter(|a| a.kind == kind).count()
    }
}

impl Core {
    /// Keys applied to the store per second, over the last 10 s (the drain rate).
    pub fn backing_rate(&self) -> f64 {
        let now = self.now();
        let keys: u64 = self
            .backing
            .applied
            .iter()
            .filter(|(sec, _)| sec * 1000 + RATE_WINDOW_MS > now)
            .map(|(_, n)| n)
            .sum();
        keys as f64 * 1000.0 / RATE_WINDOW_MS as f64
    }

    fn count_applied(&mut self, now: u64, keys: u64) {
        let sec = now / 1000;
        let applied = &mut self.backing.applied;
        match applied.back_mut() {
            Some((s, n)) if *s == sec => *n += keys,
            _ => applied.push_back((sec, keys)),
        }
        while applied
            .front()
            .is_some_and(|(s, _)| s * 1000 + RATE_WINDOW_MS <= now)
        {
            applied.pop_front();
        }
    }

    /// The worker's mode machine (status: since when, why).
    pub fn backing_machine(&self) -> &ModeMachine {
        &self.backing.machine
    }

    /// Starts the worker's write-back state after a restart: probes pause at most the
    /// configured time, and every backed key replayed from the log is dirty.
    pub fn start_backing(&mut self) {
        let max = self.shard.backing_config().probe_max_ms;
        self.backing.machine = ModeMachine::new(self.now(), max);
        self.shard.mark_backed_keys_dirty();
    }

    /// A client's write to `key` ran with `result`: answers it once the store has it (at
    /// once if the key is clean).
    pub(super) fn await_store(&mut self, job: u64, pos: usize, result: OpResult, key: Bytes) {
        match self.shard.await_backing(&key) {
            None => self.fill(job, pos, result),
            Some(gen) => self.backing.waiters.entry(key).or_default().push(Waiter {
                job,
                pos,
                result,
                gen,
            }),
        }
    }

    /// When the backing store next needs attention (monotonic ms).
    pub(super) fn backing_deadline(&self) -> Option<u64> {
        if !self.shard.has_backing() {
            return None;
        }
        let config = self.shard.backing_config();
        let (appliers, background) = match self.backing.machine.mode() {
            Mode::Failed => return self.backing.machine.probe_at(),
            Mode::Recovery => (config.appliers, config.recovery_workers),
            Mode::Normal => (config.appliers, config.appliers),
        };
        // Due only what a batch could go out for now: a batch returning calls the pump
        // anyway (no waking up for keys nothing may take — recovery without workers).
        let mut next = None;
        if self.backing.in_flight(Kind::Foreground) < appliers && self.shard.backing_urgent() {
            next = Some(self.now());
        }
        if self.backing.in_flight(Kind::Background) < background {
            if let Some(due) = self.shard.backing_due() {
                next = Some(next.map_or(due, |n: u64| n.min(due)));
            }
        }
        next
    }

    /// Sends whatever batches are due (see the module docs).
    pub(super) fn pump_backing(&mut self) {
        if !self.shard.has_backing() {
            return;
        }
        let now = self.now();
        let appliers = self.shard.backing_config().appliers;
        match self.backing.machine.mode() {
            Mode::Failed => {
                let due = self.backing.machine.probe_at().is_some_and(|t| now >= t);
                if due && self.backing.in_flight(Kind::Probe) == 0 {
                    self.backing.machine.probing(now);
                    let batch = self.shard.take_backing_batch(false, true, PROBE_KEYS);
                    self.send_batch(Kind::Probe, batch);
                }
            }
            mode => {
                while self.backing.in_flight(Kind::Foreground) < appliers {
                    let batch = self.shard.take_backing_batch(true, false, usize::MAX);
                    if batch.is_empty() {
                        break;
                    }
                    self.send_batch(Kind::Foreground, batch);
                }
                let (limit, failed_only) = match mode {
                    Mode::Recovery => (self.shard.backing_config().recovery_workers, true),
                    _ => (appliers, false),
                };
                while self.backing.in_flight(Kind::Background) < limit {
                    let batch = self
                        .shard
                        .take_backing_batch(false, failed_only, usize::MAX);
                    if batch.is_empty() {
                        break;
                    }
                    self.send_batch(Kind::Background, batch);
                }
                self.check_drained();
            }
        }
        // Keys a batch found gone from RAM (handed away): nobody here applies them any
        // more, and their new owner has them; the clients waiting for them are answered.
        for key in self.shard.take_forgotten_backing() {
            self.release_waiters(&key, None);
        }
    }

    fn send_batch(&mut self, kind: Kind, batch: Vec<crate::shard::Taken>) {
        if batch.is_empty() && kind != Kind::Probe {
            return;
        }
        let id = self.next_id();
        let mut taken = Vec::with_capacity(batch.len());
        let mut records: Vec<(Bytes, Record)> = Vec::with_capacity(batch.len());
        for t in batch {
            taken.push((t.key.clone(), t.gen));
            records.push((t.key, t.record));
        }
        self.backing.applying.insert(id, Applying { kind, taken });
        self.effects
            .push(Effect::BackingApply { id, batch: records });
    }

    /// The outcome of a batch (`Err`: why the store failed it). An empty batch was a ping.
    pub fn on_backing_applied(&mut self, id: u64, result: Result<(), String>) {
        let Some(a) = self.backing.applying.remove(&id) else {
            return;
        };
        let now = self.now();
        match result {
            Ok(()) => {
                self.shard.backing_applied(&a.taken, true);
                self.count_applied(now, a.taken.len() as u64);
                if self.backing.machine.succeeded(now) {
                    tracing::info!("the backing store answers again: recovering");
                    self.shard.set_backing_mode(Mode::Recovery);
                }
                for (key, gen) in &a.taken {
                    self.release_waiters(key, Some(*gen));
                }
            }
            Err(why) => {
                self.shard.backing_applied(&a.taken, false);
                self.store_failed(now, why);
            }
        }
        self.pump_backing();
        self.gossip_if_full();
        self.arm_journal();
    }

    /// The store failed a request: failed mode, and every waiting client is answered
    /// (its write is buffered).
    pub(super) fn store_failed(&mut self, now: u64, why: String) {
        if self.backing.machine.failed(now, why.clone()) {
            tracing::warn!(error = %why, "the backing store is unavailable: buffering writes");
            self.shard.set_backing_mode(Mode::Failed);
        }
        self.shard.clear_urgent();
        let keys: Vec<Bytes> = self.backing.waiters.keys().cloned().collect();
        for key in keys {
            self.release_waiters(&key, None);
        }
    }

    /// Answers the clients waiting for `key` up to generation `gen` (all of them: None).
    fn release_waiters(&mut self, key: &[u8], gen: Option<u64>) {
        let Some(list) = self.backing.waiters.remove(key) else {
            return;
        };
        let (done, left): (Vec<Waiter>, Vec<Waiter>) = list
            .into_iter()
            .partition(|w| gen.is_none_or(|g| w.gen <= g));
        if !left.is_empty() {
            self.backing
                .waiters
                .insert(Bytes::copy_from_slice(key), left);
        }
        for w in done {
            self.fill(w.job, w.pos, w.result);
        }
    }

    /// Recovery ends once the failed list is empty.
    fn check_drained(&mut self) {
        if self.backing.machine.mode() == Mode::Recovery && self.shard.failed_keys() == 0 {
            let now = self.now();
            self.backing.machine.drained(now);
            self.shard.set_backing_mode(Mode::Normal);
            tracing::info!("the backing store has every buffered write: normal mode");
        }
    }

    /// Asks the store for `keys` (reads through); false if reads may not go to the store
    /// now (the caller then fails them unless the disk tier has them).
    pub(super) fn fetch_from_store(&mut self, keys: Vec<Bytes>) -> bool {
        if !self.shard.reads_through() {
            return false;
        }
        // In reads of at most `batch_keys` keys: a request for many uncached keys must not
        // become one read the store refuses as too large (and take the worker to failed
        // mode).
        let chunk = self.shard.backing_config().batch_keys.max(1);
        for keys in keys.chunks(chunk) {
            let id = self.next_id();
            self.backing.fetching.insert(id, keys.to_vec());
            self.effects.push(Effect::BackingFetch {
                id,
                keys: keys.to_vec(),
            });
        }
        true
    }

    /// The store's answer to a read through.
    pub fn on_backing_fetched(&mut self, id: u64, result: Result<Vec<Option<Record>>, String>) {
        let Some(keys) = self.backing.fetching.remove(&id) else {
            return;
        };
        let records = match result {
            Ok(records) => {
                self.shard.note_backing_reads(keys.len(), 0);
                Some(records)
            }
            Err(why) => {
                let now = self.now();
                self.store_failed(now, why);
                None
            }
        };
        self.on_store_records(keys, records);
        self.pump_backing();
    }
}
