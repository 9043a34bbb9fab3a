//! Durability of a worker's writes and the acknowledgement levels built on it.
//!
//! A memory-tier worker with a data directory keeps a write-ahead log ([`store::wal::Wal`]): every
//! change to its store (a client write's delta, a merge received by gossip, hand-off or
//! repair) is appended as one record per batch, and replayed on restart. A disk-tier worker
//! needs no log of its own: its LSM's journal already holds every write, and a
//! [`LsmSyncer`] thread `fdatasync`s it — periodically, and on demand for writes that asked
//! for the durable level, one sync covering every waiter (group commit).
//!
//! Acknowledgement levels ([`AckLevel`]): `merged` answers once the write is merged into the
//! replica that ran it (in memory; the log record follows within the same event-loop turn);
//! `durable` answers once it is on disk there (WAL record or LSM journal synced). Either
//! combines with `ack_replicas = N` (the cluster's synchronous fan-out), which then counts
//! replicas that reached that level.

use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use serde::Deserialize;
use store::DiskDb;
use tokio::sync::oneshot;
use wire::pb;

use crate::error::NodeError;
use crate::shard::{GossipBatch, Shard};

/// When a write is acknowledged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AckLevel {
    /// After the merge at the replica that ran it (the default; lost if that node dies
    /// before its log record reaches the disk, see `docs/durability.md`).
    #[default]
    Merged,
    /// After the write is on disk at that replica (WAL record fsynced under the WAL's
    /// policy, or the LSM journal synced).
    Durable,
}

impl std::str::FromStr for AckLevel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "merged" => Ok(AckLevel::Merged),
            "durable" => Ok(AckLevel::Durable),
            other => Err(format!(
                "unknown acknowledgement level {other:?} (merged or durable)"
            )),
        }
    }
}

/// The acknowledgement a write asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ack {
    /// Replicas (counting the one that ran it) that must hold the write: 0 or 1 is the
    /// replica that ran it alone.
    pub replicas: usize,
    /// Each of them must have it on disk.
    pub durable: bool,
}

impl Ack {
    /// The default: after the merge at the replica that ran the write.
    pub const MERGED: Ack = Ack {
        replicas: 1,
        durable: false,
    };

    /// True for the default level (no fan-out, no wait for the disk).
    pub fn is_default(&self) -> bool {
        self.replicas <= 1 && !self.durable
    }
}

/// What a worker waits on to make its writes durable.
pub enum Durability {
    /// Nothing durable (a memory-tier node without a data directory): durable
    /// acknowledgements are refused.
    None,
    /// A memory-tier worker's write-ahead log.
    Wal(WalState),
    /// A disk-tier worker: the node's LSM journal and its syncer.
    Lsm(LsmSyncer),
}

/// A worker's write-ahead log and its bookkeeping.
pub struct WalState {
    /// The log.
    pub log: store::wal::Wal,
    /// Bytes appended since the last snapshot.
    pub since_snapshot: std::cell::Cell<u64>,
    /// A snapshot is being written.
    pub snapshotting: std::cell::Cell<bool>,
    /// Take a snapshot once this many bytes were appended since the last one.
    pub snapshot_after: u64,
}

/// Appends the shard's pending changes to the worker's log (waiting only while the log's
/// queue is full). Returns the LSN covering every change made so far, if there is a log.
pub async fn flush_journal(
    shard: &std::cell::RefCell<Shard>,
    durability: &Durability,
) -> Result<Option<store::wal::Lsn>, NodeError> {
    let Durability::Wal(state) = durability else {
        return Ok(None);
    };
    let batch = shard.borrow_mut().take_journal();
    if batch.is_empty() {
        return Ok(Some(state.log.last_lsn()));
    }
    let payload = encode_batch(&batch);
    let size = payload.len() as u64;
    let result = match state.log.try_append(payload.clone()) {
        Err(store::wal::WalError::QueueFull) => state.log.append(payload).await,
        other => other,
    };
    match result {
        Ok(lsn) => {
            state.since_snapshot.set(state.since_snapshot.get() + size);
            shard.borrow_mut().set_journal_failure(None);
            Ok(Some(lsn))
        }
        Err(e) => {
            let err = wal_error(&e);
            tracing::warn!(error = %e, changes = batch.len(), "write-ahead log append failed");
            shard
                .borrow_mut()
                .set_journal_failure(Some(err.to_string()));
            Err(err)
        }
    }
}

/// Waits until every change this worker made so far is durable.
pub async fn make_durable(
    shard: &std::cell::RefCell<Shard>,
    durability: &Durability,
) -> Result<(), NodeError> {
    match durability {
        Durability::None => Err(NodeError::Storage(
            "durable acknowledgement needs durable storage: start the node with a data \
             directory (--data-dir)"
                .into(),
        )),
        Durability::Wal(state) => {
            let lsn = flush_journal(shard, durability).await?.unwrap_or(0);
            state.log.wait_durable(lsn).await.map_err(|e| wal_error(&e))
        }
        Durability::Lsm(syncer) => syncer.sync().await,
    }
}

