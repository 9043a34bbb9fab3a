//! [`Priority`]: the value with the lowest priority wins.

use std::cmp::Ordering;

use crate::{Blob, Lattice};

/// A register holding the value with the lowest priority seen.
///
/// Merge rule: keep the smaller of `(priority, value)`, comparing priorities with
/// [`f64::total_cmp`] (so NaN and −0.0 have a fixed place: −NaN < −∞ < … < −0.0 < +0.0 < … <
/// +∞ < +NaN) and breaking ties with the smaller value bytes. The order is total, so the
/// merge is commutative even for NaN.
///
/// Equality is consistent with that order: priorities are compared with `total_cmp` (NaN
/// equals NaN with the same bits, −0.0 differs from +0.0).
#[derive(Clone, Debug)]
pub struct Priority {
    /// The priority; lower wins.
    pub priority: f64,
    /// The value.
    pub value: Blob,
}

impl Priority {
    /// A register holding `value` at `priority`.
    pub fn new(priority: f64, value: Blob) -> Self {
        Priority { priority, value }
    }

    /// The total order the merge uses: priority by `total_cmp`, then value bytes.
    pub fn total_cmp(&self, other: &Priority) -> Ordering {
        self.priority
            .total_cmp(&other.priority)
            .then_with(|| self.value.cmp(&other.value))
    }
}

impl PartialEq for Priority {
    fn eq(&self, other: &Self) -> bool {
        self.total_cmp(other) == Ordering::Equal
    }
}

impl Eq for Priority {}

impl Lattice for Priority {
    /// Keeps the smaller `(priority, value)` under the total order.
    fn merge(&mut self, other: Self) -> bool {
        if other.total_cmp(self) == Ordering::Less {
            *self = other;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(priority: f64, v: &[u8]) -> Priority {
        Priority::new(priority, Box::from(v))
    }

    #[test]
    fn lowest_priority_wins_with_total_tie_breaks() {
        let mut a = p(2.0, b"b");
        assert!(a.merge(p(1.0, b"z")));
        assert!(!a.merge(p(1.0, b"zz")));
        assert!(a.merge(p(1.0, b"a")));
        assert_eq!(a, p(1.0, b"a"));
        let mut n = p(f64::NAN, b"x");
        assert!(!n.merge(p(f64::NAN, b"x")));
        assert_eq!(n, p(f64::NAN, b"x"));
        assert!(n.merge(p(f64::INFINITY, b"y")));
        let mut z = p(0.0, b"x");
        assert!(z.merge(p(-0.0, b"x")));
        assert_ne!(z, p(0.0, b"x"));
    }
}
