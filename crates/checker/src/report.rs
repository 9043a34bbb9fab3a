//! What a check found: [`Anomaly`] kinds, [`Violation`]s and the [`Report`] that lists them.

use std::collections::BTreeMap;
use std::fmt;

/// The `session` of a violation found in [`crate::History::finals`] rather than in an op; its
/// `op_index` is then `history.ops.len()` and its detail names the replica.
pub const FINALS_SESSION: u64 = u64::MAX;

/// The kinds of violation; the crate documentation defines each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Anomaly {
    /// A read observed a write id that no op of the history wrote.
    ThinAir,
    /// Two replicas hold different versions of a key after quiescence.
    Divergence,
    /// A replica lacks a key that a committed write wrote.
    MissingKey,
    /// A read missed the session's own latest write of the key.
    ReadYourWrites,
    /// A read went back in time relative to an earlier read of the session.
    MonotonicReads,
    /// A session's later write of a key is ordered before (or lost to) its earlier one.
    MonotonicWrites,
    /// A session's write is ordered before (or lost to) a version the session had read.
    WritesFollowReads,
    /// A read observed a version that was overwritten in the read's causal past.
    CausalOverwritten,
    /// A read observed nothing although a write of the key is in its causal past.
    CausalMissing,
    /// The happens-before relation has a cycle (e.g. a read observed a later write of its own
    /// session).
    CausalCycle,
    /// Dirty write: a cycle of write-write order among committed transactions.
    G0,
    /// Aborted read: a read observed a write of an aborted transaction.
    G1a,
    /// Intermediate read: a read observed a write that is not its transaction's last write of
    /// the key.
    G1b,
    /// Circular information flow: a cycle of write-write and write-read dependencies among
    /// committed transactions.
    G1c,
    /// Two reads of a key in one transaction observed different versions without an own write
    /// in between.
    ItemCut,
}

/// One violation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// What was violated.
    pub anomaly: Anomaly,
    /// The session of the offending op, or [`FINALS_SESSION`].
    pub session: u64,
    /// The offending op's index into `history.ops` (`history.ops.len()` for the finals).
    pub op_index: usize,
    /// A human-readable explanation naming the keys and writes involved.
    pub detail: String,
}

/// The violations a check found, sorted by op index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// The violations found.
    pub violations: Vec<Violation>,
}

/// How many violations [`Report`]'s `Display` prints in full.
const SHOWN: usize = 10;

impl Report {
    /// The number of violations.
    pub fn count(&self) -> usize {
        self.violations.len()
    }

    /// Whether no violation was found.
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// The number of violations of each anomaly found.
    pub fn by_anomaly(&self) -> BTreeMap<Anomaly, usize> {
        let mut counts = BTreeMap::new();
        for v in &self.violations {
            *counts.entry(v.anomaly).or_insert(0) += 1;
        }
        counts
    }

    /// The number of violations of `anomaly`.
    pub fn count_of(&self, anomaly: Anomaly) -> usize {
        self.violations
            .iter()
            .filter(|v| v.anomaly == anomaly)
            .count()
    }

    /// Adds a violation.
    pub(crate) fn push(&mut self, anomaly: Anomaly, session: u64, op_index: usize, detail: String) {
        self.violations.push(Violation {
            anomaly,
            session,
            op_index,
            detail,
        });
    }

    /// Appends the violations of `other`.
    pub(crate) fn extend(&mut self, other: Report) {
        self.violations.extend(other.violations);
    }

    /// Sorts the violations by op index, then anomaly, keeping the order found otherwise.
    pub(crate) fn sort(&mut self) {
        self.violations.sort_by_key(|v| (v.op_index, v.anomaly));
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.session == FINALS_SESSION {
            write!(f, "{:?} in the finals: {}", self.anomaly, self.detail)
        } else {
            write!(
                f,
                "{:?} at op {} (session {}): {}",
                self.anomaly, self.op_index, self.session, self.detail
            )
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_ok() {
            return write!(f, "no violations");
        }
        let counts: Vec<String> = self
            .by_anomaly()
            .iter()
            .map(|(a, n)| format!("{a:?}: {n}"))
            .collect();
        writeln!(f, "{} violations ({})", self.count(), counts.join(", "))?;
        for v in self.violations.iter().take(SHOWN) {
            writeln!(f, "  {v}")?;
        }
        if self.count() > SHOWN {
            writeln!(f, "  ... and {} more", self.count() - SHOWN)?;
        }
        Ok(())
    }
}
