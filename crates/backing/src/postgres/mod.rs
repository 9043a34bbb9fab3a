//! [`Postgres`]: the [`BackingStore`] on a PostgreSQL table, through a bounded pool of
//! `tokio-postgres` connections (`deadpool-postgres`).
//!
//! # One call
//! Every call runs `Postgres::run`: lease a connection (at most `connect_timeout`),
//! create the table if this is the first connection that got through, run the call's
//! statements, all of it within `connect_timeout + statement_timeout`. It runs the call
//! again, within the same bound, when the server rolled the transaction back for a
//! serialization failure or a deadlock (`40001`, `40P01`: up to 5 attempts,
//! with a short jittered back-off), and once when a connection taken from the pool turns
//! out to be dead (the server restarted since it was last used). Running an apply again is
//! harmless even if its first commit did reach the server: applying is a merge.
//!
//! A connection goes back to the pool only if the call left it idle (no transaction open,
//! no request in flight); one whose call failed on the connection, or was cut off by the
//! time bound, is closed instead (see `Lease`).
//!
//! # Layout
//! From the bottom up (each uses only those before it):
//! - `conn`: a leased connection and how an attempt on it failed; the connector.
//! - `table`: the SQL of every statement, and the creation and check of the table.
//! - `calls`: apply, fetch and ping: the statements of one attempt of each (an apply is
//!   one transaction in two round trips; its docs explain the locking).

mod calls;
mod conn;
mod table;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use lattice::Record;

use crate::error::{classify, classify_pool, is_conflict, server_answered};
use crate::options::quoted_table;
use crate::{BackingError, BackingOptions, BackingStore, BoxFuture};
use calls::{ApplyCall, Call, FetchCall, PingCall};
use conn::{backoff, connector, Failure, Lease};
use table::Sql;

pub use calls::{MAX_BATCH_BYTES, MAX_BATCH_KEYS};

/// Attempts of one call when the server rolls it back for a serialization failure or a
/// deadlock.
const MAX_ATTEMPTS: u32 = 5;

/// The backing store on a PostgreSQL table (see the crate docs for the schema).
///
/// Cheap to share: hold it in an `Arc` (`Arc<dyn BackingStore>`); calls from many tasks
/// share the pool.
pub struct Postgres {
    /// At most `pool_size` connections, made on demand.
    pool: Pool,
    /// The statements, with the table name spliced in.
    sql: Sql,
    /// The bound on getting a connection.
    connect_timeout: Duration,
    /// The bound on a whole call.
    call_timeout: Duration,
    /// Set once a connection has made sure the table exists and has the right shape.
    table_ready: AtomicBool,
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the URL: it may hold a password.
        f.debug_struct("Postgres")
            .field("table", &self.sql.table)
            .field("pool", &self.pool.status())
            .finish_non_exhaustive()
    }
}

impl Postgres {
    /// A store on `options`. Does not contact the server: connections are made on first
    /// use, so this succeeds while the store is down (calls return
    /// [`BackingError::Unavailable`] until it is up). The table is created, if missing, by
    /// the first call that reaches the server.
    ///
    /// # Errors
    /// [`BackingError::Config`] if [`BackingOptions::validate`] fails.
    pub async fn connect(options: BackingOptions) -> Result<Postgres, BackingError> {
        options.validate()?;
        let pg_config = options.pg_config()?;
        let manager = Manager::from_config(
            pg_config,
            connector(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size)
            .wait_timeout(Some(options.connect_timeout))
            .create_timeout(Some(options.connect_timeout))
            .recycle_timeout(Some(options.connect_timeout))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| BackingError::Config(format!("connection pool: {e}")))?;
        Ok(Postgres {
            pool,
            sql: Sql::new(quoted_table(&options.table)?),
            connect_timeout: options.connect_timeout,
            call_timeout: options.call_timeout(),
            table_ready: AtomicBool::new(false),
        })
    }

    /// Runs one call: `call` on a leased connection, retried as the module docs say, all
    /// within the call's time bound.
    async fn run<C: Call>(&self, call: &C) -> Result<C::Output, BackingError> {
        let bound = self.call_timeout;
        match tokio::time::timeout(bound, self.attempts(call)).await {
            Ok(result) => result,
            Err(_) => Err(BackingError::Unavailable(format!(
                "the store did not answer within {bound:?}"
            ))),
        }
    }

    async fn attempts<C: Call>(&self, call: &C) -> Result<C::Output, BackingError> {
        let mut attempt = 0;
        let mut stale_retried = false;
        loop {
            attempt += 1;
            let mut lease = self.lease().await?;
            let result = match self.ensure_table(&lease).await {
                Ok(()) => call.attempt(&self.sql, &lease).await,
                Err(failure) => Err(failure),
            };
            let error = match result {
                Ok(value) => {
                    lease.keep = true;
                    return Ok(value);
                }
                Err(Failure::Final(e)) => {
                    lease.keep = true;
                    return Err(e);
                }
                Err(Failure::Vanished) if attempt < MAX_ATTEMPTS => {
                    lease.keep = true;
                    tracing::debug!(attempt, "a locked row vanished; running the call again");
                    continue;
                }
                Err(Failure::Vanished) => {
                    return Err(BackingError::Unavailable(
                        "rows kept vanishing under the transaction".into(),
                    ))
                }
                Err(Failure::Pg(e)) => e,
            };
            lease.keep = server_answered(&error);
            if is_conflict(&error) && attempt < MAX_ATTEMPTS {
                tracing::debug!(attempt, %error, "transaction conflict; running it again");
                drop(lease);
                tokio::time::sleep(backoff(attempt)).await;
                continue;
            }
            if !server_answered(&error) && lease.reused() && !stale_retried {
                tracing::debug!(%error, "a pooled connection was dead; trying a new one");
                stale_retried = true;
                continue;
            }
            return Err(classify(&error));
        }
    }

    /// Creates the table if it does not exist and checks its shape, once per process.
    async fn ensure_table(&self, lease: &Lease) -> Result<(), Failure> {
        if !self.table_ready.load(Ordering::Acquire) {
            table::ensure(&self.sql, lease).await?;
            self.table_ready.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// A connection from the pool (a new one if none is idle), within `connect_timeout`.
    async fn lease(&self) -> Result<Lease, BackingError> {
        match tokio::time::timeout(self.connect_timeout, self.pool.get()).await {
            Ok(Ok(conn)) => Ok(Lease::new(conn)),
            Ok(Err(e)) => Err(classify_pool(&e)),
            Err(_) => Err(BackingError::Unavailable(format!(
                "no connection to the store within {:?}",
                self.connect_timeout
            ))),
        }
    }
}

impl BackingStore for Postgres {
    fn apply<'a>(
        &'a self,
        batch: &'a [(Bytes, Record)],
    ) -> BoxFuture<'a, Result<usize, BackingError>> {
        Box::pin(async move {
            if batch.is_empty() {
                return Ok(0);
            }
            self.run(&ApplyCall::new(batch)?).await
        })
    }

    fn fetch<'a>(
        &'a self,
        keys: &'a [Bytes],
    ) -> BoxFuture<'a, Result<Vec<Option<Record>>, BackingError>> {
        Box::pin(async move {
            if keys.is_empty() {
                return Ok(Vec::new());
            }
            self.run(&FetchCall::new(keys)?).await
        })
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), BackingError>> {
        Box::pin(self.run(&PingCall))
    }
}
