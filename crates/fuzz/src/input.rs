//! Reading structured choices out of fuzz bytes. Every read succeeds: past the end of the
//! input, numbers read as zero and byte strings as empty, so any input is a valid script.

/// A cursor over fuzz bytes.
#[derive(Clone, Debug)]
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    /// A cursor at the start of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    /// True once every byte was read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The next byte (0 past the end).
    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }

    /// The next two bytes, little-endian.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    /// The next four bytes, little-endian.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// The next eight bytes, little-endian.
    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    /// Up to `n` bytes.
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }

    /// A byte string whose length (0..=`max`, at most 65,535) is read first (two bytes).
    pub fn chunk(&mut self, max: usize) -> &'a [u8] {
        let n = usize::from(self.u16()) % (max.min(65_535) + 1);
        self.bytes(n)
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }
}

/// Splits `data` into the reads a connection might see: chunk lengths follow from `seed`
/// (a read of the whole of it when `seed` is 0).
pub fn reads(data: &[u8], seed: u8) -> Vec<&[u8]> {
    if seed == 0 {
        return vec![data];
    }
    let mut rng = fastrand::Rng::with_seed(u64::from(seed));
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let n = match rng.u8(..4) {
            0 => 1,
            1 => rng.usize(1..8),
            _ => rng.usize(1..64),
        };
        let (head, tail) = rest.split_at(n.min(rest.len()));
        out.push(head);
        rest = tail;
    }
    out
}
