//! Causal metadata in few bytes: the `RefTable` message of `faas.proto`. Versionsets on the
//! wire (an edge's `S_u` and `R_u`, CON's snapshots and parts, HB's views) are rows of one
//! table, `(key, clock, sources)`, in which every actor and every cache id is written once
//! (8 bytes each) and a clock entry is two small varints (the actor's index and the
//! counter); messages name rows by index, so a version in both `S_u` and `R_u` (the usual
//! case: `R ⊆ S`) is written once. Lossless: decoding gives back the versionsets encoded.
//! Everything decoded is checked (indexes in range, counts within the bytes, nothing left
//! over) and refused with a [`MetaError`].

use std::collections::HashMap;

use bytes::Bytes;
use cache::{CacheId, Key, VectorClock, VersionRef, VersionSet};

use crate::pb;

/// Why received metadata is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MetaError {
    /// A pinned value that does not decode as a store value.
    #[error("a pinned value does not decode: {0}")]
    Decode(String),
    /// A pinned value of another type than `MultiKeyCausal`.
    #[error("a pinned value of key {0:?} is not a multi-key causal value")]
    NotCausal(String),
    /// A key bound twice in one versionset.
    #[error("key {0:?} is bound twice in one versionset")]
    Duplicate(String),
    /// A `RefTable` or an index into one that does not hold together.
    #[error("malformed causal metadata: {0}")]
    Malformed(String),
}

pub(crate) fn show(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

/// A row as the builder knows it: the key, the clock's entries, the sources' ids.
type RowId = (Key, Vec<(u64, u64)>, Vec<u64>);

/// Builds one `RefTable`: rows are added once each (an identical row is named by the
/// index it already has).
#[derive(Default)]
pub(crate) struct TableBuilder {
    table: pb::RefTable,
    actors: HashMap<u64, u64>,
    caches: HashMap<u64, u64>,
    rows: HashMap<RowId, u32>,
}

impl TableBuilder {
    /// The index of the row `(key, r)`, added if new.
    pub(crate) fn row(&mut self, key: &[u8], r: &VersionRef) -> u32 {
        let clock: Vec<(u64, u64)> = r.clock.iter().collect();
        // A bottom (empty clock) has no sources (`refs_from_table` drops them anyway).
        let sources: Vec<u64> = if clock.is_empty() {
            Vec::new()
        } else {
            r.sources.iter().map(|c| c.0).collect()
        };
        let id: RowId = (Key::from(key), clock, sources);
        if let Some(&i) = self.rows.get(&id) {
            return i;
        }
        let i = u32::try_from(self.table.keys.len()).unwrap_or(u32::MAX);
        let (key, clock, sources) = &id;
        self.table.keys.push(Bytes::copy_from_slice(key));
        self.table.rows.push(clock.len() as u64);
        for &(actor, counter) in clock {
            let next = self.actors.len() as u64;
            let a = *self.actors.entry(actor).or_insert_with(|| {
                self.table.actors.push(actor);
                next
            });
            self.table.rows.extend([a, counter]);
        }
        self.table.rows.push(sources.len() as u64);
        for &c in sources {
            let next = self.caches.len() as u64;
            let x = *self.caches.entry(c).or_insert_with(|| {
                self.table.caches.push(c);
                next
            });
            self.table.rows.push(x);
        }
        self.rows.insert(id, i);
        i
    }

    /// The rows of every version of `v`, in key order.
    pub(crate) fn rows(&mut self, v: &VersionSet) -> Vec<u32> {
        v.iter().map(|(k, r)| self.row(k, r)).collect()
    }

    /// The table.
    pub(crate) fn finish(self) -> pb::RefTable {
        self.table
    }
}

/// A versionset as a table of its own (every row once, in key order).
pub(crate) fn refs_to_table(v: &VersionSet) -> pb::RefTable {
    let mut b = TableBuilder::default();
    b.rows(v);
    b.finish()
}

/// Entry `i` of a table's column, `None` out of range (an index from the network).
fn entry(column: &[u64], i: u64) -> Option<u64> {
    usize::try_from(i).ok().and_then(|i| column.get(i)).copied()
}

/// A table's rows, checked.
///
/// # Errors
/// An index out of range, a count beyond the bytes, bytes left over.
pub(crate) fn rows_from_table(t: &pb::RefTable) -> Result<Vec<(Key, VersionRef)>, MetaError> {
    let bad = |what: &str| MetaError::Malformed(what.to_string());
    let mut body = t.rows.iter().copied();
    let mut next = |what: &str| body.next().ok_or_else(|| bad(what));
    let mut out = Vec::with_capacity(t.keys.len());
    for key in &t.keys {
        let n = next("a clock's length")?;
        if n > t.rows.len() as u64 {
            return Err(bad("a clock longer than the table"));
        }
        let mut clock = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let a = next("a clock entry's actor")?;
            let actor = entry(&t.actors, a).ok_or_else(|| bad("an actor index out of range"))?;
            clock.push((actor, next("a clock entry's counter")?));
        }
        let m = next("a source count")?;
        if m > t.rows.len() as u64 {
            return Err(bad("more sources than the table holds"));
        }
        let mut sources = Vec::with_capacity(m as usize);
        for _ in 0..m {
            let c = next("a source")?;
            let id = entry(&t.caches, c).ok_or_else(|| bad("a cache index out of range"))?;
            sources.push(CacheId(id));
        }
        let clock: VectorClock = clock.into_iter().collect();
        let sources = if clock.is_empty() {
            Default::default()
        } else {
            sources.into_iter().collect()
        };
        out.push((Key::from(&key[..]), VersionRef { clock, sources }));
    }
    if next("").is_ok() {
        return Err(bad("bytes after the last row"));
    }
    Ok(out)
}

/// The versionset of rows `ix` of `rows`.
///
/// # Errors
/// An index out of range, a key twice.
pub(crate) fn set_of(rows: &[(Key, VersionRef)], ix: &[u32]) -> Result<VersionSet, MetaError> {
    let mut out = VersionSet::new();
    for &i in ix {
        let (k, r) = rows
            .get(i as usize)
            .ok_or_else(|| MetaError::Malformed("a row index out of range".into()))?;
        if out.insert(k.clone(), r.clone()).is_some() {
            return Err(MetaError::Duplicate(show(k)));
        }
    }
    Ok(out)
}

/// A table holding one versionset (every row, as [`refs_to_table`] writes it).
///
/// # Errors
/// As [`rows_from_table`], and a key twice.
pub(crate) fn refs_from_table(t: &pb::RefTable) -> Result<VersionSet, MetaError> {
    let rows = rows_from_table(t)?;
    let all: Vec<u32> = (0..rows.len() as u32).collect();
    set_of(&rows, &all)
}
