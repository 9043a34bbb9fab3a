//! A consistent-hash ring with virtual nodes.
//!
//! Each member owns `vnodes` points at [`vnode_hash`]`(label, i)`. A key
//! hashing to `h` belongs to the member owning the first point at or after `h` (wrapping), and
//! its `n` replicas are the first `n` distinct members met walking clockwise from there.
//!
//! The same structure serves as the local ring (members = worker indexes of one node, label
//! `"worker/<index>"`) and as the global ring of a tier (members = node ids).

use crate::hash::vnode_hash;

/// Default number of virtual nodes per member.
pub const DEFAULT_VNODES: u32 = 128;

/// Replication factors up to this many find their distinct members without allocating.
const INLINE_SEEN: usize = 16;

/// A consistent-hash ring over members of type `M`.
#[derive(Clone, Debug)]
pub struct Ring<M> {
    /// The members, in insertion order; points refer to them by index.
    members: Vec<M>,
    /// `(position, member index)`, sorted by position then member index (so hash collisions
    /// between points still give one deterministic order).
    points: Vec<(u64, u32)>,
}

impl<M> Default for Ring<M> {
    fn default() -> Self {
        Ring {
            members: Vec::new(),
            points: Vec::new(),
        }
    }
}

impl<M: Clone + PartialEq> Ring<M> {
    /// An empty ring.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a ring from `(member, label)` pairs, each with `vnodes` points.
    pub fn from_members<'a, I>(members: I, vnodes: u32) -> Self
    where
        I: IntoIterator<Item = (M, &'a [u8])>,
    {
        let mut ring = Ring::new();
        for (member, label) in members {
            ring.add(member, label, vnodes);
        }
        ring
    }

    /// Adds `member` with `vnodes` points derived from `label`. Adding a member twice is a
    /// no-op.
    pub fn add(&mut self, member: M, label: &[u8], vnodes: u32) {
        if self.members.contains(&member) {
            return;
        }
        let index = self.members.len() as u32;
        self.members.push(member);
        self.points
            .extend((0..vnodes.max(1)).map(|v| (vnode_hash(label, v), index)));
        self.points.sort_unstable();
    }

    /// Removes `member` and its points.
    pub fn remove(&mut self, member: &M) {
        let Some(index) = self.members.iter().position(|m| m == member) else {
            return;
        };
        self.members.remove(index);
        let index = index as u32;
        self.points.retain(|&(_, m)| m != index);
        for point in &mut self.points {
            if point.1 > index {
                point.1 -= 1;
            }
        }
    }

    /// Members in insertion order.
    pub fn members(&self) -> &[M] {
        &self.members
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// True if the ring has no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Index of the first point at or after `hash`, wrapping to 0.
    fn start(&self, hash: u64) -> usize {
        let i = self.points.partition_point(|&(pos, _)| pos < hash);
        if i == self.points.len() {
            0
        } else {
            i
        }
    }

    /// The member owning `hash` (the first replica), or `None` on an empty ring.
    pub fn primary(&self, hash: u64) -> Option<&M> {
        if self.points.is_empty() {
            return None;
        }
        let (_, m) = self.points[self.start(hash)];
        self.members.get(m as usize)
    }

    /// Calls `f` on each of the first `n` distinct members clockwise from `hash`, primary
    /// first. Never yields more members than the ring has (a replication factor above the
    /// member count is capped, never a hang — the reference code looped forever here).
    pub fn for_each_replica(&self, hash: u64, n: usize, mut f: impl FnMut(&M)) {
        let want = n.min(self.members.len());
        if want == 0 {
            return;
        }
        if want == 1 {
            if let Some(member) = self.primary(hash) {
                f(member);
            }
            return;
        }
        // The member indexes met so far: on the stack for the usual factors, since this runs
        // for every routed request and every write's replica checks.
        let mut inline = [0u32; INLINE_SEEN];
        let mut spilled = Vec::new();
        let seen: &mut [u32] = if want <= INLINE_SEEN {
            &mut inline[..want]
        } else {
            spilled.resize(want, 0);
            &mut spilled
        };
        let mut met = 0;
        let start = self.start(hash);
        for k in 0..self.points.len() {
            let (_, m) = self.points[(start + k) % self.points.len()];
            if seen[..met].contains(&m) {
                continue;
            }
            seen[met] = m;
            met += 1;
            if let Some(member) = self.members.get(m as usize) {
                f(member);
            }
            if met == want {
                break;
            }
        }
    }

    /// The first `n` distinct members clockwise from `hash`, primary first.
    pub fn replicas(&self, hash: u64, n: usize) -> Vec<M> {
        let mut out = Vec::with_capacity(n.min(self.members.len()));
        self.for_each_replica(hash, n, |m| out.push(m.clone()));
        out
    }

    /// The fraction of the hash space each member is primary for, in member order.
    pub fn ownership(&self) -> Vec<(M, f64)> {
        let mut share = vec![0f64; self.members.len()];
        let n = self.points.len();
        for i in 0..n {
            let (pos, m) = self.points[i];
            // The segment (previous point, this point] belongs to this point's member; the
            // first point also owns the wrap-around from the last point.
            let prev = if i == 0 {
                self.points[n - 1].0
            } else {
                self.points[i - 1].0
            };
            let width = pos.wrapping_sub(prev) as f64 / 2f64.powi(64);
            let width = if n == 1 { 1.0 } else { width };
            if let Some(s) = share.get_mut(m as usize) {
                *s += width;
            }
        }
        self.members.iter().cloned().zip(share).collect()
    }

    /// True if `member` is among the first `n` replicas of `hash`.
    pub fn is_replica(&self, hash: u64, n: usize, member: &M) -> bool {
        let mut found = false;
        self.for_each_replica(hash, n, |m| found |= m == member);
        found
    }
}

impl Ring<u32> {
    /// The local ring of a node with `workers` workers (member `w` has label `worker/<w>`).
    pub fn local(workers: u32, vnodes: u32) -> Ring<u32> {
        let mut ring = Ring::new();
        for w in 0..workers {
            ring.add(w, format!("worker/{w}").as_bytes(), vnodes);
        }
        ring
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::key_hash;
    use proptest::prelude::*;

    #[test]
    fn local_ring_spreads_keys() {
        let ring = Ring::<u32>::local(2, DEFAULT_VNODES);
        let mut counts = [0usize; 2];
        for i in 0..10_000 {
            let key = format!("key:{i}");
            counts[*ring.primary(key_hash(key.as_bytes())).unwrap() as usize] += 1;
        }
        // With 128 virtual nodes each worker gets a fair share (within 20% of half).
        for c in counts {
            assert!((4_000..=6_000).contains(&c), "unbalanced: {counts:?}");
        }
    }

    #[test]
    fn replication_above_member_count_is_capped() {
        let ring = Ring::<u32>::local(3, 8);
        let r = ring.replicas(42, 10);
        assert_eq!(r.len(), 3);
        let mut sorted = r.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 3, "replicas must be distinct: {r:?}");
        assert!(Ring::<u32>::new().replicas(42, 3).is_empty());
        assert_eq!(Ring::<u32>::new().primary(1), None);
        // Past the factors whose members are tracked on the stack.
        let wide = Ring::<u32>::local(INLINE_SEEN as u32 + 4, 8);
        let mut r = wide.replicas(42, INLINE_SEEN + 2);
        assert_eq!(r.first(), wide.primary(42));
        r.sort();
        r.dedup();
        assert_eq!(r.len(), INLINE_SEEN + 2, "replicas must be distinct");
    }

    #[test]
    fn remove_renumbers_points() {
        let mut ring = Ring::<String>::new();
        for name in ["a", "b", "c"] {
            ring.add(name.to_string(), name.as_bytes(), 16);
        }
        ring.remove(&"b".to_string());
        assert_eq!(ring.len(), 2);
        for h in [0u64, 1 << 40, u64::MAX] {
            let p = ring.primary(h).unwrap();
            assert!(p == "a" || p == "c");
        }
    }

    proptest! {
        /// Replica sets are deterministic, distinct, start at the primary, and a ring built in
        /// another member order gives the same answer.
        #[test]
        fn replicas_are_deterministic(key in proptest::collection::vec(any::<u8>(), 0..16), n in 1usize..6) {
            let names = ["n1", "n2", "n3", "n4", "n5"];
            let fwd = Ring::from_members(names.iter().map(|s| (s.to_string(), s.as_bytes())), 32);
            let rev = Ring::from_members(names.iter().rev().map(|s| (s.to_string(), s.as_bytes())), 32);
            let h = key_hash(&key);
            let a = fwd.replicas(h, n);
            prop_assert_eq!(&a, &rev.replicas(h, n));
            prop_assert_eq!(a.first(), fwd.primary(h));
            prop_assert_eq!(a.len(), n.min(5));
            for m in &a { prop_assert!(fwd.is_replica(h, n, m)); }
        }
    }
}
