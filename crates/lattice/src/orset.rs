//! [`OrSet`]: an add-wins observed-remove set in delta-state form.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::{CausalContext, Dot, Lattice};

/// An add-wins observed-remove set (AWSet / ORSWOT with a causal context).
///
/// Every add is an event, a [`Dot`]; a member is present while at least one of its dots is.
/// The [`CausalContext`] records every dot the state has seen, so "seen and gone" (removed)
/// is told apart from "not seen yet".
///
/// Merge rule: a dot of a member survives iff it is on both sides, or it is on one side and
/// not covered by the other side's context (the other side has not seen it, so it did not
/// remove it). Members left without dots disappear. Contexts are unioned and compacted.
///
/// Updates are deltas: [`OrSet::add_delta`] and [`OrSet::remove_delta`] return a small
/// `OrSet` that the caller merges into its state (`state.merge(delta.clone())`) and ships to
/// the other replicas. A remove removes only the adds it has observed, so an add concurrent
/// with a remove of the same member wins.
///
/// Each replica must generate dots under its own actor id, from its own up-to-date state.
#[derive(Clone, PartialEq, Eq)]
pub struct OrSet<T> {
    entries: BTreeMap<T, BTreeSet<Dot>>,
    context: CausalContext,
}

impl<T: Ord + Clone> OrSet<T> {
    /// The empty set (no member, nothing seen): the bottom.
    pub fn new() -> Self {
        OrSet {
            entries: BTreeMap::new(),
            context: CausalContext::new(),
        }
    }

    /// A set from its parts (the wire decoder's constructor). Canonicalises: members with
    /// no dots are dropped; the context is already compact by construction. Entry dots are
    /// kept as given.
    pub fn from_parts(entries: BTreeMap<T, BTreeSet<Dot>>, context: CausalContext) -> Self {
        // A dot with counter 0 counts as seen by every context: any merge would drop it,
        // so it is dropped here (no operation issues one).
        let entries = entries
            .into_iter()
            .map(|(m, dots)| (m, dots.into_iter().filter(|d| d.counter > 0).collect()))
            .filter(|(_, dots): &(T, BTreeSet<Dot>)| !dots.is_empty())
            .collect();
        OrSet { entries, context }
    }

    /// True if `member` is present.
    pub fn contains<Q>(&self, member: &Q) -> bool
    where
        T: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.entries.contains_key(member)
    }

    /// The members, in sorted order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + ExactSizeIterator + '_ {
        self.entries.keys()
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if there are no members (the context may still hold removed adds).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The dots (add events) that keep `member` present, if it is.
    pub fn dots<Q>(&self, member: &Q) -> Option<&BTreeSet<Dot>>
    where
        T: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.entries.get(member)
    }

    /// Every dot this state has seen (present or removed).
    pub fn context(&self) -> &CausalContext {
        &self.context
    }

    /// The delta that adds `member` as `actor`'s next event.
    ///
    /// The new dot is `self.context().next_dot(actor)`. The delta's context holds the new dot
    /// and the member's existing dots, so applying it replaces them by the new one.
    #[must_use]
    pub fn add_delta(&self, actor: u64, member: T) -> OrSet<T> {
        let dot = self.context.next_dot(actor);
        let mut context = CausalContext::new();
        context.insert(dot);
        if let Some(existing) = self.entries.get(&member) {
            for &d in existing {
                context.insert(d);
            }
        }
        let mut entries = BTreeMap::new();
        entries.insert(member, BTreeSet::from([dot]));
        OrSet { entries, context }
    }

    /// The delta that removes `member`: no entries, and a context holding the member's
    /// observed dots. The bottom if the member is absent.
    #[must_use]
    pub fn remove_delta<Q>(&self, member: &Q) -> OrSet<T>
    where
        T: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let mut context = CausalContext::new();
        if let Some(existing) = self.entries.get(member) {
            for &d in existing {
                context.insert(d);
            }
        }
        OrSet {
            entries: BTreeMap::new(),
            context,
        }
    }
}

impl<T: Ord + Clone> OrSet<T> {
    /// Adds `member` as `actor`'s next event in place and returns the delta to ship to the
    /// other replicas. Same result as `self.merge(self.add_delta(actor, member))`, in
    /// O(log n) instead of a merge's O(n).
    #[must_use = "the delta must reach the other replicas"]
    pub fn add(&mut self, actor: u64, member: T) -> OrSet<T> {
        let delta = self.add_delta(actor, member.clone());
        let dot = self.context.next_dot(actor);
        self.context.insert(dot);
        self.entries.insert(member, BTreeSet::from([dot]));
        delta
    }

    /// Removes `member` in place (observed-remove) and returns the delta to ship. Same
    /// result as `self.merge(self.remove_delta(member))`, in O(log n).
    #[must_use = "the delta must reach the other replicas"]
    pub fn remove<Q>(&mut self, member: &Q) -> OrSet<T>
    where
        T: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let delta = self.remove_delta(member);
        self.entries.remove(member);
        delta
    }
}

