//! Sessions and transactions: the consistency levels of `docs/consistency.md`.
//!
//! A [`Session`] is one client's sequence of operations at one [`Level`]. Every level is
//! built in the client, over the same coordination-free store: the server only merges
//! lattices. What a level adds is client state and the timestamps or clocks it writes:
//!
//! | level | reads | writes |
//! |---|---|---|
//! | eventual | one replica | LWW, stamped by the replica |
//! | read your writes | merged with the session's own writes | LWW, stamped by the session |
//! | monotonic reads | merged with everything the session read | LWW, stamped by the replica |
//! | monotonic writes | one replica | LWW, stamped by the session's clock (only grows) |
//! | writes follow reads | the session's clock moves past every timestamp read | LWW, stamped by that clock |
//! | PRAM | merged with own writes and earlier reads | LWW, stamped by the session |
//! | causal | merged with own writes and earlier reads | read, then a causal register dominating it (the session's vector clock entry) |
//! | multi-key causal | as causal | as causal, with its nearest dependencies, written to every replica after the versions read since the last write were |
//! | read uncommitted | one replica | transaction timestamp on every write, sent at once |
//! | read committed | one replica, own buffered writes | buffered, one batch at commit |
//! | item cut | the first read of a key is the transaction's read of it | as read committed |
//!
//! The session's state is bounded ([`SessionOptions::max_keys`]): beyond it, the least
//! recently used keys are made stable — their value written to every replica (`PutAll`),
//! after which any replica serves them at least as new — and forgotten.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lattice::{
    Blob, CausalVersion, CausalWriter, Hlc, Lattice, Lww, MultiKeyCausal, SingleKeyCausal,
    Timestamp, Value, VectorClock,
};

use crate::api::{join_all, Client};
use crate::error::ClientError;

/// The consistency level of a [`Session`] (see `docs/consistency.md` for each level's exact
/// guarantee, mechanism and cost).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Level {
    /// Replicas converge; nothing else. LWW registers stamped by the replica.
    Eventual,
    /// A read sees the session's own earlier writes (or newer versions).
    ReadYourWrites,
    /// A read of a key never returns an older version than an earlier read of it.
    MonotonicReads,
    /// The session's writes of a key take effect in the order it issued them.
    MonotonicWrites,
    /// A write of a key is ordered after every version of it the session read before.
    WritesFollowReads,
    /// Pipelined RAM: read your writes, monotonic reads and monotonic writes together.
    Pram,
    /// Per-key causal consistency: a read never returns a version that is causally
    /// overwritten by something in the session's past on that key; concurrent writes are
    /// kept as siblings.
    Causal,
    /// Causal consistency across keys: as [`Level::Causal`], with the causal past built
    /// over every key. A write first makes the session's causal past stable (on every
    /// replica) and is itself written to every replica, so reads stay single-replica.
    MultiKeyCausal,
    /// Transactions without dirty writes: all writes of a transaction carry its timestamp.
    ReadUncommitted,
    /// Transactions that read only committed data: writes are buffered and sent as one
    /// batch at commit.
    ReadCommitted,
    /// Read committed, and a transaction that reads a key twice reads the same value.
    ItemCut,
}

impl Level {
    /// Every level, weakest first (roughly: the transactional ones last).
    pub const ALL: [Level; 11] = [
        Level::Eventual,
        Level::ReadYourWrites,
        Level::MonotonicReads,
        Level::MonotonicWrites,
        Level::WritesFollowReads,
        Level::Pram,
        Level::Causal,
        Level::MultiKeyCausal,
        Level::ReadUncommitted,
        Level::ReadCommitted,
        Level::ItemCut,
    ];

