//! Recovery from damaged logs, through the public API: a torn tail, a corrupted last
//! record, corruption in a middle segment, a crash image with preallocated space. In each
//! case the log recovers to the last good record and then serves appends.

mod common;

use std::fs;
use std::path::Path;

use common::*;
use store::wal::{FsyncPolicy, Lsn, WalOptions};

fn options() -> WalOptions {
    WalOptions {
        fsync: FsyncPolicy::Never,
        segment_bytes: 1 << 20,
        ..WalOptions::default()
    }
}

/// Writes records 1..=n to a fresh log in `dir` and closes it.
fn write_log(dir: &Path, n: u64, options: WalOptions) {
    rt().block_on(async {
        let (wal, ..) = open(dir, options);
        for i in 1..=n {
            wal.append(payload(i)).await.unwrap();
        }
        wal.close().await.unwrap();
    });
}

/// Opens the damaged log in `dir`, expects records 1..=good, appends one record, and
/// checks that a reopen sees 1..=good and the new one.
fn recovers_to(dir: &Path, good: u64) -> store::wal::Recovery {
    let (wal, rec, log) = open(dir, options());
    let expected: Records = (1..=good).map(|i| (i, payload(i).to_vec())).collect();
    assert_eq!(log, expected, "{rec:?}");
    assert_eq!(rec.last_lsn, good);
    rt().block_on(async {
        let lsn = wal
            .append(bytes::Bytes::from_static(b"after"))
            .await
            .unwrap();
        assert_eq!(lsn, good + 1);
        wal.wait_durable(lsn).await.unwrap();
        wal.close().await.unwrap();
    });
    let (again, log) = read_back(dir);
    assert_eq!(again.corruption, None, "{again:?}");
    assert_eq!(log.len() as u64, good + 1);
    assert_eq!(log.last().unwrap(), &(good + 1, b"after".to_vec()));
    rec
}

#[test]
fn torn_tail_at_every_cut_recovers_to_the_last_good_record() {
    let pristine = tempfile::tempdir().unwrap();
    write_log(pristine.path(), 20, options());
    let seg = &segments(pristine.path())[0];
    let lens: Vec<usize> = (1..=20).map(|i| payload(i).len()).collect();
    let (start, end) = record_spans(&lens)[19];
    assert_eq!(fs::metadata(seg).unwrap().len(), end);
    for cut in start + 1..end {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(pristine.path(), dir.path());
        let f = fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join(seg.file_name().unwrap()))
            .unwrap();
        f.set_len(cut).unwrap();
        let rec = recovers_to(dir.path(), 19);
        let c = rec.corruption.expect("torn record reported");
        assert_eq!(c.offset, start, "cut {cut}");
        assert_eq!(rec.bytes_discarded, cut - start, "cut {cut}");
    }
}

#[test]
fn corrupted_byte_in_the_last_record_recovers_to_the_one_before() {
    let pristine = tempfile::tempdir().unwrap();
    write_log(pristine.path(), 20, options());
    let seg = &segments(pristine.path())[0];
    let lens: Vec<usize> = (1..=20).map(|i| payload(i).len()).collect();
    let (start, end) = record_spans(&lens)[19];
    for pos in start..end {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(pristine.path(), dir.path());
        let path = dir.path().join(seg.file_name().unwrap());
        let mut bytes = fs::read(&path).unwrap();
        bytes[pos as usize] ^= 0x40;
        fs::write(&path, bytes).unwrap();
        let rec = recovers_to(dir.path(), 19);
        assert_eq!(rec.corruption.map(|c| c.offset), Some(start), "byte {pos}");
    }
}

#[test]
fn corruption_in_a_middle_segment_ends_the_log_there() {
    let dir = tempfile::tempdir().unwrap();
    let small = WalOptions {
        segment_bytes: 1024,
        ..options()
    };
    write_log(dir.path(), 200, small.clone());
    let segs = segments(dir.path());
    assert!(segs.len() >= 6, "{segs:?}");
    // Damage the third record of the third segment.
    let (_, before) = read_back(dir.path());
    let base: Lsn = segs[2]
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .trim_start_matches("wal-")
        .trim_end_matches(".log")
        .parse()
        .unwrap();
    let lens: Vec<usize> = before
        .iter()
        .filter(|(lsn, _)| *lsn >= base)
        .map(|(_, p)| p.len())
        .collect();
    let (start, _) = record_spans(&lens)[2];
    let mut bytes = fs::read(&segs[2]).unwrap();
    bytes[start as usize + 20] ^= 1;
    fs::write(&segs[2], bytes).unwrap();

    let good = base + 1;
    let rec = recovers_to(dir.path(), good);
    let c = rec.corruption.expect("corruption reported");
    assert_eq!(c.segment, segs[2]);
    assert_eq!(c.offset, start);
    assert_eq!(rec.segments_discarded, segs.len() - 3);
    assert!(rec.bytes_discarded > 0);
    // Segments 1 and 2, the cut segment 3, and the one started after recovery.
    assert_eq!(segments(dir.path()).len(), 4);
}

#[test]
fn crash_image_with_preallocated_space_recovers_everything_durable() {
    let live = tempfile::tempdir().unwrap();
    let image = tempfile::tempdir().unwrap();
    let prealloc = WalOptions {
        fsync: FsyncPolicy::Always,
        segment_bytes: 64 << 10,
        preallocate: true,
        ..WalOptions::default()
    };
    rt().block_on(async {
        let (wal, ..) = open(live.path(), prealloc.clone());
        for i in 1..=50 {
            wal.append(payload(i)).await.unwrap();
        }
        wal.wait_durable(50).await.unwrap();
        // The files as a crash would leave them: the segment still at its preallocated
        // size, zeros after the last record.
        copy_dir(live.path(), image.path());
        wal.close().await.unwrap();
    });
    let seg = &segments(image.path())[0];
    assert_eq!(fs::metadata(seg).unwrap().len(), 64 << 10);
    let (wal, rec, log) = open(image.path(), prealloc);
    assert_eq!(log.len(), 50);
    assert_eq!(rec.corruption, None);
    assert_eq!(rec.bytes_discarded, 0);
    drop(wal);
}
