//! Keys under a write policy (see `crate::writeback`): which are dirty — changed here
//! and not yet merged into the backing store — and the batches that apply them.
//!
//! A memory-tier worker marks a key dirty when its record changes and the worker is the
//! key's primary replica (it applies every change, whoever made it: its clients, the
//! key's other replicas by gossip), or when its own client wrote a write-through or
//! write-around key (the client waits for the store). Each change bumps the key's
//! *generation*; a batch takes a key's record and generation, and a successful apply
//! cleans the key only if no change came since — else it stays dirty for the next batch.
//! A dirty key is pinned: never evicted. After a restart, every backed key replayed from
//! the log is dirty (the log does not say what the store already had; re-applying is
//! harmless), and so is every backed key a worker becomes primary of.
//!
//! While the worker is not in normal mode, keys that become dirty join the *failed list*
//! (entering failed mode puts every dirty key on it); recovery ends when it is empty.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use lattice::{Blob, Record};

use super::{Map, Shard};
use crate::error::NodeError;
use crate::writeback::{BackingConfig, Mode, WritePolicy};

/// One dirty key.
#[derive(Clone, Copy, Debug)]
struct Dirty {
    /// Bumped by every change.
    gen: u64,
    /// Bytes counted for it in the buffer.
    bytes: usize,
    /// When it became dirty (monotonic ms): applied `apply_delay_ms` later.
    since: u64,
    /// A client waits for it to be applied (write-through, write-around, a recovery-mode
    /// write under DIS or TARDIS).
    urgent: bool,
    /// On the failed list.
    failed: bool,
    /// In a batch being applied.
    in_flight: bool,
}

/// A key taken into a batch: its name, the generation applied and its record.
pub struct Taken {
    /// The key.
    pub key: Bytes,
    /// Its generation when taken.
    pub gen: u64,
    /// Its record when taken.
    pub record: Record,
}

/// Counters of the write-back state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackingStats {
    /// The worker's mode ([`Mode::code`]).
    pub mode: u32,
    /// Keys not yet in the store.
    pub dirty_keys: u64,
    /// Bytes of their records.
    pub dirty_bytes: u64,
    /// Dirty keys on the failed list.
    pub failed_keys: u64,
    /// Keys applied (one per key per successful batch).
    pub applied_keys: u64,
    /// Batches that failed.
    pub apply_failures: u64,
    /// Keys read through from the store.
    pub fetched_keys: u64,
    /// Reads of keys not in RAM refused because the store is unavailable.
    pub refused_reads: u64,
    /// Writes refused: the buffer was full while the store was unavailable.
    pub refused_writes: u64,
}

/// A shard's write-back state.
pub(crate) struct Backing {
    pub(crate) config: Arc<BackingConfig>,
    pub(crate) mode: Mode,
    dirty: Map<Blob, Dirty>,
    /// Keys in the order they became dirty (entries of keys since cleaned or in flight
    /// are skipped when met).
    queue: VecDeque<Blob>,
    /// Keys a client waits for, in the order they were asked (also in `queue`).
    urgent: VecDeque<Blob>,
    next_gen: u64,
    bytes: usize,
    /// Most dirty bytes (this worker's share of the node's bound).
    bound: usize,
    /// Dirty keys a batch found gone from RAM, until the core answers their waiters.
    forgotten: Vec<Blob>,
    failed: usize,
    /// The change being made comes from this worker's client.
    client_write: bool,
    pub(crate) stats: BackingStats,
}

impl Backing {
    pub(crate) fn new(hasher: foldhash::fast::FixedState) -> Backing {
        Backing {
            config: Arc::new(BackingConfig::default()),
            mode: Mode::Normal,
            dirty: Map::with_hasher(hasher),
            queue: VecDeque::new(),
            urgent: VecDeque::new(),
            next_gen: 0,
            bytes: 0,
            bound: usize::MAX,
            forgotten: Vec::new(),
            failed: 0,
            client_write: false,
            stats: BackingStats::default(),
        }
    }
}

impl Shard {
    /// Puts this worker, one of `workers` on its node, in front of a backing store with
    /// these policies (a memory-tier worker; disk-tier workers never apply).
    pub fn set_backing(&mut self, config: Arc<BackingConfig>, workers: usize) {
        self.backing.bound = (config.max_buffered_bytes / workers.max(1) as u64) as usize;
        self.backing.config = config;
    }

