//! Packed blocks: a plain LWW register stored as one heap block,
//! `[meta u32 LE][key_len u16 LE][key][time u64 LE][writer u64 LE][value]` (see the
//! parent module's layout notes).

use lattice::{Record, Timestamp, Value};

/// Per-entry cost of a packed entry beyond its block: the 16-byte table slot at about half
/// load, control bytes and the allocator's header.
pub const PACKED_OVERHEAD: usize = 40;

/// Bytes of a packed block's meta word (access tick and flags).
pub(super) const META_BYTES: usize = 4;
/// Bytes of a packed block before the key: the meta word and the key's length.
pub(super) const KEY_LEN_BYTES: usize = META_BYTES + 2;
/// Bytes of a packed block's timestamp.
pub(super) const TS_BYTES: usize = 16;

/// If `record` can be stored packed under `key`: the LWW timestamp and value.
pub(super) fn packable<'r>(key: &[u8], record: &'r Record) -> Option<(Timestamp, &'r [u8])> {
    if record.expiry.is_some() {
        // A packed block has no room for a deadline.
        return None;
    }
    match &record.value {
        Some(Value::Lww(l)) if l.ts == record.epoch && key.len() <= usize::from(u16::MAX) => {
            Some((l.ts, &l.value))
        }
        _ => None,
    }
}

/// The length of the packed block of `key` and `value`.
pub(super) fn packed_len(key: &[u8], value: &[u8]) -> usize {
    KEY_LEN_BYTES + key.len() + TS_BYTES + value.len()
}

pub(super) fn pack(meta: u32, key: &[u8], ts: Timestamp, value: &[u8]) -> Box<[u8]> {
    let mut block = Vec::with_capacity(packed_len(key, value));
    block.extend_from_slice(&meta.to_le_bytes());
    // `packable` guarantees the key length fits in a u16.
    block.extend_from_slice(&(key.len() as u16).to_le_bytes());
    block.extend_from_slice(key);
    block.extend_from_slice(&ts.time.to_le_bytes());
    block.extend_from_slice(&ts.writer.to_le_bytes());
    block.extend_from_slice(value);
    block.into_boxed_slice()
}

/// Rewrites the meta word, timestamp and value of `block` (its key stays) with a value of
/// the same length as the one it holds: what [`pack`] would build, without allocating.
pub(super) fn repack(block: &mut [u8], meta: u32, ts: Timestamp, value: &[u8]) {
    debug_assert_eq!(block.len(), packed_len(packed_key(block), value));
    let at = KEY_LEN_BYTES + packed_key(block).len();
    set_packed_meta(block, meta);
    let (stamp, rest) = block[at..].split_at_mut(TS_BYTES);
    stamp[..8].copy_from_slice(&ts.time.to_le_bytes());
    stamp[8..].copy_from_slice(&ts.writer.to_le_bytes());
    rest.copy_from_slice(value);
}

/// The parts of a packed block. Blocks are only built by [`pack`], so the layout holds.
pub(super) struct Packed<'a> {
    pub(super) key: &'a [u8],
    pub(super) ts: Timestamp,
    pub(super) value: &'a [u8],
}

pub(super) fn unpack(block: &[u8]) -> Packed<'_> {
    let key_len = usize::from(u16::from_le_bytes([
        block[META_BYTES],
        block[META_BYTES + 1],
    ]));
    let (key, rest) = block[KEY_LEN_BYTES..].split_at(key_len);
    let (ts, value) = rest.split_at(TS_BYTES);
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
    Packed {
        key,
        ts: Timestamp::new(word(&ts[..8]), word(&ts[8..])),
        value,
    }
}

/// Asks the CPU to load the cache line at `ptr` (a hint: no fault, no effect on memory).
#[inline(always)]
pub(super) fn prefetch_line(ptr: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` is a hint: it never faults and reads or writes no memory the
    // program can observe, whatever the address; SSE is part of x86_64's baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(ptr.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}

pub(super) fn packed_key(block: &[u8]) -> &[u8] {
    unpack(block).key
}

pub(super) fn packed_meta(block: &[u8]) -> u32 {
    u32::from_le_bytes([block[0], block[1], block[2], block[3]])
}

pub(super) fn set_packed_meta(block: &mut [u8], meta: u32) {
    block[..META_BYTES].copy_from_slice(&meta.to_le_bytes());
}

pub(super) fn packed_size(block: &[u8]) -> usize {
    block.len() + PACKED_OVERHEAD
}
