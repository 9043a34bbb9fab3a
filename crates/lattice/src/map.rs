//! [`Map`]: a map whose values are lattices, merged key by key.

use std::borrow::Borrow;
use std::collections::{btree_map, BTreeMap};
use std::fmt;

use crate::Lattice;

/// A map from keys to lattice values.
///
/// Merge rule: key-wise; a key present on one side only is inserted, a key present on both
/// sides merges its values with `V::merge`. Keys are never removed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Map<K, V>(BTreeMap<K, V>);

impl<K: Ord + Clone, V: Lattice> Map<K, V> {
    /// The empty map.
    pub fn new() -> Self {
        Map(BTreeMap::new())
    }

    /// The value at `key`.
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.0.get(key)
    }

    /// Merges `value` into the value at `key` (inserting it if absent); true iff the map
    /// changed.
    pub fn insert_merge(&mut self, key: K, value: V) -> bool {
        match self.0.entry(key) {
            btree_map::Entry::Vacant(slot) => {
                slot.insert(value);
                true
            }
            btree_map::Entry::Occupied(mut slot) => slot.get_mut().merge(value),
        }
    }

    /// The entries, ordered by key.
    pub fn iter(&self) -> btree_map::Iter<'_, K, V> {
        self.0.iter()
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True if there are no keys.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<K: Ord + Clone, V: Lattice> Default for Map<K, V> {
    fn default() -> Self {
        Map::new()
    }
}

impl<K: Ord + Clone, V: Lattice> FromIterator<(K, V)> for Map<K, V> {
    /// Builds a map; a repeated key merges its values.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut map = Map::new();
        for (k, v) in iter {
            map.insert_merge(k, v);
        }
        map
    }
}

impl<'a, K, V> IntoIterator for &'a Map<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = btree_map::Iter<'a, K, V>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<K: Ord + Clone + fmt::Debug, V: Lattice> Lattice for Map<K, V> {
    /// Key-wise merge; absent keys are inserted.
    fn merge(&mut self, other: Self) -> bool {
        if self.0.is_empty() {
            let changed = !other.0.is_empty();
            *self = other;
            return changed;
        }
        let mut changed = false;
        for (k, v) in other.0 {
            changed |= self.insert_merge(k, v);
        }
        changed
    }

    fn merge_ref(&mut self, other: &Self) -> bool {
        let mut changed = false;
        for (k, v) in &other.0 {
            changed |= match self.0.get_mut(k) {
                Some(mine) => mine.merge_ref(v),
                None => {
                    self.0.insert(k.clone(), v.clone());
                    true
                }
            };
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Max;

    #[test]
    fn key_wise_merge() {
        let mut a: Map<&str, Max<i32>> = [("x", Max(1)), ("y", Max(5))].into_iter().collect();
        let b: Map<&str, Max<i32>> = [("x", Max(3)), ("z", Max(0))].into_iter().collect();
        assert!(a.merge_ref(&b));
        assert!(!a.merge_ref(&b));
        assert_eq!(a.get("x"), Some(&Max(3)));
        assert_eq!(a.get("y"), Some(&Max(5)));
        assert_eq!(a.len(), 3);
        let mut e = Map::new();
        assert!(e.merge(a.clone()));
        assert!(!e.merge(Map::new()));
        assert_eq!(e, a);
        assert!(!a.insert_merge("y", Max(2)));
        assert!(a.insert_merge("w", Max(2)));
    }
}
