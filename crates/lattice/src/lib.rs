//! Lattice value types of latticekv.
//!
//! Every value the store holds is an element of a join semilattice: [`Lattice::merge`] is
//! associative, commutative and idempotent (ACI), so replicas that receive the same updates in
//! any order, with any duplication, converge to the same value. Every merge is total (it never
//! panics) and leaves the value in a canonical form, so converged replicas compare `==`.
//!
//! Module map:
//! - [`clock`]: [`Timestamp`] and the hybrid logical clock [`Hlc`]; [`VectorClock`]; [`Dot`]
//!   and the delta-state [`CausalContext`].
//! - [`lww`]: [`Lww`], a last-writer-wins register with a total tie-break.
//! - [`set`]: grow-only sets, [`Set`] (membership) and [`OrderedSet`] (ordered access).
//! - [`orset`]: [`OrSet`], an add-wins observed-remove set in delta-state form.
//! - [`ord`]: [`Max`], [`Min`] and [`Bool`] (logical or).
//! - [`counter`]: [`Counter`], a PN-counter.
//! - [`expiry`]: [`Expiry`], a key's deadline as a last-writer-wins register.
//! - [`map`]: [`Map`], a key-wise merged map of lattices.
//! - [`priority`]: [`Priority`], the value with the lowest priority wins.
//! - [`causal`]: multi-value registers ordered by vector clocks: [`SingleKeyCausal`] and
//!   [`MultiKeyCausal`] (with cross-key dependencies), and [`CausalWriter`], which issues
//!   clocks that never collide.
//! - [`list`]: [`List`], a sequence with dense positions and observed-remove deletion
//!   (RESP lists).
//! - [`value`]: [`Value`], the dynamically typed value the store holds, its [`LatticeType`]
//!   tag, and [`Record`], the per-key record with its epoch and tombstones.
//! - [`hash`]: [`Hash`](struct@Hash), a Redis hash of last-writer-wins fields with removals, and
//!   [`FieldReg`], one such field.
//! - [`zset`]: [`SortedSet`], a Redis sorted set of last-writer-wins [`Score`]s with
//!   removals and an order index.
//! - [`laws`]: checks of the lattice laws, used by the property tests.
//!
//! The crate is pure: no I/O, no clocks (physical time is passed in), no dependencies.

#![warn(missing_docs)]

pub mod causal;
pub mod clock;
pub mod counter;
pub mod expiry;
pub mod hash;
pub mod laws;
pub mod list;
pub mod lww;
pub mod map;
pub mod ord;
pub mod orset;
pub mod priority;
pub mod set;
pub mod value;
pub mod zset;

pub use causal::{CausalVersion, CausalWriter, MultiKeyCausal, SingleKeyCausal};
pub use clock::{CausalContext, Dot, Hlc, Timestamp, VectorClock};
pub use counter::Counter;
pub use expiry::Expiry;
pub use list::List;
pub use lww::Lww;
pub use map::Map;
pub use ord::{Bool, Max, Min};
pub use orset::OrSet;
pub use priority::Priority;
pub use set::{OrderedSet, Set};
pub use value::{LatticeType, Record, Value};
// Redis hashes and sorted sets.
pub use hash::{FieldReg, Hash};
pub use zset::{Score, SortedSet};

/// A byte string stored in values (members, register contents, map keys).
pub type Blob = Box<[u8]>;

/// A join semilattice: a state with a merge (join, least upper bound) that is associative,
/// commutative and idempotent.
///
/// Implementations must also keep their state canonical, so that two states that hold the
/// same information compare equal whatever order the merges happened in.
pub trait Lattice: Clone + PartialEq + std::fmt::Debug {
    /// Merge `other` into `self`; returns true iff `self` changed. Must be ACI.
    fn merge(&mut self, other: Self) -> bool;

    /// Same as merge, from a reference (default clones).
    fn merge_ref(&mut self, other: &Self) -> bool {
        self.merge(other.clone())
    }
}
