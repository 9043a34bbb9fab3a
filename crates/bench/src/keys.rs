//! Key and value bytes, precomputed so the hot loop only copies slices.
//!
//! A key is `key:` followed by the key id in zero-padded decimal, exactly `--key-size` bytes
//! long: `key:000000000042` for id 42 at 16 bytes. When the size leaves no room for the whole
//! prefix, the prefix is cut (`k00042` at 6 bytes); the digits are never cut, so keys stay
//! distinct (validation rejects a size too small for the key count's digits).

/// Number of decimal digits of `n` (1 for 0).
pub fn digits(n: u64) -> usize {
    let mut d = 1;
    let mut n = n / 10;
    while n > 0 {
        d += 1;
        n /= 10;
    }
    d
}

/// Appends key `id` formatted to `size` bytes (see the module documentation), leaving room for
/// at least `min_digits` digits so that every key of a run has the same shape. `size` must be
/// at least `digits(id)`, else the key is longer than `size`.
pub fn format_key(out: &mut Vec<u8>, id: u64, size: usize, min_digits: usize) {
    const PREFIX: &[u8] = b"key:";
    let d = digits(id).max(min_digits);
    let prefix = PREFIX.len().min(size.saturating_sub(d));
    out.extend_from_slice(&PREFIX[..prefix]);
    let width = size.saturating_sub(prefix).max(d);
    let start = out.len();
    out.resize(start + width, b'0');
    let mut n = id;
    for slot in out[start..].iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
}

/// All keys of the run, stored back to back.
#[derive(Debug)]
pub struct Keys {
    buf: Vec<u8>,
    size: usize,
    count: usize,
}

impl Keys {
    /// Keys `0..count`, each `size` bytes (`size` ≥ the digits of `count - 1`).
    pub fn new(count: usize, size: usize) -> Keys {
        let mut buf = Vec::with_capacity(count * size);
        let min_digits = digits(count.saturating_sub(1) as u64);
        for id in 0..count {
            format_key(&mut buf, id as u64, size, min_digits);
        }
        Keys { buf, size, count }
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True if there are no keys.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Length of every key.
    pub fn key_size(&self) -> usize {
        self.size
    }

    /// The bytes of key `id` (`id < len()`).
    #[inline]
    pub fn get(&self, id: u32) -> &[u8] {
        let start = id as usize * self.size;
        &self.buf[start..start + self.size]
    }
}

/// How many different value windows [`Values::get`] offers.
pub const VALUE_VARIANTS: usize = 64;

/// Value bytes: one pseudo-random alphanumeric buffer, read through a sliding window so
/// successive writes do not all carry the same bytes.
#[derive(Debug)]
pub struct Values {
    buf: Vec<u8>,
    size: usize,
}

impl Values {
    /// Values of `size` bytes drawn from `seed`.
    pub fn new(size: usize, seed: u64) -> Values {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        let mut rng = fastrand::Rng::with_seed(seed ^ 0x7661_6c75_6573);
        let buf = (0..size + VALUE_VARIANTS)
            .map(|_| ALPHABET[rng.usize(..ALPHABET.len())])
            .collect();
        Values { buf, size }
    }

    /// Length of every value.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Value variant `variant % VALUE_VARIANTS`.
    #[inline]
    pub fn get(&self, variant: usize) -> &[u8] {
        let start = variant % VALUE_VARIANTS;
        &self.buf[start..start + self.size]
    }
}

/// Number of distinct OR-set members the benchmark adds and queries per key.
pub const MEMBERS: usize = 16;

/// OR-set member `i % MEMBERS`: `m00` … `m15` (always 3 bytes).
pub fn member(i: usize) -> &'static [u8] {
    const ALL: [&[u8]; MEMBERS] = [
        b"m00", b"m01", b"m02", b"m03", b"m04", b"m05", b"m06", b"m07", b"m08", b"m09", b"m10",
        b"m11", b"m12", b"m13", b"m14", b"m15",
    ];
    ALL[i % MEMBERS]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: u64, size: usize) -> String {
        let mut out = Vec::new();
        format_key(&mut out, id, size, 1);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn key_format() {
        assert_eq!(key(42, 16), "key:000000000042");
        assert_eq!(key(0, 16), "key:000000000000");
        assert_eq!(key(99_999, 8), "key99999");
        assert_eq!(key(42, 6), "key:42");
        assert_eq!(key(42, 5), "key42");
        assert_eq!(key(12345, 6), "k12345");
        assert_eq!(key(12345, 5), "12345");
        assert_eq!(key(7, 1), "7");
        assert_eq!(key(123, 24), "key:00000000000000000123");
        assert_eq!(digits(0), 1);
        assert_eq!(digits(9), 1);
        assert_eq!(digits(10), 2);
        assert_eq!(digits(u64::MAX), 20);
    }

    #[test]
    fn keys_are_distinct_and_sized() {
        for size in [3, 4, 5, 16] {
            let keys = Keys::new(1000, size);
            let set: std::collections::HashSet<&[u8]> = (0..1000).map(|i| keys.get(i)).collect();
            assert_eq!(set.len(), 1000);
            assert!((0..1000).all(|i| keys.get(i).len() == size));
        }
        let keys = Keys::new(10, 16);
        assert_eq!(keys.get(7), b"key:000000000007");
        // Every key of a run has the same shape.
        let keys = Keys::new(1000, 4);
        assert_eq!((keys.get(5), keys.get(999)), (&b"k005"[..], &b"k999"[..]));
    }

    #[test]
    fn values() {
        let v = Values::new(100, 1);
        assert_eq!(v.get(0).len(), 100);
        assert_eq!(v.get(VALUE_VARIANTS + 3), v.get(3));
        assert!(v.get(5).iter().all(u8::is_ascii_alphanumeric));
        assert_eq!(Values::new(0, 1).get(9), b"");
        assert_eq!(member(17), b"m01");
    }
}
