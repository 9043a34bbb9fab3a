//! Property: whatever records are appended and wherever a crash cuts the log (a truncation
//! anywhere, or a damaged byte anywhere), recovery returns exactly the records wholly
//! before the cut, in order, and the log then serves appends after them.

mod common;

use std::fs;

use common::*;
use proptest::prelude::*;
use store::wal::{FsyncPolicy, Lsn, WalOptions};

/// How a crash damages the log at the chosen position.
#[derive(Clone, Copy, Debug)]
enum Damage {
    /// The file ends there and later segments are gone (unwritten tail).
    Truncate,
    /// One byte there is flipped (a torn or corrupt sector); everything else intact.
    Flip(u8),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![Just(Damage::Truncate), (1u8..=255).prop_map(Damage::Flip)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn recovered_prefix_is_the_appended_prefix(
        lens in prop::collection::vec(0usize..300, 1..120),
        segment_bytes in 256u64..4096,
        preallocate in any::<bool>(),
        cut_at in any::<prop::sample::Index>(),
        damage in damage(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let options = WalOptions {
            fsync: FsyncPolicy::Never,
            segment_bytes,
            preallocate,
            ..WalOptions::default()
        };
        let payloads: Vec<Vec<u8>> = lens
            .iter()
            .enumerate()
            .map(|(i, len)| (0..*len).map(|j| (i * 31 + j) as u8).collect())
            .collect();
        rt().block_on(async {
            let (wal, ..) = open(dir.path(), options.clone());
            for p in &payloads {
                wal.append(bytes::Bytes::from(p.clone())).await.unwrap();
            }
            wal.close().await.unwrap();
        });

        // Where each record lies: (segment index, start, end).
        let segs = segments(dir.path());
        let mut spans = Vec::new();
        let mut lsn: Lsn = 1;
        for (s, path) in segs.iter().enumerate() {
            let len = fs::metadata(path).unwrap().len();
            let mut off = store::wal::layout::SEGMENT_HEADER_LEN as u64;
            while off < len {
                let end = off + (store::wal::layout::RECORD_HEADER_LEN + payloads[lsn as usize - 1].len()) as u64;
                spans.push((s, off, end));
                off = end;
                lsn += 1;
            }
            prop_assert_eq!(off, len);
        }
        prop_assert_eq!(spans.len(), payloads.len());

        // A position in the concatenated records (headers of segments excluded).
        let total: u64 = spans.iter().map(|(_, a, b)| b - a).sum();
        let mut pos = cut_at.index(total as usize) as u64;
        let (mut seg, mut off) = (0, 0);
        for (s, a, b) in &spans {
            if pos < b - a {
                seg = *s;
                off = a + pos;
                break;
            }
            pos -= b - a;
        }
        let kept = spans.iter().filter(|(s, _, b)| *s < seg || (*s == seg && *b <= off)).count();
        match damage {
            Damage::Truncate => {
                let f = fs::OpenOptions::new().write(true).open(&segs[seg]).unwrap();
                f.set_len(off).unwrap();
                for later in &segs[seg + 1..] {
                    fs::remove_file(later).unwrap();
                }
            }
            Damage::Flip(mask) => {
                let mut bytes = fs::read(&segs[seg]).unwrap();
                bytes[off as usize] ^= mask;
                fs::write(&segs[seg], bytes).unwrap();
            }
        }

        let (wal, rec, log) = open(dir.path(), options.clone());
        prop_assert_eq!(log.len(), kept, "{:?}", rec);
        for (i, (lsn, p)) in log.iter().enumerate() {
            prop_assert_eq!(*lsn, i as u64 + 1);
            prop_assert_eq!(p, &payloads[i]);
        }
        prop_assert_eq!(rec.last_lsn, kept as u64);
        rt().block_on(async {
            let lsn = wal.append(bytes::Bytes::from_static(b"next")).await.unwrap();
            assert_eq!(lsn, kept as u64 + 1);
            wal.close().await.unwrap();
        });
        let (again, log) = read_back(dir.path());
        prop_assert_eq!(again.corruption, None);
        prop_assert_eq!(log.len(), kept + 1);
    }
}
