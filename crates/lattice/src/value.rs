//! [`Value`], the dynamically typed lattice value the store holds; its [`LatticeType`] tag;
//! and [`Record`], what the store keeps per key (an epoch and a value or a tombstone).

use std::fmt;
use std::mem::size_of;

use crate::expiry::merge_expiry;
use crate::{
    Blob, Bool, CausalVersion, Counter, Dot, Expiry, Hash, Lattice, Lww, Map, Max, Min,
    MultiKeyCausal, OrSet, OrderedSet, Priority, Set, SingleKeyCausal, SortedSet, Timestamp,
    VectorClock,
};
// ---- lists (helper B) ----
use crate::list::{Atom, Entry, List, Pos};

/// The type of a [`Value`]. The discriminant is the wire tag, and it orders types for the
/// type-mismatch rule of [`Value`]'s merge (the higher tag wins).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum LatticeType {
    /// [`Lww`]: last-writer-wins register.
    Lww = 1,
    /// [`Set`]: grow-only set.
    Set = 2,
    /// [`OrSet`]: add-wins observed-remove set.
    OrSet = 3,
    /// [`OrderedSet`]: grow-only set with ordered access.
    OrderedSet = 4,
    /// [`Max`]: maximum of 64-bit integers.
    Max = 5,
    /// [`Min`]: minimum of 64-bit integers.
    Min = 6,
    /// [`Bool`]: logical or.
    Bool = 7,
    /// [`Counter`]: PN-counter.
    Counter = 8,
    /// [`Map`]: map of values, merged key-wise.
    Map = 9,
    /// [`Priority`]: lowest priority wins.
    Priority = 10,
    /// [`SingleKeyCausal`]: causal multi-value register.
    SingleKeyCausal = 11,
    /// [`MultiKeyCausal`]: causal multi-value register with dependencies.
    MultiKeyCausal = 12,
    // ---- lists (helper B) ----
    /// [`List`]: a sequence with dense positions and observed-remove deletion.
    List = 15,
    // Redis hashes and sorted sets.
    /// [`Hash`](struct@Hash): Redis hash, fields as last-writer-wins registers with removals.
    Hash = 13,
    /// [`SortedSet`]: Redis sorted set, scores as last-writer-wins registers with removals.
    SortedSet = 14,
}

impl LatticeType {
    /// Every type, in tag order.
    pub const ALL: [LatticeType; 15] = [
        LatticeType::Lww,
        LatticeType::Set,
        LatticeType::OrSet,
        LatticeType::OrderedSet,
        LatticeType::Max,
        LatticeType::Min,
        LatticeType::Bool,
        LatticeType::Counter,
        LatticeType::Map,
        LatticeType::Priority,
        LatticeType::SingleKeyCausal,
        LatticeType::MultiKeyCausal,
        // ---- lists (helper B) ----
        LatticeType::List,
        // Redis hashes and sorted sets.
        LatticeType::Hash,
        LatticeType::SortedSet,
    ];

