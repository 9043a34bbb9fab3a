//! LWW string writes: `SET` (with NX / XX), and the read-modify-writes of RESP strings
//! (`GETSET`, `GETDEL`, `APPEND`, `SETRANGE`, `INCRBYFLOAT`, and `INCR` on a string holding
//! an integer).
//!
//! Each runs at one replica of the key: it reads the live string there and writes the
//! result as a new LWW register stamped by the worker's clock — one op, so nothing
//! interleaves on that worker. Two replicas taking such writes concurrently each compute
//! from their own state; the merge keeps the later timestamp, so the key converges to one
//! of the two results and the other write is lost (docs/protocol.md). `INCR` on a key that
//! does not exist creates a PN-counter instead, whose concurrent increments all count.

use lattice::{LatticeType, Lww, Record, Value};

use super::Shard;
use crate::error::NodeError;
use crate::op::{Condition, OpResult};

/// Redis's error for a string that is not a decimal integer.
pub(crate) const NOT_AN_INTEGER: &str = "value is not an integer or out of range";
/// Redis's error for a string that is not a decimal number.
pub(crate) const NOT_A_FLOAT: &str = "value is not a valid float";

/// Parses an integer as Redis does: the canonical decimal form only (no sign `+`, no
/// leading zeros or spaces).
pub(crate) fn parse_strict_i64(b: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(b).ok()?;
    let n: i64 = s.parse().ok()?;
    (n.to_string() == s).then_some(n)
}

/// Parses a decimal number as Redis's `INCRBYFLOAT` does: no spaces, not NaN.
pub(crate) fn parse_float(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.trim() != s {
        return None;
    }
    let x: f64 = s.parse().ok()?;
    (!x.is_nan()).then_some(x)
}

/// A number as Redis prints `INCRBYFLOAT`'s result: plain decimal, no exponent, no
/// trailing zeros.
pub(crate) fn format_float(x: f64) -> String {
    let s = format!("{x}");
    if s == "-0" {
        "0".into()
    } else {
        s
    }
}

impl Shard {
    /// `SET` (with NX / XX): an LWW write stamped by the worker's clock.
    pub(super) fn assign(
        &mut self,
        key: &[u8],
        value: &[u8],
        condition: Condition,
    ) -> Result<OpResult, NodeError> {
        self.check_type(key, LatticeType::Lww)?;
        if value.len() > self.config.limits.max_value_size {
            return Err(NodeError::ValueTooLarge {
                len: value.len(),
                max: self.config.limits.max_value_size,
            });
        }
        let exists = self.live(key).is_some();
        let proceed = match condition {
            Condition::Always => true,
            Condition::IfAbsent => !exists,
            Condition::IfPresent => exists,
        };
        if !proceed {
            return Ok(OpResult::Int(0));
        }
        self.write_string(key, value)?;
        Ok(OpResult::Int(1))
    }

    /// Writes `value` as `key`'s LWW string, stamped by the worker's clock.
    pub(super) fn write_string(&mut self, key: &[u8], value: &[u8]) -> Result<(), NodeError> {
        let ts = self.hlc.tick(self.clock_ms());
        let record = Record::new(ts, Some(Value::Lww(Lww::new(ts, Box::from(value)))));
        self.apply(key, record)
    }

    /// The live string of `key` (a counter reads as its decimal form if `counters`),
    /// `None` if absent; WRONGTYPE for other types.
    fn live_string(&self, key: &[u8], counters: bool) -> Result<Option<Vec<u8>>, NodeError> {
        let Some(r) = self.live(key) else {
            return Ok(None);
        };
        match r.to_value() {
            None => Ok(None),
            Some(Value::Lww(l)) => Ok(Some(l.value.to_vec())),
            Some(Value::Counter(c)) if counters => Ok(Some(c.value().to_string().into_bytes())),
            Some(other) => Err(NodeError::wrong_type("lww", other.lattice_type())),
        }
    }

    fn check_string_size(&self, len: usize) -> Result<(), NodeError> {
        let max = self.config.limits.max_value_size;
        if len > max {
            return Err(NodeError::ValueTooLarge { len, max });
        }
        Ok(())
    }

    fn string_value(value: &[u8]) -> OpResult {
        let ts = lattice::Timestamp::ZERO;
        OpResult::Value(Some(Value::Lww(lattice::Lww::new(ts, Box::from(value)))))
    }

    pub(super) fn get_set(&mut self, key: &[u8], value: &[u8]) -> Result<OpResult, NodeError> {
        self.check_type(key, LatticeType::Lww)?;
        self.check_string_size(value.len())?;
        let old = self.live_string(key, false)?;
        self.write_string(key, value)?;
        Ok(match old {
            Some(old) => Self::string_value(&old),
            None => OpResult::Value(None),
        })
    }

