//! The on-disk format: file headers, record framing, checksums and file names.
//!
//! All integers are little-endian. See the crate docs ("On-disk format") for the layout;
//! this module is its only implementation.

use std::fmt;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::wal::Lsn;

/// Length of a segment's (and a snapshot's) file header.
pub const SEGMENT_HEADER_LEN: usize = 32;
/// Length of a record's header (length, checksum, LSN).
pub const RECORD_HEADER_LEN: usize = 16;
/// Hard limit of one record's payload in the format (1 GiB): a larger length field is
/// corruption, whatever the options say.
pub const MAX_RECORD_LEN: u32 = 1 << 30;
/// Format version written in every file header; readers refuse other versions.
pub const FORMAT_VERSION: u32 = 1;
/// Magic bytes opening a log segment.
pub const SEGMENT_MAGIC: [u8; 8] = *b"LKV-WAL\0";
/// Magic bytes opening a snapshot.
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"LKV-SNP\0";
/// The LSN field of a snapshot's trailer record.
pub const SNAPSHOT_TRAILER_LSN: u64 = u64::MAX;

/// Added to a rotated CRC so that a checksum of data containing checksums stays strong
/// (the LevelDB/RocksDB mask).
const MASK_DELTA: u32 = 0xa282_ead8;

/// CRC-32C of `data`, masked.
pub fn masked_crc(data: &[u8]) -> u32 {
    mask(crc32c::crc32c(data))
}

fn mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// The checksum of a record: CRC-32C over the length, the LSN and the payload, masked.
pub fn record_crc(len: u32, lsn: Lsn, payload: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&len.to_le_bytes());
    let crc = crc32c::crc32c_append(crc, &lsn.to_le_bytes());
    mask(crc32c::crc32c_append(crc, payload))
}

/// Appends one framed record to `out`.
pub fn encode_record(out: &mut Vec<u8>, lsn: Lsn, payload: &[u8]) {
    debug_assert!(payload.len() <= MAX_RECORD_LEN as usize);
    let len = payload.len() as u32;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&record_crc(len, lsn, payload).to_le_bytes());
    out.extend_from_slice(&lsn.to_le_bytes());
    out.extend_from_slice(payload);
}

/// Which kind of file a header opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A log segment; the header's LSN is its base.
    Segment,
    /// A snapshot; the header's LSN is the LSN it covers.
    Snapshot,
}

impl FileKind {
    fn magic(self) -> [u8; 8] {
        match self {
            FileKind::Segment => SEGMENT_MAGIC,
            FileKind::Snapshot => SNAPSHOT_MAGIC,
        }
    }
}

/// The file header of a segment or snapshot.
pub fn encode_header(kind: FileKind, lsn: Lsn) -> [u8; SEGMENT_HEADER_LEN] {
    let mut h = [0u8; SEGMENT_HEADER_LEN];
    h[0..8].copy_from_slice(&kind.magic());
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    // 12..16: flags, 24..28: reserved; both zero in version 1.
    h[16..24].copy_from_slice(&lsn.to_le_bytes());
    let crc = masked_crc(&h[0..28]);
    h[28..32].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Why a file header was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BadHeader {
    /// Fewer than 32 bytes.
    Short,
    /// Not a latticekv segment or snapshot (or the wrong one of the two).
    Magic,
    /// Written by another format version.
    Version(u32),
    /// The header checksum does not match.
    Checksum,
}

impl fmt::Display for BadHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadHeader::Short => f.write_str("file shorter than its header"),
            BadHeader::Magic => f.write_str("bad magic bytes"),
            BadHeader::Version(v) => write!(f, "unsupported format version {v}"),
            BadHeader::Checksum => f.write_str("header checksum mismatch"),
        }
    }
}

/// Decodes a file header, returning its LSN.
pub fn decode_header(kind: FileKind, h: &[u8]) -> Result<Lsn, BadHeader> {
    let h: &[u8; SEGMENT_HEADER_LEN] = h
        .get(..SEGMENT_HEADER_LEN)
        .and_then(|s| s.try_into().ok())
        .ok_or(BadHeader::Short)?;
    if h[0..8] != kind.magic() {
        return Err(BadHeader::Magic);
    }
    if masked_crc(&h[0..28]) != u32::from_le_bytes([h[28], h[29], h[30], h[31]]) {
        return Err(BadHeader::Checksum);
    }
    let version = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
    if version != FORMAT_VERSION {
        return Err(BadHeader::Version(version));
    }
    let mut lsn = [0u8; 8];
    lsn.copy_from_slice(&h[16..24]);
    Ok(u64::from_le_bytes(lsn))
}