    /// The user-facing name ("lww", "set", "orset", "ordered-set", "max", "min", "bool",
    /// "counter", "map", "priority", "causal", "multi-causal", "hash", "sorted-set").
    pub const fn name(self) -> &'static str {
        match self {
            LatticeType::Lww => "lww",
            LatticeType::Set => "set",
            LatticeType::OrSet => "orset",
            LatticeType::OrderedSet => "ordered-set",
            LatticeType::Max => "max",
            LatticeType::Min => "min",
            LatticeType::Bool => "bool",
            LatticeType::Counter => "counter",
            LatticeType::Map => "map",
            LatticeType::Priority => "priority",
            LatticeType::SingleKeyCausal => "causal",
            LatticeType::MultiKeyCausal => "multi-causal",
            // ---- lists (helper B) ----
            LatticeType::List => "list",
            // Redis hashes and sorted sets.
            LatticeType::Hash => "hash",
            LatticeType::SortedSet => "sorted-set",
        }
    }

    /// The type named `name`, case-insensitively. Besides [`LatticeType::name`] it accepts
    /// "ordered_set", "single-causal", "single_causal", "multi_causal", "sorted_set" and
    /// "zset".
    pub fn from_name(name: &str) -> Option<Self> {
        let lower = name.to_ascii_lowercase();
        let ty = match lower.as_str() {
            "lww" => LatticeType::Lww,
            "set" => LatticeType::Set,
            "orset" => LatticeType::OrSet,
            "ordered-set" | "ordered_set" => LatticeType::OrderedSet,
            "max" => LatticeType::Max,
            "min" => LatticeType::Min,
            "bool" => LatticeType::Bool,
            "counter" => LatticeType::Counter,
            "map" => LatticeType::Map,
            "priority" => LatticeType::Priority,
            "causal" | "single-causal" | "single_causal" => LatticeType::SingleKeyCausal,
            "multi-causal" | "multi_causal" => LatticeType::MultiKeyCausal,
            // ---- lists (helper B) ----
            "list" => LatticeType::List,
            // Redis hashes and sorted sets.
            "hash" => LatticeType::Hash,
            "sorted-set" | "sorted_set" | "zset" => LatticeType::SortedSet,
            _ => return None,
        };
        Some(ty)
    }

    /// The type whose tag is `tag`.
    pub fn from_u8(tag: u8) -> Option<Self> {
        LatticeType::ALL.into_iter().find(|t| *t as u8 == tag)
    }
}

impl fmt::Display for LatticeType {
    /// Writes [`LatticeType::name`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A lattice value of any type: what the store holds for a key.
///
/// Merge rule: values of the same type merge with their type's merge. Values of DIFFERENT
/// types resolve as an ordinal sum: the value whose [`LatticeType`] tag is higher wins
/// wholesale. This keeps the merge total and ACI; the store rejects type mismatches before
/// they get here, so the rule only guarantees convergence (inside maps, in gossip).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// A last-writer-wins register.
    Lww(Lww),
    /// A grow-only set.
    Set(Set<Blob>),
    /// An add-wins observed-remove set (boxed to keep `Value` small).
    OrSet(Box<OrSet<Blob>>),
    /// A grow-only set with ordered access.
    OrderedSet(OrderedSet<Blob>),
    /// Maximum of 64-bit integers.
    Max(Max<i64>),
    /// Minimum of 64-bit integers.
    Min(Min<i64>),
    /// Logical or.
    Bool(Bool),
    /// A PN-counter.
    Counter(Counter),
    /// A map of values, merged key-wise.
    Map(Map<Blob, Value>),
    /// Lowest priority wins.
    Priority(Priority),
    /// A causal multi-value register.
    SingleKeyCausal(SingleKeyCausal),
    /// A causal multi-value register with cross-key dependencies.
    MultiKeyCausal(MultiKeyCausal),
    // ---- lists (helper B) ----
    /// A list (boxed to keep `Value` small).
    List(Box<List>),
    // Redis hashes and sorted sets (boxed to keep `Value` small).
    /// A Redis hash.
    Hash(Box<Hash>),
    /// A Redis sorted set.
    SortedSet(Box<SortedSet>),
}

/// Estimated bookkeeping bytes per element of a B-tree map or set, on top of the element.
const TREE_ENTRY: usize = 16;

/// Estimated bytes per field of a hash or member of a sorted set, besides its bytes: the
/// key, the register (timestamp and optional value) and the tree entry.
const FIELD_ENTRY: usize = size_of::<Blob>() + 48 + TREE_ENTRY;

fn blob_heap(b: &Blob) -> usize {
    b.len()
}

fn clock_heap(c: &VectorClock) -> usize {
    c.len() * (2 * size_of::<u64>() + TREE_ENTRY)
}

fn set_heap<'a>(members: impl Iterator<Item = &'a Blob>) -> usize {
    members
        .map(|m| size_of::<Blob>() + TREE_ENTRY + blob_heap(m))
        .sum()
}

fn orset_heap(s: &OrSet<Blob>) -> usize {
    let dot = size_of::<Dot>() + TREE_ENTRY;
    let entries: usize = s
        .iter()
        .map(|m| {
            let dots = s.dots(m).map_or(0, |d| d.len());
            size_of::<Blob>() + TREE_ENTRY + blob_heap(m) + dots * dot
        })
        .sum();
    let context = (s.context().vector().len() + s.context().cloud().len()) * dot;
    size_of::<OrSet<Blob>>() + entries + context
}

