//! Lua scripts (RESP `EVAL`): the script cache and the Lua engine, without the commands a
//! script calls.
//!
//! A script runs in its **worker's Lua 5.1 state** (the version Redis embeds; one state
//! per worker thread, reused, each script compiled once) on the worker that holds its keys,
//! inside one op ([`crate::op::Op::Script`]), so nothing else runs on that worker until it
//! ends. The engine (`eval`) knows nothing of the store: every `redis.call` goes to a
//! `Host`, which the RESP front end implements by planning the command and executing its
//! ops on the worker (`front::resp::scripting`).
//!
//! What a script can reach: the base library without `dofile`, `loadfile`, `print`,
//! `setfenv`, `getfenv` and `newproxy`, and `string`, `table`, `math`, `bit`, `cjson`,
//! `cmsgpack`, `struct` — no `io`, `os`, `package`, `debug`, no `require`. Globals and
//! libraries are read-only and reading a missing global is an error, as in Redis 7, so
//! nothing a run does reaches the next one. Each run is bounded:
//! an instruction hook stops it past its time budget (`limits.script_time_limit_ms`) or on
//! `SCRIPT KILL`, checked every [`HOOK_EVERY`] instructions (a long call into a C library
//! function such as a pattern match is not interrupted), and its Lua heap is limited
//! (`limits.script_memory_bytes`).
//!
//! # Layout
//! - this module: [`ScriptCache`] (scripts by SHA1, bounded), [`sha1_hex`];
//! - `lua`: running one script (`eval`, `Host`, `Budget`), its errors;
//! - `engine`: the worker's Lua state, its compiled scripts, the read-only globals;
//! - `libs`: `bit` and `cjson`; `msgpack`: `cmsgpack`; `structs`: `struct`;
//! - `runs`: the scripts running on the node ([`Runs`], `SCRIPT KILL`);
//! - `convert`: Lua values to and from RESP replies, as Redis converts them.

mod convert;
mod engine;
mod libs;
mod lua;
mod msgpack;
mod runs;
mod structs;

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use bytes::Bytes;
use sha1::{Digest, Sha1};

pub use engine::{ENGINE_MEMORY, FUNCTIONS_PER_WORKER};
pub(crate) use lua::{declares_no_writes, eval, Budget, Call, Host};
pub use runs::{KillOutcome, RunFlags, RunGuard, Runs};

/// Instructions between two checks of a script's running time.
pub const HOOK_EVERY: u32 = 10_000;

/// Most bytes of script source a node caches (`SCRIPT LOAD`, `EVAL`): past it the least
/// recently used scripts are dropped, and an `EVALSHA` of one answers `NOSCRIPT` (clients
/// such as redis-py then send it again with `EVAL` or `SCRIPT LOAD`).
pub const CACHE_BYTES: usize = 16 << 20;

/// Most scripts a node caches, whatever their size: the byte bound alone would let many
/// tiny scripts grow the map (each entry costs far more than its source).
pub const CACHE_SCRIPTS: usize = 100_000;

/// The SHA1 of `body` in lower-case hex, as Redis names scripts.
pub fn sha1_hex(body: &[u8]) -> String {
    let digest = Sha1::digest(body);
    let mut out = String::with_capacity(40);
    for b in digest {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 15)]));
    }
    out
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// A node's scripts by SHA1 (lower-case hex), bounded by [`CACHE_BYTES`] of source and
/// [`CACHE_SCRIPTS`] entries.
#[derive(Debug, Default)]
pub struct ScriptCache {
    inner: Mutex<Cache>,
    /// The scripts running now on the node's workers (`SCRIPT KILL`).
    pub runs: std::sync::Arc<Runs>,
}

#[derive(Debug, Default)]
struct Cache {
    scripts: HashMap<String, (Bytes, u64)>,
    /// The scripts by last use, least recent first (what is dropped first).
    by_use: BTreeMap<u64, String>,
    bytes: usize,
    /// Bumped by every use: a script's last use.
    clock: u64,
}

