//! [`Hash`](struct@Hash): a Redis hash as a map of last-writer-wins fields that can be removed, and
//! [`FieldReg`], the register of one field (shared with [`crate::SortedSet`]).

use std::collections::{btree_map, BTreeMap};

use crate::{Blob, Lattice, Timestamp};

/// One field's register: the value written last, or a removal (`value: None`, a
/// timestamped tombstone).
///
/// Merge rule: keep the maximum of `(ts, value)`, a removal being below every value at the
/// same timestamp — the later write wins; equal timestamps (never issued by a correct
/// clock) still resolve the same way on every replica.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldReg<V> {
    /// When the field was written or removed.
    pub ts: Timestamp,
    /// The value; `None`: removed.
    pub value: Option<V>,
}

impl<V: Ord> FieldReg<V> {
    /// A register written at `ts`.
    pub fn new(ts: Timestamp, value: Option<V>) -> Self {
        FieldReg { ts, value }
    }

    /// Merges `other` in; returns true iff `self` changed.
    pub fn merge(&mut self, other: FieldReg<V>) -> bool {
        if other > *self {
            *self = other;
            true
        } else {
            false
        }
    }
}

/// A Redis hash: field → [`FieldReg`] of its value.
///
/// Merge rule: field-wise, each field's register keeps its last write (a value or a
/// removal). Removed fields stay as tombstones, so a removal beats older writes that
/// arrive later; the hash is empty for users when no field holds a value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Hash {
    fields: BTreeMap<Blob, FieldReg<Blob>>,
    /// Number of fields holding a value.
    live: usize,
}

impl Hash {
    /// The empty hash.
    pub fn new() -> Self {
        Hash::default()
    }

    /// A hash from registers (a field repeated merges its registers).
    pub fn from_entries(entries: impl IntoIterator<Item = (Blob, FieldReg<Blob>)>) -> Self {
        let mut h = Hash::new();
        for (f, r) in entries {
            h.write(f, r);
        }
        h
    }

    /// The value of `field`, if it holds one.
    pub fn get(&self, field: &[u8]) -> Option<&Blob> {
        self.fields.get(field).and_then(|r| r.value.as_ref())
    }

    /// The register of `field` (a value or a removal), if the field was ever written.
    pub fn register(&self, field: &[u8]) -> Option<&FieldReg<Blob>> {
        self.fields.get(field)
    }

    /// Number of fields holding a value.
    pub fn len(&self) -> usize {
        self.live
    }

    /// True if no field holds a value.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The fields holding a value, with their values, ordered by field.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&Blob, &Blob)> + '_ {
        self.fields
            .iter()
            .filter_map(|(f, r)| r.value.as_ref().map(|v| (f, v)))
    }

    /// The live fields from `start` (inclusive) on, ordered by field.
    pub fn iter_from<'a>(&'a self, start: &'a [u8]) -> impl Iterator<Item = (&'a Blob, &'a Blob)> {
        self.fields
            .range::<[u8], _>((std::ops::Bound::Included(start), std::ops::Bound::Unbounded))
            .filter_map(|(f, r)| r.value.as_ref().map(|v| (f, v)))
    }

    /// Every register, removals included, ordered by field (for encodings).
    pub fn entries(&self) -> btree_map::Iter<'_, Blob, FieldReg<Blob>> {
        self.fields.iter()
    }

    /// Number of registers, removals included.
    pub fn entry_count(&self) -> usize {
        self.fields.len()
    }

    /// Merges one field's register in; true iff the hash changed.
    pub fn write(&mut self, field: Blob, reg: FieldReg<Blob>) -> bool {
        match self.fields.entry(field) {
            btree_map::Entry::Vacant(slot) => {
                self.live += usize::from(reg.value.is_some());
                slot.insert(reg);
                true
            }
            btree_map::Entry::Occupied(mut slot) => {
                let was = slot.get().value.is_some();
                let changed = slot.get_mut().merge(reg);
                let now = slot.get().value.is_some();
                self.live = self.live + usize::from(now) - usize::from(was);
                changed
            }
        }
    }
}

impl Lattice for Hash {
    /// Field-wise merge of the registers.
    fn merge(&mut self, other: Self) -> bool {
        if self.fields.is_empty() {
            let changed = !other.fields.is_empty();
            *self = other;
            return changed;
        }
        let mut changed = false;
        for (f, r) in other.fields {
            changed |= self.write(f, r);
        }
        changed
    }

    fn merge_ref(&mut self, other: &Self) -> bool {
        let mut changed = false;
        for (f, r) in &other.fields {
            let newer = self.fields.get(f).is_none_or(|mine| r > mine);
            if newer {
                changed |= self.write(f.clone(), r.clone());
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(t: u64, v: Option<&str>) -> FieldReg<Blob> {
        FieldReg::new(Timestamp::new(t, 1), v.map(|s| Box::from(s.as_bytes())))
    }

    fn f(s: &str) -> Blob {
        Box::from(s.as_bytes())
    }

    #[test]
    fn later_write_or_removal_wins_per_field() {
        let mut a = Hash::from_entries([(f("x"), reg(1, Some("1"))), (f("y"), reg(1, Some("2")))]);
        assert_eq!(a.len(), 2);
        let del = Hash::from_entries([(f("x"), reg(2, None))]);
        assert!(a.merge_ref(&del));
        assert_eq!(a.len(), 1);
        assert_eq!(a.get(b"x"), None);
        // An older write of x arriving late does not resurrect it.
        assert!(!a.merge(Hash::from_entries([(f("x"), reg(1, Some("old")))])));
        assert_eq!(a.get(b"x"), None);
        // A newer one does.
        assert!(a.merge(Hash::from_entries([(f("x"), reg(3, Some("new")))])));
        assert_eq!(a.get(b"x").map(|v| &v[..]), Some(&b"new"[..]));
        assert_eq!(a.len(), 2);
        let fields: Vec<_> = a.iter().map(|(k, _)| k.to_vec()).collect();
        assert_eq!(fields, vec![b"x".to_vec(), b"y".to_vec()]);
    }

    #[test]
    fn removal_loses_to_a_value_at_the_same_timestamp() {
        let mut a = Hash::from_entries([(f("x"), reg(5, None))]);
        let b = Hash::from_entries([(f("x"), reg(5, Some("v")))]);
        let mut b2 = b.clone();
        assert!(a.merge(b));
        assert!(!b2.merge(Hash::from_entries([(f("x"), reg(5, None))])));
        assert_eq!(a, b2);
        assert!(!a.is_empty());
    }

    #[test]
    fn all_removed_is_empty_but_keeps_tombstones() {
        let mut a = Hash::from_entries([(f("x"), reg(1, Some("1")))]);
        a.merge(Hash::from_entries([(f("x"), reg(2, None))]));
        assert!(a.is_empty());
        assert_eq!(a.entry_count(), 1);
        assert_eq!(a.iter().count(), 0);
    }
}
