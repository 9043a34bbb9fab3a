//! [`Lww`]: a last-writer-wins register.

use crate::{Blob, Lattice, Timestamp};

/// A last-writer-wins register: a value stamped with the [`Timestamp`] of its write.
///
/// Merge rule: keep the maximum of `(ts, value)`. The later timestamp wins; two different
/// values with the same timestamp (which a correct clock never issues, but a buggy client or
/// a hand-built value can) resolve to the larger value bytes, the same on every replica.
/// Comparing only timestamps would keep whichever value arrived first, and replicas would
/// diverge.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lww {
    /// When the value was written.
    pub ts: Timestamp,
    /// The value.
    pub value: Blob,
}

impl Lww {
    /// A register holding `value` written at `ts`.
    pub fn new(ts: Timestamp, value: Blob) -> Self {
        Lww { ts, value }
    }
}

impl Lattice for Lww {
    /// Keeps the maximum of `(ts, value)`.
    fn merge(&mut self, other: Self) -> bool {
        if (other.ts, &other.value) > (self.ts, &self.value) {
            *self = other;
            true
        } else {
            false
        }
    }

    fn merge_ref(&mut self, other: &Self) -> bool {
        if (other.ts, &other.value) > (self.ts, &self.value) {
            self.clone_from(other);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lww(time: u64, writer: u64, v: &[u8]) -> Lww {
        Lww::new(Timestamp::new(time, writer), Box::from(v))
    }

    #[test]
    fn later_timestamp_wins() {
        let mut a = lww(1, 1, b"old");
        assert!(a.merge(lww(2, 1, b"new")));
        assert!(!a.merge(lww(1, 9, b"zzz")));
        assert_eq!(&*a.value, b"new");
        // Same time, higher writer wins.
        assert!(a.merge(lww(2, 2, b"aaa")));
        assert_eq!(&*a.value, b"aaa");
    }

    #[test]
    fn equal_timestamps_tie_break_on_value() {
        let x = lww(5, 1, b"x");
        let y = lww(5, 1, b"y");
        let mut xy = x.clone();
        xy.merge(y.clone());
        let mut yx = y.clone();
        assert!(!yx.merge(x.clone()));
        assert_eq!(xy, yx);
        assert_eq!(&*xy.value, b"y");
    }
}
