//! Where a worker's writes become durable: its write-ahead log (a memory-tier worker with
//! a data directory), the node's LSM journal (a disk-tier worker), or nothing.
//!
//! The core hands over the changes to log (`Journal::append`, in order: a key's removal
//! must replay after the merges before it) and asks for syncs (`Journal::sync`: one sync
//! covers everything appended before it, and the log's writer thread group-commits
//! concurrent ones). The log's own task watches its health — writes fail while it refuses
//! appends, and resume by themselves once it accepts them again — and writes snapshots.
//!
//! A snapshot covers the log up to an LSN so the segments before it can go. It is taken a
//! partition of the store at a time, interleaved with requests, and encoded and written on
//! a thread of its own; the records a partition holds when its turn comes may include
//! changes made after the LSN, which is harmless: replay applies the snapshot, then every
//! change logged after the LSN in order, merges being idempotent and removals ordered. A
//! snapshot that fails is tried again after a back-off that doubles up to five minutes.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use store::DiskDb;
use tokio::sync::{oneshot, Notify};
use tokio::task::spawn_local;

use super::worker::Worker;
use crate::codec::{decode_journal, encode_journal_chunks, JournalEntry};
use crate::error::NodeError;
use crate::shard::Shard;

/// How often the log's task looks at its health and whether a snapshot is due.
const CHECK_EVERY: Duration = Duration::from_millis(50);

/// First pause after a failed snapshot; it doubles up to [`MAX_SNAPSHOT_BACKOFF`].
const FIRST_SNAPSHOT_BACKOFF: Duration = Duration::from_secs(1);

/// Longest pause after failed snapshots.
const MAX_SNAPSHOT_BACKOFF: Duration = Duration::from_secs(300);

/// Largest log payload the worker writes (well under the log's record limit); a larger
/// flush is split, each change replaying on its own.
const MAX_PAYLOAD: usize = crate::codec_journal::MAX_JOURNAL_PAYLOAD;

/// Bytes waiting for room in the log's queue beyond which client connections wait before
/// their next batch of requests (back-pressure instead of an unbounded queue or errors).
const QUEUE_ROOM: u64 = 32 << 20;

/// Partitions copied between two yields to requests while a snapshot is taken.
const SNAPSHOT_PARTITIONS_PER_STEP: usize = 1;

/// What makes a worker's writes durable, as given to its thread.
pub enum JournalSetup {
    /// Nothing durable (a memory-tier node without a data directory).
    None,
    /// A memory-tier worker's write-ahead log, and its snapshot threshold in bytes.
    Wal(store::wal::Wal, u64),
    /// A disk-tier worker: the node's LSM journal's syncer.
    Lsm(LsmSyncer),
}

impl JournalSetup {
    /// The journal, on the worker's thread.
    pub(crate) fn build(self) -> Journal {
        match self {
            JournalSetup::None => Journal::None,
            JournalSetup::Wal(log, after) => Journal::Wal(Rc::new(WalJournal::new(log, after))),
            JournalSetup::Lsm(s) => Journal::Lsm(s),
        }
    }
}

/// What makes a worker's writes durable.
pub(crate) enum Journal {
    /// Nothing durable (a memory-tier node without a data directory).
    None,
    /// A memory-tier worker's write-ahead log.
    Wal(Rc<WalJournal>),
    /// A disk-tier worker: the node's LSM journal and its syncer.
    Lsm(LsmSyncer),
}

/// A worker's write-ahead log and its bookkeeping.
pub(crate) struct WalJournal {
    /// The log.
    pub(crate) log: store::wal::Wal,
    /// Payloads waiting for room in the log's queue, in order.
    queue: RefCell<VecDeque<Bytes>>,
    /// Bytes in `queue`.
    queued_bytes: Cell<u64>,
    /// Signalled when `queued_bytes` drops to [`QUEUE_ROOM`] or below.
    room: Notify,
    /// A task is moving `queue` into the log.
    draining: Cell<bool>,
    /// Signalled when `queue` empties.
    drained: Notify,
    /// Bytes appended since the last snapshot.
    since_snapshot: Cell<u64>,
    /// Take a snapshot once this many bytes were appended since the last one.
    snapshot_after: u64,
    /// The next snapshot not before this.
    next_snapshot: Cell<Instant>,
    /// The pause after the next failure.
    backoff: Cell<Duration>,
    /// Snapshots written, and the time they took in all (µs), for the metrics.
    snapshots: Cell<(u64, u64)>,
}

