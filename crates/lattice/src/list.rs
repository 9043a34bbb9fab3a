//! [`List`]: a sequence CRDT (RESP lists) with dense position identifiers and
//! observed-remove deletion.
//!
//! # Positions
//! Every element has a unique [`Pos`], a non-empty path of [`Atom`]s ordered
//! lexicographically (a proper prefix sorts first). Each atom is a digit and the [`Dot`] of
//! the insert that made it, so two positions are never equal: concurrent `LPUSH`es on two
//! replicas both compute "one below the head", and their dots order them the same way
//! everywhere. The common case — pushes at either end — is a path of ONE atom (the digit
//! one below the head or one above the tail); inserts in the middle (`LINSERT`) find a path
//! strictly between two neighbours, usually of the same length, growing by one atom only
//! when the neighbours leave no room.
//!
//! # Removals and tombstone growth
//! Like [`crate::OrSet`], the state carries a [`CausalContext`] of every dot it has seen: an
//! element whose dot is in the context but not in the entries was removed. A pop is thus
//! "forget the entry"; nothing is stored per removal. Each actor issues its dots in
//! sequence, so the context is a version vector of one integer per actor that ever wrote
//! the list, whatever the order of pushes and removals: a queue that pushes and pops
//! forever does not grow. The limit: a dot seen out of order (a later delta of an actor
//! merged before an earlier one) waits in the context's cloud until the gap is filled; and
//! the vector grows with the number of distinct writers.
//!
//! # Values
//! Each element's value is a last-writer-wins register stamped by a [`Timestamp`] (`LSET`
//! replaces it in place).
//!
//! Merge rule: an entry survives iff both sides hold it, or one side holds it and the other
//! side's context does not cover its dot (that side has not seen it, so did not remove it);
//! entries on both sides keep the larger `(ts, value)`; contexts union. ACI, and the state
//! stays canonical.

use std::collections::BTreeMap;
use std::fmt;

use crate::{Blob, CausalContext, Dot, Lattice, Timestamp};

/// Longest position path an insert may create (inserts beyond it are refused).
pub const MAX_PATH: usize = 64;

/// One level of a position: a digit, made unique by the dot of the insert that chose it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Atom {
    /// Orders positions first.
    pub digit: i64,
    /// Breaks ties between equal digits (concurrent inserts at the same place).
    pub dot: Dot,
}

/// A position in a [`List`]: a non-empty path of atoms, ordered lexicographically.
pub type Pos = Box<[Atom]>;

/// An element's value: a last-writer-wins register.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    /// When the value was written (push or `LSET`).
    pub ts: Timestamp,
    /// The element.
    pub value: Blob,
}

/// A replicated list (see the module docs).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct List {
    entries: BTreeMap<Pos, Entry>,
    context: CausalContext,
}

/// Why a list update was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListError {
    /// No position fits between the neighbours within [`MAX_PATH`] atoms.
    NoRoom,
}

impl fmt::Display for ListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("no room for a position between these elements")
    }
}

/// The dot of a position: its last atom's.
fn dot_of(pos: &[Atom]) -> Option<Dot> {
    pos.last().map(|a| a.dot)
}

/// A path strictly between `lo` (empty: before everything) and `hi` (`None`: after
/// everything), ending with an atom carrying `dot`. Requires `lo < hi`.
fn between(lo: &[Atom], hi: Option<&[Atom]>, dot: Dot) -> Option<Vec<Atom>> {
    let atom = |digit| Atom { digit, dot };
    let extend = |digit| {
        let mut p = lo.to_vec();
        p.push(atom(digit));
        p
    };
    let path = match hi {
        None => match lo.first() {
            None => vec![atom(0)],
            Some(first) if first.digit < i64::MAX => vec![atom(first.digit + 1)],
            Some(_) => extend(0),
        },
        Some(hi) => match lo.iter().zip(hi).position(|(l, h)| l != h) {
            // `lo` is a proper prefix of `hi`: go below `hi`'s next atom.
            None => {
                let next = hi.get(lo.len())?;
                if next.digit == i64::MIN {
                    return None;
                }
                extend(next.digit - 1)
            }
            // They differ first at `i` (`lo[i] < hi[i]`): any path starting with `lo[..=i]`
            // and above `lo` is below `hi`.
            Some(i) => {
                let last = lo.len() - 1;
                let l = lo[last];
                let room = last > i || hi[i].digit > l.digit.saturating_add(1);
                if room && l.digit < i64::MAX {
                    let mut p = lo[..last].to_vec();
                    p.push(atom(l.digit + 1));
                    p
                } else {
                    extend(0)
                }
            }
        },
    };
    (path.len() <= MAX_PATH).then_some(path)
}