/// Why reading stopped at a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BadRecord {
    /// The file ends inside a record header.
    ShortHeader,
    /// The file ends inside a record's payload (a torn write).
    ShortPayload {
        /// The header's length field.
        len: u32,
    },
    /// The length field is beyond the format's limit.
    BadLength(u32),
    /// The checksum does not match the record.
    Checksum,
    /// LSN 0 with a non-zero header.
    ZeroLsn,
    /// The LSN does not follow the previous record's.
    OutOfOrder {
        /// What was expected (the first allowed LSN).
        expected: Lsn,
        /// What the record says.
        found: Lsn,
    },
    /// An all-zero header (the end of the written data) followed by non-zero bytes.
    DataAfterEnd,
}

impl fmt::Display for BadRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadRecord::ShortHeader => f.write_str("file ends inside a record header"),
            BadRecord::ShortPayload { len } => {
                write!(f, "file ends inside a record of {len} bytes (torn write)")
            }
            BadRecord::BadLength(len) => write!(f, "record length {len} is beyond the limit"),
            BadRecord::Checksum => f.write_str("record checksum mismatch"),
            BadRecord::ZeroLsn => f.write_str("record with LSN 0"),
            BadRecord::OutOfOrder { expected, found } => {
                write!(f, "record LSN {found} out of order (expected {expected})")
            }
            BadRecord::DataAfterEnd => f.write_str("non-zero bytes after the end of the log"),
        }
    }
}

/// What [`RecordReader::next`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// A good record; its payload is [`RecordReader::payload`].
    Record(Lsn),
    /// The clean end: the end of the file, or an all-zero header followed only by zeros
    /// (preallocated space).
    End,
    /// A bad record at [`RecordReader::offset`]; nothing after it is read.
    Bad(BadRecord),
}

/// Reads framed records from a file, after its header, checking each one.
pub struct RecordReader<R> {
    input: R,
    /// Offset of the next record (or of the bad one, after `Bad`).
    offset: u64,
    /// Offset of `input`'s position in the file.
    pos: u64,
    /// Length of the file.
    len: u64,
    /// End of the last non-zero byte, once known.
    data_end: Option<u64>,
    payload: Vec<u8>,
}

impl<R: Read> RecordReader<R> {
    /// Reads records from `input`, which is positioned at `offset` of a file of `len` bytes.
    pub fn new(input: R, offset: u64, len: u64) -> Self {
        RecordReader {
            input,
            offset,
            pos: offset,
            len,
            data_end: None,
            payload: Vec::new(),
        }
    }

    /// Offset of the next record, or of the bad record after [`Next::Bad`].
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The payload of the last [`Next::Record`].
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        self.input.read_exact(buf)?;
        self.pos += buf.len() as u64;
        Ok(())
    }

    /// Reads the next record. I/O errors are returned as such (the caller decides whether
    /// a file it cannot read is corruption); a record that is not intact is [`Next::Bad`].
    pub fn next(&mut self) -> io::Result<Next> {
        let remaining = self.len.saturating_sub(self.offset);
        if remaining == 0 {
            return Ok(Next::End);
        }
        let mut h = [0u8; RECORD_HEADER_LEN];
        if remaining < RECORD_HEADER_LEN as u64 {
            let tail = &mut h[..remaining as usize];
            self.input.read_exact(tail)?;
            self.pos += remaining;
            return Ok(if tail.iter().all(|&b| b == 0) {
                Next::End
            } else {
                Next::Bad(BadRecord::ShortHeader)
            });
        }
        self.read_exact(&mut h)?;
        if h.iter().all(|&b| b == 0) {
            // The end of the written data, if only zeros follow.
            let rest = self.len - self.pos;
            let start = self.pos;
            let last = last_nonzero(&mut self.input, rest)?;
            self.pos = self.len;
            return Ok(match last {
                Some(p) => {
                    self.data_end = Some(start + p + 1);
                    Next::Bad(BadRecord::DataAfterEnd)
                }
                None => Next::End,
            });
        }
        let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let crc = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
        let mut lsn = [0u8; 8];
        lsn.copy_from_slice(&h[8..16]);
        let lsn = u64::from_le_bytes(lsn);
        if len > MAX_RECORD_LEN {
            return Ok(Next::Bad(BadRecord::BadLength(len)));
        }
        if u64::from(len) > remaining - RECORD_HEADER_LEN as u64 {
            return Ok(Next::Bad(BadRecord::ShortPayload { len }));
        }
        let mut payload = std::mem::take(&mut self.payload);
        payload.clear();
        payload.resize(len as usize, 0);
        let read = self.read_exact(&mut payload);
        self.payload = payload;
        read?;
        if record_crc(len, lsn, &self.payload) != crc {
            return Ok(Next::Bad(BadRecord::Checksum));
        }
        if lsn == 0 {
            return Ok(Next::Bad(BadRecord::ZeroLsn));
        }
        self.offset = self.pos;
        Ok(Next::Record(lsn))
    }

    /// Bytes from `start` (at most the current offset) to the last non-zero byte of the
    /// file, reading the rest of it: how much written data a cut at `start` discards.
    /// Preallocated zeros at the end do not count.
    pub fn data_after(mut self, start: u64) -> io::Result<u64> {
        let end = match self.data_end {
            Some(end) => end,
            None => {
                let from = self.pos;
                match last_nonzero(&mut self.input, self.len - self.pos)? {
                    Some(p) => from + p + 1,
                    // Everything consumed so far counts (it held a non-zero header).
                    None => from,
                }
            }
        };
        Ok(end.saturating_sub(start))
    }
}

