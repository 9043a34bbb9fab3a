//! The channels between the workers of a node: one bounded inbox per worker, a sender to
//! every inbox in the [`Mesh`]. A full inbox makes senders that can wait (a connection
//! handing over work) wait, and senders that cannot (a worker) fail the message at once,
//! which the replica core treats like an unreachable peer: nothing in a worker's loop ever
//! blocks on another worker.

use tokio::sync::mpsc;

/// Capacity of each worker's inbox.
pub const INBOX_CAPACITY: usize = 4096;

/// Senders to every worker's inbox, indexed by worker.
#[derive(Debug)]
pub struct Mesh<M> {
    inboxes: Vec<mpsc::Sender<M>>,
}

impl<M> Clone for Mesh<M> {
    fn clone(&self) -> Self {
        Mesh {
            inboxes: self.inboxes.clone(),
        }
    }
}

impl<M> Mesh<M> {
    /// Creates the inboxes of `workers` workers: the mesh and each worker's receiver.
    pub fn new(workers: usize) -> (Mesh<M>, Vec<mpsc::Receiver<M>>) {
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
    pub async fn send(&self, worker: u32, msg: M) -> Result<(), M> {
        match self.inboxes.get(worker as usize) {
            Some(tx) => tx.send(msg).await.map_err(|e| e.0),
            None => Err(msg),
        }
    }

    /// Sends `msg` to `worker` without waiting; gives it back if the inbox is full or gone.
    pub fn try_send(&self, worker: u32, msg: M) -> Result<(), M> {
        match self.inboxes.get(worker as usize) {
            Some(tx) => tx.try_send(msg).map_err(|e| match e {
                mpsc::error::TrySendError::Full(m) | mpsc::error::TrySendError::Closed(m) => m,
            }),
            None => Err(msg),
        }
    }
}