/// How often a worker moves its pending changes to its log.
pub const JOURNAL_FLUSH: Duration = Duration::from_millis(2);

/// Encodes a batch of records as one WAL payload (the `Replicate` message: the same
/// entries gossip carries).
pub fn encode_batch(batch: &GossipBatch) -> Bytes {
    let msg = pb::Replicate {
        entries: crate::worker::encode_entries(batch),
        sender: String::new(),
        durable: false,
    };
    Bytes::from(msg.encode_to_vec())
}

/// Decodes a WAL payload written by [`encode_batch`].
pub fn decode_batch(payload: &[u8]) -> Result<GossipBatch, NodeError> {
    let msg = pb::Replicate::decode(payload)
        .map_err(|e| NodeError::BadRequest(format!("undecodable log record: {e}")))?;
    Ok(crate::worker::decode_entries(msg.entries))
}

/// Opens (and replays into `shard`) the write-ahead log of one memory-tier worker.
pub fn open_wal(
    dir: &Path,
    options: store::wal::WalOptions,
    shard: &mut Shard,
) -> Result<(store::wal::Wal, store::wal::Recovery), store::wal::WalError> {
    store::wal::Wal::open(dir, options, |item: store::wal::Replayed<'_>| {
        let payload = match item {
            store::wal::Replayed::Snapshot { record, .. } => record,
            store::wal::Replayed::Log { payload, .. } => payload,
        };
        let batch = decode_batch(payload)?;
        shard.restore(batch);
        Ok::<(), NodeError>(())
    })
}

/// Entries per snapshot record.
const SNAPSHOT_CHUNK: usize = 512;