impl List {
    /// The empty list (nothing seen): the bottom.
    pub fn new() -> Self {
        List::default()
    }

    /// A list from its parts (the wire decoder's constructor). Canonicalises: entries with
    /// an empty path are dropped and every entry's dot joins the context.
    pub fn from_parts(entries: BTreeMap<Pos, Entry>, mut context: CausalContext) -> Self {
        // A dot with counter 0 counts as seen by every context: any merge would drop its
        // entry, so it is dropped here (no operation issues one).
        let entries: BTreeMap<Pos, Entry> = entries
            .into_iter()
            .filter(|(p, _)| dot_of(p).is_some_and(|d| d.counter > 0))
            .collect();
        for pos in entries.keys() {
            if let Some(dot) = dot_of(pos) {
                context.insert(dot);
            }
        }
        List { entries, context }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if there are no elements (the context may still hold removed ones).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The elements in list order, with their positions.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&Pos, &Entry)> + '_ {
        self.entries.iter()
    }

    /// The element values in list order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &Blob> + '_ {
        self.entries.values().map(|e| &e.value)
    }

    /// Every dot this state has seen (present or removed).
    pub fn context(&self) -> &CausalContext {
        &self.context
    }

    /// The position of the element at `index` (0 is the head; negative counts from the
    /// tail, -1 being the last), if any. O(index).
    pub fn pos_at(&self, index: i64) -> Option<&Pos> {
        let len = self.entries.len() as i64;
        let i = if index < 0 { len + index } else { index };
        if i < 0 || i >= len {
            return None;
        }
        if i <= len / 2 {
            self.entries.keys().nth(i as usize)
        } else {
            self.entries.keys().nth_back((len - 1 - i) as usize)
        }
    }

    /// The entry at `pos`.
    pub fn get(&self, pos: &[Atom]) -> Option<&Entry> {
        self.entries.get(pos)
    }

    /// The positions just before and after `pos` (which need not be present).
    fn neighbours(&self, pos: &[Atom]) -> (Option<&Pos>, Option<&Pos>) {
        use std::ops::Bound::{Excluded, Unbounded};
        let prev = self
            .entries
            .range::<[Atom], _>((Unbounded, Excluded(pos)))
            .next_back()
            .map(|(p, _)| p);
        let next = self
            .entries
            .range::<[Atom], _>((Excluded(pos), Unbounded))
            .next()
            .map(|(p, _)| p);
        (prev, next)
    }

    /// Inserts `value` as `actor`'s next event at a fresh position strictly between `lo`
    /// (`None`: the head) and `hi` (`None`: the tail); returns the delta to ship.
    fn insert_between(
        &mut self,
        lo: Option<Pos>,
        hi: Option<Pos>,
        actor: u64,
        ts: Timestamp,
        value: Blob,
    ) -> Result<List, ListError> {
        let dot = self.context.next_dot(actor);
        let path =
            between(lo.as_deref().unwrap_or(&[]), hi.as_deref(), dot).ok_or(ListError::NoRoom)?;
        let pos: Pos = path.into_boxed_slice();
        let entry = Entry { ts, value };
        self.context.insert(dot);
        self.entries.insert(pos.clone(), entry.clone());
        let mut context = CausalContext::new();
        context.insert(dot);
        Ok(List {
            entries: BTreeMap::from([(pos, entry)]),
            context,
        })
    }

    /// Pushes `value` at the head (`LPUSH`) as `actor`'s next event; returns the delta.
    pub fn push_front(
        &mut self,
        actor: u64,
        ts: Timestamp,
        value: Blob,
    ) -> Result<List, ListError> {
        let hi = self.entries.keys().next().cloned();
        self.insert_between(None, hi, actor, ts, value)
    }

    /// Pushes `value` at the tail (`RPUSH`) as `actor`'s next event; returns the delta.
    pub fn push_back(&mut self, actor: u64, ts: Timestamp, value: Blob) -> Result<List, ListError> {
        let lo = self.entries.keys().next_back().cloned();
        self.insert_between(lo, None, actor, ts, value)
    }

    /// Inserts `value` just before (`after == false`) or after the element at `pivot`
    /// (`LINSERT`); returns the delta.
    pub fn insert_at(
        &mut self,
        pivot: &[Atom],
        after: bool,
        actor: u64,
        ts: Timestamp,
        value: Blob,
    ) -> Result<List, ListError> {
        let (prev, next) = self.neighbours(pivot);
        let pivot: Pos = Box::from(pivot);
        let (lo, hi) = if after {
            (Some(pivot), next.cloned())
        } else {
            (prev.cloned(), Some(pivot))
        };
        self.insert_between(lo, hi, actor, ts, value)
    }

    /// Removes the element at `pos` (observed-remove); returns its entry and the delta (no
    /// entries; a context holding the element's dot). `None` if absent.
    pub fn remove(&mut self, pos: &[Atom]) -> Option<(Entry, List)> {
        let entry = self.entries.remove(pos)?;
        let mut context = CausalContext::new();
        if let Some(dot) = dot_of(pos) {
            context.insert(dot);
        }
        Some((
            entry,
            List {
                entries: BTreeMap::new(),
                context,
            },
        ))
    }

    /// Replaces the value at `pos` (`LSET`) with a write stamped `ts`; returns the delta.
    /// `None` if absent.
    pub fn set(&mut self, pos: &[Atom], ts: Timestamp, value: Blob) -> Option<List> {
        let slot = self.entries.get_mut(pos)?;
        let entry = Entry { ts, value };
        if entry > *slot {
            *slot = entry.clone();
        }
        let mut context = CausalContext::new();
        if let Some(dot) = dot_of(pos) {
            context.insert(dot);
        }
        Some(List {
            entries: BTreeMap::from([(Box::from(pos), entry)]),
            context,
        })
    }
}

