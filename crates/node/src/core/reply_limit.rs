//! The reply limit of requests reading several values (`limits.max_reply_bytes`).

use crate::error::NodeError;
use crate::op::OpResult;

/// A result of a request reading several values, counted against the reply limit: once the
/// values collected exceed `max` bytes, every further value is dropped and replaced by
/// [`NodeError::ReplyTooLarge`] (which fails the request as a whole), so a request asking for
/// one large value many times never holds more than about `max` bytes of them. A request
/// for one key is always answered.
pub(super) fn within_reply_limit(
    several: bool,
    bytes: &mut usize,
    max: usize,
    result: OpResult,
) -> OpResult {
    let OpResult::Value(Some(value)) = &result else {
        return result;
    };
    if !several {
        return result;
    }
    *bytes = bytes.saturating_add(value.approx_size());
    if *bytes > max {
        OpResult::Error(NodeError::ReplyTooLarge { max })
    } else {
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lattice::{Lww, Timestamp, Value};

    fn value(len: usize) -> OpResult {
        OpResult::Value(Some(Value::Lww(Lww::new(
            Timestamp::new(1, 1),
            vec![7u8; len].into_boxed_slice(),
        ))))
    }

    #[test]
    fn values_beyond_the_reply_limit_become_errors() {
        let size = match value(1000) {
            OpResult::Value(Some(v)) => v.approx_size(),
            _ => unreachable!(),
        };
        let max = 3 * size;
        let mut bytes = 0;
        for _ in 0..3 {
            assert_eq!(
                within_reply_limit(true, &mut bytes, max, value(1000)),
                value(1000)
            );
        }
        let too_large = OpResult::Error(NodeError::ReplyTooLarge { max });
        assert_eq!(
            within_reply_limit(true, &mut bytes, max, value(1000)),
            too_large
        );
        // Misses, counts and errors cost nothing; every later value is refused.
        assert_eq!(
            within_reply_limit(true, &mut bytes, max, OpResult::Value(None)),
            OpResult::Value(None)
        );
        assert_eq!(
            within_reply_limit(true, &mut bytes, max, OpResult::Int(3)),
            OpResult::Int(3)
        );
        assert_eq!(
            within_reply_limit(true, &mut bytes, max, value(1)),
            too_large
        );
        // A request for one key is always answered.
        let mut one = 0;
        assert_eq!(
            within_reply_limit(false, &mut one, 10, value(1000)),
            value(1000)
        );
    }
}
