//! Helpers shared by the property tests: the law checks of `lattice::laws` as proptest
//! results, and delivery orders with duplicates.

use lattice::{laws, Lattice};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// Every lattice law on `a`, `b`, `c` (idempotence, commutativity, associativity, changed
/// flag), as a proptest result.
pub fn laws_hold<L: Lattice>(a: &L, b: &L, c: &L) -> Result<(), TestCaseError> {
    laws::check_all(a, b, c).map_err(|v| TestCaseError::fail(v.to_string()))
}

/// Two replicas that receive `updates` in `order_a` and `order_b` end equal.
pub fn converges<L: Lattice>(
    initial: &L,
    updates: &[L],
    order_a: &[usize],
    order_b: &[usize],
) -> Result<(), TestCaseError> {
    laws::check_convergence(initial, updates, order_a, order_b)
        .map_err(|v| TestCaseError::fail(v.to_string()))
}

/// A delivery order of `n` updates: every index at least once, some repeated, shuffled.
pub fn delivery_order(n: usize) -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(0..n.max(1), 0..=n)
        .prop_map(move |extra| {
            let mut order: Vec<usize> = (0..n).collect();
            order.extend(extra.into_iter().filter(|&i| i < n));
            order
        })
        .prop_shuffle()
}