// ---- lists (helper B) ----
fn list_heap(l: &List) -> usize {
    let dot = size_of::<Dot>() + TREE_ENTRY;
    let entries: usize = l
        .iter()
        .map(|(p, e)| {
            size_of::<(Pos, Entry)>()
                + TREE_ENTRY
                + p.len() * size_of::<Atom>()
                + blob_heap(&e.value)
        })
        .sum();
    let context = (l.context().vector().len() + l.context().cloud().len()) * dot;
    size_of::<List>() + entries + context
}

fn version_heap(v: &CausalVersion) -> usize {
    let deps: usize = v
        .deps
        .iter()
        .map(|(k, c)| {
            size_of::<Blob>() + size_of::<VectorClock>() + TREE_ENTRY + blob_heap(k) + clock_heap(c)
        })
        .sum();
    size_of::<CausalVersion>() + clock_heap(&v.clock) + blob_heap(&v.value) + deps
}

impl Value {
    /// The type of the value.
    pub fn lattice_type(&self) -> LatticeType {
        match self {
            Value::Lww(_) => LatticeType::Lww,
            Value::Set(_) => LatticeType::Set,
            Value::OrSet(_) => LatticeType::OrSet,
            Value::OrderedSet(_) => LatticeType::OrderedSet,
            Value::Max(_) => LatticeType::Max,
            Value::Min(_) => LatticeType::Min,
            Value::Bool(_) => LatticeType::Bool,
            Value::Counter(_) => LatticeType::Counter,
            Value::Map(_) => LatticeType::Map,
            Value::Priority(_) => LatticeType::Priority,
            Value::SingleKeyCausal(_) => LatticeType::SingleKeyCausal,
            Value::MultiKeyCausal(_) => LatticeType::MultiKeyCausal,
            // ---- lists (helper B) ----
            Value::List(_) => LatticeType::List,
            // Redis hashes and sorted sets.
            Value::Hash(_) => LatticeType::Hash,
            Value::SortedSet(_) => LatticeType::SortedSet,
        }
    }

    /// Estimated memory use in bytes: the inline `Value` plus the heap it owns (an estimate
    /// for memory budgets and value-size limits, not an exact count). O(1) for registers,
    /// linear in the number of elements for collections.
    pub fn approx_size(&self) -> usize {
        size_of::<Value>() + self.heap_size()
    }

    /// Estimated heap bytes owned by the value.
    fn heap_size(&self) -> usize {
        match self {
            Value::Lww(l) => blob_heap(&l.value),
            Value::Set(s) => set_heap(s.iter()),
            Value::OrSet(s) => orset_heap(s),
            Value::OrderedSet(s) => set_heap(s.iter()),
            Value::Max(_) | Value::Min(_) | Value::Bool(_) => 0,
            Value::Counter(c) => c.entries().count() * (3 * size_of::<u64>() + TREE_ENTRY),
            Value::Map(m) => m
                .iter()
                .map(|(k, v)| size_of::<Blob>() + TREE_ENTRY + blob_heap(k) + v.approx_size())
                .sum(),
            Value::Priority(p) => blob_heap(&p.value),
            Value::SingleKeyCausal(c) => c
                .versions()
                .iter()
                .map(|(clock, v)| {
                    size_of::<(VectorClock, Blob)>() + clock_heap(clock) + blob_heap(v)
                })
                .sum(),
            Value::MultiKeyCausal(c) => c.versions().iter().map(version_heap).sum(),
            // ---- lists (helper B) ----
            Value::List(l) => list_heap(l),
            // Redis hashes and sorted sets: every register (removals included); a sorted
            // set's live members also sit in its order index.
            Value::Hash(h) => {
                size_of::<Hash>()
                    + h.entries()
                        .map(|(f, r)| {
                            let value = r.value.as_ref().map_or(0, blob_heap);
                            FIELD_ENTRY + blob_heap(f) + value
                        })
                        .sum::<usize>()
            }
            Value::SortedSet(z) => {
                let index: usize = z.iter().map(|(m, _)| FIELD_ENTRY + blob_heap(m)).sum();
                let regs: usize = z.entries().map(|(m, _)| FIELD_ENTRY + blob_heap(m)).sum();
                size_of::<SortedSet>() + index + regs
            }
        }
    }
}