    /// The backing configuration.
    pub fn backing_config(&self) -> &Arc<BackingConfig> {
        &self.backing.config
    }

    /// True if this worker has keys under a write policy.
    pub fn has_backing(&self) -> bool {
        self.backing.config.enabled() && !self.is_disk()
    }

    /// The write policy of `key` on this worker (None: not backed here).
    pub fn backed(&self, key: &[u8]) -> Option<WritePolicy> {
        if self.is_disk() {
            return None;
        }
        self.backing.config.policy_of(key)
    }

    /// The worker's mode towards the store.
    pub fn backing_mode(&self) -> Mode {
        self.backing.mode
    }

    /// Sets the mode; entering failed mode puts every dirty key on the failed list.
    pub fn set_backing_mode(&mut self, mode: Mode) {
        if mode == Mode::Failed {
            for d in self.backing.dirty.values_mut() {
                if !d.failed {
                    d.failed = true;
                    self.backing.failed += 1;
                }
            }
        }
        self.backing.mode = mode;
    }

    /// The buffer bound of this worker (its share of the node's).
    fn backing_bound(&self) -> usize {
        self.backing.bound
    }

    /// True if a write to `key` must wait until the store has it: write-through and
    /// write-around keys, write-back keys beyond the buffer bound — in normal mode, and in
    /// recovery under DIS and TARDIS (where every write is applied at once). In failed
    /// mode, and in recovery under TAR and TARD, writes buffer.
    pub fn write_waits_for_store(&self, key: &[u8]) -> bool {
        let Some(policy) = self.backed(key) else {
            return false;
        };
        match self.backing.mode {
            Mode::Failed => false,
            Mode::Recovery if self.backing.config.technique.writes_apply() => true,
            Mode::Recovery => false,
            Mode::Normal => {
                policy != WritePolicy::WriteBack || self.backing.bytes >= self.backing_bound()
            }
        }
    }

    /// Refuses a write to `key` the buffer cannot take: beyond the bound while the store
    /// is unavailable (in normal mode such writes wait for the store instead).
    pub(super) fn check_backing(&mut self, key: &[u8]) -> Result<(), NodeError> {
        if self.backing.mode == Mode::Normal || self.backed(key).is_none() {
            return Ok(());
        }
        let bound = self.backing_bound();
        if self.backing.bytes >= bound && !self.backing.dirty.contains_key(key) {
            self.backing.stats.refused_writes += 1;
            return Err(NodeError::Unavailable(format!(
                "the write-back buffer is full ({} of {bound} bytes) and the backing store \
                 is unavailable",
                self.backing.bytes
            )));
        }
        Ok(())
    }

    /// Refuses a read of a backed key a disk-tier worker does not hold: the backing store
    /// may have it, and only the memory tier reads it through (a client that retried here
    /// after the memory tier refused must not get "absent").
    pub(super) fn check_backed_read(&self, key: &[u8]) -> Result<(), NodeError> {
        if !self.is_disk()
            || self.backing.config.policy_of(key).is_none()
            || self.store.get(key).is_some()
        {
            return Ok(());
        }
        Err(NodeError::Unavailable(
            "this disk-tier replica does not hold the key, and the backing store is read \
             through by the memory tier"
                .into(),
        ))
    }

    /// True if a read of `key`, not in RAM, may go to the store now: normal mode, or
    /// recovery under TARD and TARDIS.
    pub fn reads_through(&self) -> bool {
        match self.backing.mode {
            Mode::Normal => true,
            Mode::Failed => false,
            Mode::Recovery => self.backing.config.technique.reads_through(),
        }
    }

    /// Marks the next changes as made by this worker's client (until [`end_client_write`]).
    ///
    /// [`end_client_write`]: Self::end_client_write
    pub(super) fn begin_client_write(&mut self) {
        self.backing.client_write = true;
    }

    pub(super) fn end_client_write(&mut self) {
        self.backing.client_write = false;
    }