/// A worker's write-ahead log as the metrics see it.
#[derive(Clone, Debug, Default)]
pub struct WalMetrics {
    /// The log's own counters.
    pub log: store::wal::WalStats,
    /// Bytes waiting in the worker for room in the log's queue.
    pub waiting_bytes: u64,
    /// Snapshots this worker wrote since it started.
    pub snapshots: u64,
    /// The time they took in all, µs (from the request to the installed file).
    pub snapshot_micros: u64,
}

/// The fsyncs of a disk-tier node's LSM journal (one syncer for all its workers), as the
/// metrics see them.
#[derive(Clone, Debug, Default)]
pub struct LsmMetrics {
    /// Fsyncs (successful or not).
    pub fsyncs: u64,
    /// The time they took in all, µs.
    pub fsync_micros: u64,
    /// Fsyncs by duration, buckets of [`store::wal::stats::FSYNC_BUCKETS_US`].
    pub fsync_histogram: [u64; store::wal::stats::FSYNC_BUCKETS_US.len() + 1],
    /// Tables of the node's LSM, all levels.
    pub tables: u64,
    /// Tables in level 0: flushes add them, only compactions remove them.
    pub l0_tables: u64,
}

impl WalJournal {
    /// A journal over `log`.
    pub(crate) fn new(log: store::wal::Wal, snapshot_after: u64) -> WalJournal {
        WalJournal {
            log,
            queue: RefCell::new(VecDeque::new()),
            queued_bytes: Cell::new(0),
            room: Notify::new(),
            draining: Cell::new(false),
            drained: Notify::new(),
            since_snapshot: Cell::new(0),
            snapshot_after,
            next_snapshot: Cell::new(Instant::now()),
            backoff: Cell::new(FIRST_SNAPSHOT_BACKOFF),
            snapshots: Cell::new((0, 0)),
        }
    }

    /// Waits until nothing waits for room in the log's queue.
    async fn wait_drained(&self) {
        loop {
            let drained = self.drained.notified();
            if self.queue.borrow().is_empty() && !self.draining.get() {
                return;
            }
            drained.await;
        }
    }

    /// Appends `payload` after everything appended before.
    fn append(self: &Rc<Self>, w: &Rc<Worker>, payload: Bytes) -> Result<(), String> {
        let size = payload.len() as u64;
        let payload = if self.queue.borrow().is_empty() && !self.draining.get() {
            match self.log.try_append_or_keep(payload) {
                Ok(_) => {
                    self.since_snapshot.set(self.since_snapshot.get() + size);
                    return Ok(());
                }
                Err((store::wal::WalError::QueueFull, Some(back))) => back,
                Err((e, _)) => return Err(wal_error(&e).to_string()),
            }
        } else {
            payload
        };
        // The log's queue is full: wait for room, keeping the order.
        self.queue.borrow_mut().push_back(payload);
        self.queued_bytes.set(self.queued_bytes.get() + size);
        if !self.draining.get() {
            self.draining.set(true);
            spawn_local(self.clone().drain(w.clone()));
        }
        Ok(())
    }

    /// Moves `queue` into the log as room appears.
    async fn drain(self: Rc<Self>, w: Rc<Worker>) {
        loop {
            let next = self.queue.borrow_mut().pop_front();
            let Some(payload) = next else { break };
            let size = payload.len() as u64;
            let result = self.log.append(payload).await;
            self.queued_bytes.set(self.queued_bytes.get() - size);
            if self.queued_bytes.get() <= QUEUE_ROOM {
                self.room.notify_waiters();
            }
            match result {
                Ok(_) => self.since_snapshot.set(self.since_snapshot.get() + size),
                Err(e) => {
                    tracing::warn!(error = %e, "write-ahead log append failed");
                    self.queue.borrow_mut().clear();
                    self.queued_bytes.set(0);
                    self.room.notify_waiters();
                    w.with_core(|c| c.set_journal_failure(Some(wal_error(&e).to_string())));
                }
            }
        }
        self.draining.set(false);
        self.drained.notify_waiters();
    }
}

/// A sync the core waits for.
pub(crate) type SyncFuture = Pin<Box<dyn Future<Output = Result<(), NodeError>>>>;

