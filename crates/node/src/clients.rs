//! The node's RESP connections, on every worker (`CLIENT LIST`, `CLIENT INFO`,
//! `CLIENT KILL`): one registry per node, shared by its workers.
//!
//! A connection registers when it opens and leaves when it closes (its [`Registration`] is
//! dropped); its id is unique on the node (a counter from 1, as Redis). What `CLIENT LIST`
//! shows of a connection — its name, last command, protocol, library, user, transaction and
//! subscriptions — is copied here by the connection's own worker as it runs commands; other
//! workers only read it, and kill a connection by flagging it and waking it up.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Every RESP connection of a node.
#[derive(Debug, Default)]
pub struct Clients {
    next_id: AtomicU64,
    open: Mutex<BTreeMap<u64, Arc<Client>>>,
}

/// Where a connection comes from.
#[derive(Clone, Debug, Default)]
pub struct Peer {
    /// The client's address (`ip:port`), if known.
    pub addr: Option<String>,
    /// The node's address of the connection (`ip:port`), if known.
    pub laddr: Option<String>,
    /// The socket's file descriptor, if known.
    pub fd: Option<i64>,
}

/// One connection as other connections see it.
#[derive(Debug)]
pub struct Client {
    /// Unique on the node.
    pub id: u64,
    /// Where it comes from.
    pub peer: Peer,
    /// When it opened.
    pub opened: Instant,
    /// What its worker last copied of it (all but `last`).
    info: Mutex<ClientInfo>,
    /// When its last command arrived, in nanoseconds after `opened`: stored per batch of
    /// commands without the lock.
    last_ns: AtomicU64,
    killed: AtomicBool,
    kill: Notify,
}

/// The parts of a connection that change as it runs commands.
#[derive(Clone, Debug)]
pub struct ClientInfo {
    /// `CLIENT SETNAME`.
    pub name: Vec<u8>,
    /// The last command's name, lower case (`client|list` for a subcommand).
    pub cmd: String,
    /// When its last command arrived.
    pub last: Instant,
    /// 2 or 3.
    pub resp: u8,
    /// `CLIENT SETINFO LIB-NAME`.
    pub lib_name: String,
    /// `CLIENT SETINFO LIB-VER`.
    pub lib_ver: String,
    /// The user it acts as (`default` on a node without users).
    pub user: String,
    /// Commands queued since `MULTI` (`None`: not in a transaction).
    pub multi: Option<usize>,
    /// Its subscriptions (channels, patterns and shard channels).
    pub subscriptions: usize,
    /// Of them, patterns (`CLIENT LIST`'s `psub`).
    pub patterns: usize,
    /// Of them, shard channels (`ssub`).
    pub shard_channels: usize,
}

/// A connection's place in the registry; leaving it removes the connection.
#[derive(Debug)]
pub struct Registration {
    clients: Arc<Clients>,
    client: Arc<Client>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        lock(&self.clients.open).remove(&self.client.id);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Clients {
    /// Registers a new connection from `peer`.
    pub fn register(self: &Arc<Self>, peer: Peer) -> Registration {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let now = Instant::now();
        let client = Arc::new(Client {
            id,
            peer,
            opened: now,
            info: Mutex::new(ClientInfo {
                name: Vec::new(),
                cmd: "NULL".into(),
                last: now,
                resp: 2,
                lib_name: String::new(),
                lib_ver: String::new(),
                user: "default".into(),
                multi: None,
                subscriptions: 0,
                patterns: 0,
                shard_channels: 0,
            }),
            last_ns: AtomicU64::new(0),
            killed: AtomicBool::new(false),
            kill: Notify::new(),
        });
        lock(&self.open).insert(id, client.clone());
        Registration {
            clients: self.clone(),
            client,
        }
    }

    /// Every open connection, by id.
    pub fn list(&self) -> Vec<Arc<Client>> {
        lock(&self.open).values().cloned().collect()
    }

    /// How many connections are open.
    pub fn len(&self) -> usize {
        lock(&self.open).len()
    }

    /// True if no connection is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Registration {
    /// The registered connection.
    pub fn client(&self) -> &Arc<Client> {
        &self.client
    }

    /// The registry it is in.
    pub fn registry(&self) -> &Clients {
        &self.clients
    }
}

impl Client {
    /// A copy of what changes.
    pub fn info(&self) -> ClientInfo {
        let mut info = lock(&self.info).clone();
        info.last = self.opened + Duration::from_nanos(self.last_ns.load(Ordering::Relaxed));
        info
    }

    /// Notes that a command arrived at `at` (by the connection's own worker).
    pub fn touch(&self, at: Instant) {
        let ns = at.saturating_duration_since(self.opened).as_nanos();
        self.last_ns
            .store(u64::try_from(ns).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Updates what changes (by the connection's own worker).
    pub fn update(&self, f: impl FnOnce(&mut ClientInfo)) {
        f(&mut lock(&self.info))
    }

    /// Asks the connection to close (`CLIENT KILL`): at once if it waits, otherwise once its
    /// current commands are answered.
    pub fn kill(&self) {
        self.killed.store(true, Ordering::Release);
        // Every waiter: a connection waits for its kill in several places at once (its
        // whole life, and around a write that may block).
        self.kill.notify_waiters();
    }

    /// True once killed.
    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }

    /// Completes once the connection is killed.
    pub async fn wait_killed(&self) {
        loop {
            // Created before the check: a kill between the two still completes it.
            let notified = self.kill.notified();
            if self.is_killed() {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_a_closed_connection_leaves_the_list() {
        let clients = Arc::new(Clients::default());
        let a = clients.register(Peer::default());
        let b = clients.register(Peer::default());
        assert_ne!(a.client().id, b.client().id);
        assert_eq!(clients.len(), 2);
        let b_id = b.client().id;
        drop(b);
        let ids: Vec<u64> = clients.list().iter().map(|c| c.id).collect();
        assert_eq!(ids, vec![a.client().id]);
        let c = clients.register(Peer::default());
        assert!(c.client().id > b_id, "ids are not reused");
    }

    #[tokio::test]
    async fn a_killed_connection_is_woken() {
        let clients = Arc::new(Clients::default());
        let a = clients.register(Peer::default());
        let client = a.client().clone();
        let waiter = tokio::spawn(async move { client.wait_killed().await });
        a.client().kill();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .unwrap();
        assert!(a.client().is_killed());
    }

    #[tokio::test]
    async fn a_kill_wakes_every_waiter_of_the_connection() {
        // A connection waits for its kill for its whole life and again around a write.
        let clients = Arc::new(Clients::default());
        let a = clients.register(Peer::default());
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let client = a.client().clone();
                tokio::spawn(async move { client.wait_killed().await })
            })
            .collect();
        // Both are registered before the kill.
        tokio::task::yield_now().await;
        a.client().kill();
        for waiter in waiters {
            tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
                .await
                .expect("every waiter is woken")
                .unwrap();
        }
        // And one that starts waiting afterwards completes at once.
        tokio::time::timeout(std::time::Duration::from_secs(5), a.client().wait_killed())
            .await
            .expect("a later waiter completes");
    }
}
