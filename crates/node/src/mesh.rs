//! Messages between the workers of a node, and the bounded channels that carry them.
//!
//! Every worker has one inbox. Other workers (and the acceptor) hold a [`Mesh`] with a sender
//! to every inbox. Inboxes are bounded: a full inbox makes forwarding connections wait (back
//! pressure on that client only) and makes gossip retry at the next round; nothing in a
//! worker's loop ever blocks on another worker.

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::op::{Op, OpResult};
use crate::shard::{GossipBatch, ShardStats};

/// Capacity of each worker's inbox.
pub const INBOX_CAPACITY: usize = 4096;

/// Which protocol a handed-over connection speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// Native protocol on the front port: forwards requests for other workers' keys.
    NativeFront,
    /// Redis protocol.
    Resp,
}

/// A message to a worker.
#[derive(Debug)]
pub enum WorkerMsg {
    /// Execute ops on keys this worker holds and answer with one result per op.
    Exec {
        /// The ops.
        ops: Vec<Op<Bytes>>,
        /// The acknowledgement each write needs before the answer.
        ack: crate::durability::Ack,
        /// Where to answer.
        reply: oneshot::Sender<Vec<OpResult>>,
    },
    /// Merge a gossip batch from another worker.
    Gossip(GossipBatch),
    /// Merge a batch and acknowledge it (synchronous replication): `true` if it was merged
    /// (and, on a disk-tier worker, written; and, if the flag says durable, on disk).
    Replicate(GossipBatch, bool, oneshot::Sender<bool>),
    /// Report counters.
    Stats(oneshot::Sender<WorkerStats>),
    /// Serve a connection accepted on a shared port (with its slot in the connection limit,
    /// or `None` if the node is full and the connection only gets an error).
    Connection(
        std::net::TcpStream,
        Protocol,
        Option<crate::worker::ConnectionPermit>,
    ),
}

/// Counters of one worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Worker index.
    pub worker: u32,
    /// Shard counters.
    pub shard: ShardStats,
    /// Open client connections on this worker.
    pub connections: u64,
    /// Replication batches sent to other nodes and not yet acknowledged.
    pub batches_in_flight: u64,
    /// Keys subscribed by connections on this worker.
    pub subscriptions: u64,
}

impl WorkerStats {
    /// True if the worker has nothing left to hand to another node: it stores nothing
    /// (tombstones included), has no replication queued (requeued batches included) and
    /// none in flight. A leaving node stops only when all its workers are so: a worker
    /// that holds no live key may still hold a delete, or the only copy of a write whose
    /// first recipient has crashed since.
    pub fn handed_everything_off(&self) -> bool {
        self.shard.stored_keys == 0
            && self.shard.pending_replication == 0
            && self.batches_in_flight == 0
    }
}

/// Senders to every worker's inbox, indexed by worker.
#[derive(Clone, Debug)]
pub struct Mesh {
    inboxes: Vec<mpsc::Sender<WorkerMsg>>,
}

impl Mesh {
    /// Creates the inboxes of `workers` workers: the mesh and each worker's receiver.
    pub fn new(workers: usize) -> (Mesh, Vec<mpsc::Receiver<WorkerMsg>>) {
        let (inboxes, receivers) = (0..workers).map(|_| mpsc::channel(INBOX_CAPACITY)).unzip();
        (Mesh { inboxes }, receivers)
    }

    /// Number of workers.
    pub fn len(&self) -> usize {
        self.inboxes.len()
    }

    /// True if there are no workers.
    pub fn is_empty(&self) -> bool {
        self.inboxes.is_empty()
    }

    /// Sends `msg` to `worker`, waiting while its inbox is full. Fails if the worker is gone.
    pub async fn send(&self, worker: u32, msg: WorkerMsg) -> Result<(), WorkerMsg> {
        match self.inboxes.get(worker as usize) {
            Some(tx) => tx.send(msg).await.map_err(|e| e.0),
            None => Err(msg),
        }
    }

    /// Sends `msg` to `worker` without waiting; gives it back if the inbox is full or gone.
    pub fn try_send(&self, worker: u32, msg: WorkerMsg) -> Result<(), WorkerMsg> {
        match self.inboxes.get(worker as usize) {
            Some(tx) => tx.try_send(msg).map_err(|e| match e {
                mpsc::error::TrySendError::Full(m) | mpsc::error::TrySendError::Closed(m) => m,
            }),
            None => Err(msg),
        }
    }

    /// Executes `ops` on `worker` and waits for the results.
    pub async fn exec(&self, worker: u32, ops: Vec<Op<Bytes>>) -> Option<Vec<OpResult>> {
        let (reply, rx) = oneshot::channel();
        let ack = crate::durability::Ack::MERGED;
        self.send(worker, WorkerMsg::Exec { ops, ack, reply })
            .await
            .ok()?;
        rx.await.ok()
    }

    /// Collects every worker's counters (workers that are gone are skipped).
    pub async fn stats(&self) -> Vec<WorkerStats> {
        let mut out = Vec::with_capacity(self.inboxes.len());
        for w in 0..self.inboxes.len() as u32 {
            let (tx, rx) = oneshot::channel();
            if self.send(w, WorkerMsg::Stats(tx)).await.is_ok() {
                if let Ok(s) = rx.await {
                    out.push(s);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handed_everything_off_needs_no_keys_nothing_queued_nothing_in_flight() {
        let done = WorkerStats::default();
        assert!(done.handed_everything_off());
        let mut tombstone = done;
        tombstone.shard.stored_keys = 1;
        assert!(
            !tombstone.handed_everything_off(),
            "no live key, but a delete"
        );
        let mut requeued = done;
        requeued.shard.pending_replication = 1;
        assert!(!requeued.handed_everything_off());
        let mut sending = done;
        sending.batches_in_flight = 1;
        assert!(!sending.handed_everything_off());
    }
}
