//! Recorded client histories and checkers for the consistency levels of latticekv
//! (`spec/anna-core.md` §2.6, `ARCHITECTURE.md` §7).
//!
//! A workload records what its client sessions did into a [`History`] (through a [`Recorder`]
//! and one [`Session`] per client), optionally adds reads of every key after quiescence
//! ([`History::finals`]), and asks [`check`] whether the history satisfies a [`Guarantee`]. The
//! crate is pure: data in, [`Report`] out.
//!
//! # Model
//!
//! Every write writes a value of its own ([`encode_value`]), so a read names the writes it
//! observed ([`Observed`]). A version's timestamp is its LWW timestamp `(time, writer)` when the
//! type has one. The *known timestamp* of a write is the one on its write event, otherwise the
//! first one an observation of it carries (ops first, then the finals). The *version order* of
//! a key is the order of known timestamps; writes without one are compared only where a rule
//! below says so.
//!
//! Each op may carry its [`Span`]: when it was invoked and when its response arrived. The
//! guarantees here are about session order and reads-from, not real time, so spans only
//! help read a history; they are never needed.
//!
//! Ops with the same transaction id of one session form a transaction, ended by `Commit` or
//! `Abort`; one without an end is aborted. An op outside any transaction is a committed
//! transaction of its own. Writes of aborted transactions are never visible: the session rules
//! treat them as not written (except for reads in the same transaction) and their observations
//! as observing nothing; the causal rules do not count them as overwriting.
//!
//! # Guarantees as checked
//!
//! Every guarantee also reports [`Anomaly::ThinAir`]: a read (or final read) observed a write
//! id that no op wrote. Violations found in the finals have `session` [`FINALS_SESSION`] and
//! `op_index` `history.ops.len()`.
//!
//! - [`Guarantee::Convergence`]: with two or more final maps, every map holds the same set of
//!   write ids for every key ([`Anomaly::Divergence`]; absent = empty), and every key that a
//!   committed write wrote is present in every map ([`Anomaly::MissingKey`]). With one map
//!   there is nothing to compare.
//! - [`Guarantee::ReadYourWrites`]: let `w` be session `s`'s latest write of `k` before a read
//!   `r` of `k` in `s` (skipping writes of aborted transactions other than `r`'s own). `r`
//!   violates if it observes nothing; or observes a write of `k` that `s` issued before `w`; or
//!   `ts(w)` is known and every observed version has a known timestamp below `ts(w)`.
//! - [`Guarantee::MonotonicReads`]: for reads `r1` before `r2` of `k` in one session, `r2`
//!   violates if `r1` observed something and `r2` nothing; or the newest known timestamp `r2`
//!   observed is below the newest one any earlier read of `k` observed.
//! - [`Guarantee::MonotonicWrites`]: for writes `wi` before `wj` of `k` by one session, in
//!   different transactions (writes of one transaction are unordered), `wj` violates if both
//!   timestamps are known and `ts(wj) <= ts(wi)`; or some final map holds exactly `wi` for `k`.
//! - [`Guarantee::WritesFollowReads`]: if session `s` read version `v` of `k` (written by
//!   another session) and later writes `w` to `k`, `w` violates if `ts(w)` and `ts(v)` are
//!   known and `ts(w) <= ts(v)`; or some final map holds exactly `v` for `k`.
//! - [`Guarantee::Pram`]: the union of read-your-writes, monotonic reads and monotonic writes.
//! - [`Guarantee::Causal`]: happens-before (hb) is the transitive closure of session order and
//!   reads-from (a read happens after every write it observed). A read `r` of `k` violates if
//!   it observes nothing while a write of `k` hb `r` ([`Anomaly::CausalMissing`]); or it
//!   observes `x` and some write `w != x` of `k` has `x` hb `w` hb `r`
//!   ([`Anomaly::CausalOverwritten`]). A read that observes a write which happens after the
//!   read (a cycle of hb) is [`Anomaly::CausalCycle`]; that reads-from edge is then left out.
//! - [`Guarantee::CausalPerKey`]: as causal, but for each key hb is built from the ops on that
//!   key only (session order restricted to them, reads-from on the key).
//! - [`Guarantee::ReadUncommitted`]: no G0 (dirty write). The write-write order has an edge
//!   `T1 → T2` between committed transactions when both wrote `k` and the known timestamp of
//!   `T1`'s last write of `k` is below `T2`'s; a cycle is G0. So is a *split winner*: committed
//!   transactions that wrote the same set of two or more keys, where the versions a final map
//!   holds for those keys were written by more than one of them.
//! - [`Guarantee::ReadCommitted`]: no G0; no G1a (a read observes a write of an aborted
//!   transaction other than its own); no G1b (a read observes a committed write that is not
//!   its transaction's last write of the key, unless the reader is that transaction); no G1c (a
//!   cycle of write-write and write-read edges among committed transactions that contains a
//!   write-read edge `T1 → T2`: `T2 != T1` read a write of `T1`). Final reads count as reads
//!   outside any transaction.
//! - [`Guarantee::ItemCut`]: two reads of a key in one transaction observe the same set of
//!   write ids, unless the transaction wrote the key between them.
//!
//! # Cost
//!
//! Session, transaction and convergence checks are near-linear in the history. The causal
//! checks keep a vector clock over sessions per write: `O(ops × sessions)` time and
//! `O(writes × sessions)` memory (per key, only the sessions that touch the key).