    /// The user-facing name: "eventual", "read-your-writes", "monotonic-reads",
    /// "monotonic-writes", "writes-follow-reads", "pram", "causal", "multi-key-causal",
    /// "read-uncommitted", "read-committed", "item-cut".
    pub const fn name(self) -> &'static str {
        match self {
            Level::Eventual => "eventual",
            Level::ReadYourWrites => "read-your-writes",
            Level::MonotonicReads => "monotonic-reads",
            Level::MonotonicWrites => "monotonic-writes",
            Level::WritesFollowReads => "writes-follow-reads",
            Level::Pram => "pram",
            Level::Causal => "causal",
            Level::MultiKeyCausal => "multi-key-causal",
            Level::ReadUncommitted => "read-uncommitted",
            Level::ReadCommitted => "read-committed",
            Level::ItemCut => "item-cut",
        }
    }

    /// The level named `name` (case-insensitive; `_` may stand for `-`; "ryw", "mr",
    /// "mw", "wfr", "rc", "ru" are accepted as short names).
    pub fn from_name(name: &str) -> Option<Level> {
        let name = name.to_ascii_lowercase().replace('_', "-");
        let short = match name.as_str() {
            "ryw" => Some(Level::ReadYourWrites),
            "mr" => Some(Level::MonotonicReads),
            "mw" => Some(Level::MonotonicWrites),
            "wfr" => Some(Level::WritesFollowReads),
            "ru" => Some(Level::ReadUncommitted),
            "rc" => Some(Level::ReadCommitted),
            _ => None,
        };
        short.or_else(|| Level::ALL.into_iter().find(|l| l.name() == name))
    }

    /// True for the levels with transactions ([`Session::begin`]).
    pub const fn is_transactional(self) -> bool {
        matches!(
            self,
            Level::ReadUncommitted | Level::ReadCommitted | Level::ItemCut
        )
    }

    /// True if register writes ([`Session::write`]) are causal registers.
    pub const fn is_causal(self) -> bool {
        matches!(self, Level::Causal | Level::MultiKeyCausal)
    }

    /// Reads are merged with the session's own writes.
    const fn floors_writes(self) -> bool {
        matches!(
            self,
            Level::ReadYourWrites | Level::Pram | Level::Causal | Level::MultiKeyCausal
        )
    }

    /// Reads are merged with the session's earlier reads.
    const fn floors_reads(self) -> bool {
        matches!(
            self,
            Level::MonotonicReads | Level::Pram | Level::Causal | Level::MultiKeyCausal
        )
    }

    /// The session's clock moves past every timestamp it reads.
    const fn observes_reads(self) -> bool {
        matches!(
            self,
            Level::WritesFollowReads
                | Level::ReadUncommitted
                | Level::ReadCommitted
                | Level::ItemCut
        )
    }
}

impl std::fmt::Display for Level {
    /// Writes [`Level::name`].
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Session settings.
#[derive(Clone, Copy, Debug)]
pub struct SessionOptions {
    /// Most keys whose versions the session tracks (caches of its writes and reads, causal
    /// dependencies). Beyond it the least recently used are made stable and forgotten.
    /// Default: 100,000.
    pub max_keys: usize,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions { max_keys: 100_000 }
    }
}

/// Bits of an LWW timestamp's writer id that number the writes of one transaction.
const COMMAND_BITS: u32 = 16;

/// How long a session waits after failing to make keys stable before trying again.
const EVICTION_RETRY: Duration = Duration::from_secs(1);

/// What the session remembers of one key.
#[derive(Default)]
struct Tracked {
    /// The merge of the versions reads must not go below (own writes and/or earlier
    /// reads, per level).
    floor: Option<Value>,
    /// When the key was last used (the session's operation counter), for eviction.
    used: u64,
}

struct State {
    hlc: Hlc,
    writer: CausalWriter,
    keys: HashMap<Blob, Tracked>,
    /// Multi-key causal: the keys the session read since its last write, whose versions it
    /// has not yet made stable (merged into every replica). A subset of `keys`.
    unstable: HashSet<Blob>,
    ops: u64,
    /// After a failed attempt to make keys stable (a replica unreachable), the next
    /// attempt waits until then instead of trying on every operation.
    next_eviction: Option<Instant>,
}

/// One client's session at one consistency [`Level`]. Cheap to clone: clones share the
/// session (its clock and what it has seen), so they are the same session.
#[derive(Clone)]
pub struct Session {
    client: Client,
    level: Level,
    options: SessionOptions,
    actor: u64,
    state: Arc<Mutex<State>>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn merge_into(slot: &mut Option<Value>, value: &Value) {
    match slot {
        Some(v) => {
            v.merge_ref(value);
        }
        None => *slot = Some(value.clone()),
    }
}

fn merged(a: Option<Value>, b: Option<&Value>) -> Option<Value> {
    match (a, b) {
        (Some(mut a), Some(b)) => {
            a.merge_ref(b);
            Some(a)
        }
        (a, None) => a,
        (None, Some(b)) => Some(b.clone()),
    }
}

/// The clock a reader of `value` sees, for the causal types.
fn causal_clock(value: &Value) -> Option<VectorClock> {
    match value {
        Value::SingleKeyCausal(c) => Some(c.clock()),
        Value::MultiKeyCausal(c) => Some(c.clock()),
        _ => None,
    }
}

/// The register values of a value: the LWW value, or the causal siblings.
fn register_values(value: Option<Value>) -> Result<Vec<Blob>, ClientError> {
    match value {
        None => Ok(Vec::new()),
        Some(Value::Lww(l)) => Ok(vec![l.value]),
        Some(Value::SingleKeyCausal(c)) => Ok(c.values().cloned().collect()),
        Some(Value::MultiKeyCausal(c)) => Ok(c.values().cloned().collect()),
        Some(v) => Err(ClientError::UnexpectedType {
            expected: "register (lww or causal)",
            found: v.lattice_type(),
        }),
    }
}

impl Client {
    /// A new session at `level` with default options.
    pub fn session(&self, level: Level) -> Session {
        self.session_with(level, SessionOptions::default())
    }