impl Lattice for Value {
    /// Same type: the type's merge. Different types: the higher [`LatticeType`] tag wins.
    fn merge(&mut self, other: Self) -> bool {
        match (self, other) {
            (Value::Lww(a), Value::Lww(b)) => a.merge(b),
            (Value::Set(a), Value::Set(b)) => a.merge(b),
            (Value::OrSet(a), Value::OrSet(b)) => a.merge(*b),
            (Value::OrderedSet(a), Value::OrderedSet(b)) => a.merge(b),
            (Value::Max(a), Value::Max(b)) => a.merge(b),
            (Value::Min(a), Value::Min(b)) => a.merge(b),
            (Value::Bool(a), Value::Bool(b)) => a.merge(b),
            (Value::Counter(a), Value::Counter(b)) => a.merge(b),
            (Value::Map(a), Value::Map(b)) => a.merge(b),
            (Value::Priority(a), Value::Priority(b)) => a.merge(b),
            (Value::SingleKeyCausal(a), Value::SingleKeyCausal(b)) => a.merge(b),
            (Value::MultiKeyCausal(a), Value::MultiKeyCausal(b)) => a.merge(b),
            // ---- lists (helper B) ----
            (Value::List(a), Value::List(b)) => a.merge(*b),
            // Redis hashes and sorted sets.
            (Value::Hash(a), Value::Hash(b)) => a.merge(*b),
            (Value::SortedSet(a), Value::SortedSet(b)) => a.merge(*b),
            (mine, theirs) => {
                if theirs.lattice_type() > mine.lattice_type() {
                    *mine = theirs;
                    true
                } else {
                    false
                }
            }
        }
    }

    fn merge_ref(&mut self, other: &Self) -> bool {
        match (self, other) {
            (Value::Lww(a), Value::Lww(b)) => a.merge_ref(b),
            (Value::OrSet(a), Value::OrSet(b)) => a.merge_ref(b),
            (Value::Counter(a), Value::Counter(b)) => a.merge_ref(b),
            (Value::Map(a), Value::Map(b)) => a.merge_ref(b),
            // ---- lists (helper B) ----
            (Value::List(a), Value::List(b)) => a.merge((**b).clone()),
            // Redis hashes and sorted sets.
            (Value::Hash(a), Value::Hash(b)) => a.merge_ref(b),
            (Value::SortedSet(a), Value::SortedSet(b)) => a.merge_ref(b),
            (mine, theirs) => mine.merge(theirs.clone()),
        }
    }
}

/// What the store keeps per key: an epoch and a value, or a tombstone (`value: None`).
///
/// Merge rule: lexicographic. The record with the higher `epoch` wins wholesale; with equal
/// epochs the values merge, a tombstone (`None`) being the bottom, and so do the expiries
/// (an [`Expiry`] register; `None` is the bottom). A new incarnation (a delete, an LWW
/// write) thus clears the deadline unless it carries one, as Redis's `SET` does.
///
/// Convention (enforced by the node, which picks the epochs):
/// - a delete writes `(hlc_now, None)`;
/// - an [`Lww`] write uses `epoch = lww.ts`, so deletes and LWW writes order by timestamp
///   (a write newer than a delete survives it, an older one does not);
/// - a write of any other type uses the epoch the key currently has at the replica, so it
///   merges into the current incarnation (after a delete, into the tombstone's epoch: the
///   key comes back with only the new write). A delete removes everything written before
///   it, and also a concurrent write the deleting replica had not seen (which carries an
///   older epoch): remove-wins across incarnations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// The incarnation of the key: a higher epoch replaces everything of lower epochs.
    pub epoch: Timestamp,
    /// The value; `None` is a tombstone (the key was deleted).
    pub value: Option<Value>,
    /// When the key expires (RESP TTLs); `None`: never set in this incarnation.
    /// Boxed: most records have none, and a record's inline size is per key in RAM.
    pub expiry: Option<Box<Expiry>>,
}