    /// `key`'s record changed here: dirty if this worker applies it (see the module docs).
    /// Every change of the store passes here (`merge_into_store`, and the in-place
    /// updates of counters and OR-sets).
    pub(super) fn note_backing_change(&mut self, key: &[u8]) {
        let Some(policy) = self.backed(key) else {
            return;
        };
        let applies =
            self.is_primary(key) || (self.backing.client_write && policy != WritePolicy::WriteBack);
        if applies {
            self.mark_dirty(key);
        }
    }

    /// Marks `key` dirty (a new generation).
    pub(super) fn mark_dirty(&mut self, key: &[u8]) {
        let bytes = key.len() + self.store.size_of(key);
        let now = self.clock.mono_ms();
        self.backing.next_gen += 1;
        let gen = self.backing.next_gen;
        let failing = self.backing.mode != Mode::Normal;
        match self.backing.dirty.get_mut(key) {
            Some(d) => {
                d.gen = gen;
                self.backing.bytes = self.backing.bytes - d.bytes + bytes;
                d.bytes = bytes;
                if failing && !d.failed {
                    d.failed = true;
                    self.backing.failed += 1;
                }
            }
            None => {
                self.backing.dirty.insert(
                    Blob::from(key),
                    Dirty {
                        gen,
                        bytes,
                        since: now,
                        urgent: false,
                        failed: failing,
                        in_flight: false,
                    },
                );
                self.backing.bytes += bytes;
                self.backing.failed += failing as usize;
                self.backing.queue.push_back(Blob::from(key));
            }
        }
    }

    /// The generation a client waiting for `key` to reach the store waits for (None: the
    /// key is clean, nothing to wait for); marks the key urgent.
    pub fn await_backing(&mut self, key: &[u8]) -> Option<u64> {
        let d = self.backing.dirty.get_mut(key)?;
        if !d.urgent {
            d.urgent = true;
            self.backing.urgent.push_back(Blob::from(key));
        }
        Some(d.gen)
    }

    /// No client waits any more (the store failed: their writes are buffered). Every
    /// dirty key loses the mark, those in flight too (a key marked urgent but in no
    /// queue would never be taken for the next client waiting for it).
    pub fn clear_urgent(&mut self) {
        self.backing.urgent.clear();
        for d in self.backing.dirty.values_mut() {
            d.urgent = false;
        }
    }

    /// True if `key` has changes the store lacks.
    pub(crate) fn backing_dirty(&self, key: &[u8]) -> bool {
        !self.backing.dirty.is_empty() && self.backing.dirty.contains_key(key)
    }

    /// Dirty keys on the failed list.
    pub fn failed_keys(&self) -> usize {
        self.backing.failed
    }

    /// True if a client waits for a dirty key not in flight.
    pub fn backing_urgent(&self) -> bool {
        self.backing
            .urgent
            .iter()
            .filter_map(|k| self.backing.dirty.get(k))
            .any(|d| d.urgent && !d.in_flight)
    }

    /// When the oldest dirty key not in flight is due for a background batch (monotonic
    /// ms), if any.
    pub fn backing_due(&self) -> Option<u64> {
        let delay = self.backing.config.apply_delay_ms;
        self.backing
            .queue
            .iter()
            .filter_map(|k| self.backing.dirty.get(k))
            .find(|d| !d.in_flight)
            .map(|d| d.since + delay)
    }

    /// Takes up to `max` (and `batch_keys`) dirty keys into a batch: first keys a client
    /// waits for; then, unless `urgent_only`, keys on the failed list (`failed_only`) or
    /// keys whose delay is over (all of them beyond the buffer bound). Keys taken are in
    /// flight until [`backing_applied`](Self::backing_applied).
    pub fn take_backing_batch(
        &mut self,
        urgent_only: bool,
        failed_only: bool,
        max: usize,
    ) -> Vec<Taken> {
        let max = max.min(self.backing.config.batch_keys);
        let mut out = Vec::new();
        while out.len() < max {
            let Some(key) = self.backing.urgent.pop_front() else {
                break;
            };
            match self.backing.dirty.get(&key) {
                Some(d) if d.urgent && !d.in_flight => self.take_key(key, &mut out),
                // In flight: back in the urgent queue when its batch returns.
                _ => {}
            }
        }
        if urgent_only {
            return out;
        }
        let now = self.clock.mono_ms();
        let delay = self.backing.config.apply_delay_ms;
        let over_bound = self.backing.bytes >= self.backing_bound();
        let mut skipped = Vec::new();
        let mut looked = 0;
        // Bounded work per call: at most a few batches' worth of queue entries.
        while out.len() < max && looked < 4 * max {
            let Some(key) = self.backing.queue.pop_front() else {
                break;
            };
            looked += 1;
            let Some(d) = self.backing.dirty.get(&key) else {
                continue;
            };
            if d.in_flight {
                continue;
            }
            let due = if failed_only {
                d.failed
            } else {
                over_bound || now >= d.since + delay
            };
            if !due {
                skipped.push(key);
                if !failed_only && !over_bound {
                    // The queue is in the order keys became dirty: none behind is due.
                    break;
                }
                continue;
            }
            self.take_key(key, &mut out);
        }
        // Not taken: back at the front, in their order.
        for key in skipped.into_iter().rev() {
            self.backing.queue.push_front(key);
        }
        out
    }