impl fmt::Debug for List {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("List")
            .field("entries", &self.entries)
            .field("context", &self.context)
            .finish()
    }
}

/// Largest context of the other side whose dots a merge looks up one by one instead of
/// scanning all of its own entries (see [`List::drop_removed`]).
const SMALL_CONTEXT: usize = 64;

impl List {
    /// Drops our entries that `other` saw and no longer holds (it removed them).
    ///
    /// A full state's context covers most of our dots: every entry is checked. A delta's
    /// context names a few dots (a push's new dot, a pop's removed one): each is looked up
    /// instead, so merging a delta costs O(log n), not O(n) — what keeps replaying a log of
    /// deltas, or receiving them from a replica, linear. A dot is issued by one insert and
    /// names one position; a dot `other` still holds an entry for therefore removes nothing,
    /// and a removed dot is found at either end of the list (pops), or else by the full
    /// scan.
    fn drop_removed(&mut self, other: &List) -> bool {
        if let Some(dots) = other.context.dots_up_to(SMALL_CONTEXT) {
            let held: Vec<Dot> = other.entries.keys().filter_map(|p| dot_of(p)).collect();
            let mut changed = false;
            for dot in dots {
                if !self.context.contains(&dot) || held.contains(&dot) {
                    continue;
                }
                let at_end = [self.entries.keys().next(), self.entries.keys().next_back()]
                    .into_iter()
                    .flatten()
                    .find(|p| dot_of(p) == Some(dot))
                    .cloned();
                match at_end {
                    Some(pos) => {
                        self.entries.remove(&pos);
                        changed = true;
                    }
                    // In the middle (LREM, LTRIM), or already removed here.
                    None => return self.retain_seen(other) || changed,
                }
            }
            return changed;
        }
        self.retain_seen(other)
    }

    /// [`List::drop_removed`] by a scan of every entry.
    fn retain_seen(&mut self, other: &List) -> bool {
        let mut changed = false;
        self.entries.retain(|pos, _| {
            let keep = other.entries.contains_key(pos)
                || !dot_of(pos).is_some_and(|d| other.context.contains(&d));
            changed |= !keep;
            keep
        });
        changed
    }
}

