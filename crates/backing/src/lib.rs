//! The backing store behind latticekv's memory tier: the [`BackingStore`] interface the
//! write-through / write-back workers call, and [`Postgres`], its implementation on a
//! PostgreSQL table.
//!
//! # Schema
//! One table, `latticekv_kv` unless [`BackingOptions::table`] names another (optionally
//! schema-qualified); created at the first successful connection if missing:
//!
//! ```sql
//! CREATE TABLE IF NOT EXISTS latticekv_kv (
//!     key        bytea PRIMARY KEY,
//!     value      bytea,   -- the plain bytes of an LWW value; NULL for tombstones and other types
//!     state      bytea,   -- the whole encoded Record (authoritative); NULL if written by SQL
//!     ts         bigint NOT NULL DEFAULT 0,         -- see "Timestamps" below
//!     updated_at timestamptz NOT NULL DEFAULT now() -- when latticekv last changed the row
//! )
//! ```
//!
//! `state` is `wire::convert::record_to_pb(&record).encode_to_vec()`, the bytes the disk
//! tier stores. `value` is for SQL users: `SELECT value FROM latticekv_kv WHERE key = 'k'`
//! reads an LWW string; it is NULL after a delete.
//!
//! Other applications may write rows with plain SQL, `(key, value[, ts])` and `state`
//! NULL: such a row reads as an LWW write of `value` at timestamp `ts`, and merges as one
//! (a later latticekv write replaces it, an earlier one does not). To overwrite a row that
//! latticekv wrote, set `state` to NULL as well (`state` is authoritative when present).
//!
//! # Timestamps (`ts`)
//! `ts` holds the bits of [`lattice::Timestamp::time`] as an `i64`: the hybrid logical time,
//! physical milliseconds since the Unix epoch `<< 16`, plus a 16-bit logical counter in the
//! low bits (saturating at `i64::MAX`, reached in the year ~6400). For an LWW value it is
//! the LWW timestamp, otherwise the record's epoch (a tombstone's is the delete's time).
//! The timestamp's `writer` tie-break is not stored in `ts`. Reading a SQL-written row,
//! `ts` is `Timestamp { time: ts, writer: 0 }`; 0 (the default) and negative values are the
//! oldest timestamp. So `SELECT key, value, ts >> 16 AS ms FROM latticekv_kv` shows when
//! LWW values were written, and a SQL writer uses
//! `(extract(epoch FROM now()) * 1000)::bigint << 16` to stamp a row with the current time.
//!
//! # Applying is merging: why replays are harmless
//! [`BackingStore::apply`] does not overwrite rows: in one transaction it reads each row
//! (locked), merges the incoming [`Record`] into it with [`lattice::Lattice::merge`], and
//! writes back the rows that changed. Merge is idempotent, commutative and associative, so
//! the row after applying a set of records is their join, whatever the order, however
//! often each is applied, however the batches were cut. Hence a buffered write applied
//! twice (a retry after a lost COMMIT acknowledgement, two nodes draining the same write)
//! or out of order (a later batch drained first) leaves the same row. Counters are
//! state-based CRDTs: the node ships the counter's state (per-replica totals), never an
//! increment, so applying it twice counts nothing twice. A record the row already covers
//! changes nothing and writes nothing.
//!
//! # Errors
//! [`BackingError`] tells the caller what to do next: [`Unavailable`](BackingError::Unavailable)
//! (the store is down or slow: buffer and probe with [`BackingStore::ping`]),
//! [`Rejected`](BackingError::Rejected) (the store refused this batch; it was not applied),
//! [`Corrupt`](BackingError::Corrupt) (a stored state does not decode) and
//! [`Config`](BackingError::Config). The SQLSTATE classification is in [`error`]'s docs.
//! Every call returns within `connect_timeout + statement_timeout` of its options.
//!
//! # Layout
//! - [`options`]: [`BackingOptions`] and the validation of the table name.
//! - [`error`]: [`BackingError`] and the classification of driver and pool errors.
//! - `row`: the row codec (`Record` ⇄ `value`, `state`, `ts`) and the merge step.
//! - [`postgres`]: [`Postgres`]: the pool, the calls, their SQL and retries.
//!
//! Depends on `lattice` (records) and `wire` (their encoding); used by `node`.
#![warn(missing_docs)]

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use lattice::Record;

pub mod error;
pub mod options;
pub mod postgres;
mod row;

pub use error::BackingError;
pub use options::BackingOptions;
pub use postgres::{Postgres, MAX_BATCH_BYTES, MAX_BATCH_KEYS};

/// A boxed future that is `Send`, so [`BackingStore`] is object-safe and its calls can run
/// on any worker thread.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A durable store rows are merged into: what the memory tier writes through or back to.
///
/// Object-safe so the node can hold `Arc<dyn BackingStore>`. Every call is bounded in time
/// (see [`BackingOptions`]) and safe to call from many tasks at once.
pub trait BackingStore: Send + Sync + 'static {
    /// Merges every record into its key's row in ONE transaction (all or nothing). Keys may
    /// repeat (they are merged first). Returns how many rows changed (a record already
    /// covered by the row changes nothing and is not written).
    ///
    /// Applying the same batch again, or batches in another order, gives the same rows.
    /// At most [`MAX_BATCH_KEYS`] records and [`MAX_BATCH_BYTES`] bytes.
    fn apply<'a>(
        &'a self,
        batch: &'a [(Bytes, Record)],
    ) -> BoxFuture<'a, Result<usize, BackingError>>;

    /// The rows of `keys`, in order (`None`: no row). At most [`MAX_BATCH_KEYS`] keys.
    fn fetch<'a>(
        &'a self,
        keys: &'a [Bytes],
    ) -> BoxFuture<'a, Result<Vec<Option<Record>>, BackingError>>;

    /// A cheap round trip (`SELECT 1`), to detect that the store is back.
    fn ping(&self) -> BoxFuture<'_, Result<(), BackingError>>;
}