/// Reads `n` bytes of `input`; the position (0-based) of the last non-zero byte among them.
fn last_nonzero<R: Read>(input: &mut R, n: u64) -> io::Result<Option<u64>> {
    let mut buf = vec![0u8; 64 << 10];
    let mut pos = 0u64;
    let mut last = None;
    while pos < n {
        let want = (n - pos).min(buf.len() as u64) as usize;
        let got = input.read(&mut buf[..want])?;
        if got == 0 {
            break;
        }
        if let Some(i) = buf[..got].iter().rposition(|&b| b != 0) {
            last = Some(pos + i as u64);
        }
        pos += got as u64;
    }
    Ok(last)
}

/// Width of the zero-padded LSN in file names (enough for any `u64`).
const NAME_DIGITS: usize = 20;

/// The name of the segment with base `base`: `wal-<base, 20 digits>.log`.
pub fn segment_name(base: Lsn) -> String {
    format!("wal-{base:0NAME_DIGITS$}.log")
}

/// The name of the snapshot covering `lsn`: `snap-<lsn, 20 digits>.snap`.
pub fn snapshot_name(lsn: Lsn) -> String {
    format!("snap-{lsn:0NAME_DIGITS$}.snap")
}

/// Suffix of files being written (a segment before its header is durable, a snapshot
/// before it is complete); they are deleted when the log is opened.
pub const TMP_SUFFIX: &str = ".tmp";

/// The name of the lock file.
pub const LOCK_NAME: &str = "LOCK";

/// What a file in the log's directory is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DirEntry {
    /// A segment and its base LSN.
    Segment(Lsn),
    /// A snapshot and its LSN.
    Snapshot(Lsn),
    /// A file being written when a previous process stopped.
    Temporary,
}

/// Classifies a file name of the log's directory; `None` for files that are not the log's
/// (they are left alone).
pub fn parse_name(name: &str) -> Option<DirEntry> {
    if name.ends_with(TMP_SUFFIX) && (name.starts_with("wal-") || name.starts_with("snap-")) {
        return Some(DirEntry::Temporary);
    }
    let digits = |s: &str| {
        (s.len() == NAME_DIGITS && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u64>().ok())
            .flatten()
    };
    if let Some(base) = name
        .strip_prefix("wal-")
        .and_then(|s| s.strip_suffix(".log"))
    {
        return digits(base).map(DirEntry::Segment);
    }
    if let Some(lsn) = name
        .strip_prefix("snap-")
        .and_then(|s| s.strip_suffix(".snap"))
    {
        return digits(lsn).map(DirEntry::Snapshot);
    }
    None
}

/// The files of the log in `dir`.
#[derive(Debug, Default)]
pub struct Listing {
    /// Segments by ascending base.
    pub segments: Vec<(Lsn, PathBuf)>,
    /// Snapshots by ascending LSN.
    pub snapshots: Vec<(Lsn, PathBuf)>,
    /// Leftover temporary files.
    pub temporary: Vec<PathBuf>,
}