    /// A new session at `level`.
    pub fn session_with(&self, level: Level, options: SessionOptions) -> Session {
        // 48 random bits, never 0: the session's actor id (its vector clock entry) and the
        // high bits of its LWW writer id, whose low bits number a transaction's writes.
        let actor = fastrand::u64(1..1 << (64 - COMMAND_BITS));
        Session {
            client: self.clone(),
            level,
            options,
            actor,
            state: Arc::new(Mutex::new(State {
                hlc: Hlc::new(actor << COMMAND_BITS),
                writer: CausalWriter::new(actor),
                keys: HashMap::new(),
                unstable: HashSet::new(),
                ops: 0,
                next_eviction: None,
            })),
        }
    }
}

impl Session {
    /// The session's level.
    pub fn level(&self) -> Level {
        self.level
    }

    /// The session's actor id: its entry in vector clocks, and the high bits of the writer
    /// id of its LWW timestamps (`writer >> 16`).
    pub fn actor(&self) -> u64 {
        self.actor
    }

    /// The client the session runs on.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Keys whose versions the session currently tracks.
    pub fn tracked_keys(&self) -> usize {
        self.lock().keys.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is only mutated in short critical sections with no await inside; a
        // panic there cannot leave it half-updated in a way that matters more than losing
        // the session, so recover from poisoning.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new LWW timestamp from the session's clock.
    fn tick(&self) -> Timestamp {
        self.lock().hlc.tick(now_ms())
    }

    /// Moves the session's clock past the timestamp of `value`, if it is an LWW register.
    fn observe(&self, value: Option<&Value>) {
        if let Some(Value::Lww(l)) = value {
            self.lock().hlc.observe(l.ts);
        }
    }

    // ---- reads -------------------------------------------------------------------------

    /// Reads `key` at the session's level: its lattice value, or `None` if it does not
    /// exist. (Outside a transaction on the transactional levels, a plain read: every
    /// version the store holds is committed.)
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>, ClientError> {
        let key = key.as_ref();
        self.ensure_capacity().await?;
        let value = self.client.get(key).await?;
        if self.level.observes_reads() {
            self.observe(value.as_ref());
        }
        let value = if self.level.floors_writes() || self.level.floors_reads() {
            let mut state = self.lock();
            state.ops += 1;
            let ops = state.ops;
            let floors_reads = self.level.floors_reads();
            let tracked = state.keys.entry(Box::from(key)).or_default();
            tracked.used = ops;
            let value = merged(value, tracked.floor.as_ref());
            if floors_reads {
                if let Some(v) = &value {
                    merge_into(&mut tracked.floor, v);
                    if self.level == Level::MultiKeyCausal {
                        state.unstable.insert(Box::from(key));
                    }
                }
            }
            value
        } else {
            value
        };
        self.bound().await;
        Ok(value)
    }

    /// Reads a register (`lww`, or a causal one on the causal levels): its value, or the
    /// concurrent siblings of a causal register; empty if the key does not exist.
    pub async fn read(&self, key: impl AsRef<[u8]>) -> Result<Vec<Blob>, ClientError> {
        register_values(self.get(key).await?)
    }

    // ---- writes ------------------------------------------------------------------------

    /// Merges `value` into `key` at the session's level: it becomes part of what the
    /// session's later reads see (on the levels that floor reads with own writes). LWW
    /// values are sent as given; use [`Session::write`] for registers stamped by the level.
    pub async fn put(&self, key: impl AsRef<[u8]>, value: Value) -> Result<(), ClientError> {
        let key = key.as_ref();
        if self.level.is_transactional() {
            return self.autocommit(key, value).await;
        }
        self.ensure_capacity().await?;
        if self.level == Level::MultiKeyCausal {
            self.causal_put(key, &value).await?;
        } else {
            self.client.put(key, value.clone()).await?;
        }
        self.remember_write(key, &value);
        self.bound().await;
        Ok(())
    }

    /// Writes a register: an LWW register stamped as the level says, or a causal register
    /// on the causal levels (overwriting the versions the session has seen of the key;
    /// concurrent ones stay siblings).
    pub async fn write(
        &self,
        key: impl AsRef<[u8]>,
        bytes: impl AsRef<[u8]>,
    ) -> Result<(), ClientError> {
        let key = key.as_ref();
        let bytes: Blob = Box::from(bytes.as_ref());
        let value = match self.level {
            Level::Eventual | Level::MonotonicReads => {
                return self.client.assign(key, &bytes).await;
            }
            Level::Causal => {
                let seen = self.read_before_write(key).await?;
                let read = seen.as_ref().and_then(causal_clock).unwrap_or_default();
                let clock = self.lock().writer.next_clock(&read);
                Value::SingleKeyCausal(SingleKeyCausal::new(clock, bytes))
            }
            Level::MultiKeyCausal => {
                let seen = self.read_before_write(key).await?;
                let mut state = self.lock();
                // The new version overwrites what the session has seen of the key and
                // inherits its dependencies (HydroCache's I2); it depends on the versions
                // read since the session's last write (its nearest dependencies: everything
                // before those is stable already, see `causal_put`).
                let (read, mut deps) = match &seen {
                    Some(Value::MultiKeyCausal(c)) => (c.clock(), c.deps()),
                    _ => (VectorClock::new(), BTreeMap::new()),
                };
                for k in &state.unstable {
                    let floor = state.keys.get(k).and_then(|t| t.floor.as_ref());
                    if let Some(clock) = floor.and_then(causal_clock) {
                        deps.entry(k.clone()).or_default().merge_from(&clock);
                    }
                }
                deps.remove(key);
                let clock = state.writer.next_clock(&read);
                Value::MultiKeyCausal(MultiKeyCausal::new(CausalVersion {
                    clock,
                    deps,
                    value: bytes,
                }))
            }
            _ => Value::Lww(Lww::new(self.tick(), bytes)),
        };
        self.put(key, value).await
    }

    /// Causal writes read the key first (Anna's read-modify-write) and merge it into what
    /// the session has seen of it, which the new version then overwrites. So blind writes
    /// do not pile up siblings (only writes racing between the read and the write stay
    /// concurrent), and under multi-key causality the versions of the key in the session's
    /// causal past that it never read itself — stable, so on every replica — are
    /// overwritten too. Returns the merge of what the session has seen of the key.
    async fn read_before_write(&self, key: &[u8]) -> Result<Option<Value>, ClientError> {
        let current = self.client.get(key).await?;
        let mut state = self.lock();
        let tracked = state.keys.entry(Box::from(key)).or_default();
        if let Some(v) = &current {
            merge_into(&mut tracked.floor, v);
        }
        Ok(tracked.floor.clone())
    }

    /// Records a write the server acknowledged in the session's state.
    fn remember_write(&self, key: &[u8], value: &Value) {
        if !self.level.floors_writes() {
            return;
        }
        let mut state = self.lock();
        state.ops += 1;
        let ops = state.ops;
        let tracked = state.keys.entry(Box::from(key)).or_default();
        tracked.used = ops;
        merge_into(&mut tracked.floor, value);
        state.unstable.remove(key);
    }

    /// Multi-key causal write: first makes the session's causal past stable — every
    /// version it read since its last write merged into every replica of its key
    /// (`PutAll`; its earlier writes are stable already) — then writes `value` to every
    /// replica of `key` (`PutAll`). So when any replica holds a version, every replica
    /// already holds (something newer than) everything in that version's causal past,
    /// whoever wrote it, and a read at any single replica never returns a version that
    /// something in the reader's causal past overwrote: no read ever waits for a
    /// dependency, and no dependency metadata beyond the nearest ones travels.
    async fn causal_put(&self, key: &[u8], value: &Value) -> Result<(), ClientError> {
        let unstable: Vec<(Blob, Value)> = {
            let state = self.lock();
            state
                .unstable
                .iter()
                .filter(|k| &***k != key)
                .filter_map(|k| {
                    let floor = state.keys.get(k).and_then(|t| t.floor.clone());
                    floor.map(|v| (k.clone(), v))
                })
                .collect()
        };
        let stabilized = join_all(
            unstable
                .iter()
                .map(|(k, v)| self.client.put_all(k, v.clone())),
        )
        .await;
        for result in stabilized {
            result?;
        }
        {
            let mut state = self.lock();
            for (k, _) in &unstable {
                state.unstable.remove(k);
            }
        }
        self.client.put_all(key, value.clone()).await
    }

    /// A single write outside a transaction on a transactional level: a transaction of its
    /// own.
    async fn autocommit(&self, key: &[u8], value: Value) -> Result<(), ClientError> {
        let mut txn = self.begin()?;
        txn.put(key, value).await?;
        txn.commit().await
    }

    // ---- bounded state -----------------------------------------------------------------

    /// Keeps the tracked keys within [`SessionOptions::max_keys`]: beyond it, makes the
    /// least recently used tenth stable (their value merged into every replica with
    /// `PutAll`, so every replica serves at least what the session requires) and forgets
    /// them. A key that cannot be made stable now (a replica unreachable) stays tracked and
    /// is tried again later.
    async fn bound(&self) {
        let victims: Vec<(Blob, Option<Value>)> = {
            let state = self.lock();
            if state.keys.len() <= self.options.max_keys
                || state.next_eviction.is_some_and(|t| Instant::now() < t)
            {
                return;
            }
            let excess = state.keys.len() - self.options.max_keys;
            let count = excess.max(self.options.max_keys / 10).max(1);
            let mut by_age: Vec<(u64, &Blob)> =
                state.keys.iter().map(|(k, t)| (t.used, k)).collect();
            by_age.sort_unstable();
            by_age
                .into_iter()
                .take(count)
                .filter_map(|(_, k)| state.keys.get(k).map(|t| (k.clone(), t.floor.clone())))
                .collect()
        };
        for (key, floor) in victims {
            let stable = match self.client.get_all(&key).await {
                Ok(all) => match merged(all, floor.as_ref()) {
                    Some(v) => self.client.put_all(&key, v).await.is_ok(),
                    None => true,
                },
                Err(_) => false,
            };
            let mut state = self.lock();
            if !stable {
                // A replica is unreachable: the other keys would fail the same way.
                state.next_eviction = Some(Instant::now() + EVICTION_RETRY);
                return;
            }
            state.keys.remove(&key);
            state.unstable.remove(&key);
            state.next_eviction = None;
        }
    }

    /// Fails with `SessionFull` while the session tracks twice its bound of keys (they
    /// could not be made stable: replicas unreachable), instead of growing without limit;
    /// tries to make room first.
    async fn ensure_capacity(&self) -> Result<(), ClientError> {
        let full = |s: &Session| s.lock().keys.len() >= s.options.max_keys.saturating_mul(2);
        if full(self) {
            self.bound().await;
            if full(self) {
                return Err(ClientError::SessionFull {
                    tracked: self.tracked_keys(),
                    max: self.options.max_keys,
                });
            }
        }
        Ok(())
    }

    // ---- transactions ------------------------------------------------------------------

    /// Starts a transaction (on [`Level::ReadUncommitted`], [`Level::ReadCommitted`] or
    /// [`Level::ItemCut`]; an `InvalidUse` error on the others).
    pub fn begin(&self) -> Result<Transaction, ClientError> {
        if !self.level.is_transactional() {
            return Err(ClientError::InvalidUse(format!(
                "level {} has no transactions",
                self.level
            )));
        }
        // Read uncommitted sends writes as they come: they need the timestamp now.
        let ts = (self.level == Level::ReadUncommitted).then(|| self.tick());
        Ok(Transaction {
            session: self.clone(),
            ts,
            writes: BTreeMap::new(),
            reads: HashMap::new(),
            sent: 0,
            finished: false,
        })
    }
}

/// A transaction of a [`Session`] (see [`Session::begin`]). Dropping it without
/// [`commit`](Transaction::commit) aborts it (at read uncommitted, writes already sent stay).
pub struct Transaction {
    session: Session,
    /// Read uncommitted: the timestamp all writes carry (taken at begin).
    ts: Option<Timestamp>,
    /// Read committed, item cut: the buffered writes.
    writes: BTreeMap<Blob, Value>,
    /// Item cut: the first read of each key.
    reads: HashMap<Blob, Option<Value>>,
    /// Read uncommitted: writes sent so far (numbers them within the transaction).
    sent: u64,
    finished: bool,
}

impl Transaction {
    fn check_open(&self) -> Result<(), ClientError> {
        if self.finished {
            return Err(ClientError::InvalidUse(
                "the transaction has already committed or aborted".into(),
            ));
        }
        Ok(())
    }

