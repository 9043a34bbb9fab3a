//! The stable key hash.
//!
//! Placement must never change between versions, platforms or languages, so it uses a
//! specified hash: xxh3-64 with the fixed seed [`HASH_SEED`]. (The reference implementation
//! used `std::hash<string>`, whose output differs between standard libraries.)

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Seed of every placement hash: the ASCII bytes of `"lattice!"` read as a little-endian u64.
pub const HASH_SEED: u64 = u64::from_le_bytes(*b"lattice!");

/// Position of `key` on every ring: `xxh3_64_with_seed(key, HASH_SEED)`.
#[inline]
pub fn key_hash(key: &[u8]) -> u64 {
    xxh3_64_with_seed(key, HASH_SEED)
}

/// Position of virtual node `vnode` of the ring member labelled `label`.
///
/// The hashed bytes are `label || 0x00 || vnode as u32 little-endian`.
pub fn vnode_hash(label: &[u8], vnode: u32) -> u64 {
    let mut buf = Vec::with_capacity(label.len() + 5);
    buf.extend_from_slice(label);
    buf.push(0);
    buf.extend_from_slice(&vnode.to_le_bytes());
    xxh3_64_with_seed(&buf, HASH_SEED)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pins the hash so an accidental change of seed or algorithm fails loudly: these values
    /// are part of the protocol, and were cross-checked against Python's `xxhash` package
    /// (`xxhash.xxh3_64_intdigest(b"greeting", seed=0x216563697474616c)`).
    #[test]
    fn hash_is_pinned() {
        assert_eq!(HASH_SEED, 0x2165_6369_7474_616c);
        assert_eq!(key_hash(b"greeting"), 0x6791_6205_82d9_e6eb);
        assert_eq!(vnode_hash(b"worker/0", 0), 0x1cd5_c213_e23b_27ed);
        assert_ne!(key_hash(b"a"), key_hash(b"b"));
    }
}
