//! The stable key hash.
//!
//! Placement must never change between versions, platforms or languages, so it uses a
//! specified hash: xxh3-64 with the fixed seed [`HASH_SEED`]. (The reference implementation
//! used `std::hash<string>`, whose output differs between standard libraries.)
//!
//! Under the hash-tag rule ([`placement_hash`] with `hash_tags`), a key containing a Redis
//! Cluster hash tag (`{…}`, see [`hash_tag`]) is placed by the hash of its tag alone, so keys
//! sharing a tag share their nodes and workers. Whether the rule is in force is a property of
//! the cluster view ([`crate::ClusterView::hash_tags`]).

use xxhash_rust::xxh3::{xxh3_64_with_seed, Xxh3};

/// Seed of every placement hash: the ASCII bytes of `"lattice!"` read as a little-endian u64.
pub const HASH_SEED: u64 = u64::from_le_bytes(*b"lattice!");

/// Position of `key` on every ring: `xxh3_64_with_seed(key, HASH_SEED)`.
#[inline]
pub fn key_hash(key: &[u8]) -> u64 {
    xxh3_64_with_seed(key, HASH_SEED)
}

/// [`key_hash`] of bytes that arrive in pieces: [`finish`](KeyHasher::finish) is the
/// `key_hash` of everything [`update`](KeyHasher::update) was given, concatenated (for
/// hashing a message as it is encoded, without the encoded copy).
#[derive(Clone)]
pub struct KeyHasher(Xxh3);

impl KeyHasher {
    /// A hasher that has seen nothing yet.
    pub fn new() -> KeyHasher {
        KeyHasher(Xxh3::with_seed(HASH_SEED))
    }

    /// Appends `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The [`key_hash`] of everything appended so far.
    pub fn finish(&self) -> u64 {
        self.0.digest()
    }
}

impl Default for KeyHasher {
    fn default() -> Self {
        KeyHasher::new()
    }
}

/// Placement version of a node that places every key by the hash of the whole key (also
/// what a member that advertises no version, an older one, is taken to use).
pub const PLACEMENT_WHOLE_KEY: u32 = 1;

/// Placement version of a node that can place keys under the hash-tag rule: it does so when
/// every storage node of the cluster advertises this version or a later one.
pub const PLACEMENT_HASH_TAGS: u32 = 2;

/// The hash tag of `key` as Redis Cluster defines it (`keyHashSlot`): the bytes between the
/// first `{` and the first `}` after it, if there is at least one. `None` (the whole key is
/// hashed) without a `{`, without a `}` after it, or if the two are adjacent: `foo{}{bar}`
/// has no tag, `foo{{bar}}` has the tag `{bar`, `foo{bar}{zap}` the tag `bar`.
#[inline]
pub fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let rest = &key[open + 1..];
    let close = rest.iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &rest[..close])
}

/// Position of `key` on every ring: [`key_hash`] of its [`hash_tag`] if `hash_tags` and it
/// has one, else of the whole key.
#[inline]
pub fn placement_hash(key: &[u8], hash_tags: bool) -> u64 {
    match hash_tags.then(|| hash_tag(key)).flatten() {
        Some(tag) => key_hash(tag),
        None => key_hash(key),
    }
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

    /// Redis's `keyHashSlot` (cluster.c), case by case.
    #[test]
    fn hash_tags_follow_redis() {
        let tag = hash_tag;
        assert_eq!(tag(b"{user1000}.following"), Some(&b"user1000"[..]));
        assert_eq!(tag(b"bull:{queue}:wait"), Some(&b"queue"[..]));
        assert_eq!(
            tag(b"foo{bar}{zap}"),
            Some(&b"bar"[..]),
            "the first tag only"
        );
        assert_eq!(
            tag(b"foo{}{bar}"),
            None,
            "an empty first tag: the whole key"
        );
        assert_eq!(tag(b"foo{{bar}}zap"), Some(&b"{bar"[..]));
        assert_eq!(tag(b"foo{bar}}"), Some(&b"bar"[..]));
        assert_eq!(tag(b"{}"), None);
        assert_eq!(tag(b"{"), None);
        assert_eq!(
            tag(b"}{"),
            None,
            "a closing brace before the first opening one closes nothing"
        );
        assert_eq!(tag(b"a}b{c"), None);
        assert_eq!(tag(b"plain"), None);
        assert_eq!(tag(b""), None);
        assert_eq!(tag(b"{a}"), Some(&b"a"[..]));
        assert_eq!(tag(b"x{\xff\x00}"), Some(&b"\xff\x00"[..]), "any bytes");
    }

    #[test]
    fn a_key_hasher_fed_in_pieces_equals_the_key_hash_of_the_whole() {
        // Across the hasher's internal block sizes (buffered, then striped), cut anywhere.
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 31 % 251) as u8).collect();
        for len in [0, 1, 16, 17, 128, 129, 240, 241, 1024, 4999] {
            for cut in [0, 1.min(len), len / 3, len / 2, len] {
                let mut h = KeyHasher::new();
                h.update(&data[..cut]);
                for piece in data[cut..len].chunks(7) {
                    h.update(piece);
                }
                assert_eq!(h.finish(), key_hash(&data[..len]), "len {len}, cut {cut}");
            }
        }
    }

    #[test]
    fn placement_hash_hashes_the_tag_only_under_the_rule() {
        assert_eq!(placement_hash(b"{t}:a", true), key_hash(b"t"));
        assert_eq!(
            placement_hash(b"{t}:a", true),
            placement_hash(b"x{t}y", true)
        );
        assert_eq!(placement_hash(b"{t}:a", false), key_hash(b"{t}:a"));
        assert_eq!(placement_hash(b"foo{}{bar}", true), key_hash(b"foo{}{bar}"));
        assert_eq!(placement_hash(b"plain", true), key_hash(b"plain"));
    }
}