    /// The level of the transaction's session.
    pub fn level(&self) -> Level {
        self.session.level
    }

    /// Reads `key` in the transaction: its own buffered write if it wrote the key (read
    /// committed, item cut), the transaction's first read of the key (item cut), or the
    /// store's value.
    pub async fn get(&mut self, key: impl AsRef<[u8]>) -> Result<Option<Value>, ClientError> {
        self.check_open()?;
        let key = key.as_ref();
        if let Some(v) = self.writes.get(key) {
            return Ok(Some(v.clone()));
        }
        if let Some(v) = self.reads.get(key) {
            return Ok(v.clone());
        }
        let value = self.session.client.get(key).await?;
        self.session.observe(value.as_ref());
        if self.session.level == Level::ItemCut {
            self.reads.insert(Box::from(key), value.clone());
        }
        Ok(value)
    }

    /// Reads a register in the transaction (see [`Transaction::get`]): its value, or
    /// empty if the key does not exist.
    pub async fn read(&mut self, key: impl AsRef<[u8]>) -> Result<Vec<Blob>, ClientError> {
        register_values(self.get(key).await?)
    }

    /// Writes `value` to `key` in the transaction. LWW values are restamped with the
    /// transaction's timestamp (every write of a transaction carries it, so two
    /// transactions' writes are ordered the same way on every key). Read uncommitted sends
    /// the write now; read committed and item cut buffer it until commit (a later write of
    /// the same key in the transaction replaces it).
    pub async fn put(&mut self, key: impl AsRef<[u8]>, value: Value) -> Result<(), ClientError> {
        self.check_open()?;
        let key = key.as_ref();
        match self.ts {
            Some(ts) => {
                // Read uncommitted: the transaction's time, its session's writer id and
                // the write's number, so a later write of a key in the transaction wins
                // over its earlier one, and the order against other transactions is the
                // same on every key.
                if self.sent >= 1 << COMMAND_BITS {
                    return Err(ClientError::InvalidUse(format!(
                        "more than {} writes in one read-uncommitted transaction",
                        1u64 << COMMAND_BITS
                    )));
                }
                let ts = Timestamp::new(ts.time, ts.writer | self.sent);
                self.sent += 1;
                self.session.client.put(key, restamp(value, ts)).await
            }
            None => {
                match self.writes.get_mut(key) {
                    // A later LWW write replaces the earlier one (they get one stamp).
                    Some(slot) if !matches!(value, Value::Lww(_)) => {
                        slot.merge(value);
                    }
                    _ => {
                        self.writes.insert(Box::from(key), value);
                    }
                }
                Ok(())
            }
        }
    }