impl Journal {
    /// The log's figures for the metrics (None without a write-ahead log). Reads the log's
    /// counters: called at a scrape, not per request.
    pub(crate) fn wal_metrics(&self) -> Option<WalMetrics> {
        let Journal::Wal(wal) = self else {
            return None;
        };
        let (snapshots, snapshot_micros) = wal.snapshots.get();
        Some(WalMetrics {
            log: wal.log.stats(),
            waiting_bytes: wal.queued_bytes.get(),
            snapshots,
            snapshot_micros,
        })
    }

    /// The LSM journal's fsyncs, for the metrics (None unless on a disk-tier node).
    pub(crate) fn lsm_metrics(&self) -> Option<LsmMetrics> {
        let Journal::Lsm(syncer) = self else {
            return None;
        };
        Some(syncer.metrics())
    }

    /// Appends `payloads` (encoded changes) after everything appended before. Fails (with
    /// why) if the log refuses appends: the core then refuses writes until it accepts them
    /// again.
    pub(crate) fn append(&self, w: &Rc<Worker>, payloads: Vec<Bytes>) -> Result<(), String> {
        let Journal::Wal(wal) = self else {
            return Ok(());
        };
        for payload in payloads {
            let bytes = payload.len();
            wal.append(w, payload).inspect_err(|e| {
                tracing::warn!(error = %e, bytes, "write-ahead log append failed");
            })?;
        }
        Ok(())
    }

    /// An emptied buffer of a payload the log has written, to build the next one in (see
    /// `store::wal::Wal::reuse_buffer`).
    pub(crate) fn reuse_buffer(&self) -> Option<Vec<u8>> {
        match self {
            Journal::Wal(wal) => wal.log.reuse_buffer(),
            _ => None,
        }
    }

    /// Waits while the log is far behind (more than [`QUEUE_ROOM`] bytes wait for room in
    /// its queue): a connection calls this before each batch of requests, so writers slow
    /// down to the disk's pace.
    pub(crate) async fn wait_room(&self) {
        let Journal::Wal(wal) = self else {
            return;
        };
        loop {
            let room = wal.room.notified();
            if wal.queued_bytes.get() <= QUEUE_ROOM {
                return;
            }
            room.await;
        }
    }

    /// Resolves once everything appended so far is durable. `strict`: fail without durable
    /// storage (a client asked for the durable level); otherwise succeed (as durable as
    /// this worker gets).
    pub(crate) fn sync(&self, strict: bool) -> SyncFuture {
        match self {
            Journal::None if strict => Box::pin(async {
                Err(NodeError::Storage(
                    "durable acknowledgement needs durable storage: start the node with a \
                     data directory (--data-dir)"
                        .into(),
                ))
            }),
            Journal::None => Box::pin(async { Ok(()) }),
            Journal::Wal(wal) => {
                let wal = wal.clone();
                // Durable means fsynced whatever the policy: the policy only bounds how
                // long records nobody waits for stay un-fsynced. `sync` asks the writer
                // for an fsync covering everything appended so far (one for every
                // waiter queued meanwhile: group commit).
                Box::pin(async move {
                    wal.wait_drained().await;
                    wal.log.sync().await.map(|_| ()).map_err(|e| wal_error(&e))
                })
            }
            Journal::Lsm(syncer) => {
                let syncer = syncer.clone();
                Box::pin(async move { syncer.sync().await })
            }
        }
    }
}

/// Maps a log failure to the error a writer gets.
pub(crate) fn wal_error(e: &store::wal::WalError) -> NodeError {
    NodeError::Storage(format!("write-ahead log: {e}"))
}

/// The log's task: notices when a failed log accepts appends again, and snapshots the
/// store once enough log has accumulated.
pub(crate) async fn run(w: Rc<Worker>) {
    let Journal::Wal(wal) = &w.journal else {
        return;
    };
    let wal = wal.clone();
    let mut shutdown = w.shared.shutdown();
    let mut tick = tokio::time::interval(CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        let failed = w.core().shard().journal_failure().is_some();
        if failed {
            if wal.log.health().is_err() {
                continue;
            }
            tracing::info!(worker = w.index, "write-ahead log accepts appends again");
            w.with_core(|c| c.set_journal_failure(None));
        }
        let due = wal.since_snapshot.get() >= wal.snapshot_after
            && Instant::now() >= wal.next_snapshot.get();
        if due {
            let started = Instant::now();
            match snapshot(&w, &wal).await {
                Ok(info) => {
                    wal.backoff.set(FIRST_SNAPSHOT_BACKOFF);
                    let took = started.elapsed();
                    let (n, micros) = wal.snapshots.get();
                    wal.snapshots.set((n + 1, micros + took.as_micros() as u64));
                    let took_ms = took.as_millis() as u64;
                    tracing::info!(worker = w.index, ?info, took_ms, "snapshot written");
                }
                Err(e) => {
                    let backoff = wal.backoff.get();
                    wal.next_snapshot.set(Instant::now() + backoff);
                    wal.backoff.set((backoff * 2).min(MAX_SNAPSHOT_BACKOFF));
                    tracing::warn!(worker = w.index, error = %e, retry_in = ?backoff, "snapshot failed");
                }
            }
        }
    }
}