impl Lattice for List {
    /// Keeps an entry iff both sides hold it or the other side has not seen its dot; equal
    /// positions keep the larger `(ts, value)`; unions the contexts.
    fn merge(&mut self, other: Self) -> bool {
        // Ours that the other side saw and no longer holds were removed there.
        let mut changed = self.drop_removed(&other);
        for (pos, entry) in other.entries {
            match self.entries.get_mut(&pos) {
                Some(mine) => {
                    if entry > *mine {
                        *mine = entry;
                        changed = true;
                    }
                }
                None => {
                    let seen = dot_of(&pos).is_some_and(|d| self.context.contains(&d));
                    if !seen {
                        self.entries.insert(pos, entry);
                        changed = true;
                    }
                }
            }
        }
        changed |= self.context.merge(other.context);
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::laws::check_all;

    fn ts(n: u64) -> Timestamp {
        Timestamp::new(n, 0)
    }

    fn b(s: &str) -> Blob {
        Box::from(s.as_bytes())
    }

    fn items(l: &List) -> Vec<String> {
        l.values()
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect()
    }

    #[test]
    fn pushes_at_the_ends_use_one_atom() {
        let mut l = List::new();
        l.push_back(1, ts(1), b("b")).unwrap();
        l.push_front(1, ts(2), b("a")).unwrap();
        l.push_back(1, ts(3), b("c")).unwrap();
        assert_eq!(items(&l), ["a", "b", "c"]);
        assert!(l.iter().all(|(p, _)| p.len() == 1));
    }

    #[test]
    fn inserts_in_the_middle_stay_ordered_and_short() {
        let mut l = List::new();
        l.push_back(1, ts(1), b("a")).unwrap();
        l.push_back(1, ts(2), b("z")).unwrap();
        // Append after the newest element repeatedly (typing in the middle).
        let mut pivot = l.pos_at(0).unwrap().clone();
        for i in 0..50 {
            l.insert_at(&pivot, true, 1, ts(10 + i), b(&format!("m{i:02}")))
                .unwrap();
            pivot = l.pos_at(i as i64 + 1).unwrap().clone();
        }
        let got = items(&l);
        assert_eq!(got.first().map(String::as_str), Some("a"));
        assert_eq!(got.last().map(String::as_str), Some("z"));
        let middle: Vec<_> = got[1..51].to_vec();
        let mut sorted = middle.clone();
        sorted.sort();
        assert_eq!(middle, sorted);
        assert!(l.iter().all(|(p, _)| p.len() <= 2), "{l:?}");
        // Before the head, repeatedly.
        for i in 0..20 {
            let head = l.pos_at(0).unwrap().clone();
            l.insert_at(&head, false, 2, ts(100 + i), b("h")).unwrap();
        }
        assert_eq!(l.len(), 72);
    }

    #[test]
    fn concurrent_pushes_interleave_deterministically_and_both_survive() {
        let mut base = List::new();
        base.push_back(1, ts(1), b("x")).unwrap();
        let (mut a, mut c) = (base.clone(), base.clone());
        let da = a.push_front(1, ts(2), b("from-a")).unwrap();
        let dc = c.push_front(2, ts(2), b("from-c")).unwrap();
        a.merge(dc);
        c.merge(da);
        assert_eq!(a, c);
        assert_eq!(a.len(), 3);
        assert_eq!(items(&a)[2], "x");
    }

    #[test]
    fn concurrent_pops_remove_once_and_a_pop_beats_a_concurrent_lset() {
        let mut base = List::new();
        base.push_back(1, ts(1), b("x")).unwrap();
        base.push_back(1, ts(2), b("y")).unwrap();
        let (mut a, mut c) = (base.clone(), base.clone());
        let head = base.pos_at(0).unwrap().clone();
        let (ea, da) = a.remove(&head).unwrap();
        let (ec, dc) = c.remove(&head).unwrap();
        assert_eq!(ea, ec);
        a.merge(dc);
        c.merge(da);
        assert_eq!(a, c);
        assert_eq!(items(&a), ["y"]);
        // LSET on one side, pop on the other: the element is gone.
        let tail = a.pos_at(0).unwrap().clone();
        let set = c.set(&tail, ts(9), b("Y")).unwrap();
        let (_, pop) = a.remove(&tail).unwrap();
        c.merge(pop.clone());
        a.merge(set.clone());
        assert_eq!(a, c);
        assert!(a.is_empty());
        check_all(&set, &pop, &a).unwrap();
    }

    #[test]
    fn a_queue_keeps_a_bounded_context() {
        let mut l = List::new();
        for i in 0..1000 {
            l.push_back(7, ts(i), b("job")).unwrap();
            if i % 2 == 1 {
                let head = l.pos_at(0).unwrap().clone();
                l.remove(&head).unwrap();
                let head = l.pos_at(0).unwrap().clone();
                l.remove(&head).unwrap();
            }
        }
        assert!(l.is_empty());
        assert!(l.context().cloud().is_empty());
        assert_eq!(l.context().vector().len(), 1);
    }

    #[test]
    fn between_handles_the_edges() {
        let d = Dot::new(1, 1);
        let a = |digit| Atom { digit, dot: d };
        assert_eq!(between(&[], Some(&[a(i64::MIN)]), d), None);
        let p = between(&[a(i64::MAX)], None, d).unwrap();
        assert!(p.as_slice() > &[a(i64::MAX)][..]);
        let lo = [a(3)];
        let hi = [a(3), a(5)];
        let p = between(&lo, Some(&hi), Dot::new(2, 1)).unwrap();
        assert!(&lo[..] < p.as_slice() && p.as_slice() < &hi[..]);
    }

    /// The merge of the scan, the reference the looked-up merge must equal.
    fn scanning_merge(state: &mut List, other: List) {
        state.retain_seen(&other);
        for (pos, entry) in other.entries {
            match state.entries.get_mut(&pos) {
                Some(mine) => {
                    if entry > *mine {
                        *mine = entry;
                    }
                }
                None => {
                    if !dot_of(&pos).is_some_and(|d| state.context.contains(&d)) {
                        state.entries.insert(pos, entry);
                    }
                }
            }
        }
        state.context.merge(other.context);
    }

    /// Replaying a log of deltas (pushes at both ends, pops at both ends, LSET, LINSERT and
    /// removals in the middle), in order, twice, or shuffled, reaches the state that made
    /// them, and every merge of a delta equals the scanning merge.
    #[test]
    fn deltas_replay_to_the_full_state() {
        let mut rng = fastrand::Rng::with_seed(11);
        let mut state = List::new();
        let mut log = Vec::new();
        for i in 0..3000u64 {
            let value = b(&format!("v{i}"));
            let len = state.len() as i64;
            let delta = match rng.u8(..8) {
                0 | 1 => state.push_front(rng.u64(1..3), ts(i), value).unwrap(),
                2 | 3 => state.push_back(rng.u64(1..3), ts(i), value).unwrap(),
                4 if len > 0 => {
                    let pos = state.pos_at(0).unwrap().clone();
                    state.remove(&pos).unwrap().1
                }
                5 if len > 0 => {
                    let pos = state.pos_at(-1).unwrap().clone();
                    state.remove(&pos).unwrap().1
                }
                6 if len > 0 => {
                    let pos = state.pos_at(rng.i64(0..len)).unwrap().clone();
                    if rng.bool() {
                        state.remove(&pos).unwrap().1
                    } else {
                        state.set(&pos, ts(i), value).unwrap()
                    }
                }
                _ if len > 0 => {
                    let pos = state.pos_at(rng.i64(0..len)).unwrap().clone();
                    state.insert_at(&pos, rng.bool(), 3, ts(i), value).unwrap()
                }
                _ => state.push_back(1, ts(i), value).unwrap(),
            };
            log.push(delta);
        }
        let mut replayed = List::new();
        let mut reference = List::new();
        for delta in &log {
            replayed.merge(delta.clone());
            scanning_merge(&mut reference, delta.clone());
            assert_eq!(replayed, reference);
        }
        assert_eq!(replayed, state);
        for delta in log.iter().rev().step_by(3) {
            replayed.merge(delta.clone());
            scanning_merge(&mut reference, delta.clone());
            assert_eq!(replayed, reference);
        }
        assert_eq!(replayed, state);
        let mut shuffled = log.clone();
        rng.shuffle(&mut shuffled);
        let (mut x, mut y) = (List::new(), List::new());
        for delta in shuffled {
            x.merge(delta.clone());
            scanning_merge(&mut y, delta);
            assert_eq!(x, y);
        }
        assert_eq!(x, state);
    }

    #[test]
    fn a_context_lists_its_dots_only_when_small() {
        let mut c = CausalContext::new();
        assert_eq!(c.dots_up_to(0), Some(vec![]));
        c.insert(Dot::new(1, 1));
        c.insert(Dot::new(1, 2));
        c.insert(Dot::new(2, 5));
        assert_eq!(
            c.dots_up_to(3),
            Some(vec![Dot::new(1, 1), Dot::new(1, 2), Dot::new(2, 5)])
        );
        assert_eq!(c.dots_up_to(2), None);
        c.insert(Dot::new(3, u64::MAX));
        c.merge(CausalContext::from_parts(
            BTreeMap::from([(4, u64::MAX)]),
            Default::default(),
        ));
        assert_eq!(c.dots_up_to(64), None);
    }
}