    /// Writes an LWW register in the transaction (see [`Transaction::put`]).
    pub async fn write(
        &mut self,
        key: impl AsRef<[u8]>,
        bytes: impl AsRef<[u8]>,
    ) -> Result<(), ClientError> {
        let value = Value::Lww(Lww::new(Timestamp::ZERO, Box::from(bytes.as_ref())));
        self.put(key, value).await
    }

    /// Commits: read committed and item cut send the buffered writes, stamped with a
    /// timestamp later than everything the session has read, as one batch to one node,
    /// which applies each at its replicas (retried until acknowledged or the timeout).
    /// Read uncommitted has nothing left to send.
    pub async fn commit(mut self) -> Result<(), ClientError> {
        self.check_open()?;
        self.finished = true;
        if self.writes.is_empty() {
            return Ok(());
        }
        let ts = self.session.tick();
        let batch: Vec<(Blob, Value)> = std::mem::take(&mut self.writes)
            .into_iter()
            .map(|(k, v)| (k, restamp(v, ts)))
            .collect();
        self.session.client.put_batch(&batch).await
    }

    /// Aborts: buffered writes are dropped (read uncommitted: writes already sent stay).
    pub fn abort(mut self) {
        self.finished = true;
        self.writes.clear();
    }

    /// The writes buffered so far (read committed, item cut).
    pub fn buffered(&self) -> usize {
        self.writes.len()
    }
}

/// An LWW value with its timestamp replaced by `ts`; other values unchanged.
fn restamp(value: Value, ts: Timestamp) -> Value {
    match value {
        Value::Lww(l) => Value::Lww(Lww::new(ts, l.value)),
        v => v,
    }
}

#[cfg(test)]
mod tests;