impl<T: Ord + Clone> Default for OrSet<T> {
    fn default() -> Self {
        OrSet::new()
    }
}

impl<T: fmt::Debug> fmt::Debug for OrSet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OrSet")
            .field("entries", &self.entries)
            .field("context", &self.context)
            .finish()
    }
}

/// Largest context of the other side (or a quarter of its own members, if more) whose dots
/// a merge looks up instead of scanning all of its own members (see
/// [`OrSet::drop_removed`]).
const SMALL_CONTEXT: usize = 64;

impl<T: Ord + Clone> OrSet<T> {
    /// Drops our dots that `other` saw and no longer holds (it removed them).
    ///
    /// A full state's context covers most of our dots: every member is checked. A delta's
    /// context names a few dots (an add's new dot and the member's earlier ones; a gossip
    /// period's deltas of the key, merged): only the members the delta holds are checked
    /// then, so merging it costs O(k log n) for k dots, not O(n) — what keeps replaying a
    /// log of deltas, or receiving them from a replica, linear. A dot is issued by one add
    /// and belongs to one member, so every removed dot (seen here, named by `other`'s context,
    /// held by none of its members) found under those members accounts for one; if some are
    /// not found there (a remove's delta names no member), the full scan runs.
    fn drop_removed(&mut self, other: &OrSet<T>) -> bool {
        let limit = SMALL_CONTEXT.max(self.entries.len() / 4);
        let Some(dots) = other.context.dots_up_to(limit) else {
            return self.retain_seen(other);
        };
        let held: BTreeSet<Dot> = other.entries.values().flatten().copied().collect();
        let removed = dots
            .iter()
            .filter(|d| !held.contains(d) && self.context.contains(d))
            .count();
        if removed == 0 {
            return false;
        }
        let mut found = 0;
        for (member, theirs) in &other.entries {
            let Some(ours) = self.entries.get_mut(member) else {
                continue;
            };
            let before = ours.len();
            ours.retain(|d| theirs.contains(d) || !other.context.contains(d));
            found += before - ours.len();
            if ours.is_empty() {
                self.entries.remove(member);
            }
        }
        if found < removed {
            return self.retain_seen(other) || found > 0;
        }
        found > 0
    }

    /// [`OrSet::drop_removed`] by a scan of every member.
    fn retain_seen(&mut self, other: &OrSet<T>) -> bool {
        let mut changed = false;
        self.entries.retain(|member, dots| {
            let theirs = other.entries.get(member);
            dots.retain(|d| {
                let keep = theirs.is_some_and(|t| t.contains(d)) || !other.context.contains(d);
                changed |= !keep;
                keep
            });
            !dots.is_empty()
        });
        changed
    }
}

