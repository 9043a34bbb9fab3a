//! [`SortedSet`]: a Redis sorted set as a map of last-writer-wins scores that can be
//! removed, with an order index.

use std::cmp::Ordering;
use std::collections::{btree_map, BTreeMap, BTreeSet};
use std::ops::Bound;

use crate::hash::FieldReg;
use crate::{Blob, Lattice};

/// A score as a register holds it: an `f64` totally ordered by [`f64::total_cmp`] (so the
/// merge is total even for values Redis never stores, NaN and −0.0 included).
#[derive(Clone, Copy, Debug)]
pub struct Score(pub f64);

impl PartialEq for Score {
    fn eq(&self, other: &Self) -> bool {
        self.0.total_cmp(&other.0) == Ordering::Equal
    }
}

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl std::hash::Hash for Score {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state)
    }
}

/// The least score above `s` (`s` itself for infinities and NaN).
fn next_up(s: f64) -> f64 {
    let s = s + 0.0;
    if s.is_nan() || s.is_infinite() {
        return s;
    }
    if s == 0.0 {
        return f64::from_bits(1);
    }
    let bits = s.to_bits();
    f64::from_bits(if s > 0.0 { bits + 1 } else { bits - 1 })
}

/// The index position of a score: −0.0 sorts as +0.0, as Redis compares scores.
fn order_key(s: f64) -> Score {
    Score(s + 0.0)
}

/// A Redis sorted set: member → [`FieldReg`] of its score, and the live members ordered by
/// `(score, member bytes)` as Redis orders them.
///
/// Merge rule: member-wise, each member's register keeps its last write (a score or a
/// removal); the index follows. Removed members stay as tombstones; the set is empty for
/// users when no member holds a score.
#[derive(Clone, Debug, Default)]
pub struct SortedSet {
    members: BTreeMap<Blob, FieldReg<Score>>,
    index: BTreeSet<(Score, Blob)>,
}

impl PartialEq for SortedSet {
    /// The registers decide (the index is a function of them).
    fn eq(&self, other: &Self) -> bool {
        self.members == other.members
    }
}

impl Eq for SortedSet {}

impl SortedSet {
    /// The empty sorted set.
    pub fn new() -> Self {
        SortedSet::default()
    }

    /// A sorted set from registers (a member repeated merges its registers).
    pub fn from_entries(entries: impl IntoIterator<Item = (Blob, FieldReg<Score>)>) -> Self {
        let mut z = SortedSet::new();
        for (m, r) in entries {
            z.write(m, r);
        }
        z
    }

    /// The score of `member`, if it holds one.
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.members.get(member).and_then(|r| r.value.map(|s| s.0))
    }

    /// Number of members holding a score.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// True if no member holds a score.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The live members with their scores, by `(score, member)`.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&Blob, f64)> + '_ {
        self.index
            .iter()
            .map(|(s, m)| (m, self.score(m).unwrap_or(s.0)))
    }

    /// The live members whose scores are within the bounds, by `(score, member)`.
    pub fn range_by_score(
        &self,
        min: Bound<f64>,
        max: Bound<f64>,
    ) -> impl DoubleEndedIterator<Item = (&Blob, f64)> + '_ {
        let at = |s: f64| (order_key(s), Blob::default());
        // Every member sorts at or above `(score, "")`, so bounds on scores are bounds on
        // index entries.
        let lo = match min {
            Bound::Included(s) => Some(Bound::Included(at(s))),
            Bound::Excluded(s) if s < f64::INFINITY => Some(Bound::Included(at(next_up(s)))),
            Bound::Excluded(_) => None,
            Bound::Unbounded => Some(Bound::Unbounded),
        };
        let hi = match max {
            Bound::Included(s) if s < f64::INFINITY => Some(Bound::Excluded(at(next_up(s)))),
            Bound::Included(_) | Bound::Unbounded => Some(Bound::Unbounded),
            Bound::Excluded(s) => Some(Bound::Excluded(at(s))),
        };
        let ordered = match (&lo, &hi) {
            (Some(Bound::Included(a)), Some(Bound::Excluded(b))) => a < b,
            (Some(_), Some(_)) => true,
            _ => false,
        };
        let range = match (lo, hi) {
            (Some(lo), Some(hi)) if ordered => Some(self.index.range((lo, hi))),
            _ => None,
        };
        range
            .into_iter()
            .flatten()
            .map(|(s, m)| (m, self.score(m).unwrap_or(s.0)))
    }

    /// The 0-based position of `member` in `(score, member)` order, if it holds a score
    /// (linear in the rank).
    pub fn rank(&self, member: &[u8]) -> Option<usize> {
        let s = self.score(member)?;
        let key = (order_key(s), Blob::from(member));
        Some(self.index.range(..key).count())
    }

    /// Every register, removals included, ordered by member (for encodings).
    pub fn entries(&self) -> btree_map::Iter<'_, Blob, FieldReg<Score>> {
        self.members.iter()
    }

    /// Number of registers, removals included.
    pub fn entry_count(&self) -> usize {
        self.members.len()
    }

    /// The live members from `start` (inclusive) on, ordered by member bytes.
    pub fn iter_by_member_from<'a>(
        &'a self,
        start: &'a [u8],
    ) -> impl Iterator<Item = (&'a Blob, f64)> {
        self.members
            .range::<[u8], _>((Bound::Included(start), Bound::Unbounded))
            .filter_map(|(m, r)| r.value.map(|s| (m, s.0)))
    }

    /// Merges one member's register in; true iff the set changed.
    pub fn write(&mut self, member: Blob, reg: FieldReg<Score>) -> bool {
        match self.members.get_mut(&member) {
            None => {
                if let Some(s) = reg.value {
                    self.index.insert((order_key(s.0), member.clone()));
                }
                self.members.insert(member, reg);
                true
            }
            Some(mine) => {
                let old = mine.value;
                if !mine.merge(reg) {
                    return false;
                }
                let new = mine.value;
                if let Some(s) = old {
                    self.index.remove(&(order_key(s.0), member.clone()));
                }
                if let Some(s) = new {
                    self.index.insert((order_key(s.0), member));
                }
                true
            }
        }
    }
}

