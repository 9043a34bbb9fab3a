//! Candidates for the hot keys of one period: the keys whose count-min estimate rose
//! clearly above the sketch's noise, at most `capacity` of them.
//!
//! The period's table only decides *which* keys may be hot; their counts are estimated
//! again from the window's sketch when the window closes. So a candidate's count here is
//! its estimate at its last access, used only to choose whom a new candidate replaces.

use hashbrown::HashTable;

/// Longest key kept as a hot-key candidate, bytes. Longer keys are counted in every
/// estimate but never reported as hot (a truncated key would name a key that does not
/// exist; the reply to a status request stays bounded).
pub const MAX_HOT_KEY_BYTES: usize = 256;

/// A hot-key candidate.
#[derive(Clone, Debug)]
pub(crate) struct Candidate {
    /// The key's sketch hash.
    pub(crate) hash: u64,
    /// Its estimate at its last access.
    pub(crate) count: u32,
    /// The key.
    pub(crate) key: Vec<u8>,
}

/// The candidates of one period.
pub(crate) struct Candidates {
    entries: Vec<Candidate>,
    /// Index of `entries` by hash.
    index: HashTable<u32>,
    capacity: usize,
    /// A lower bound of the smallest count in `entries` once full (counts only grow, so a
    /// bound found by a scan stays one).
    floor: u32,
}

impl Candidates {
    pub(crate) fn new(capacity: usize) -> Candidates {
        Candidates {
            entries: Vec::new(),
            index: HashTable::with_capacity(capacity),
            capacity: capacity.max(1),
            floor: 0,
        }
    }

    /// An access of `key` (hash `hash`), whose period estimate is now `count`: updates it if
    /// it is a candidate, else makes it one if there is room, or if `count` exceeds the
    /// smallest candidate's by more than `margin` (the sketch's noise: replacing on smaller
    /// differences would churn among keys the sketch cannot tell apart).
    #[inline]
    pub(crate) fn offer(&mut self, hash: u64, key: &[u8], count: u32, margin: u32) {
        let entries = &mut self.entries;
        if let Some(&i) = self.index.find(hash, |&i| {
            entries[i as usize].hash == hash && entries[i as usize].key == key
        }) {
            entries[i as usize].count = count;
            return;
        }
        if key.len() > MAX_HOT_KEY_BYTES {
            return;
        }
        if entries.len() < self.capacity {
            if entries.capacity() == 0 {
                entries.reserve_exact(self.capacity);
            }
            let i = entries.len() as u32;
            entries.push(Candidate {
                hash,
                count,
                key: key.to_vec(),
            });
            self.index
                .insert_unique(hash, i, |&j| entries[j as usize].hash);
            return;
        }
        if count <= self.floor.saturating_add(margin) {
            return;
        }
        // Full: find the smallest candidate.
        let (min_i, min) = entries
            .iter()
            .enumerate()
            .map(|(i, c)| (i, c.count))
            .min_by_key(|&(_, c)| c)
            .unwrap_or((0, 0));
        self.floor = min;
        if count <= min.saturating_add(margin) {
            return;
        }
        let old = entries[min_i].hash;
        if let Ok(e) = self.index.find_entry(old, |&j| j as usize == min_i) {
            e.remove();
        }
        let slot = &mut entries[min_i];
        slot.hash = hash;
        slot.count = count;
        slot.key.clear();
        slot.key.reserve_exact(key.len());
        slot.key.extend_from_slice(key);
        self.index
            .insert_unique(hash, min_i as u32, |&j| entries[j as usize].hash);
    }

    /// The candidates, leaving the table empty.
    pub(crate) fn take(&mut self) -> Vec<Candidate> {
        self.index.clear();
        self.floor = 0;
        std::mem::take(&mut self.entries)
    }

    /// Bytes held (as [`candidate_bytes`] counts them).
    #[cfg(test)]
    pub(crate) fn held_bytes(&self) -> usize {
        self.entries
            .iter()
            .map(|c| std::mem::size_of::<Candidate>() + c.key.capacity() + 16)
            .sum()
    }

    /// Number of candidates.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Bytes the candidates of one period may hold at most (entries, their keys, the index).
pub(crate) const fn candidate_bytes(capacity: usize) -> usize {
    capacity * (std::mem::size_of::<Candidate>() + MAX_HOT_KEY_BYTES + 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_admits_only_a_clearly_larger_count() {
        let mut c = Candidates::new(2);
        c.offer(1, b"a", 5, 2);
        c.offer(2, b"b", 3, 2);
        c.offer(3, b"c", 4, 2);
        assert_eq!(c.len(), 2, "4 is within the margin of the smallest (3)");
        c.offer(3, b"c", 6, 2);
        let keys: Vec<Vec<u8>> = c.take().into_iter().map(|c| c.key).collect();
        assert_eq!(keys, vec![b"a".to_vec(), b"c".to_vec()], "c replaced b");
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn a_candidate_is_updated_in_place_and_long_keys_are_never_kept() {
        let mut c = Candidates::new(4);
        c.offer(7, b"k", 1, 0);
        c.offer(7, b"k", 9, 0);
        let long = vec![b'x'; MAX_HOT_KEY_BYTES + 1];
        c.offer(8, &long, 100, 0);
        let all = c.take();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].count, 9);
    }
}
