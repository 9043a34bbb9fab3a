//! [`Expiry`]: when a key expires, as a last-writer-wins register.

use crate::{Lattice, Timestamp};

/// A key's deadline (RESP `EXPIRE`, `SET … EX`, `PERSIST`): an absolute time in
/// milliseconds since the Unix epoch, or none, stamped with the [`Timestamp`] of the
/// command that set or cleared it.
///
/// Merge rule: keep the maximum of `(ts, at_ms)` (no deadline below any deadline at equal
/// timestamps, a tie a correct clock never produces), so every replica agrees on the
/// deadline whatever order the writes arrive in. The deadline is absolute, so replicas
/// agree on it without agreeing on when it was set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Expiry {
    /// When the deadline was set or cleared.
    pub ts: Timestamp,
    /// The deadline (ms since the Unix epoch); `None`: the key does not expire.
    pub at_ms: Option<u64>,
}

impl Expiry {
    /// A deadline `at_ms` (or none) set at `ts`.
    pub fn new(ts: Timestamp, at_ms: Option<u64>) -> Self {
        Expiry { ts, at_ms }
    }

    /// True if the deadline has passed at `now_ms` (a key is expired from its deadline on).
    pub fn expired_at(&self, now_ms: u64) -> bool {
        self.at_ms.is_some_and(|at| at <= now_ms)
    }
}

impl Lattice for Expiry {
    /// Keeps the maximum of `(ts, at_ms)`.
    fn merge(&mut self, other: Self) -> bool {
        if (other.ts, other.at_ms) > (self.ts, self.at_ms) {
            *self = other;
            true
        } else {
            false
        }
    }
}

/// Merges an optional expiry into another (`None` is the bottom): true if `mine` changed.
pub fn merge_expiry(mine: &mut Option<Box<Expiry>>, theirs: Option<Box<Expiry>>) -> bool {
    match (mine.as_mut(), theirs) {
        (_, None) => false,
        (None, Some(t)) => {
            *mine = Some(t);
            true
        }
        (Some(m), Some(t)) => m.merge(*t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::laws::check_all;

    fn e(ms: u64, writer: u64, at: Option<u64>) -> Expiry {
        Expiry::new(Timestamp::new(ms << 16, writer), at)
    }

    #[test]
    fn the_later_setting_wins_and_ties_are_total() {
        let mut a = e(1, 0, Some(100));
        assert!(a.merge(e(2, 0, None)));
        assert_eq!(a.at_ms, None);
        assert!(!a.merge(e(1, 0, Some(500))));
        let mut b = e(3, 1, None);
        assert!(b.merge(e(3, 1, Some(7))));
        assert_eq!(b.at_ms, Some(7));
        let vals = [
            e(1, 0, None),
            e(1, 0, Some(5)),
            e(2, 1, Some(3)),
            e(2, 0, None),
        ];
        for x in &vals {
            for y in &vals {
                for z in &vals {
                    check_all(x, y, z).unwrap();
                }
            }
        }
    }

    #[test]
    fn expired_from_the_deadline_on() {
        let x = e(1, 0, Some(100));
        assert!(!x.expired_at(99));
        assert!(x.expired_at(100));
        assert!(!e(1, 0, None).expired_at(u64::MAX));
    }
}
