//! Checks of the lattice laws on concrete values, for property tests (of this crate and of
//! crates that define their own lattices). No test-framework dependency: every check returns
//! `Err(LawViolation)` describing the offending values.

use std::fmt;

use crate::Lattice;

/// A lattice law that failed, with the offending values printed via `Debug`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LawViolation {
    /// `a ⊔ a ≠ a`, or merging `a` into itself reported a change.
    NotIdempotent {
        /// The value.
        a: String,
    },
    /// `a ⊔ b ≠ b ⊔ a`.
    NotCommutative {
        /// The left operand.
        a: String,
        /// The right operand.
        b: String,
        /// `a ⊔ b`.
        ab: String,
        /// `b ⊔ a`.
        ba: String,
    },
    /// `(a ⊔ b) ⊔ c ≠ a ⊔ (b ⊔ c)`.
    NotAssociative {
        /// The first operand.
        a: String,
        /// The second operand.
        b: String,
        /// The third operand.
        c: String,
        /// `(a ⊔ b) ⊔ c`.
        ab_c: String,
        /// `a ⊔ (b ⊔ c)`.
        a_bc: String,
    },
    /// `merge` (or `merge_ref`) returned the wrong changed flag, or `merge_ref` disagreed
    /// with `merge`.
    WrongChangedFlag {
        /// The value merged into.
        before: String,
        /// The value merged.
        other: String,
        /// The result.
        after: String,
        /// The flag returned.
        reported: bool,
    },
    /// Two replicas that received the same updates ended with different values.
    Diverged {
        /// The first replica.
        left: String,
        /// The second replica.
        right: String,
    },
}

impl fmt::Display for LawViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LawViolation::NotIdempotent { a } => {
                write!(f, "merge is not idempotent:\n  a = {a}")
            }
            LawViolation::NotCommutative { a, b, ab, ba } => write!(
                f,
                "merge is not commutative:\n  a = {a}\n  b = {b}\n  a ⊔ b = {ab}\n  b ⊔ a = {ba}"
            ),
            LawViolation::NotAssociative {
                a,
                b,
                c,
                ab_c,
                a_bc,
            } => write!(
                f,
                "merge is not associative:\n  a = {a}\n  b = {b}\n  c = {c}\n  \
                 (a ⊔ b) ⊔ c = {ab_c}\n  a ⊔ (b ⊔ c) = {a_bc}"
            ),
            LawViolation::WrongChangedFlag {
                before,
                other,
                after,
                reported,
            } => write!(
                f,
                "merge returned changed = {reported}, which is wrong or disagrees with \
                 merge_ref:\n  before = {before}\n  other = {other}\n  after = {after}"
            ),
            LawViolation::Diverged { left, right } => write!(
                f,
                "replicas diverged after receiving the same updates:\n  left = {left}\n  \
                 right = {right}"
            ),
        }
    }
}

impl std::error::Error for LawViolation {}

fn show<L: fmt::Debug>(value: &L) -> String {
    format!("{value:?}")
}

fn joined<L: Lattice>(a: &L, b: &L) -> L {
    let mut out = a.clone();
    out.merge(b.clone());
    out
}

/// Idempotence: `a ⊔ a = a`, and merging `a` into itself (by value and by reference)
/// reports no change.
pub fn check_idempotent<L: Lattice>(a: &L) -> Result<(), LawViolation> {
    let mut by_value = a.clone();
    let changed = by_value.merge(a.clone());
    let mut by_ref = a.clone();
    let changed_ref = by_ref.merge_ref(a);
    if changed || changed_ref || by_value != *a || by_ref != *a {
        return Err(LawViolation::NotIdempotent { a: show(a) });
    }
    Ok(())
}

/// Commutativity: `a ⊔ b = b ⊔ a`.
pub fn check_commutative<L: Lattice>(a: &L, b: &L) -> Result<(), LawViolation> {
    let ab = joined(a, b);
    let ba = joined(b, a);
    if ab != ba {
        return Err(LawViolation::NotCommutative {
            a: show(a),
            b: show(b),
            ab: show(&ab),
            ba: show(&ba),
        });
    }
    Ok(())
}

