//! Order lattices: [`Max`], [`Min`] and [`Bool`].

use std::fmt;

use crate::Lattice;

/// A register that keeps the largest value ever written.
///
/// Merge rule: maximum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Max<T>(pub T);

impl<T: Ord + Clone + fmt::Debug> Lattice for Max<T> {
    /// Keeps the maximum.
    fn merge(&mut self, other: Self) -> bool {
        if other.0 > self.0 {
            self.0 = other.0;
            true
        } else {
            false
        }
    }
}

/// A register that keeps the smallest value ever written.
///
/// Merge rule: minimum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Min<T>(pub T);

impl<T: Ord + Clone + fmt::Debug> Lattice for Min<T> {
    /// Keeps the minimum.
    fn merge(&mut self, other: Self) -> bool {
        if other.0 < self.0 {
            self.0 = other.0;
            true
        } else {
            false
        }
    }
}

/// A flag that, once true, stays true (`false` is the bottom).
///
/// Merge rule: logical or.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bool(pub bool);

impl Lattice for Bool {
    /// Logical or.
    fn merge(&mut self, other: Self) -> bool {
        let changed = other.0 && !self.0;
        self.0 |= other.0;
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_min_bool() {
        let mut m = Max(3);
        assert!(!m.merge(Max(1)));
        assert!(m.merge(Max(7)));
        assert_eq!(m, Max(7));
        let mut n = Min(3);
        assert!(n.merge(Min(-1)));
        assert!(!n.merge(Min(5)));
        assert_eq!(n, Min(-1));
        let mut b = Bool(false);
        assert!(!b.merge(Bool(false)));
        assert!(b.merge(Bool(true)));
        assert!(!b.merge(Bool(false)));
        assert_eq!(b, Bool(true));
    }
}
