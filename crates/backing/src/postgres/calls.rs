//! The calls: apply, fetch and ping, each as the statements of one attempt (run, and run
//! again, by [`Postgres::run`]).
//!
//! # Apply: two round trips
//! ```text
//! BEGIN
//! INSERT INTO t (key) SELECT k FROM unnest($keys) ... ORDER BY k ON CONFLICT (key) DO NOTHING
//! SELECT key, value, state, ts FROM t WHERE key = ANY($keys) ORDER BY key FOR UPDATE
//!     -- one pipelined round trip; then merge in Rust; then, only for the rows that changed:
//! UPDATE t SET value, state, ts, updated_at = now() FROM unnest($keys, $values, $states, $ts)
//! COMMIT
//!     -- a second pipelined round trip (or COMMIT alone when nothing changed)
//! ```
//! The placeholder insert makes every key have a row to lock, so two appliers meeting on
//! a new key serialize on the row instead of both inserting; `FOR UPDATE` makes each merge
//! read the latest committed row (read committed re-reads a row updated concurrently).
//! Both lock in key order, which keeps deadlocks between appliers rare (and they are
//! retried). The placeholders never outlive the transaction as such: every key of the
//! batch is written by the UPDATE (a key without a record always changes), and a rolled
//! back transaction takes its placeholders with it.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use deadpool_postgres::ClientWrapper;
use lattice::Record;
use tokio_postgres::types::ToSql;

use super::conn::{Failure, Lease};
use super::table::{rows_by_key, Sql};
use crate::row;
use crate::{BackingError, BoxFuture};

/// The most keys one [`apply`](crate::BackingStore::apply) or
/// [`fetch`](crate::BackingStore::fetch) accepts (the node sends at most 1,000). Larger
/// batches are [`BackingError::Rejected`].
pub const MAX_BATCH_KEYS: usize = 10_000;
/// The most bytes one apply accepts: keys plus the records' estimated size
/// ([`Record::approx_size`]). Larger batches are [`BackingError::Rejected`].
pub const MAX_BATCH_BYTES: usize = 64 << 20;

/// The work of one call, run once per attempt by `Postgres::run`.
///
/// (A trait rather than an async closure: the future of a generic async closure cannot be
/// shown `Send` for every lifetime of its argument, which `BoxFuture` needs.)
pub(super) trait Call: Sync {
    /// What the call returns.
    type Output: Send;

    /// One attempt on `lease`.
    fn attempt<'c>(
        &'c self,
        sql: &'c Sql,
        lease: &'c Lease,
    ) -> BoxFuture<'c, Result<Self::Output, Failure>>;
}

/// An apply: the batch, repeated keys merged, in key order.
pub(super) struct ApplyCall<'b> {
    batch: BTreeMap<&'b [u8], Record>,
}

impl<'b> ApplyCall<'b> {
    /// The apply of `batch`: repeated keys merged, in key order (the order rows are
    /// locked in).
    ///
    /// # Errors
    /// [`BackingError::Rejected`] past [`MAX_BATCH_KEYS`] or [`MAX_BATCH_BYTES`].
    pub(super) fn new(batch: &'b [(Bytes, Record)]) -> Result<Self, BackingError> {
        if batch.len() > MAX_BATCH_KEYS {
            return Err(BackingError::Rejected(format!(
                "batch of {} records exceeds {MAX_BATCH_KEYS}",
                batch.len()
            )));
        }
        let bytes: usize = batch.iter().map(|(k, r)| k.len() + r.approx_size()).sum();
        if bytes > MAX_BATCH_BYTES {
            return Err(BackingError::Rejected(format!(
                "batch of about {bytes} bytes exceeds {MAX_BATCH_BYTES}"
            )));
        }
        let mut merged: BTreeMap<&[u8], Record> = BTreeMap::new();
        for (key, record) in batch {
            match merged.get_mut(&key[..]) {
                Some(existing) => {
                    lattice::Lattice::merge(existing, record.clone());
                }
                None => {
                    merged.insert(key, record.clone());
                }
            }
        }
        Ok(ApplyCall { batch: merged })
    }
}

impl Call for ApplyCall<'_> {
    type Output = usize;

    fn attempt<'c>(
        &'c self,
        sql: &'c Sql,
        lease: &'c Lease,
    ) -> BoxFuture<'c, Result<usize, Failure>> {
        Box::pin(apply_once(sql, lease, &self.batch))
    }
}

/// One attempt of an apply: the transaction, rolled back if anything failed.
async fn apply_once(
    sql: &Sql,
    lease: &Lease,
    batch: &BTreeMap<&[u8], Record>,
) -> Result<usize, Failure> {
    let result = apply_transaction(sql, lease.client(), batch).await;
    if result.is_err() {
        // Ends the transaction whatever state it is in (after a failed COMMIT, or an
        // UPDATE error that made COMMIT roll back, this is a harmless warning).
        if lease.client().batch_execute("ROLLBACK").await.is_err() {
            lease.broken.store(true, Ordering::Relaxed);
        }
    }
    result
}

