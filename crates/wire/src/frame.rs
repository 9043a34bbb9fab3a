//! Length-prefixed frames: a 4-byte big-endian length `N`, then `N` bytes of one protobuf
//! message.
//!
//! Decoding separates "need more bytes" (`Ok(None)`) from a violation (`Err`), so a reader can
//! call [`frame_len`] again after every read without copying.

use prost::Message;

/// Size of the length prefix.
pub const HEADER_LEN: usize = 4;

/// Default upper bound on a frame body (the node's `max_frame_size`).
pub const DEFAULT_MAX_FRAME: usize = 32 * 1024 * 1024;

/// A framing violation. The connection cannot be resynchronised after one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The announced body length exceeds the limit.
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    TooLarge {
        /// Announced body length.
        len: usize,
        /// The limit in force.
        max: usize,
    },
}

/// If `buf` starts with a whole frame, returns the length of its body (the body is
/// `buf[HEADER_LEN..HEADER_LEN + len]`). `Ok(None)` means more bytes are needed.
pub fn frame_len(buf: &[u8], max: usize) -> Result<Option<usize>, FrameError> {
    let Some(header) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    if buf.len() < HEADER_LEN + len {
        return Ok(None);
    }
    Ok(Some(len))
}

/// Longest body the 4-byte length prefix can announce (4 GiB − 1).
pub const MAX_BODY: usize = u32::MAX as usize;

/// The length prefix of a body of `len` bytes; an error if it cannot be announced in 4 bytes
/// (never a truncated length).
fn prefix(len: usize) -> Result<[u8; HEADER_LEN], FrameError> {
    u32::try_from(len)
        .map(u32::to_be_bytes)
        .map_err(|_| FrameError::TooLarge { len, max: MAX_BODY })
}

/// Appends `msg` as one frame to `out`, or appends nothing and fails if its body is longer
/// than [`MAX_BODY`].
///
/// # Errors
/// [`FrameError::TooLarge`] for a body over 4 GiB − 1.
pub fn try_encode<M: Message>(msg: &M, out: &mut Vec<u8>) -> Result<(), FrameError> {
    let len = msg.encoded_len();
    let header = prefix(len)?;
    out.reserve(HEADER_LEN + len);
    out.extend_from_slice(&header);
    // Encoding into a Vec only fails for lack of capacity, which `reserve` rules out.
    let _ = msg.encode(out);
    Ok(())
}

/// Appends `msg` as one frame to `out`, for messages that cannot reach 4 GiB (their size is
/// bounded by other limits). One that did would be left out — nothing appended, never a
/// truncated length prefix; where a message's size depends on what a client asked for, use
/// [`try_encode`] and answer the error.
pub fn encode<M: Message>(msg: &M, out: &mut Vec<u8>) {
    let _ = try_encode(msg, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb;

    #[test]
    fn round_trip_and_partial_frames() {
        let req = pb::Request {
            id: 7,
            op: Some(pb::request::Op::Get(pb::Get {
                key: bytes::Bytes::from_static(b"k"),
            })),
            ..Default::default()
        };
        let mut out = Vec::new();
        encode(&req, &mut out);
        for cut in 0..out.len() {
            assert_eq!(frame_len(&out[..cut], 1024), Ok(None), "prefix {cut}");
        }
        let len = frame_len(&out, 1024).unwrap().unwrap();
        let back = pb::Request::decode(&out[HEADER_LEN..HEADER_LEN + len]).unwrap();
        assert_eq!(back, req);
    }

    #[test]
    fn a_body_over_4_gib_has_no_length_prefix() {
        assert_eq!(prefix(0), Ok([0, 0, 0, 0]));
        assert_eq!(prefix(MAX_BODY), Ok([0xff; 4]));
        assert_eq!(
            prefix(MAX_BODY + 1),
            Err(FrameError::TooLarge {
                len: MAX_BODY + 1,
                max: MAX_BODY
            })
        );
        let mut out = Vec::new();
        try_encode(&pb::Ping {}, &mut out).unwrap();
        assert_eq!(out, [0, 0, 0, 0]);
    }

    #[test]
    fn oversized_frame_is_an_error() {
        let buf = [0xff, 0xff, 0xff, 0xff, 0];
        assert_eq!(
            frame_len(&buf, 1024),
            Err(FrameError::TooLarge {
                len: u32::MAX as usize,
                max: 1024
            })
        );
    }
}