impl<T: Ord + Clone + fmt::Debug> Lattice for OrSet<T> {
    /// Keeps a dot iff it is on both sides or on one side and not in the other's context;
    /// drops members without dots; unions the contexts.
    fn merge(&mut self, other: Self) -> bool {
        // Our dots that the other side has seen and no longer holds were removed there.
        let mut changed = self.drop_removed(&other);
        // Their dots that we have not seen are new adds. (Dots on both sides are kept above.)
        for (member, dots) in other.entries {
            for d in dots {
                let ours = self.entries.get(&member).is_some_and(|m| m.contains(&d));
                if !ours && !self.context.contains(&d) {
                    self.entries.entry(member.clone()).or_default().insert(d);
                    changed = true;
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

    fn apply(state: &mut OrSet<&'static str>, delta: &OrSet<&'static str>) {
        state.merge(delta.clone());
    }

    #[test]
    fn add_and_observed_remove() {
        let mut a = OrSet::new();
        let add = a.add_delta(1, "x");
        apply(&mut a, &add);
        assert!(a.contains("x"));
        let mut b = OrSet::new();
        apply(&mut b, &add);
        let rm = b.remove_delta("x");
        apply(&mut b, &rm);
        assert!(!b.contains("x"));
        apply(&mut a, &rm);
        assert!(!a.contains("x") && a.is_empty());
        assert_eq!(a, b);
        // The removed add is remembered: re-delivering it does not resurrect the member.
        assert!(!a.merge(add));
        assert!(a.is_empty());
        // Removing an absent member is the bottom.
        assert_eq!(a.remove_delta("nope"), OrSet::new());
    }

    #[test]
    fn concurrent_add_wins_over_remove() {
        let mut a = OrSet::new();
        let add1 = a.add_delta(1, "x");
        apply(&mut a, &add1);
        let mut b = a.clone();
        // a removes x while b (concurrently) adds x again.
        let rm = a.remove_delta("x");
        apply(&mut a, &rm);
        let add2 = b.add_delta(2, "x");
        apply(&mut b, &add2);
        let mut ab = a.clone();
        ab.merge(b.clone());
        let mut ba = b.clone();
        ba.merge(a.clone());
        assert_eq!(ab, ba);
        assert!(ab.contains("x"));
        assert_eq!(ab.dots("x"), Some(&BTreeSet::from([Dot::new(2, 1)])));
    }

    #[test]
    fn re_add_replaces_old_dots() {
        let mut a = OrSet::new();
        for _ in 0..3 {
            let d = a.add_delta(1, "x");
            assert!(a.merge(d));
        }
        assert_eq!(a.dots("x").map(BTreeSet::len), Some(1));
        assert_eq!(a.len(), 1);
        assert_eq!(a.context().next_dot(1), Dot::new(1, 4));
        let again = a.clone();
        assert!(!a.merge(again));
    }

    #[test]
    fn from_parts_drops_empty_members() {
        let entries = BTreeMap::from([
            ("a", BTreeSet::new()),
            ("b", BTreeSet::from([Dot::new(1, 1)])),
        ]);
        let s = OrSet::from_parts(entries, CausalContext::new());
        assert_eq!(s.iter().copied().collect::<Vec<_>>(), vec!["b"]);
    }

    /// In-place `add`/`remove` reach exactly the state merging their deltas reaches, and
    /// return those deltas.
    #[test]
    fn in_place_ops_equal_delta_merges() {
        let mut fast: OrSet<&'static str> = OrSet::new();
        let mut slow: OrSet<&'static str> = OrSet::new();
        let ops: &[(bool, u64, &'static str)] = &[
            (true, 1, "a"),
            (true, 2, "b"),
            (true, 1, "a"),
            (false, 0, "a"),
            (true, 3, "c"),
            (false, 0, "zz"),
            (true, 2, "a"),
            (false, 0, "b"),
        ];
        for &(add, actor, m) in ops {
            let (delta, expected) = if add {
                (fast.add(actor, m), slow.add_delta(actor, m))
            } else {
                (fast.remove(m), slow.remove_delta(m))
            };
            assert_eq!(delta, expected);
            slow.merge(expected);
            assert_eq!(fast, slow);
        }
        assert_eq!(fast.iter().copied().collect::<Vec<_>>(), vec!["a", "c"]);
    }

    /// The merge of the scan, the reference the looked-up merge must equal.
    fn scanning_merge(state: &mut OrSet<u32>, other: OrSet<u32>) {
        state.retain_seen(&other);
        for (member, dots) in other.entries {
            for d in dots {
                let ours = state.entries.get(&member).is_some_and(|m| m.contains(&d));
                if !ours && !state.context.contains(&d) {
                    state.entries.entry(member).or_default().insert(d);
                }
            }
        }
        state.context.merge(other.context);
    }

    /// Replaying a log of deltas (adds, re-adds, removes from three writers), in order,
    /// twice, or merged into a replica's state, reaches the state that made them, and every
    /// merge of a delta equals the scanning merge.
    #[test]
    fn deltas_replay_to_the_full_state() {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut state: OrSet<u32> = OrSet::new();
        let mut log = Vec::new();
        for _ in 0..3000 {
            let member = rng.u32(..200);
            let delta = if rng.u8(..4) == 0 {
                state.remove(&member)
            } else {
                state.add(rng.u64(1..4), member)
            };
            log.push(delta);
        }
        let mut replayed: OrSet<u32> = OrSet::new();
        let mut reference: OrSet<u32> = OrSet::new();
        for delta in &log {
            replayed.merge(delta.clone());
            scanning_merge(&mut reference, delta.clone());
            assert_eq!(replayed, reference);
        }
        assert_eq!(replayed, state);
        // Delivered again (a log replayed over a snapshot that has it), or out of order.
        for delta in log.iter().rev().step_by(3) {
            replayed.merge(delta.clone());
            scanning_merge(&mut reference, delta.clone());
            assert_eq!(replayed, reference);
        }
        assert_eq!(replayed, state);
        let mut shuffled = log.clone();
        rng.shuffle(&mut shuffled);
        let (mut a, mut b): (OrSet<u32>, OrSet<u32>) = (OrSet::new(), OrSet::new());
        for delta in shuffled {
            a.merge(delta.clone());
            scanning_merge(&mut b, delta);
            assert_eq!(a, b);
        }
        assert_eq!(a, state);
        // A gossip period's deltas merged into one (the changeset), then into a replica.
        let (mut x, mut y): (OrSet<u32>, OrSet<u32>) = (OrSet::new(), OrSet::new());
        for chunk in log.chunks(150) {
            let mut period = OrSet::new();
            for delta in chunk {
                period.merge(delta.clone());
            }
            x.merge(period.clone());
            scanning_merge(&mut y, period);
            assert_eq!(x, y);
        }
        assert_eq!(x, state);
    }
}