/// Lists the log's files in `dir`.
pub fn list_dir(dir: &Path) -> io::Result<Listing> {
    let mut listing = Listing::default();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        match parse_name(&name) {
            Some(DirEntry::Segment(base)) => listing.segments.push((base, entry.path())),
            Some(DirEntry::Snapshot(lsn)) => listing.snapshots.push((lsn, entry.path())),
            Some(DirEntry::Temporary) => listing.temporary.push(entry.path()),
            None => {}
        }
    }
    listing.segments.sort();
    listing.snapshots.sort();
    Ok(listing)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(bytes: &[u8]) -> (Vec<(Lsn, Vec<u8>)>, Next, u64) {
        let mut r = RecordReader::new(bytes, 0, bytes.len() as u64);
        let mut out = Vec::new();
        loop {
            match r.next().unwrap() {
                Next::Record(lsn) => out.push((lsn, r.payload().to_vec())),
                other => return (out, other, r.offset()),
            }
        }
    }

    #[test]
    fn records_round_trip() {
        let mut buf = Vec::new();
        encode_record(&mut buf, 1, b"hello");
        encode_record(&mut buf, 2, b"");
        encode_record(&mut buf, 3, &[7u8; 1000]);
        let (recs, end, off) = read_all(&buf);
        assert_eq!(end, Next::End);
        assert_eq!(off, buf.len() as u64);
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[0], (1, b"hello".to_vec()));
        assert_eq!(recs[1], (2, Vec::new()));
        assert_eq!(recs[2].1.len(), 1000);
    }

    #[test]
    fn zero_tail_is_a_clean_end_and_data_after_zeros_is_not() {
        let mut buf = Vec::new();
        encode_record(&mut buf, 1, b"x");
        let good = buf.len() as u64;
        buf.resize(buf.len() + 100, 0);
        assert_eq!(read_all(&buf).1, Next::End);
        buf.resize(buf.len() + 5, 0); // fewer than a header's worth of zeros at the end
        assert_eq!(read_all(&buf).1, Next::End);
        buf[good as usize + 50] = 1;
        let (recs, end, off) = read_all(&buf);
        assert_eq!(recs.len(), 1);
        assert_eq!(end, Next::Bad(BadRecord::DataAfterEnd));
        assert_eq!(off, good);
    }

    #[test]
    fn every_cut_and_every_flipped_bit_is_detected() {
        let mut buf = Vec::new();
        encode_record(&mut buf, 1, b"first record");
        let first = buf.len();
        encode_record(&mut buf, 2, b"second record, a bit longer");
        for cut in first + 1..buf.len() {
            let (recs, end, off) = read_all(&buf[..cut]);
            assert_eq!(recs.len(), 1, "cut {cut}");
            assert!(matches!(end, Next::Bad(_)), "cut {cut}: {end:?}");
            assert_eq!(off, first as u64);
        }
        for byte in first..buf.len() {
            for bit in 0..8 {
                let mut b = buf.clone();
                b[byte] ^= 1 << bit;
                let (recs, end, _) = read_all(&b);
                assert_eq!(recs.len(), 1, "byte {byte} bit {bit}");
                assert!(
                    matches!(end, Next::Bad(_)),
                    "byte {byte} bit {bit}: {end:?}"
                );
            }
        }
    }

    #[test]
    fn huge_length_is_refused_without_allocating() {
        let mut buf = Vec::new();
        encode_record(&mut buf, 1, b"abc");
        buf[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(read_all(&buf).1, Next::Bad(BadRecord::BadLength(u32::MAX)));
        buf[0..4].copy_from_slice(&(MAX_RECORD_LEN - 1).to_le_bytes());
        assert!(matches!(
            read_all(&buf).1,
            Next::Bad(BadRecord::ShortPayload { .. })
        ));
    }

    #[test]
    fn headers_round_trip_and_reject_damage() {
        let h = encode_header(FileKind::Segment, 42);
        assert_eq!(decode_header(FileKind::Segment, &h), Ok(42));
        assert_eq!(decode_header(FileKind::Snapshot, &h), Err(BadHeader::Magic));
        assert_eq!(
            decode_header(FileKind::Segment, &h[..31]),
            Err(BadHeader::Short)
        );
        let mut bad = h;
        bad[17] ^= 1;
        assert_eq!(
            decode_header(FileKind::Segment, &bad),
            Err(BadHeader::Checksum)
        );
        let mut v2 = h;
        v2[8] = 2;
        let crc = masked_crc(&v2[0..28]);
        v2[28..32].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            decode_header(FileKind::Segment, &v2),
            Err(BadHeader::Version(2))
        );
    }

    #[test]
    fn names() {
        assert_eq!(segment_name(7), "wal-00000000000000000007.log");
        assert_eq!(parse_name(&segment_name(7)), Some(DirEntry::Segment(7)));
        assert_eq!(
            parse_name(&snapshot_name(u64::MAX)),
            Some(DirEntry::Snapshot(u64::MAX))
        );
        assert_eq!(
            parse_name("snap-00000000000000000001.snap.tmp"),
            Some(DirEntry::Temporary)
        );
        for other in [
            "LOCK",
            "wal-1.log",
            "wal-0000000000000000000x.log",
            "notes.txt",
        ] {
            assert_eq!(parse_name(other), None, "{other}");
        }
    }
}
