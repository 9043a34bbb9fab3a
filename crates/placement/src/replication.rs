//! Replication vectors: how many copies of a key each tier keeps.
//!
//! A key's vector says, per tier, on how many nodes (`global`) and on how many workers of each
//! of those nodes (`local`) it is replicated. Keys without an explicit vector use the
//! configured default. Explicit vectors are stored in the store itself under
//! [`METADATA_PREFIX`], so they are replicated and survive like any other key.

/// Reserved key prefix for metadata stored inside latticekv. User keys may not start with it.
pub const METADATA_PREFIX: &[u8] = b"\x00lkv\x00";

/// Prefix (after [`METADATA_PREFIX`]) of replication-vector metadata keys.
const REPLICATION_PREFIX: &[u8] = b"rep\x00";

/// A storage tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tier {
    /// Values in RAM.
    Memory,
    /// Values in the embedded LSM.
    Disk,
}

/// Replication of a key inside one tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Replication {
    /// Number of nodes of the tier holding the key.
    pub global: u32,
    /// Number of workers on each of those nodes holding the key.
    pub local: u32,
}

impl Replication {
    /// One node, one worker: pure partitioning.
    pub const ONE: Replication = Replication {
        global: 1,
        local: 1,
    };
}

impl Default for Replication {
    fn default() -> Self {
        Replication::ONE
    }
}

/// A key's replication in every tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ReplicationVector {
    /// Replication in the memory tier.
    pub memory: Replication,
    /// Replication in the disk tier (`global == 0`: not kept on disk).
    pub disk: Replication,
}

impl ReplicationVector {
    /// The replication of `tier`.
    pub fn tier(&self, tier: Tier) -> Replication {
        match tier {
            Tier::Memory => self.memory,
            Tier::Disk => self.disk,
        }
    }
}

/// True if `key` lies in the reserved metadata key space.
#[inline]
pub fn is_metadata_key(key: &[u8]) -> bool {
    key.starts_with(METADATA_PREFIX)
}

/// The metadata key under which the replication vector of `key` is stored.
pub fn replication_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(METADATA_PREFIX.len() + REPLICATION_PREFIX.len() + key.len());
    k.extend_from_slice(METADATA_PREFIX);
    k.extend_from_slice(REPLICATION_PREFIX);
    k.extend_from_slice(key);
    k
}

/// The user key whose replication vector `meta_key` holds, if it is such a key.
pub fn replicated_key(meta_key: &[u8]) -> Option<&[u8]> {
    meta_key
        .strip_prefix(METADATA_PREFIX)?
        .strip_prefix(REPLICATION_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_keys_round_trip() {
        let k = replication_key(b"user:1");
        assert!(is_metadata_key(&k));
        assert_eq!(replicated_key(&k), Some(&b"user:1"[..]));
        assert!(!is_metadata_key(b"user:1"));
        assert_eq!(replicated_key(b"user:1"), None);
    }
}