impl Lattice for SortedSet {
    /// Member-wise merge of the registers.
    fn merge(&mut self, other: Self) -> bool {
        if self.members.is_empty() {
            let changed = !other.members.is_empty();
            *self = other;
            return changed;
        }
        let mut changed = false;
        for (m, r) in other.members {
            changed |= self.write(m, r);
        }
        changed
    }

    fn merge_ref(&mut self, other: &Self) -> bool {
        let mut changed = false;
        for (m, r) in &other.members {
            let newer = self.members.get(m).is_none_or(|mine| r > mine);
            if newer {
                changed |= self.write(m.clone(), r.clone());
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Timestamp;

    fn reg(t: u64, s: Option<f64>) -> FieldReg<Score> {
        FieldReg::new(Timestamp::new(t, 1), s.map(Score))
    }

    fn m(s: &str) -> Blob {
        Box::from(s.as_bytes())
    }

    fn members(z: &SortedSet) -> Vec<String> {
        z.iter()
            .map(|(m, _)| String::from_utf8_lossy(m).into_owned())
            .collect()
    }

    #[test]
    fn ordered_by_score_then_member_and_index_follows_writes() {
        let mut z = SortedSet::from_entries([
            (m("b"), reg(1, Some(1.0))),
            (m("a"), reg(1, Some(1.0))),
            (m("c"), reg(1, Some(-2.0))),
        ]);
        assert_eq!(members(&z), ["c", "a", "b"]);
        assert_eq!(z.rank(b"b"), Some(2));
        assert!(z.merge(SortedSet::from_entries([(m("c"), reg(2, Some(5.0)))])));
        assert_eq!(members(&z), ["a", "b", "c"]);
        assert!(z.merge(SortedSet::from_entries([(m("a"), reg(3, None))])));
        assert_eq!(members(&z), ["b", "c"]);
        assert_eq!(z.len(), 2);
        assert_eq!(z.entry_count(), 3);
        // A late older write does not come back.
        assert!(!z.merge(SortedSet::from_entries([(m("a"), reg(2, Some(0.0)))])));
        assert_eq!(z.score(b"a"), None);
    }

    #[test]
    fn score_ranges() {
        let z = SortedSet::from_entries(
            [("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", f64::INFINITY)]
                .map(|(k, s)| (m(k), reg(1, Some(s)))),
        );
        let pick = |lo, hi| -> Vec<String> {
            z.range_by_score(lo, hi)
                .map(|(m, _)| String::from_utf8_lossy(m).into_owned())
                .collect()
        };
        assert_eq!(
            pick(Bound::Included(2.0), Bound::Unbounded),
            ["b", "c", "d"]
        );
        assert_eq!(pick(Bound::Excluded(1.0), Bound::Excluded(3.0)), ["b"]);
        assert_eq!(
            pick(Bound::Included(3.0), Bound::Included(1.0)),
            Vec::<String>::new()
        );
        let rev: Vec<_> = z
            .range_by_score(Bound::Unbounded, Bound::Included(2.0))
            .rev()
            .map(|(m, _)| m.to_vec())
            .collect();
        assert_eq!(rev, vec![b"b".to_vec(), b"a".to_vec()]);
    }

    #[test]
    fn negative_zero_sorts_with_zero() {
        let z =
            SortedSet::from_entries([(m("b"), reg(1, Some(-0.0))), (m("a"), reg(1, Some(0.0)))]);
        assert_eq!(members(&z), ["a", "b"]);
    }
}
