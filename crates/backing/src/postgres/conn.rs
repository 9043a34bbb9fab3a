//! What one attempt of a call works with: the leased connection ([`Lease`]), how the
//! attempt failed ([`Failure`]), the connector, and the pause between attempts.

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use deadpool_postgres::{ClientWrapper, Object};

use crate::BackingError;

/// The connector: plain TCP (or a Unix socket), no TLS. The one place to change when TLS
/// to the store is needed (a `MakeTlsConnect` such as `tokio-postgres-rustls`).
pub(super) fn connector() -> tokio_postgres::NoTls {
    tokio_postgres::NoTls
}

/// Why one attempt failed.
pub(super) enum Failure {
    /// The driver failed; classified (and maybe retried) by `Postgres::run`.
    Pg(tokio_postgres::Error),
    /// This crate's final answer (a corrupt state, a table of the wrong shape).
    Final(BackingError),
    /// A key's row was not there to lock (deleted by someone else between the placeholder
    /// insert and the lock): run the transaction again.
    Vanished,
}

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Self {
        Failure::Pg(e)
    }
}

/// A pooled connection lent to one call.
///
/// It goes back to the pool when dropped only if the call said it is idle ([`keep`]);
/// otherwise it is detached from the pool and closed, so a connection left inside a
/// transaction or with a request in flight (a call cut off by its time bound) is never
/// handed to another call.
///
/// [`keep`]: Lease::keep
pub(super) struct Lease {
    /// The connection; `None` only while dropping.
    pub(super) conn: Option<Object>,
    /// Set by `Postgres::run` once the call ended with the connection idle.
    pub(super) keep: bool,
    /// Set by a call that could not end its transaction (the ROLLBACK after a failure
    /// failed): the connection's state is unknown, close it whatever `keep` says.
    pub(super) broken: AtomicBool,
}

impl Lease {
    /// A lease of `conn`, closed when dropped unless [`keep`](Lease::keep) is set.
    pub(super) fn new(conn: Object) -> Lease {
        Lease {
            conn: Some(conn),
            keep: false,
            broken: AtomicBool::new(false),
        }
    }

    /// The connection.
    pub(super) fn client(&self) -> &ClientWrapper {
        self.conn
            .as_ref()
            .expect("a lease holds its connection until dropped")
    }

    /// True if the connection was used by an earlier call (it may have died since).
    pub(super) fn reused(&self) -> bool {
        self.conn
            .as_ref()
            .is_some_and(|c| Object::metrics(c).recycle_count > 0)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if !self.keep || self.broken.load(Ordering::Relaxed) {
                drop(Object::take(conn));
            }
        }
    }
}

/// The pause before attempt `attempt + 1` after a conflict: 2^attempt ms plus up to as
/// much again at random, so two appliers that collided do not collide again in step.
pub(super) fn backoff(attempt: u32) -> Duration {
    let base = 1u64 << attempt.min(10);
    let jitter = RandomState::new().hash_one(attempt) % base;
    Duration::from_millis(base + jitter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_bounded() {
        for attempt in 1..5 {
            let d = backoff(attempt);
            let base = Duration::from_millis(1 << attempt);
            assert!(d >= base && d < base * 2, "{d:?}");
        }
    }
}
