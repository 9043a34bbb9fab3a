//! Grow-only sets: [`Set`] (membership) and [`OrderedSet`] (ordered access).
//!
//! Both merge by union; they are distinct lattice types so that users pick the access they
//! need. Members can never be removed: use [`crate::OrSet`] for a set with removes, or delete
//! the whole key (see [`crate::Record`]).

use std::borrow::Borrow;
use std::collections::{btree_set, BTreeSet};
use std::fmt;
use std::ops::RangeBounds;

use crate::Lattice;

/// Adds every member of `other` to `mine`; true iff a member was new.
fn union<T: Ord>(mine: &mut BTreeSet<T>, mut other: BTreeSet<T>) -> bool {
    let before = mine.len();
    if before == 0 {
        *mine = other;
    } else {
        mine.append(&mut other);
    }
    mine.len() != before
}

/// A grow-only set, for membership queries.
///
/// Merge rule: set union.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Set<T>(BTreeSet<T>);

impl<T: Ord + Clone> Set<T> {
    /// The empty set.
    pub fn new() -> Self {
        Set(BTreeSet::new())
    }

    /// Adds `member`; returns true if it was not present.
    pub fn insert(&mut self, member: T) -> bool {
        self.0.insert(member)
    }

    /// True if `member` is present.
    pub fn contains<Q>(&self, member: &Q) -> bool
    where
        T: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.0.contains(member)
    }

    /// The members, in sorted order.
    pub fn iter(&self) -> btree_set::Iter<'_, T> {
        self.0.iter()
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True if there are no members.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<T: Ord + Clone> Default for Set<T> {
    fn default() -> Self {
        Set::new()
    }
}

impl<T: Ord + Clone> FromIterator<T> for Set<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Set(iter.into_iter().collect())
    }
}

impl<'a, T> IntoIterator for &'a Set<T> {
    type Item = &'a T;
    type IntoIter = btree_set::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<T: Ord + Clone + fmt::Debug> Lattice for Set<T> {
    /// Set union.
    fn merge(&mut self, other: Self) -> bool {
        union(&mut self.0, other.0)
    }
}

/// A grow-only set with ordered access (first, last, ranges).
///
/// Merge rule: set union (the same as [`Set`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OrderedSet<T>(BTreeSet<T>);

impl<T: Ord + Clone> OrderedSet<T> {
    /// The empty set.
    pub fn new() -> Self {
        OrderedSet(BTreeSet::new())
    }

    /// Adds `member`; returns true if it was not present.
    pub fn insert(&mut self, member: T) -> bool {
        self.0.insert(member)
    }

    /// True if `member` is present.
    pub fn contains<Q>(&self, member: &Q) -> bool
    where
        T: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.0.contains(member)
    }

    /// The members, in ascending order.
    pub fn iter(&self) -> btree_set::Iter<'_, T> {
        self.0.iter()
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True if there are no members.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The smallest member.
    pub fn first(&self) -> Option<&T> {
        self.0.first()
    }

    /// The largest member.
    pub fn last(&self) -> Option<&T> {
        self.0.last()
    }

    /// The members within `range`, in ascending order.
    ///
    /// An inverted or empty range (start after end, or both excluded at the same point)
    /// yields nothing instead of panicking.
    pub fn range<Q, R>(&self, range: R) -> btree_set::Range<'_, T>
    where
        T: Borrow<Q>,
        Q: Ord + ?Sized,
        R: RangeBounds<Q>,
    {
        use std::ops::Bound::{Excluded, Included};
        let empty = match (range.start_bound(), range.end_bound()) {
            (Included(s), Included(e)) => s > e,
            (Included(s), Excluded(e)) | (Excluded(s), Included(e)) => s > e,
            (Excluded(s), Excluded(e)) => s >= e,
            _ => false,
        };
        if empty {
            // `BTreeSet::range` panics on such ranges; return an empty range of the set.
            return match self.0.first() {
                Some(first) => self.0.range::<T, _>((Included(first), Excluded(first))),
                None => self.0.range::<T, _>(..),
            };
        }
        self.0.range(range)
    }
}

impl<T: Ord + Clone> Default for OrderedSet<T> {
    fn default() -> Self {
        OrderedSet::new()
    }
}

impl<T: Ord + Clone> FromIterator<T> for OrderedSet<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        OrderedSet(iter.into_iter().collect())
    }
}

impl<'a, T> IntoIterator for &'a OrderedSet<T> {
    type Item = &'a T;
    type IntoIter = btree_set::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<T: Ord + Clone + fmt::Debug> Lattice for OrderedSet<T> {
    /// Set union.
    fn merge(&mut self, other: Self) -> bool {
        union(&mut self.0, other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_and_changed_flag() {
        let mut a: Set<u8> = [1, 2].into_iter().collect();
        assert!(!a.merge([2].into_iter().collect()));
        assert!(a.merge([3].into_iter().collect()));
        assert_eq!(a.iter().copied().collect::<Vec<_>>(), vec![1, 2, 3]);
        let mut e = Set::new();
        assert!(e.merge(a.clone()));
        assert_eq!(e, a);
        assert!(!e.merge(Set::new()));
    }

    #[test]
    fn blob_members_are_found_by_slice() {
        let s: Set<Box<[u8]>> = [Box::from(&b"x"[..])].into_iter().collect();
        assert!(s.contains(&b"x"[..]));
        assert!(!s.contains(&b"y"[..]));
    }

    #[test]
    fn ordered_access() {
        let mut s: OrderedSet<u32> = [5, 1, 9, 3].into_iter().collect();
        assert!(s.insert(7));
        assert!(!s.insert(7));
        assert_eq!(s.first(), Some(&1));
        assert_eq!(s.last(), Some(&9));
        assert_eq!(s.range(3..8).copied().collect::<Vec<_>>(), vec![3, 5, 7]);
        assert_eq!(s.range(..=3).count(), 2);
        // Inverted and empty ranges yield nothing instead of panicking.
        use std::ops::Bound::{Excluded, Included};
        assert_eq!(s.range((Included(8), Included(3))).count(), 0);
        assert_eq!(s.range((Excluded(5), Excluded(5))).count(), 0);
        assert_eq!(s.range((Included(5), Excluded(5))).count(), 0);
        let empty = OrderedSet::<u32>::new();
        assert_eq!(empty.range((Included(2), Excluded(1))).count(), 0);
        assert!(s.merge([0].into_iter().collect()));
        assert_eq!(s.first(), Some(&0));
    }
}