/// Writes a snapshot of the worker's store (see the module docs).
async fn snapshot(
    w: &Rc<Worker>,
    wal: &Rc<WalJournal>,
) -> Result<store::wal::SnapshotInfo, String> {
    // Everything the core queued goes to the log first: the snapshot covers it.
    w.with_core(crate::core::Core::flush_journal_now);
    wal.wait_drained().await;
    let lsn = wal.log.last_lsn();
    let appended = wal.since_snapshot.get();
    let mut writer = wal.log.begin_snapshot(lsn).map_err(|e| e.to_string())?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Vec<JournalEntry>>(4);
    let (done_tx, done) = oneshot::channel();
    std::thread::Builder::new()
        .name("lkv-snapshot".into())
        .spawn(move || {
            // Nobody waits for a snapshot: requests on this core go first.
            crate::priority::lower_this_thread(crate::priority::BACKGROUND_NICE);
            let mut rx = rx;
            let mut result = Ok(());
            while let Some(chunk) = rx.blocking_recv() {
                for payload in encode_journal_chunks(&chunk, MAX_PAYLOAD) {
                    if result.is_ok() {
                        result = writer.append(&payload);
                    }
                }
            }
            let outcome = result.and_then(|()| writer.finish());
            let _ = done_tx.send(outcome);
        })
        .map_err(|e| e.to_string())?;
    let mut partition = 0;
    while partition < store::PARTITIONS {
        for _ in 0..SNAPSHOT_PARTITIONS_PER_STEP {
            if partition >= store::PARTITIONS {
                break;
            }
            let chunk = w.core().shard().partition_entries_for_log(partition);
            partition += 1;
            if !chunk.is_empty() && tx.send(chunk).await.is_err() {
                break;
            }
        }
        // Requests run between partitions.
        tokio::task::yield_now().await;
    }
    drop(tx);
    let info = done
        .await
        .map_err(|_| "the snapshot thread stopped".to_string())?
        .map_err(|e| e.to_string())?;
    wal.since_snapshot
        .set(wal.since_snapshot.get().saturating_sub(appended));
    Ok(info)
}

/// Closes the log at the end: what is queued goes in, then the writer finishes.
pub(crate) async fn close(w: &Rc<Worker>) {
    if let Journal::Wal(wal) = &w.journal {
        wal.wait_drained().await;
        if let Err(e) = wal.log.close().await {
            tracing::warn!(worker = w.index, error = %e, "closing the write-ahead log");
        }
    }
}

/// Opens (and replays into `shard`) the write-ahead log of one memory-tier worker.
pub fn open_wal(
    dir: &Path,
    options: store::wal::WalOptions,
    shard: &mut Shard,
) -> Result<(store::wal::Wal, store::wal::Recovery), store::wal::WalError> {
    open_wal_reporting(dir, options, shard, &())
}

/// [`open_wal`], telling `progress` the bytes replayed (a few times per MiB).
pub fn open_wal_reporting(
    dir: &Path,
    options: store::wal::WalOptions,
    shard: &mut Shard,
    progress: &dyn super::replay::ReplayProgress,
) -> Result<(store::wal::Wal, store::wal::Recovery), store::wal::WalError> {
    let mut pending = 0u64;
    let opened = store::wal::Wal::open(dir, options, |item: store::wal::Replayed<'_>| {
        let payload = match item {
            store::wal::Replayed::Snapshot { record, .. } => record,
            store::wal::Replayed::Log { payload, .. } => payload,
        };
        pending += (payload.len() + store::wal::layout::RECORD_HEADER_LEN) as u64;
        if pending >= super::replay::REPORT_EVERY {
            progress.advance(std::mem::take(&mut pending));
        }
        shard.restore(decode_journal(payload)?);
        Ok::<(), NodeError>(())
    });
    progress.advance(pending);
    opened
}

