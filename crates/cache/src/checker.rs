//! The TCC anomaly checker (spec §8 item 31, the paper's method P:548): given what one
//! request read — per key, the clock and dependencies of the version read — report every
//! pair that breaks the snapshot or atomic visibility.
//!
//! For every pair `(a_i, b_j)` of the read set and every `⟨a, vc⟩ ∈ b_j.deps`:
//! - **strict-snapshot violation** if `¬leq(vc, a_i.vc)`: the read `a` does not supersede
//!   what `b` depends on (HydroCache's guarantee, the strict snapshot of §2.4);
//! - **Def. 2 violation** (reported separately) if `lt(a_i.vc, vc)`: `a` was read at a
//!   version older than one `b` depends on (the weaker causal snapshot);
//! - **atomic-visibility violation** if, for some executor `e`,
//!   `vc[e] = b_j.vc[e] > a_i.vc[e]`: one commit of `e` wrote both `a` and `b` (a clock
//!   entry `(e, c)` appears only in versions descending from `e`'s commit `c` of that key,
//!   and [`crate::Executor::commit`] gives every key of a commit the same fresh counter),
//!   and the request sees that commit's `b` but not its `a`. Every such pair is also a
//!   strict violation; a Def. 2 one only if `a_i` is older, not concurrent.
//!
//! The metadata comes from the versions read (HydroCache: [`ReadMeta::of`]) or, for the
//! bare-store baselines, from the payloads, where the writer embedded it with [`embed`]
//! (read back with [`extract`]; join the metadata of a key's sibling payloads).
//!
//! It lives here rather than in `crates/checker`: it needs the lattice's clocks and versions
//! and checks one request's read set, while `crates/checker` checks recorded client
//! histories of write ids and depends on nothing.

use std::collections::BTreeMap;

use lattice::{MultiKeyCausal, VectorClock};
use thiserror::Error as ThisError;

use crate::Key;

/// The metadata of the version of one key a request read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadMeta {
    /// Its clock (empty: the key was read as absent).
    pub clock: VectorClock,
    /// Its dependencies.
    pub deps: BTreeMap<Key, VectorClock>,
}

impl ReadMeta {
    /// The metadata of a version read from HydroCache (the joins over its siblings).
    pub fn of(value: &MultiKeyCausal) -> Self {
        ReadMeta {
            clock: value.clock(),
            deps: value.deps(),
        }
    }

    /// Joins another sibling's metadata into this one.
    pub fn join(&mut self, other: &ReadMeta) {
        self.clock.merge_from(&other.clock);
        for (k, c) in &other.deps {
            self.deps.entry(k.clone()).or_default().merge_from(c);
        }
    }
}

/// The kind of an anomaly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `¬leq(dep_vc, read_vc)`.
    StrictSnapshot,
    /// `lt(read_vc, dep_vc)` (Def. 2).
    CausalSnapshot,
    /// A commit seen for one key and not for another it wrote.
    AtomicVisibility,
}

/// One violating pair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Anomaly {
    /// What is violated.
    pub kind: Kind,
    /// The key whose version carries the dependency (`b`).
    pub key: Key,
    /// The dependency's key (`a`).
    pub dep: Key,
    /// The clock `b` depends on.
    pub needed: VectorClock,
    /// The clock of the version of `a` read.
    pub read: VectorClock,
}

/// The anomalies of one read set, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Strict-snapshot violations.
    pub strict: Vec<Anomaly>,
    /// Def. 2 violations.
    pub causal: Vec<Anomaly>,
    /// Atomic-visibility violations.
    pub atomic: Vec<Anomaly>,
}

impl Report {
    /// True if nothing was found.
    pub fn is_clean(&self) -> bool {
        self.strict.is_empty() && self.causal.is_empty() && self.atomic.is_empty()
    }
}

/// Checks one request's read set (see the module docs).
pub fn check(reads: &BTreeMap<Key, ReadMeta>) -> Report {
    let mut report = Report::default();
    for (key, meta) in reads {
        for (dep, needed) in &meta.deps {
            if dep == key {
                continue;
            }
            let Some(read) = reads.get(dep).map(|m| &m.clock) else {
                continue;
            };
            let anomaly = |kind| Anomaly {
                kind,
                key: key.clone(),
                dep: dep.clone(),
                needed: needed.clone(),
                read: read.clone(),
            };
            if !needed.leq(read) {
                report.strict.push(anomaly(Kind::StrictSnapshot));
            }
            if needed.dominates(read) {
                report.causal.push(anomaly(Kind::CausalSnapshot));
            }
            let torn = needed
                .iter()
                .any(|(e, c)| meta.clock.get(e) == c && read.get(e) < c);
            if torn {
                report.atomic.push(anomaly(Kind::AtomicVisibility));
            }
        }
    }
    report
}

