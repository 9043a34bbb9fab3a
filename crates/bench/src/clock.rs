//! Clock helpers of the drivers and the runner.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Microseconds in `d`, rounded to the nearest.
#[inline]
pub(crate) fn micros(d: Duration) -> u64 {
    ((d.as_nanos() + 500) / 1000) as u64
}

/// Wall-clock milliseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn physical_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micros_rounds_to_nearest() {
        assert_eq!(micros(Duration::from_nanos(1499)), 1);
        assert_eq!(micros(Duration::from_nanos(1500)), 2);
    }
}
