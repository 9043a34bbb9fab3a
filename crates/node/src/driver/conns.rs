//! Connection accounting: the node-wide limit on client connections, and each worker's
//! count of the connections it serves (so a stopping worker can wait for them).

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// The node-wide count of open client connections, against a limit.
#[derive(Debug)]
pub struct ConnectionLimit {
    open: AtomicUsize,
    max: usize,
}

impl ConnectionLimit {
    /// A limit of `max` connections.
    pub fn new(max: usize) -> Arc<ConnectionLimit> {
        Arc::new(ConnectionLimit {
            open: AtomicUsize::new(0),
            max,
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }
}

/// A slot in the node-wide connection limit, released when dropped.
#[derive(Debug)]
pub struct ConnectionPermit {
    limit: Arc<ConnectionLimit>,
}

impl ConnectionPermit {
    /// Takes a slot, or `None` if the node is at its limit.
    pub fn acquire(limit: &Arc<ConnectionLimit>) -> Option<Self> {
        let prev = limit.open.fetch_add(1, Ordering::Relaxed);
        if prev >= limit.max {
            limit.open.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(ConnectionPermit {
            limit: limit.clone(),
        })
    }
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        self.limit.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The connections one worker serves.
#[derive(Debug, Default)]
pub struct LocalConnections {
    open: Cell<u64>,
    closed: Notify,
}

impl LocalConnections {
    /// Connections open on this worker.
    pub fn open(&self) -> u64 {
        self.open.get()
    }

    /// Waits until every connection of this worker has closed.
    pub async fn all_closed(&self) {
        while self.open.get() > 0 {
            let closed = self.closed.notified();
            if self.open.get() == 0 {
                break;
            }
            closed.await;
        }
    }
}

/// Counts a connection on its worker while alive.
pub struct LocalConnection {
    conns: Rc<LocalConnections>,
}

impl LocalConnection {
    /// Registers a connection.
    pub fn new(conns: &Rc<LocalConnections>) -> Self {
        conns.open.set(conns.open.get() + 1);
        LocalConnection {
            conns: conns.clone(),
        }
    }
}

impl Drop for LocalConnection {
    fn drop(&mut self) {
        let c = &self.conns;
        c.open.set(c.open.get().saturating_sub(1));
        c.closed.notify_waiters();
    }
}