/// The statements of an apply (see the module docs): two pipelined round trips.
async fn apply_transaction(
    sql: &Sql,
    c: &ClientWrapper,
    batch: &BTreeMap<&[u8], Record>,
) -> Result<usize, Failure> {
    let (insert, lock, update) = tokio::try_join!(
        c.prepare_cached(&sql.insert),
        c.prepare_cached(&sql.lock),
        c.prepare_cached(&sql.update),
    )?;
    let keys: Vec<&[u8]> = batch.keys().copied().collect();
    // One round trip: requests go out in the order the futures are first polled.
    let params: [&(dyn ToSql + Sync); 1] = [&keys];
    let (begun, inserted, locked) = tokio::join!(
        biased;
        c.batch_execute("BEGIN"),
        c.execute(&insert, &params),
        c.query(&lock, &params),
    );
    begun?;
    inserted?;
    let mut stored = rows_by_key(&locked?)?;
    if stored.len() != keys.len() {
        return Err(Failure::Vanished);
    }
    let mut changed_keys = Vec::new();
    let mut values = Vec::new();
    let mut states = Vec::new();
    let mut tss = Vec::new();
    for (key, incoming) in batch {
        let columns = stored.remove(*key).ok_or(Failure::Vanished)?;
        let current = row::decode(key, &columns).map_err(Failure::Final)?;
        if let Some(new) = row::merge(current, incoming.clone()) {
            let columns = row::encode(&new);
            changed_keys.push(*key);
            values.push(columns.value);
            states.push(columns.state);
            tss.push(columns.ts);
        }
    }
    if changed_keys.is_empty() {
        c.batch_execute("COMMIT").await?;
        return Ok(0);
    }
    let params: [&(dyn ToSql + Sync); 4] = [&changed_keys, &values, &states, &tss];
    let (updated, committed) = tokio::join!(
        biased;
        c.execute(&update, &params),
        c.batch_execute("COMMIT"),
    );
    updated?;
    committed?;
    Ok(changed_keys.len())
}

/// A fetch of `keys`.
pub(super) struct FetchCall<'b> {
    keys: Vec<&'b [u8]>,
}

impl<'b> FetchCall<'b> {
    /// The fetch of `keys`.
    ///
    /// # Errors
    /// [`BackingError::Rejected`] past [`MAX_BATCH_KEYS`].
    pub(super) fn new(keys: &'b [Bytes]) -> Result<Self, BackingError> {
        if keys.len() > MAX_BATCH_KEYS {
            return Err(BackingError::Rejected(format!(
                "fetch of {} keys exceeds {MAX_BATCH_KEYS}",
                keys.len()
            )));
        }
        Ok(FetchCall {
            keys: keys.iter().map(|k| &k[..]).collect(),
        })
    }
}

impl Call for FetchCall<'_> {
    type Output = Vec<Option<Record>>;

    fn attempt<'c>(
        &'c self,
        sql: &'c Sql,
        lease: &'c Lease,
    ) -> BoxFuture<'c, Result<Self::Output, Failure>> {
        Box::pin(fetch_once(sql, lease, &self.keys))
    }
}

/// One attempt of a fetch.
async fn fetch_once(
    sql: &Sql,
    lease: &Lease,
    keys: &[&[u8]],
) -> Result<Vec<Option<Record>>, Failure> {
    let c = lease.client();
    let select = c.prepare_cached(&sql.select).await?;
    let rows = rows_by_key(&c.query(&select, &[&keys]).await?)?;
    keys.iter()
        .map(|key| match rows.get(*key) {
            Some(columns) => row::decode(key, columns).map_err(Failure::Final),
            None => Ok(None),
        })
        .collect()
}

/// A ping: `SELECT 1`.
pub(super) struct PingCall;

impl Call for PingCall {
    type Output = ();

    fn attempt<'c>(&'c self, _: &'c Sql, lease: &'c Lease) -> BoxFuture<'c, Result<(), Failure>> {
        Box::pin(async move {
            lease.client().batch_execute("SELECT 1").await?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lattice::{Counter, Timestamp, Value};

    fn counter(actor: u64, n: u64) -> Record {
        Record::new(
            Timestamp::ZERO,
            Some(Value::Counter(Counter::from_entries([(actor, (n, 0))]))),
        )
    }

    #[test]
    fn repeated_keys_merge_and_sort() {
        let batch = vec![
            (Bytes::from_static(b"b"), counter(1, 3)),
            (Bytes::from_static(b"a"), counter(1, 1)),
            (Bytes::from_static(b"b"), counter(2, 4)),
            (Bytes::from_static(b"b"), counter(1, 2)),
        ];
        let merged = ApplyCall::new(&batch).unwrap().batch;
        let keys: Vec<&[u8]> = merged.keys().copied().collect();
        assert_eq!(keys, vec![&b"a"[..], &b"b"[..]]);
        let Some(Value::Counter(c)) = &merged[&b"b"[..]].value else {
            panic!("not a counter")
        };
        assert_eq!(c.value(), 7);
    }

    #[test]
    fn oversized_batches_are_rejected() {
        let many: Vec<(Bytes, Record)> = (0..=MAX_BATCH_KEYS)
            .map(|i| (Bytes::from(i.to_string()), Record::default()))
            .collect();
        assert!(matches!(
            ApplyCall::new(&many).map(|_| ()),
            Err(BackingError::Rejected(_))
        ));
        let big = vec![(Bytes::from(vec![0u8; MAX_BATCH_BYTES]), Record::default())];
        assert!(matches!(
            ApplyCall::new(&big).map(|_| ()),
            Err(BackingError::Rejected(_))
        ));
    }
}
