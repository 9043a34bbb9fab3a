//! Tests of `session`.

use super::*;

#[test]
fn names_round_trip() {
    for level in Level::ALL {
        assert_eq!(Level::from_name(level.name()), Some(level));
    }
    assert_eq!(Level::from_name("RYW"), Some(Level::ReadYourWrites));
    assert_eq!(
        Level::from_name("multi_key_causal"),
        Some(Level::MultiKeyCausal)
    );
    assert_eq!(Level::from_name("linearizable"), None);
}

#[test]
fn restamping_touches_only_lww() {
    let ts = Timestamp::new(7, 9);
    let v = restamp(
        Value::Lww(Lww::new(Timestamp::ZERO, Box::from(&b"x"[..]))),
        ts,
    );
    assert_eq!(v, Value::Lww(Lww::new(ts, Box::from(&b"x"[..]))));
}