#![warn(missing_docs)]

mod causal;
mod convergence;
mod graph;
mod history;
mod index;
mod report;
mod session;
mod txn;

#[cfg(test)]
mod tests;

use std::fmt;

pub use history::{
    decode_value, encode_value, Event, FinalState, History, Observed, Op, Recorder, Session, Span,
    Ts, WriteId,
};
pub use report::{Anomaly, Report, Violation, FINALS_SESSION};

use index::Index;

/// A consistency guarantee [`check`] can check; the crate documentation defines each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Guarantee {
    /// Replicas converge to the same state holding every written key.
    Convergence,
    /// A session's reads reflect its own earlier writes.
    ReadYourWrites,
    /// A session's reads never go back in time.
    MonotonicReads,
    /// A session's writes are ordered in issue order.
    MonotonicWrites,
    /// A session's writes are ordered after what it read.
    WritesFollowReads,
    /// Read-your-writes, monotonic reads and monotonic writes.
    Pram,
    /// Causal consistency for each key on its own.
    CausalPerKey,
    /// Causal consistency across keys.
    Causal,
    /// No dirty writes (G0).
    ReadUncommitted,
    /// No dirty writes or reads (G0, G1a, G1b, G1c).
    ReadCommitted,
    /// Repeated reads of a key in a transaction agree.
    ItemCut,
}

impl Guarantee {
    /// Every guarantee.
    pub const ALL: [Guarantee; 11] = [
        Guarantee::Convergence,
        Guarantee::ReadYourWrites,
        Guarantee::MonotonicReads,
        Guarantee::MonotonicWrites,
        Guarantee::WritesFollowReads,
        Guarantee::Pram,
        Guarantee::CausalPerKey,
        Guarantee::Causal,
        Guarantee::ReadUncommitted,
        Guarantee::ReadCommitted,
        Guarantee::ItemCut,
    ];
}

impl fmt::Display for Guarantee {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Checks `history` against `guarantee`; the report lists every violation found (plus thin-air
/// reads), sorted by op index.
pub fn check(guarantee: Guarantee, history: &History) -> Report {
    let index = Index::new(history);
    let mut report = index::thin_air(&index);
    match guarantee {
        Guarantee::Convergence => report.extend(convergence::check(&index)),
        Guarantee::ReadYourWrites => report.extend(session::read_your_writes(&index)),
        Guarantee::MonotonicReads => report.extend(session::monotonic_reads(&index)),
        Guarantee::MonotonicWrites => report.extend(session::monotonic_writes(&index)),
        Guarantee::WritesFollowReads => report.extend(session::writes_follow_reads(&index)),
        Guarantee::Pram => {
            report.extend(session::read_your_writes(&index));
            report.extend(session::monotonic_reads(&index));
            report.extend(session::monotonic_writes(&index));
        }
        Guarantee::CausalPerKey => report.extend(causal::check(&index, causal::Scope::PerKey)),
        Guarantee::Causal => report.extend(causal::check(&index, causal::Scope::AllKeys)),
        Guarantee::ReadUncommitted => report.extend(txn::g0(&index)),
        Guarantee::ReadCommitted => {
            report.extend(txn::g0(&index));
            report.extend(txn::g1ab(&index));
            report.extend(txn::g1c(&index));
        }
        Guarantee::ItemCut => report.extend(txn::item_cut(&index)),
    }
    report.sort();
    report
}