impl Record {
    /// A record from its parts.
    pub fn new(epoch: Timestamp, value: Option<Value>) -> Self {
        Record {
            epoch,
            value,
            expiry: None,
        }
    }

    /// The deadline (ms since the Unix epoch), if the key has one.
    pub fn deadline_ms(&self) -> Option<u64> {
        self.expiry.as_ref().and_then(|e| e.at_ms)
    }

    /// A tombstone: the key was deleted at `ts`.
    pub fn tombstone(ts: Timestamp) -> Self {
        Record {
            epoch: ts,
            value: None,
            expiry: None,
        }
    }

    /// True if the record is a tombstone.
    pub fn is_tombstone(&self) -> bool {
        self.value.is_none()
    }

    /// Estimated memory use in bytes (inline record plus the value's heap).
    pub fn approx_size(&self) -> usize {
        size_of::<Record>() + self.value.as_ref().map_or(0, Value::heap_size)
    }
}

impl Lattice for Record {
    /// Higher epoch wins wholesale; equal epochs merge the values (`None` is the bottom).
    fn merge(&mut self, other: Self) -> bool {
        if other.epoch > self.epoch {
            *self = other;
            return true;
        }
        if other.epoch < self.epoch {
            return false;
        }
        let expiry = merge_expiry(&mut self.expiry, other.expiry);
        let value = match (&mut self.value, other.value) {
            (_, None) => false,
            (mine @ None, Some(theirs)) => {
                *mine = Some(theirs);
                true
            }
            (Some(mine), Some(theirs)) => mine.merge(theirs),
        };
        value || expiry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(ms: u64, writer: u64) -> Timestamp {
        Timestamp::new(ms << 16, writer)
    }

    fn lww_record(t: Timestamp, v: &[u8]) -> Record {
        Record::new(t, Some(Value::Lww(Lww::new(t, Box::from(v)))))
    }

    fn set_value(members: &[&[u8]]) -> Value {
        Value::Set(members.iter().map(|m| Box::from(*m)).collect())
    }

    fn members(r: &Record) -> Vec<Vec<u8>> {
        match &r.value {
            Some(Value::Set(s)) => s.iter().map(|m| m.to_vec()).collect(),
            other => panic!("not a set: {other:?}"),
        }
    }

    #[test]
    fn value_stays_small() {
        assert!(
            size_of::<Value>() <= 40,
            "Value is {} bytes",
            size_of::<Value>()
        );
    }

    #[test]
    fn type_names_round_trip() {
        for ty in LatticeType::ALL {
            assert_eq!(LatticeType::from_name(ty.name()), Some(ty));
            assert_eq!(LatticeType::from_name(&ty.name().to_uppercase()), Some(ty));
            assert_eq!(LatticeType::from_u8(ty as u8), Some(ty));
            assert_eq!(ty.to_string(), ty.name());
        }
        assert_eq!(
            LatticeType::from_name("Ordered_Set"),
            Some(LatticeType::OrderedSet)
        );
        assert_eq!(
            LatticeType::from_name("multi_causal"),
            Some(LatticeType::MultiKeyCausal)
        );
        assert_eq!(
            LatticeType::from_name("single-causal"),
            Some(LatticeType::SingleKeyCausal)
        );
        assert_eq!(LatticeType::from_name("nope"), None);
        assert_eq!(LatticeType::from_u8(0), None);
        assert_eq!(LatticeType::from_u8(16), None);
        assert_eq!(LatticeType::from_u8(13), Some(LatticeType::Hash));
        assert_eq!(LatticeType::from_name("zset"), Some(LatticeType::SortedSet));
    }

    #[test]
    fn type_mismatch_higher_tag_wins() {
        let lww = Value::Lww(Lww::new(ts(9, 1), Box::from(&b"x"[..])));
        let max = Value::Max(Max(1));
        let mut a = lww.clone();
        assert!(a.merge(max.clone()));
        let mut b = max.clone();
        assert!(!b.merge(lww));
        assert_eq!(a, b);
        assert_eq!(a.lattice_type(), LatticeType::Max);
    }

    #[test]
    fn approx_size_grows_with_content() {
        let small = Value::Lww(Lww::new(ts(1, 1), Box::from(&b"a"[..])));
        let big = Value::Lww(Lww::new(ts(1, 1), Box::from(&[0u8; 1000][..])));
        assert!(big.approx_size() >= small.approx_size() + 999);
        let set = set_value(&[b"a", b"bb"]);
        assert!(set.approx_size() > set_value(&[b"a"]).approx_size());
        let rec = Record::new(ts(1, 1), Some(big.clone()));
        assert!(rec.approx_size() >= 1000);
        assert!(Record::tombstone(ts(1, 1)).approx_size() < 100);
        // Redis hashes and sorted sets: every register counts, removals included.
        let reg = |v: Option<&[u8]>| crate::FieldReg::new(ts(1, 1), v.map(Box::from));
        let h1 = Hash::from_entries([(Box::from(&b"f"[..]), reg(Some(&[0u8; 500])))]);
        let mut h2 = h1.clone();
        h2.write(Box::from(&b"gone"[..]), reg(None));
        let (h1, h2) = (Value::Hash(Box::new(h1)), Value::Hash(Box::new(h2)));
        assert!(h1.approx_size() >= 500);
        assert!(h2.approx_size() > h1.approx_size());
        let z = |n: usize| {
            Value::SortedSet(Box::new(SortedSet::from_entries((0..n).map(|i| {
                let score = Some(crate::Score(i as f64));
                (
                    Box::from(&[i as u8][..]),
                    crate::FieldReg::new(ts(1, 1), score),
                )
            }))))
        };
        assert!(z(10).approx_size() > z(2).approx_size());
    }

    #[test]
    fn delete_then_re_add() {
        // Written at epoch e0, deleted at t1, re-added into the tombstone's epoch.
        let e0 = Timestamp::ZERO;
        let mut r = Record::new(e0, Some(set_value(&[b"a", b"b"])));
        let del = Record::tombstone(ts(5, 1));
        assert!(r.merge(del.clone()));
        assert!(r.is_tombstone());
        let re_add = Record::new(del.epoch, Some(set_value(&[b"c"])));
        assert!(r.merge(re_add.clone()));
        assert_eq!(members(&r), vec![b"c".to_vec()]);
        // Order does not matter: the re-add arriving before the delete gives the same.
        let mut other = re_add;
        assert!(!other.merge(del));
        assert!(!other.merge(Record::new(e0, Some(set_value(&[b"a", b"b"])))));
        assert_eq!(other, r);
    }

    #[test]
    fn tombstone_beats_older_write_and_concurrent_unseen_write() {
        let write = Record::new(Timestamp::ZERO, Some(set_value(&[b"a"])));
        let unseen = Record::new(Timestamp::ZERO, Some(set_value(&[b"z"])));
        let del = Record::tombstone(ts(3, 2));
        let mut r = write.clone();
        r.merge(del.clone());
        r.merge(unseen.clone());
        let mut s = unseen;
        s.merge(del.clone());
        s.merge(write);
        assert_eq!(r, s);
        assert_eq!(r, del);
        // An older LWW write loses to the tombstone.
        let mut t = del.clone();
        assert!(!t.merge(lww_record(ts(2, 1), b"old")));
        assert!(t.is_tombstone());
    }

    #[test]
    fn lww_write_newer_than_delete_wins() {
        let del = Record::tombstone(ts(3, 1));
        let newer = lww_record(ts(4, 1), b"new");
        let mut a = del.clone();
        assert!(a.merge(newer.clone()));
        let mut b = newer.clone();
        assert!(!b.merge(del));
        assert_eq!(a, b);
        assert_eq!(a, newer);
    }

    #[test]
    fn equal_epoch_tombstone_is_bottom() {
        let e = ts(1, 1);
        let mut r = Record::tombstone(e);
        assert!(!r.merge(Record::tombstone(e)));
        assert!(r.merge(Record::new(e, Some(Value::Bool(Bool(true))))));
        assert!(!r.merge(Record::tombstone(e)));
        assert_eq!(r.value, Some(Value::Bool(Bool(true))));
    }
}
