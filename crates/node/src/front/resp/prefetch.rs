//! Looking ahead in a pipelined batch: the keys of the next requests are asked into the
//! CPU's cache before the first of them runs.
//!
//! The first lookup of a random key in a large store misses the cache (the hash table's
//! control bytes, its slot, then the block holding the key): in a pipelined SET, about a
//! fifth of the worker's time (docs/performance.md, "What limits it now"). Run one request
//! after another, each miss stalls its own request; issued together for the next
//! [`AHEAD`] requests, the misses overlap, and the requests then find their keys in the cache.
//! A request's key is taken to be its first argument, as for most data commands; for the
//! others the look-ahead costs a probe and changes nothing.

use wire::resp::{parse_command, Args, Limits};

use crate::driver::worker::Worker;

/// Requests looked at after the one about to run. The misses of this many keys overlap
/// (a CPU keeps 10–20 loads in flight); more would let the first lines leave the cache
/// before their requests run.
pub(super) const AHEAD: usize = 16;

/// Bytes of the buffer looked at: bounds the work of a look-ahead whatever the client sent
/// (a request cut by the window just ends it).
const WINDOW: usize = 16 * 1024;

/// Look-ahead state of one connection.
#[derive(Debug, Default)]
pub(super) struct Prefetch {
    /// Requests of the batch whose keys were prefetched and have not run yet.
    left: usize,
    /// The arguments of a request looked at ahead (reused).
    args: Args,
}

impl Prefetch {
    /// Called once a request was parsed from the buffer, before it runs, with `rest`, the
    /// bytes after it: when the requests looked at last time have all run, prefetches the
    /// keys of the next [`AHEAD`] complete ones. An unpipelined request (nothing after it)
    /// costs one comparison. The look-ahead stops at the first incomplete or malformed
    /// request and within [`WINDOW`] bytes, so it costs at most one parse per request of
    /// what the parser reads anyway.
    pub(super) fn after_request(&mut self, w: &Worker, rest: &[u8], limits: &Limits) {
        if self.left > 0 {
            self.left -= 1;
            return;
        }
        if rest.is_empty() {
            return;
        }
        let core = w.core();
        let store = core.shard().store();
        // Hash every key first, then probe them back to back: a probe stalls on its own
        // misses, but consecutive short probes overlap theirs (parsing between them would
        // fill the CPU's window and serialise them).
        let mut slots = [store::Slot::default(); AHEAD];
        let mut n = 0;
        self.look_ahead(rest, limits, |key| {
            if let Some(s) = slots.get_mut(n) {
                *s = store.locate(key);
                n += 1;
            }
        });
        for &slot in slots.iter().take(n) {
            store.prefetch(slot);
        }
    }

    /// Passes the key of each of the next [`AHEAD`] complete requests of `buf` to `each_key`
    /// and counts them as looked at.
    fn look_ahead(&mut self, buf: &[u8], limits: &Limits, mut each_key: impl FnMut(&[u8])) {
        let buf = &buf[..buf.len().min(WINDOW)];
        let mut at = 0;
        let mut seen = 0;
        while seen < AHEAD {
            let Some(rest) = buf.get(at..) else { break };
            match parse_command(rest, limits, &mut self.args) {
                Ok(Some(used)) => {
                    at += used;
                    seen += 1;
                    if let Some(key) = self.args.get(rest, 1) {
                        each_key(key);
                    }
                }
                // Incomplete or malformed: the request parser reports it in turn.
                _ => break,
            }
        }
        self.left = seen;
    }

    /// The buffer was drained or replaced: the next request starts a new look-ahead.
    pub(super) fn reset(&mut self) {
        self.left = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(args: &[&str]) -> String {
        let mut out = format!("*{}\r\n", args.len());
        for a in args {
            out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        out
    }

    fn keys(p: &mut Prefetch, buf: &str) -> Vec<String> {
        let mut seen = Vec::new();
        p.look_ahead(buf.as_bytes(), &Limits::default(), |k| {
            seen.push(String::from_utf8_lossy(k).into_owned())
        });
        seen
    }

    #[test]
    fn the_keys_of_the_complete_requests_ahead_are_prefetched_in_order() {
        let mut p = Prefetch::default();
        let buf = [
            request(&["SET", "a", "1"]),
            request(&["GET", "b"]),
            request(&["PING"]),
            request(&["HSET", "c", "f", "v"]),
            "*2\r\n$3\r\nGET\r\n$5\r\npart".to_string(),
        ]
        .concat();
        assert_eq!(keys(&mut p, &buf), ["a", "b", "c"]);
        // The next four requests need no look-ahead of their own.
        assert_eq!(p.left, 4);
    }

    #[test]
    fn nothing_after_a_request_is_nothing_to_look_at() {
        let mut p = Prefetch::default();
        assert!(keys(&mut p, "").is_empty());
        assert_eq!(p.left, 0);
        assert_eq!(keys(&mut p, &request(&["SET", "a", "1"])), ["a"]);
        assert_eq!(p.left, 1);
    }

    #[test]
    fn the_look_ahead_is_bounded_in_requests_and_bytes() {
        let mut p = Prefetch::default();
        let many: String = (0..100)
            .map(|i| request(&["GET", &format!("k{i}")]))
            .collect();
        assert_eq!(keys(&mut p, &many).len(), AHEAD);
        assert_eq!(p.left, AHEAD);
        // A request past the window is not parsed (a big value ends the look-ahead).
        let big = [
            request(&["GET", "x"]),
            request(&["SET", "y", &"v".repeat(WINDOW)]),
            request(&["GET", "z"]),
        ]
        .concat();
        let mut p = Prefetch::default();
        assert_eq!(keys(&mut p, &big), ["x"]);
        assert_eq!(p.left, 1);
    }

    #[test]
    fn malformed_input_ends_the_look_ahead_without_an_error() {
        let mut p = Prefetch::default();
        let buf = [
            request(&["GET", "a"]),
            "*x\r\n".to_string(),
            request(&["GET", "b"]),
        ]
        .concat();
        assert_eq!(keys(&mut p, &buf), ["a"]);
        assert_eq!(p.left, 1);
    }
}