/// One request to the syncer: reply when everything written before it is synced.
type SyncRequest = oneshot::Sender<Result<(), String>>;

/// Syncs a disk-tier node's LSM journal: every `every` (if non-zero) and whenever a
/// worker asks, one `fdatasync` answering every request queued meanwhile.
#[derive(Clone)]
pub struct LsmSyncer {
    tx: std_mpsc::SyncSender<SyncRequest>,
    counters: Arc<FsyncCounters>,
    /// The database, for its table counts.
    db: DiskDb,
}

/// The syncer thread's counters (relaxed atomics, updated once per fsync).
#[derive(Default)]
struct FsyncCounters {
    fsyncs: AtomicU64,
    micros: AtomicU64,
    histogram: [AtomicU64; store::wal::stats::FSYNC_BUCKETS_US.len() + 1],
}

/// Most sync requests queued before workers wait for room.
const SYNC_QUEUE: usize = 4096;

impl LsmSyncer {
    /// Starts the syncer thread for `db`. It stops (after a last sync) when every
    /// [`LsmSyncer`] handle is dropped.
    pub fn start(db: DiskDb, every: Duration) -> std::io::Result<(LsmSyncer, JoinHandle<()>)> {
        let (tx, rx) = std_mpsc::sync_channel::<SyncRequest>(SYNC_QUEUE);
        let counters = Arc::new(FsyncCounters::default());
        let c = counters.clone();
        let handle = db.clone();
        let thread = std::thread::Builder::new()
            .name("lkv-lsm-sync".into())
            .spawn(move || sync_loop(db, every, rx, &c))?;
        Ok((
            LsmSyncer {
                tx,
                counters,
                db: handle,
            },
            thread,
        ))
    }

    /// Its fsyncs so far.
    fn metrics(&self) -> LsmMetrics {
        let c = &self.counters;
        let (tables, l0_tables) = self.db.table_counts();
        let mut m = LsmMetrics {
            fsyncs: c.fsyncs.load(Ordering::Relaxed),
            fsync_micros: c.micros.load(Ordering::Relaxed),
            tables,
            l0_tables,
            ..LsmMetrics::default()
        };
        for (out, a) in m.fsync_histogram.iter_mut().zip(&c.histogram) {
            *out = a.load(Ordering::Relaxed);
        }
        m
    }

    /// Resolves once everything written to the LSM before the call is on disk.
    pub async fn sync(&self) -> Result<(), NodeError> {
        let (reply, done) = oneshot::channel();
        let tx = self.tx.clone();
        // The queue is large; a full one means the disk is far behind: wait off the loop.
        if let Err(std_mpsc::TrySendError::Full(reply)) = tx.try_send(reply) {
            tokio::task::spawn_blocking(move || tx.send(reply))
                .await
                .map_err(|_| NodeError::ShuttingDown)?
                .map_err(|_| NodeError::ShuttingDown)?;
        }
        match done.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(NodeError::Storage(e)),
            Err(_) => Err(NodeError::ShuttingDown),
        }
    }
}

fn sync_loop(
    db: DiskDb,
    every: Duration,
    rx: std_mpsc::Receiver<SyncRequest>,
    counters: &FsyncCounters,
) {
    let wait = if every.is_zero() {
        Duration::from_secs(3600)
    } else {
        every
    };
    loop {
        let mut waiting = Vec::new();
        let mut closed = false;
        match rx.recv_timeout(wait) {
            Ok(first) => waiting.push(first),
            Err(std_mpsc::RecvTimeoutError::Timeout) => {
                if every.is_zero() {
                    continue;
                }
            }
            Err(std_mpsc::RecvTimeoutError::Disconnected) => closed = true,
        }
        while let Ok(more) = rx.try_recv() {
            waiting.push(more);
        }
        let started = Instant::now();
        let result = db.persist(true).map_err(|e| e.to_string());
        let micros = started.elapsed().as_micros() as u64;
        counters.fsyncs.fetch_add(1, Ordering::Relaxed);
        counters.micros.fetch_add(micros, Ordering::Relaxed);
        counters.histogram[store::wal::stats::fsync_bucket(micros)].fetch_add(1, Ordering::Relaxed);
        if let Err(e) = &result {
            tracing::warn!(error = %e, "fdatasync of the disk journal failed");
        }
        for w in waiting {
            let _ = w.send(result.clone());
        }
        if closed {
            return;
        }
    }
}
