//! Helpers shared by the serverless TCC tests (`faas_tcc.rs`, one host; `faas_mtcc.rs`,
//! several): the data plane under test, the metadata a test executor passes along (the
//! version of each key it read), and the bare-store baseline's commits with metadata
//! embedded in LWW payloads.

use cache::checker::{embed, extract, ReadMeta};
use cache::versionset::refs_of;
use cache::{CacheId, CausalVersion, Executor, Key, MultiKeyCausal};
use faas::pb;
use std::collections::BTreeMap;

/// Which data plane the host runs, and how the workload writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// HydroCache; writers put `MultiKeyCausal` versions; metadata from `KeyRead::meta`.
    Cache,
    /// The bare store; writers and sinks put LWW values with metadata embedded.
    Direct,
}

/// Encodes a function's view: `(key, meta)` pairs, length-prefixed.
pub fn encode(out: &mut Vec<u8>, key: &[u8], meta: &ReadMeta) {
    let m = embed(meta, &[]);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(&(m.len() as u32).to_le_bytes());
    out.extend_from_slice(&m);
}

pub fn decode(mut b: &[u8]) -> Vec<(Key, ReadMeta)> {
    let mut out = Vec::new();
    let take = |b: &mut &[u8]| {
        let n = u32::from_le_bytes(b[..4].try_into().unwrap()) as usize;
        let v = b[4..4 + n].to_vec();
        *b = &b[4 + n..];
        v
    };
    while !b.is_empty() {
        let key = take(&mut b);
        let meta = take(&mut b);
        let (meta, _) = extract(&meta).unwrap();
        out.push((Key::from(key), meta));
    }
    out
}

/// What a function saw of a key read.
pub fn meta_of(mode: Mode, k: &pb::KeyRead) -> ReadMeta {
    match mode {
        Mode::Cache if k.meta.is_empty() => ReadMeta::default(),
        Mode::Cache => extract(&k.meta).unwrap().0,
        Mode::Direct => {
            let mut meta = ReadMeta::default();
            for v in &k.values {
                if let Ok((m, _)) = extract(v) {
                    meta.join(&m);
                }
            }
            meta
        }
    }
}

/// A full version with `meta` (for a writer's commit from embedded metadata).
pub fn version_of(meta: &ReadMeta) -> MultiKeyCausal {
    MultiKeyCausal::new(CausalVersion {
        clock: meta.clock.clone(),
        deps: meta.deps.clone(),
        value: Box::from(&b"?"[..]),
    })
}

/// Commits `writes` over `reads` with `writer`, as the bare-store baseline's writers do:
/// the versions' metadata, to embed in LWW payloads.
pub fn commit_embedded(
    writer: &mut Executor,
    reads: &BTreeMap<Key, ReadMeta>,
    writes: &[Key],
    payload: &[u8],
) -> Vec<(Key, Vec<u8>)> {
    let read_versions: BTreeMap<Key, MultiKeyCausal> = reads
        .iter()
        .filter(|(_, m)| !m.clock.is_empty())
        .map(|(k, m)| (k.clone(), version_of(m)))
        .collect();
    let refs = refs_of(&read_versions, CacheId(0));
    let writes = writes
        .iter()
        .map(|k| (k.clone(), Box::from(payload)))
        .collect();
    writer
        .commit(writes, &refs, &read_versions)
        .unwrap()
        .into_iter()
        .map(|(k, v)| {
            let bytes = embed(&ReadMeta::of(&v), payload);
            (k, bytes)
        })
        .collect()
}

/// An HLC reading comparable with the store's (`ms << 16 | logical`).
pub fn hlc_now() -> u64 {
    let us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    ((us / 1000) << 16) | (us % 1000)
}