/// The first bytes of an embedded payload.
const MAGIC: &[u8; 3] = b"HCM";
/// The encoding version [`embed`] writes.
pub const EMBED_VERSION: u8 = 1;

/// Why [`extract`] failed.
#[derive(Clone, Debug, PartialEq, Eq, ThisError)]
pub enum DecodeError {
    /// The bytes do not start with the magic `HCM`: not an embedded payload.
    #[error("not an embedded payload (bad magic)")]
    BadMagic,
    /// An encoding version this code does not know.
    #[error("unknown embedding version {0}")]
    UnknownVersion(u8),
    /// The bytes end before the metadata does, or a count is larger than the bytes left.
    #[error("embedded metadata truncated")]
    Truncated,
}

/// Embeds `meta` in front of `payload`, for writers to bare stores (version 1):
///
/// ```text
/// "HCM" 0x01
/// u32 n, then n × (u64 actor, u64 counter)                 the clock
/// u32 m, then m × (u32 len, key bytes, u32 n, n × (u64, u64))   the dependencies
/// payload bytes (the rest)
/// ```
/// All integers little-endian.
pub fn embed(meta: &ReadMeta, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 64);
    out.extend_from_slice(MAGIC);
    out.push(EMBED_VERSION);
    put_clock(&mut out, &meta.clock);
    put_u32(&mut out, meta.deps.len());
    for (k, c) in &meta.deps {
        put_u32(&mut out, k.len());
        out.extend_from_slice(k);
        put_clock(&mut out, c);
    }
    out.extend_from_slice(payload);
    out
}

/// Reads back what [`embed`] wrote: the metadata and the payload.
///
/// # Errors
/// [`DecodeError`]; counts are checked against the bytes left before anything is
/// allocated, so hostile input cannot make it allocate more than its own size.
pub fn extract(bytes: &[u8]) -> Result<(ReadMeta, &[u8]), DecodeError> {
    let rest = bytes.strip_prefix(MAGIC).ok_or(DecodeError::BadMagic)?;
    let (&version, mut rest) = rest.split_first().ok_or(DecodeError::Truncated)?;
    if version != EMBED_VERSION {
        return Err(DecodeError::UnknownVersion(version));
    }
    let clock = take_clock(&mut rest)?;
    let m = take_u32(&mut rest)?;
    if m > rest.len() / 8 {
        return Err(DecodeError::Truncated);
    }
    let mut deps = BTreeMap::new();
    for _ in 0..m {
        let len = take_u32(&mut rest)?;
        let key = take(&mut rest, len)?;
        let c = take_clock(&mut rest)?;
        deps.insert(Key::from(key), c);
    }
    Ok((ReadMeta { clock, deps }, rest))
}

fn put_u32(out: &mut Vec<u8>, n: usize) {
    let n = u32::try_from(n).unwrap_or(u32::MAX);
    out.extend_from_slice(&n.to_le_bytes());
}

fn put_clock(out: &mut Vec<u8>, c: &VectorClock) {
    put_u32(out, c.len());
    for (a, n) in c.iter() {
        out.extend_from_slice(&a.to_le_bytes());
        out.extend_from_slice(&n.to_le_bytes());
    }
}

fn take<'a>(rest: &mut &'a [u8], n: usize) -> Result<&'a [u8], DecodeError> {
    if rest.len() < n {
        return Err(DecodeError::Truncated);
    }
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    Ok(head)
}

fn take_u32(rest: &mut &[u8]) -> Result<usize, DecodeError> {
    let bytes: [u8; 4] = take(rest, 4)?
        .try_into()
        .map_err(|_| DecodeError::Truncated)?;
    usize::try_from(u32::from_le_bytes(bytes)).map_err(|_| DecodeError::Truncated)
}

fn take_u64(rest: &mut &[u8]) -> Result<u64, DecodeError> {
    let bytes: [u8; 8] = take(rest, 8)?
        .try_into()
        .map_err(|_| DecodeError::Truncated)?;
    Ok(u64::from_le_bytes(bytes))
}

fn take_clock(rest: &mut &[u8]) -> Result<VectorClock, DecodeError> {
    let n = take_u32(rest)?;
    if n > rest.len() / 16 {
        return Err(DecodeError::Truncated);
    }
    let mut entries = Vec::with_capacity(n);
    for _ in 0..n {
        let actor = take_u64(rest)?;
        let counter = take_u64(rest)?;
        entries.push((actor, counter));
    }
    Ok(entries.into_iter().collect())
}