/// Associativity: `(a ⊔ b) ⊔ c = a ⊔ (b ⊔ c)`.
pub fn check_associative<L: Lattice>(a: &L, b: &L, c: &L) -> Result<(), LawViolation> {
    let ab_c = joined(&joined(a, b), c);
    let a_bc = joined(a, &joined(b, c));
    if ab_c != a_bc {
        return Err(LawViolation::NotAssociative {
            a: show(a),
            b: show(b),
            c: show(c),
            ab_c: show(&ab_c),
            a_bc: show(&a_bc),
        });
    }
    Ok(())
}

/// The changed flag: `a.merge(b)` returns true iff the result differs from `a`, and
/// `a.merge_ref(&b)` gives the same result and flag.
pub fn check_changed_flag<L: Lattice>(a: &L, b: &L) -> Result<(), LawViolation> {
    let mut by_value = a.clone();
    let reported = by_value.merge(b.clone());
    let mut by_ref = a.clone();
    let reported_ref = by_ref.merge_ref(b);
    if reported != (by_value != *a) || reported_ref != reported || by_ref != by_value {
        return Err(LawViolation::WrongChangedFlag {
            before: show(a),
            other: show(b),
            after: show(&by_value),
            reported,
        });
    }
    Ok(())
}

/// Every law on three values: idempotence of each, commutativity of each pair,
/// associativity in two groupings, and the changed flag in both directions of each pair.
pub fn check_all<L: Lattice>(a: &L, b: &L, c: &L) -> Result<(), LawViolation> {
    for x in [a, b, c] {
        check_idempotent(x)?;
    }
    for (x, y) in [(a, b), (b, c), (a, c)] {
        check_commutative(x, y)?;
        check_changed_flag(x, y)?;
        check_changed_flag(y, x)?;
    }
    check_associative(a, b, c)?;
    check_associative(c, a, b)?;
    Ok(())
}

/// Convergence: two replicas start from `initial` and merge `updates[i]` for each index `i`
/// of `order_a` (resp. `order_b`); indices may repeat (duplicate delivery) and out-of-range
/// indices are ignored. Each replica then merges, in index order, every update its order
/// never delivered, so that both have seen every update at least once; they must then be
/// equal.
pub fn check_convergence<L: Lattice>(
    initial: &L,
    updates: &[L],
    order_a: &[usize],
    order_b: &[usize],
) -> Result<(), LawViolation> {
    let replay = |order: &[usize]| {
        let mut replica = initial.clone();
        let mut seen = vec![false; updates.len()];
        for &i in order {
            if let Some(update) = updates.get(i) {
                replica.merge_ref(update);
                seen[i] = true;
            }
        }
        for (update, seen) in updates.iter().zip(seen) {
            if !seen {
                replica.merge_ref(update);
            }
        }
        replica
    };
    let left = replay(order_a);
    let right = replay(order_b);
    if left != right {
        return Err(LawViolation::Diverged {
            left: show(&left),
            right: show(&right),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Max;

    /// Merge always takes the incoming value: not commutative.
    #[derive(Clone, Debug, PartialEq)]
    struct TakeIncoming(u8);

    impl Lattice for TakeIncoming {
        fn merge(&mut self, other: Self) -> bool {
            let changed = *self != other;
            *self = other;
            changed
        }
    }

    #[test]
    fn correct_lattice_passes() {
        let (a, b, c) = (Max(1), Max(3), Max(2));
        assert_eq!(check_all(&a, &b, &c), Ok(()));
        assert_eq!(
            check_convergence(&Max(0), &[a, b, c], &[2, 2, 0], &[1]),
            Ok(())
        );
    }

    #[test]
    fn broken_lattice_fails() {
        let (a, b) = (TakeIncoming(1), TakeIncoming(2));
        let err = check_all(&a, &b, &a).unwrap_err();
        assert!(matches!(err, LawViolation::NotCommutative { .. }));
        assert!(err.to_string().contains("TakeIncoming(1)"));
        let err = check_convergence(&a, &[a.clone(), b.clone()], &[0, 1], &[1, 0]).unwrap_err();
        assert!(matches!(err, LawViolation::Diverged { .. }));
    }
}