impl Cache {
    /// Marks `sha` (cached) as used now; its source.
    fn touch(&mut self, sha: &str) -> Option<Bytes> {
        self.clock += 1;
        let now = self.clock;
        let entry = self.scripts.get_mut(sha)?;
        let before = std::mem::replace(&mut entry.1, now);
        let body = entry.0.clone();
        if let Some(name) = self.by_use.remove(&before) {
            self.by_use.insert(now, name);
        }
        Some(body)
    }
}

impl ScriptCache {
    /// Adds `body` (if it is not too large to cache) and returns its SHA1.
    pub fn load(&self, body: Bytes) -> String {
        let sha = sha1_hex(&body);
        let mut c = self.lock();
        if c.touch(&sha).is_some() || body.len() > CACHE_BYTES {
            return sha;
        }
        while c.bytes + body.len() > CACHE_BYTES || c.scripts.len() >= CACHE_SCRIPTS {
            let Some((_, oldest)) = c.by_use.pop_first() else {
                break;
            };
            if let Some((b, _)) = c.scripts.remove(&oldest) {
                c.bytes -= b.len();
            }
        }
        c.clock += 1;
        let now = c.clock;
        c.bytes += body.len();
        c.by_use.insert(now, sha.clone());
        c.scripts.insert(sha.clone(), (body, now));
        sha
    }

    /// The script named `sha` (any case), if cached.
    pub fn get(&self, sha: &[u8]) -> Option<Bytes> {
        let sha = std::str::from_utf8(sha).ok()?.to_ascii_lowercase();
        self.lock().touch(&sha)
    }

    /// True if `sha` is cached (`SCRIPT EXISTS`).
    pub fn contains(&self, sha: &[u8]) -> bool {
        std::str::from_utf8(sha)
            .is_ok_and(|s| self.lock().scripts.contains_key(&s.to_ascii_lowercase()))
    }

    /// Drops every script (`SCRIPT FLUSH`).
    pub fn flush(&self) {
        let mut c = self.lock();
        c.scripts.clear();
        c.by_use.clear();
        c.bytes = 0;
    }

    /// Cached scripts and their bytes of source.
    pub fn size(&self) -> (usize, usize) {
        let c = self.lock();
        (c.scripts.len(), c.bytes)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        // A panic while holding the lock leaves a consistent map: use it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_names_scripts_as_redis_does() {
        assert_eq!(sha1_hex(b""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(
            sha1_hex(b"return 1"),
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
        );
    }

    #[test]
    fn the_cache_is_bounded_and_drops_the_least_recently_used() {
        let cache = ScriptCache::default();
        let big = |c: u8| Bytes::from(vec![c; CACHE_BYTES / 3]);
        let a = cache.load(big(b'a'));
        let b = cache.load(big(b'b'));
        let c = cache.load(big(b'c'));
        assert!(
            cache.get(a.as_bytes()).is_some(),
            "a is now the most recent"
        );
        let d = cache.load(big(b'd'));
        assert!(cache.contains(a.as_bytes()));
        assert!(
            !cache.contains(b.as_bytes()),
            "b was the least recently used"
        );
        assert!(cache.contains(c.as_bytes()) && cache.contains(d.as_bytes()));
        assert!(cache.size().1 <= CACHE_BYTES);
        assert!(cache.contains(a.to_uppercase().as_bytes()), "any case");
        cache.flush();
        assert_eq!(cache.size(), (0, 0));
        // Too large to cache: named, not kept.
        let huge = cache.load(Bytes::from(vec![b'x'; CACHE_BYTES + 1]));
        assert!(!cache.contains(huge.as_bytes()));
    }

    #[test]
    fn many_tiny_scripts_are_bounded_by_count() {
        let cache = ScriptCache::default();
        let first = cache.load(Bytes::from_static(b"return 0"));
        for i in 1..=CACHE_SCRIPTS {
            cache.load(Bytes::from(format!("return {i}")));
        }
        assert_eq!(cache.size().0, CACHE_SCRIPTS);
        assert!(
            !cache.contains(first.as_bytes()),
            "the least recent went first"
        );
        let c = cache.lock();
        assert_eq!(c.by_use.len(), c.scripts.len());
    }
}
