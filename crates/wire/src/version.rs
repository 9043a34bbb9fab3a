//! [`crate::value_version`]'s hash of a message's encoding, computed as prost encodes it.

use bytes::buf::UninitSlice;
use bytes::{Buf, BufMut};
use placement::KeyHasher;
use prost::Message;

/// Bytes gathered before they go to the hasher (prost writes tags and lengths a byte or a
/// few at a time; payloads of this size or more go to the hasher directly).
const STAGE: usize = 256;

/// A [`BufMut`] that hashes what is written into it ([`placement::key_hash`] of it all)
/// instead of keeping it.
pub(crate) struct HashSink {
    hasher: KeyHasher,
    stage: [u8; STAGE],
    len: usize,
}

impl HashSink {
    pub(crate) fn new() -> HashSink {
        HashSink {
            hasher: KeyHasher::new(),
            stage: [0; STAGE],
            len: 0,
        }
    }

    fn flush(&mut self) {
        self.hasher.update(&self.stage[..self.len]);
        self.len = 0;
    }

    /// The `key_hash` of everything written.
    pub(crate) fn finish(mut self) -> u64 {
        self.flush();
        self.hasher.finish()
    }
}

// SAFETY: `chunk_mut` hands out the unwritten rest of `stage` (never empty: a full stage is
// flushed first), and `advance_mut` only counts bytes within it as written.
unsafe impl BufMut for HashSink {
    fn remaining_mut(&self) -> usize {
        usize::MAX
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        assert!(cnt <= STAGE - self.len, "advanced past the chunk");
        self.len += cnt;
        if self.len == STAGE {
            self.flush();
        }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        if self.len == STAGE {
            self.flush();
        }
        UninitSlice::new(&mut self.stage[self.len..])
    }

    fn put_slice(&mut self, src: &[u8]) {
        if src.len() <= STAGE - self.len {
            self.stage[self.len..self.len + src.len()].copy_from_slice(src);
            self.len += src.len();
            return;
        }
        // In order: what is staged, then `src` (staged too if it is small).
        self.flush();
        if src.len() < STAGE {
            self.stage[..src.len()].copy_from_slice(src);
            self.len = src.len();
        } else {
            self.hasher.update(src);
        }
    }

    fn put<T: Buf>(&mut self, mut src: T)
    where
        Self: Sized,
    {
        while src.has_remaining() {
            let chunk = src.chunk();
            let n = chunk.len();
            self.put_slice(chunk);
            src.advance(n);
        }
    }
}

/// `placement::key_hash(&msg.encode_to_vec())`, without the encoded copy.
pub(crate) fn hash_of(msg: &impl Message) -> u64 {
    let mut sink = HashSink::new();
    msg.encode_raw(&mut sink);
    sink.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb;
    use bytes::Bytes;

    fn lww(time: u64, value: Vec<u8>) -> pb::Value {
        crate::convert::value_to_pb(&lattice::Value::Lww(lattice::Lww::new(
            lattice::Timestamp::new(time, 7),
            value.into(),
        )))
    }

    fn causal(payload: Vec<u8>) -> pb::Value {
        let version = lattice::CausalVersion {
            clock: [(1, 2), (3, 4)].into_iter().collect(),
            deps: [(
                lattice::Blob::from(&b"d"[..]),
                [(5, 6)].into_iter().collect(),
            )]
            .into_iter()
            .collect(),
            value: payload.into(),
        };
        crate::convert::value_to_pb(&lattice::Value::MultiKeyCausal(
            lattice::MultiKeyCausal::new(version),
        ))
    }

    #[test]
    fn the_version_hash_equals_the_hash_of_the_encoding() {
        // Payloads around the stage's size and past it, and an empty one.
        for len in [0, 1, 200, 255, 256, 257, 300, 70_000] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 7 % 253) as u8).collect();
            for v in [lww(len as u64 + 1, payload.clone()), causal(payload)] {
                assert_eq!(
                    hash_of(&v),
                    placement::key_hash(&v.encode_to_vec()),
                    "payload of {len} bytes"
                );
            }
        }
        assert_eq!(hash_of(&pb::Value::default()), placement::key_hash(&[]));
    }

    #[test]
    fn bytes_written_through_every_entry_point_hash_in_order() {
        let mut sink = HashSink::new();
        let mut whole = Vec::new();
        for i in 0..600u32 {
            match i % 4 {
                0 => {
                    sink.put_u8(i as u8);
                    whole.push(i as u8);
                }
                1 => {
                    let big = vec![i as u8; 300 + i as usize];
                    sink.put_slice(&big);
                    whole.extend_from_slice(&big);
                }
                2 => {
                    let b = Bytes::from(vec![i as u8; 40]).chain(Bytes::from(vec![1u8; 500]));
                    whole.extend_from_slice(&[i as u8; 40]);
                    whole.extend_from_slice(&[1u8; 500]);
                    sink.put(b);
                }
                _ => {
                    sink.put_u32(i);
                    whole.extend_from_slice(&i.to_be_bytes());
                }
            }
        }
        assert_eq!(sink.finish(), placement::key_hash(&whole));
    }
}