    pub(super) fn get_del(&mut self, key: &[u8]) -> Result<OpResult, NodeError> {
        let Some(old) = self.live_string(key, true)? else {
            return Ok(OpResult::Value(None));
        };
        self.delete(key)?;
        Ok(Self::string_value(&old))
    }

    pub(super) fn append(&mut self, key: &[u8], suffix: &[u8]) -> Result<OpResult, NodeError> {
        self.check_type(key, LatticeType::Lww)?;
        let mut value = self.live_string(key, false)?.unwrap_or_default();
        self.check_string_size(value.len() + suffix.len())?;
        value.extend_from_slice(suffix);
        self.write_string(key, &value)?;
        Ok(OpResult::Int(value.len() as i64))
    }

    pub(super) fn set_range(
        &mut self,
        key: &[u8],
        offset: u64,
        bytes: &[u8],
    ) -> Result<OpResult, NodeError> {
        self.check_type(key, LatticeType::Lww)?;
        let old = self.live_string(key, false)?;
        if bytes.is_empty() {
            // Nothing to write: the length as it is (a missing key stays missing).
            return Ok(OpResult::Int(old.map_or(0, |v| v.len()) as i64));
        }
        let end = usize::try_from(offset)
            .ok()
            .and_then(|o| o.checked_add(bytes.len()))
            .filter(|&end| end <= self.config.limits.max_value_size)
            .ok_or_else(|| {
                NodeError::InvalidArgument(
                    "string exceeds maximum allowed size (limits.max_value_size)".into(),
                )
            })?;
        let mut value = old.unwrap_or_default();
        if value.len() < end {
            value.resize(end, 0);
        }
        let start = end - bytes.len();
        value[start..end].copy_from_slice(bytes);
        self.write_string(key, &value)?;
        Ok(OpResult::Int(value.len() as i64))
    }

    pub(super) fn incr_by_float(&mut self, key: &[u8], by: f64) -> Result<OpResult, NodeError> {
        if let Some(LatticeType::Counter) = self.live(key).and_then(|r| r.lattice_type()) {
            return Err(NodeError::InvalidArgument(
                "INCRBYFLOAT on a counter (a key created by INCR, an integer PN-counter) is \
                 not supported: use INCRBY, or SET the key as a string first"
                    .into(),
            ));
        }
        self.check_type(key, LatticeType::Lww)?;
        let old = match self.live_string(key, false)? {
            None => 0.0,
            Some(s) => {
                parse_float(&s).ok_or_else(|| NodeError::InvalidArgument(NOT_A_FLOAT.into()))?
            }
        };
        let new = old + by;
        if !new.is_finite() {
            return Err(NodeError::InvalidArgument(
                "increment would produce NaN or Infinity".into(),
            ));
        }
        let text = format_float(new);
        self.write_string(key, text.as_bytes())?;
        Ok(Self::string_value(text.as_bytes()))
    }

    /// RESP `INCRBY`: a string holding an integer is read, incremented and written back
    /// (`SET x 10; INCR x`, as Redis); any other key is a PN-counter (created if absent).
    pub(super) fn incr_by(&mut self, key: &[u8], delta: i64) -> Result<OpResult, NodeError> {
        if self.live(key).and_then(|r| r.lattice_type()) == Some(LatticeType::Lww) {
            return self.incr_string(key, delta);
        }
        self.counter_add(key, delta)
    }

    /// `INCRBY` on a key holding a string: the string must be a decimal integer.
    fn incr_string(&mut self, key: &[u8], delta: i64) -> Result<OpResult, NodeError> {
        let old = self.live_string(key, false)?.unwrap_or_default();
        let n = parse_strict_i64(&old)
            .ok_or_else(|| NodeError::InvalidArgument(NOT_AN_INTEGER.into()))?;
        let new = n.checked_add(delta).ok_or(NodeError::Overflow)?;
        self.write_string(key, new.to_string().as_bytes())?;
        Ok(OpResult::Int(new))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_parse_only_in_canonical_form() {
        assert_eq!(parse_strict_i64(b"10"), Some(10));
        assert_eq!(parse_strict_i64(b"-7"), Some(-7));
        assert_eq!(parse_strict_i64(b"0"), Some(0));
        for bad in [
            &b"+1"[..],
            b"01",
            b" 1",
            b"1 ",
            b"",
            b"-0",
            b"1.0",
            b"99999999999999999999",
        ] {
            assert_eq!(
                parse_strict_i64(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn floats_parse_and_print_as_redis() {
        assert_eq!(parse_float(b"10.5"), Some(10.5));
        assert_eq!(parse_float(b"3.0e3"), Some(3000.0));
        assert_eq!(parse_float(b" 1"), None);
        assert_eq!(parse_float(b"nan"), None);
        assert_eq!(parse_float(b"abc"), None);
        assert_eq!(format_float(10.5 + 0.1), "10.6");
        assert_eq!(format_float(3000.0), "3000");
        assert_eq!(format_float(-0.0), "0");
        assert_eq!(format_float(0.00001), "0.00001");
    }
}