    /// Takes dirty `key` (not in flight) into `out`, or forgets it if it left RAM.
    fn take_key(&mut self, key: Blob, out: &mut Vec<Taken>) {
        let Some(record) = self.store.get(&key).map(|r| r.to_record()) else {
            // Gone from RAM (handed away): its new owner applies it.
            self.forget_dirty(&key);
            self.backing.forgotten.push(key);
            return;
        };
        let Some(d) = self.backing.dirty.get_mut(&key) else {
            return;
        };
        d.in_flight = true;
        out.push(Taken {
            key: Bytes::copy_from_slice(&key),
            gen: d.gen,
            record,
        });
    }

    /// The outcome of a batch: applied (`ok`) keys are clean unless they changed since
    /// they were taken (their write-around records leave RAM); failed ones stay dirty.
    pub fn backing_applied(&mut self, taken: &[(Bytes, u64)], ok: bool) {
        if !ok {
            self.backing.stats.apply_failures += 1;
        }
        for (key, gen) in taken {
            let Some(d) = self.backing.dirty.get_mut(&key[..]) else {
                continue;
            };
            d.in_flight = false;
            if !ok {
                self.backing.queue.push_front(Blob::from(&key[..]));
                continue;
            }
            self.backing.stats.applied_keys += 1;
            if d.gen != *gen {
                // Changed meanwhile: the next batch takes the new record (at once if a
                // client waits for it).
                if d.urgent {
                    self.backing.urgent.push_back(Blob::from(&key[..]));
                }
                self.backing.queue.push_back(Blob::from(&key[..]));
                continue;
            }
            self.forget_dirty(key);
            if self.backed(key) == Some(WritePolicy::WriteAround) && self.evictable(key) {
                self.store.remove(key);
            }
        }
    }

    /// The dirty keys batches found gone from RAM since the last call.
    pub fn take_forgotten_backing(&mut self) -> Vec<Blob> {
        std::mem::take(&mut self.backing.forgotten)
    }

    /// Drops `key` from the dirty set.
    fn forget_dirty(&mut self, key: &[u8]) {
        if let Some(d) = self.backing.dirty.remove(key) {
            self.backing.bytes -= d.bytes;
            if d.failed {
                self.backing.failed -= 1;
            }
        }
    }

    /// Marks every backed key this worker holds and is primary of as dirty: after a
    /// restart (the log does not say what the store has) or a view change.
    pub fn mark_backed_keys_dirty(&mut self) {
        if !self.has_backing() {
            return;
        }
        let keys: Vec<Blob> = self
            .store
            .iter()
            .map(|(k, _)| Blob::from(k))
            .filter(|k| self.backed(k).is_some() && self.is_primary(k))
            .collect();
        for key in keys {
            if !self.backing_dirty(&key) {
                self.mark_dirty(&key);
            }
        }
    }

    /// Counts keys read through from the store, and reads refused without it.
    pub fn note_backing_reads(&mut self, fetched: usize, refused: usize) {
        self.backing.stats.fetched_keys += fetched as u64;
        self.backing.stats.refused_reads += refused as u64;
    }

    /// The write-back counters.
    pub fn backing_stats(&self) -> BackingStats {
        BackingStats {
            mode: self.backing.mode.code(),
            dirty_keys: self.backing.dirty.len() as u64,
            dirty_bytes: self.backing.bytes as u64,
            failed_keys: self.backing.failed as u64,
            ..self.backing.stats
        }
    }
}