/// Writes a snapshot of `shard`'s store covering everything the log holds up to `lsn`
/// (the caller flushes the shard's pending log entries first). Encoding runs here (the
/// store belongs to this thread); the final fsync and rename are left to the returned
/// writer's `finish`, which the caller runs off the event loop.
pub fn snapshot(
    log: &store::wal::Wal,
    lsn: store::wal::Lsn,
    shard: &Shard,
) -> Result<store::wal::SnapshotWriter, store::wal::WalError> {
    let mut writer = log.begin_snapshot(lsn)?;
    let mut chunk: GossipBatch = Vec::with_capacity(SNAPSHOT_CHUNK);
    let mut failed = None;
    shard.for_each_stored(|key, record| {
        if failed.is_some() {
            return;
        }
        chunk.push((Bytes::copy_from_slice(key), record));
        if chunk.len() == SNAPSHOT_CHUNK {
            if let Err(e) = writer.append(&encode_batch(&chunk)) {
                failed = Some(e);
            }
            chunk.clear();
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    if !chunk.is_empty() {
        writer.append(&encode_batch(&chunk))?;
    }
    Ok(writer)
}

/// Maps a log failure to the error a writer gets.
pub fn wal_error(e: &store::wal::WalError) -> NodeError {
    NodeError::Storage(format!("write-ahead log: {e}"))
}

/// One request to the syncer: reply when everything written before it is synced.
type SyncRequest = oneshot::Sender<Result<(), String>>;

/// Syncs a disk-tier node's LSM journal: every `every` (if non-zero) and whenever a
/// worker asks, one `fdatasync` answering every request queued meanwhile.
#[derive(Clone)]
pub struct LsmSyncer {
    tx: mpsc::SyncSender<SyncRequest>,
}

/// Most sync requests queued before workers wait for room.
const SYNC_QUEUE: usize = 4096;

impl LsmSyncer {
    /// Starts the syncer thread for `db`. It stops (after a last sync) when every
    /// [`LsmSyncer`] handle is dropped.
    pub fn start(db: DiskDb, every: Duration) -> std::io::Result<(LsmSyncer, JoinHandle<()>)> {
        let (tx, rx) = mpsc::sync_channel::<SyncRequest>(SYNC_QUEUE);
        let thread = std::thread::Builder::new()
            .name("lkv-lsm-sync".into())
            .spawn(move || sync_loop(db, every, rx))?;
        Ok((LsmSyncer { tx }, thread))
    }

    /// Resolves once everything written to the LSM before the call is on disk.
    pub async fn sync(&self) -> Result<(), NodeError> {
        let (reply, done) = oneshot::channel();
        let tx = self.tx.clone();
        // The queue is large; a full one means the disk is far behind: wait off the loop.
        if let Err(mpsc::TrySendError::Full(reply)) = tx.try_send(reply) {
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

fn sync_loop(db: DiskDb, every: Duration, rx: mpsc::Receiver<SyncRequest>) {
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
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if every.is_zero() {
                    continue;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => closed = true,
        }
        while let Ok(more) = rx.try_recv() {
            waiting.push(more);
        }
        let result = db.persist(true).map_err(|e| e.to_string());
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use lattice::{Lww, Record, Timestamp, Value};
    use placement::{node_key, Replica};

    use super::*;
    use crate::cluster::{default_vector, ViewState};
    use crate::config::Limits;
    use crate::op::{Condition, Op, OpResult};
    use crate::shard::ShardConfig;

    fn shard() -> Shard {
        let view = ViewState::single_node("n", 1, 32, default_vector(1, 1));
        Shard::new(
            ShardConfig {
                me: Replica {
                    node: node_key("n"),
                    worker: 0,
                },
                limits: Limits::default(),
                memory_budget: 1 << 30,
                max_changeset_keys: 1024,
                settle_ms: 1_000,
                clock_skew_ms: 0,
            },
            Arc::new(view),
        )
    }

    fn options() -> store::wal::WalOptions {
        store::wal::WalOptions::default()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn every_change_is_logged_and_replayed() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = shard();
            let (log, _) = open_wal(dir.path(), options(), &mut s).unwrap();
            s.enable_journal();
            let assign = s.execute(Op::Assign {
                key: &b"a"[..],
                value: &b"1"[..],
                condition: Condition::Always,
            });
            assert_eq!(assign, OpResult::Int(1));
            for _ in 0..3 {
                s.execute(Op::CounterAdd {
                    key: &b"c"[..],
                    delta: 2,
                });
            }
            s.execute(Op::SetAdd {
                key: &b"s"[..],
                members: vec![&b"x"[..], &b"y"[..]],
            });
            s.execute(Op::SetRemove {
                key: &b"s"[..],
                members: vec![&b"x"[..]],
            });
            let ts = Timestamp::new(5 << 16, 99);
            s.merge_gossip(vec![(
                Bytes::from_static(b"g"),
                Record::new(
                    ts,
                    Some(Value::Lww(Lww::new(ts, Box::from(&b"gossiped"[..])))),
                ),
            )]);
            let batch = s.take_journal();
            assert!(batch.len() >= 7, "{} changes logged", batch.len());
            let lsn = log.append(encode_batch(&batch)).await.unwrap();
            log.wait_durable(lsn).await.unwrap();
            log.close().await.unwrap();
        }
        let mut s = shard();
        let (_log, _) = open_wal(dir.path(), options(), &mut s).unwrap();
        let get = |s: &mut Shard, k: &'static [u8]| match s.execute(Op::Get { key: k }) {
            OpResult::Value(v) => v,
            other => panic!("{other:?}"),
        };
        match get(&mut s, b"c") {
            Some(Value::Counter(c)) => assert_eq!(c.value(), 6),
            other => panic!("{other:?}"),
        }
        match get(&mut s, b"s") {
            Some(Value::OrSet(set)) => {
                assert!(set.contains(&b"y"[..]) && !set.contains(&b"x"[..]))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(get(&mut s, b"a"), Some(Value::Lww(_))));
        assert!(matches!(get(&mut s, b"g"), Some(Value::Lww(_))));
        assert_eq!(s.stats().live_keys, 4);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_snapshot_replaces_the_log_it_covers() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = shard();
            let (log, _) = open_wal(dir.path(), options(), &mut s).unwrap();
            s.enable_journal();
            for i in 0..2_000 {
                let key = format!("k{i}");
                s.execute(Op::Assign {
                    key: key.as_bytes(),
                    value: &b"v"[..],
                    condition: Condition::Always,
                });
                if i % 100 == 99 {
                    log.append(encode_batch(&s.take_journal())).await.unwrap();
                }
            }
            let lsn = log.last_lsn();
            let writer = snapshot(&log, lsn, &s).unwrap();
            tokio::task::spawn_blocking(move || writer.finish())
                .await
                .unwrap()
                .unwrap();
            log.close().await.unwrap();
        }
        let mut s = shard();
        let (_log, _) = open_wal(dir.path(), options(), &mut s).unwrap();
        assert_eq!(s.stats().live_keys, 2_000);
    }

    #[test]
    fn ack_levels_parse() {
        assert_eq!("durable".parse::<AckLevel>(), Ok(AckLevel::Durable));
        assert_eq!("merged".parse::<AckLevel>(), Ok(AckLevel::Merged));
        assert!("fast".parse::<AckLevel>().is_err());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_lsm_syncer_answers_every_waiter() {
        let dir = tempfile::tempdir().unwrap();
        let db = DiskDb::open(dir.path(), &store::DiskOptions::default()).unwrap();
        let (syncer, thread) = LsmSyncer::start(db, Duration::from_millis(0)).unwrap();
        let waits: Vec<_> = (0..50)
            .map(|_| {
                let s = syncer.clone();
                tokio::spawn(async move { s.sync().await })
            })
            .collect();
        for w in waits {
            w.await.unwrap().unwrap();
        }
        drop(syncer);
        thread.join().unwrap();
    }
}
