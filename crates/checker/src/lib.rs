//! Recorded client histories and checkers for the consistency levels of latticekv
//! (`spec/anna-core.md` §2.6, `ARCHITECTURE.md` §7).
//!
//! A workload records what its client sessions did into a [`History`] (through a [`Recorder`]
//! and one [`Session`] per client), optionally adds reads of every key after quiescence
//! ([`History::finals`]), and asks `check` whether the history satisfies a `Guarantee`. The crate
//! is pure: data in, report out.
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
//! Ops with the same transaction id of one session form a transaction, ended by `Commit` or
//! `Abort`; one without an end is aborted. An op outside any transaction is a committed
//! transaction of its own. Writes of aborted transactions are never visible: the session rules
//! treat them as not written (except for reads in the same transaction) and their observations
//! as observing nothing; the causal rules do not count them as overwriting.
//!
//! The checkers follow in later modules.

#![warn(missing_docs)]

mod history;

pub use history::{
    decode_value, encode_value, Event, FinalState, History, Observed, Op, Recorder, Session, Ts,
    WriteId,
};
