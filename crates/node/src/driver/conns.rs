//! Connection accounting: the node-wide limit on client connections, and each worker's
//! count of the connections it serves (so a stopping worker can wait for them).
//!
//! Only client connections (native and RESP ports) count against `max_connections`: peer
//! connections (the peer port, and connections to other nodes) never take a client slot,
//! and [`fit_client_limit`] keeps file descriptors for them, so clients at their limit —
//! idle or not — cannot lock peers out. Beyond the limit a few slots are kept for
//! administrators: a connection in one must authenticate as a user with the admin
//! permission before anything else, or it is closed (so an operator can still connect to a
//! node whose clients took every slot).

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// File descriptors kept for everything but client connections: peer connections to and
/// from other nodes' workers and agents, the write-ahead logs, the disk tier's files,
/// listeners.
pub const RESERVED_FDS: u64 = 1024;

/// The soft limit on open files to ask for, and how many client connections fit, for
/// `clients` wanted under the limits `soft` and `hard`: enough for the clients and
/// [`RESERVED_FDS`] if the hard limit allows, else the hard limit and fewer clients.
pub fn clients_that_fit(clients: usize, soft: u64, hard: u64) -> (u64, usize) {
    let wanted = (clients as u64).saturating_add(RESERVED_FDS);
    let soft = soft.max(wanted.min(hard));
    let fit = soft.saturating_sub(RESERVED_FDS);
    (
        soft,
        clients.min(usize::try_from(fit).unwrap_or(usize::MAX)),
    )
}

/// Raises the process's soft limit on open files toward `clients` + [`RESERVED_FDS`] (up to
/// the hard limit) and returns how many client connections fit: `clients`, or fewer — with
/// a warning — if the process may not open that many files (as Redis lowers `maxclients`).
pub fn fit_client_limit(clients: usize) -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we pass; it has no other precondition.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return clients;
    }
    let (soft, fit) = clients_that_fit(clients, limit.rlim_cur, limit.rlim_max);
    if soft > limit.rlim_cur {
        let raised = libc::rlimit {
            rlim_cur: soft,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads the struct we pass; it has no other precondition.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            let (_, fit) = clients_that_fit(clients, limit.rlim_cur, limit.rlim_cur);
            tracing::warn!(
                wanted = clients,
                fit,
                "could not raise the open-file limit: fewer client connections allowed"
            );
            return fit;
        }
    }
    if fit < clients {
        tracing::warn!(
            wanted = clients,
            fit,
            open_files = soft,
            "the open-file limit leaves room for fewer client connections than \
             limits.max_connections (raise `ulimit -n`)"
        );
    }
    fit
}

/// The node-wide count of open client connections, against a limit.
#[derive(Debug)]
pub struct ConnectionLimit {
    open: AtomicUsize,
    max: usize,
    /// Slots beyond `max` for connections that authenticate as administrators.
    admin: usize,
}

impl ConnectionLimit {
    /// A limit of `max` connections, and `admin` more for administrators.
    pub fn new(max: usize, admin: usize) -> Arc<ConnectionLimit> {
        Arc::new(ConnectionLimit {
            open: AtomicUsize::new(0),
            max,
            admin,
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
    /// A slot kept for administrators: the connection must authenticate as one.
    pub admin_only: bool,
}

impl ConnectionPermit {
    /// Takes a slot — one of the administrators' once the others are taken — or `None` if
    /// every slot is taken.
    pub fn acquire(limit: &Arc<ConnectionLimit>) -> Option<Self> {
        let prev = limit.open.fetch_add(1, Ordering::Relaxed);
        if prev >= limit.max.saturating_add(limit.admin) {
            limit.open.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(ConnectionPermit {
            limit: limit.clone(),
            admin_only: prev >= limit.max,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_slots_leave_descriptors_for_peers() {
        // Enough room: the soft limit is raised, every client fits.
        assert_eq!(clients_that_fit(10_000, 1024, 1 << 20), (11_024, 10_000));
        // A soft limit already high enough stays.
        assert_eq!(clients_that_fit(100, 50_000, 1 << 20), (50_000, 100));
        // A hard limit too low: fewer clients, never the reserve.
        assert_eq!(clients_that_fit(10_000, 1024, 4096), (4096, 3072));
        assert_eq!(clients_that_fit(10_000, 512, 512), (512, 0));
    }

    #[test]
    fn permits_stop_at_the_limit_and_come_back() {
        let limit = ConnectionLimit::new(2, 0);
        let a = ConnectionPermit::acquire(&limit).unwrap();
        let _b = ConnectionPermit::acquire(&limit).unwrap();
        assert!(ConnectionPermit::acquire(&limit).is_none());
        assert_eq!(limit.open(), 2);
        drop(a);
        assert!(ConnectionPermit::acquire(&limit).is_some());
    }

    #[test]
    fn beyond_the_limit_slots_are_for_administrators_only() {
        let limit = ConnectionLimit::new(1, 2);
        let a = ConnectionPermit::acquire(&limit).unwrap();
        assert!(!a.admin_only);
        let b = ConnectionPermit::acquire(&limit).unwrap();
        let c = ConnectionPermit::acquire(&limit).unwrap();
        assert!(b.admin_only && c.admin_only);
        assert!(ConnectionPermit::acquire(&limit).is_none());
        // Slots are counted, not named: while two are open, a new one is an admin's.
        drop(a);
        assert!(ConnectionPermit::acquire(&limit).unwrap().admin_only);
        drop(b);
        drop(c);
        assert!(!ConnectionPermit::acquire(&limit).unwrap().admin_only);
    }
}
