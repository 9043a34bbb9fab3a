//! The property tests can fail: deliberately broken "lattices" run through the same law
//! checks (`common::laws_hold`, `common::converges`) with a proptest `TestRunner`, and the
//! runner must report a failure. A correct LWW register through the same runner passes.

mod common;

use common::{converges, delivery_order, laws_hold};
use lattice::{Lattice, Lww, Timestamp};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestError, TestRunner};

/// An LWW register whose merge always takes the incoming value: not commutative.
#[derive(Clone, Debug, PartialEq)]
struct TakeIncoming {
    ts: u64,
    value: u8,
}

impl Lattice for TakeIncoming {
    fn merge(&mut self, other: Self) -> bool {
        let changed = *self != other;
        *self = other;
        changed
    }
}

/// A counter whose merge adds: not idempotent (re-delivery counts twice).
#[derive(Clone, Debug, PartialEq)]
struct Sum(u64);

impl Lattice for Sum {
    fn merge(&mut self, other: Self) -> bool {
        self.0 = self.0.saturating_add(other.0);
        other.0 != 0
    }
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: 256,
        failure_persistence: None,
        ..Config::default()
    })
}

fn take_incoming() -> impl Strategy<Value = TakeIncoming> {
    (0..4u64, 0..4u8).prop_map(|(ts, value)| TakeIncoming { ts, value })
}

fn lww() -> impl Strategy<Value = Lww> {
    (0..4u64, 0..2u64, 0..4u8).prop_map(|(t, w, v)| Lww::new(Timestamp::new(t, w), Box::new([v])))
}

/// The failure message of a run that must fail.
fn failure<T: std::fmt::Debug>(result: Result<(), TestError<T>>) -> String {
    match result {
        Err(TestError::Fail(reason, input)) => format!("{}\ninput: {input:?}", reason.message()),
        Err(TestError::Abort(reason)) => panic!("aborted instead of failing: {reason}"),
        Ok(()) => panic!("the law checks accepted a broken lattice"),
    }
}

#[test]
fn non_commutative_merge_is_caught() {
    let strategy = (take_incoming(), take_incoming(), take_incoming());
    let result = runner().run(&strategy, |(a, b, c)| laws_hold(&a, &b, &c));
    let message = failure(result);
    assert!(message.contains("not commutative"), "{message}");
}

#[test]
fn non_idempotent_merge_is_caught() {
    let sum = || (0..4u64).prop_map(Sum);
    let strategy = (sum(), sum(), sum());
    let result = runner().run(&strategy, |(a, b, c)| laws_hold(&a, &b, &c));
    let message = failure(result);
    assert!(message.contains("not idempotent"), "{message}");
}

#[test]
fn divergence_is_caught() {
    let strategy = vec(take_incoming(), 2..6).prop_flat_map(|updates| {
        let n = updates.len();
        (Just(updates), delivery_order(n), delivery_order(n))
    });
    let result = runner().run(&strategy, |(updates, order_a, order_b)| {
        converges(
            &TakeIncoming { ts: 0, value: 0 },
            &updates,
            &order_a,
            &order_b,
        )
    });
    let message = failure(result);
    assert!(message.contains("diverged"), "{message}");

    let strategy = vec((0..4u64).prop_map(Sum), 2..6).prop_flat_map(|updates| {
        let n = updates.len();
        (Just(updates), delivery_order(n), delivery_order(n))
    });
    let result = runner().run(&strategy, |(updates, order_a, order_b)| {
        converges(&Sum(0), &updates, &order_a, &order_b)
    });
    assert!(failure(result).contains("diverged"));
}

/// Control: the same runner and checks accept a correct lattice.
#[test]
fn correct_lww_passes_the_same_checks() {
    let strategy = (lww(), lww(), lww());
    let result = runner().run(&strategy, |(a, b, c)| laws_hold(&a, &b, &c));
    assert!(result.is_ok(), "{result:?}");

    let strategy = vec(lww(), 2..6).prop_flat_map(|updates| {
        let n = updates.len();
        (Just(updates), delivery_order(n), delivery_order(n))
    });
    let result = runner().run(&strategy, |(updates, order_a, order_b)| {
        converges(&Lww::default(), &updates, &order_a, &order_b)
    });
    assert!(result.is_ok(), "{result:?}");
}
