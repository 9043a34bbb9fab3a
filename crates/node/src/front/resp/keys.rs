//! Key-space commands: `KEYS`, `SCAN`, `RANDOMKEY`, `FLUSHDB`/`FLUSHALL`, `RENAME`,
//! `RENAMENX`, `COPY`, `TOUCH`, `OBJECT`, `MEMORY USAGE`, `EXPIRETIME`/`PEXPIRETIME`;
//! `SWAPDB` and `MOVE` are refused (one database).
//!
//! Listing covers the cluster (`listing`): every worker of this node and every other live
//! member of its tier lists the keys it holds a replica of, each at one worker
//! (`shard::keyspace`), in placement-hash order, and the pages are merged without
//! duplicates. A `SCAN` cursor is a position in that order (a 64-bit hash), the same on
//! every worker and node. Each page covers every key with a hash in `[cursor, next)` on
//! every worker of every node, so a key present for the whole scan is returned (at least
//! once — exactly once unless it moves between workers mid-scan). `RENAME`/`COPY` are in
//! `rename`.

use std::rc::Rc;

use wire::resp::{self, Version};

use super::commands::{arity_error, parse_i64, syntax_error, Cmd, Plan};
use super::keys_reply::KeyShape;
use super::listing::{cluster_page, Filter};
use super::reply::{err, ready, Shape};
use super::sets::run_ops;
use crate::driver::worker::Worker;
use crate::op::{Op, OpResult};

/// Most keys `KEYS` answers: beyond, it is an error naming `SCAN`.
pub(crate) const MAX_KEYS_REPLY: usize = 1_000_000;
/// Most keys one `SCAN` page visits per worker (`COUNT` is clamped to it).
pub(crate) const MAX_SCAN_COUNT: usize = 100_000;
/// Deletes per request when flushing.
const FLUSH_BATCH: usize = 1024;

/// A key-space command run by `server::ask_workers`.
#[derive(Debug)]
pub(crate) enum KeyJob {
    /// `KEYS pattern`.
    Keys(Vec<u8>),
    /// `SCAN cursor [MATCH p] [COUNT n] [TYPE t]`.
    Scan {
        /// Where the page starts.
        cursor: u64,
        /// The `MATCH` pattern.
        pattern: Option<Vec<u8>>,
        /// Keys visited per worker.
        count: usize,
        /// The `TYPE` filter (a Redis type name, lower case).
        ty: Option<String>,
    },
    /// `RANDOMKEY`.
    RandomKey,
    /// `FLUSHDB` / `FLUSHALL`.
    Flush,
    /// `RENAME` (`nx`: `RENAMENX`) or `COPY` (`copy`, with `replace`).
    Rename {
        /// The source.
        src: Vec<u8>,
        /// The destination.
        dest: Vec<u8>,
        /// `RENAMENX`, or `COPY` without `REPLACE`: only if `dest` is absent.
        nx: bool,
        /// `COPY`: keep the source.
        copy: bool,
    },
}

impl KeyJob {
    /// The keys the job names (for permissions); listing and flushing name none.
    pub(crate) fn keys(&self) -> Vec<&[u8]> {
        match self {
            KeyJob::Rename { src, dest, .. } => vec![&src[..], &dest[..]],
            _ => Vec::new(),
        }
    }

    /// True if the job writes.
    pub(crate) fn writes(&self) -> bool {
        matches!(self, KeyJob::Flush | KeyJob::Rename { .. })
    }
}

/// What a key-space command needs.
pub(super) enum KeyPlan<'a> {
    /// Run now.
    Plan(Plan<'a>),
    /// Ask the workers.
    Job(KeyJob),
}

/// A `SCAN`/`SSCAN` cursor: an unsigned decimal.
pub(super) fn parse_cursor(b: &[u8]) -> Result<u64, Vec<u8>> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| err("ERR invalid cursor"))
}

/// The plan of key-space command `name` (upper case), or `None` if it is not one.
pub(super) fn plan<'a>(name: &[u8], cmd: &Cmd<'a>) -> Option<KeyPlan<'a>> {
    let argc = cmd.len();
    let now = |r: Vec<u8>| Some(KeyPlan::Plan(Plan::Reply(r)));
    let job = |j: KeyJob| Some(KeyPlan::Job(j));
    let one =
        |shape: KeyShape, op: Op<&'a [u8]>| Some(KeyPlan::Plan(Plan::One(Shape::Keys(shape), op)));
    match name {
        b"KEYS" if argc == 2 => job(KeyJob::Keys(cmd.arg(1).to_vec())),
        b"SCAN" if argc >= 2 => match scan(cmd) {
            Ok(j) => job(j),
            Err(e) => now(e),
        },
        b"RANDOMKEY" if argc == 1 => job(KeyJob::RandomKey),
        b"FLUSHDB" | b"FLUSHALL" if argc <= 2 => {
            if argc == 2
                && !cmd.arg(1).eq_ignore_ascii_case(b"ASYNC")
                && !cmd.arg(1).eq_ignore_ascii_case(b"SYNC")
            {
                return now(syntax_error());
            }
            job(KeyJob::Flush)
        }
        b"RENAME" | b"RENAMENX" if argc == 3 => job(KeyJob::Rename {
            src: cmd.arg(1).to_vec(),
            dest: cmd.arg(2).to_vec(),
            nx: name == b"RENAMENX",
            copy: false,
        }),
        b"COPY" if argc >= 3 => {
            let mut replace = false;
            let mut i = 3;
            while i < argc {
                let opt = cmd.arg(i);
                if opt.eq_ignore_ascii_case(b"REPLACE") {
                    replace = true;
                    i += 1;
                } else if opt.eq_ignore_ascii_case(b"DB") && i + 1 < argc {
                    if parse_i64(cmd.arg(i + 1)) != Some(0) {
                        return now(err("ERR DB index is out of range"));
                    }
                    i += 2;
                } else {
                    return now(syntax_error());
                }
            }
            job(KeyJob::Rename {
                src: cmd.arg(1).to_vec(),
                dest: cmd.arg(2).to_vec(),
                nx: !replace,
                copy: true,
            })
        }
        b"TOUCH" if argc >= 2 => Some(KeyPlan::Plan(Plan::Ops(
            Shape::Sum,
            (1..argc).map(|i| Op::Exists { key: cmd.arg(i) }).collect(),
        ))),
        b"EXPIRETIME" | b"PEXPIRETIME" if argc == 2 => one(
            KeyShape::ExpireTime(name == b"EXPIRETIME"),
            Op::ExpireTime { key: cmd.arg(1) },
        ),
        b"OBJECT" if argc >= 2 => object(cmd),
        b"MEMORY" if argc >= 2 => {
            let sub = cmd.arg(1);
            if sub.eq_ignore_ascii_case(b"USAGE") && (argc == 3 || argc == 5) {
                one(
                    KeyShape::MemoryUsage(cmd.arg(2).len()),
                    Op::Get { key: cmd.arg(2) },
                )
            } else {
                now(err(&format!(
                    "ERR unknown subcommand or wrong number of arguments for '{}'. Try MEMORY HELP.",
                    String::from_utf8_lossy(sub)
                )))
            }
        }
        b"SWAPDB" | b"MOVE" => now(err(&format!(
            "ERR {} is not supported: latticekv has one database (0)",
            String::from_utf8_lossy(name)
        ))),
        b"KEYS" | b"SCAN" | b"RANDOMKEY" | b"FLUSHDB" | b"FLUSHALL" | b"RENAME" | b"RENAMENX"
        | b"COPY" | b"TOUCH" | b"EXPIRETIME" | b"PEXPIRETIME" | b"OBJECT" | b"MEMORY" => {
            now(arity_error(cmd))
        }
        _ => None,
    }
}

fn object<'a>(cmd: &Cmd<'a>) -> Option<KeyPlan<'a>> {
    let sub = cmd.arg(1);
    let reply = |r| Some(KeyPlan::Plan(Plan::Reply(r)));
    let known = [&b"ENCODING"[..], b"REFCOUNT", b"IDLETIME", b"FREQ"]
        .iter()
        .any(|k| sub.eq_ignore_ascii_case(k));
    if cmd.len() != 3 && known {
        return reply(err(&format!(
            "ERR wrong number of arguments for 'object|{}' command",
            String::from_utf8_lossy(sub).to_lowercase()
        )));
    }
    let key = cmd.arg(2);
    let if_exists = |n: i64| {
        Some(KeyPlan::Plan(Plan::One(
            Shape::Keys(KeyShape::IfExists(n)),
            Op::Exists { key },
        )))
    };
    if sub.eq_ignore_ascii_case(b"ENCODING") {
        Some(KeyPlan::Plan(Plan::One(
            Shape::Keys(KeyShape::Encoding),
            Op::Get { key },
        )))
    } else if sub.eq_ignore_ascii_case(b"REFCOUNT") {
        // Values are not shared between keys: 1.
        if_exists(1)
    } else if sub.eq_ignore_ascii_case(b"IDLETIME") {
        // Access times are not tracked per key: 0 seconds.
        if_exists(0)
    } else if sub.eq_ignore_ascii_case(b"FREQ") {
        reply(err(
            "ERR An LFU maxmemory policy is not selected, access frequency not tracked. \
             Please note that when switching between policies at runtime LRU and LFU data \
             will take some time to adjust.",
        ))
    } else {
        reply(err(&format!(
            "ERR unknown subcommand '{}'. Try OBJECT HELP.",
            String::from_utf8_lossy(sub)
        )))
    }
}

fn scan(cmd: &Cmd<'_>) -> Result<KeyJob, Vec<u8>> {
    let cursor = parse_cursor(cmd.arg(1))?;
    let (mut pattern, mut count, mut ty) = (None, 10usize, None);
    let mut i = 2;
    while i < cmd.len() {
        let opt = cmd.arg(i);
        if i + 1 >= cmd.len() {
            return Err(syntax_error());
        }
        let val = cmd.arg(i + 1);
        if opt.eq_ignore_ascii_case(b"MATCH") {
            pattern = Some(val.to_vec());
        } else if opt.eq_ignore_ascii_case(b"COUNT") {
            count = match parse_i64(val) {
                Some(c) if c >= 1 => (c as usize).min(MAX_SCAN_COUNT),
                Some(_) => return Err(syntax_error()),
                None => return Err(err("ERR value is not an integer or out of range")),
            };
        } else if opt.eq_ignore_ascii_case(b"TYPE") {
            ty = Some(String::from_utf8_lossy(val).to_lowercase());
        } else {
            return Err(syntax_error());
        }
        i += 2;
    }
    if pattern.as_deref() == Some(b"*") {
        pattern = None;
    }
    Ok(KeyJob::Scan {
        cursor,
        pattern,
        count,
        ty,
    })
}

/// Keys visited per worker in each page of a whole listing (`KEYS`, `DBSIZE`, `FLUSHDB`).
const LIST_PAGE: usize = 10_000;

/// A whole listing of the cluster, page by page.
struct Listing<'a> {
    w: &'a Rc<Worker>,
    filter: Filter,
    /// Where the next page starts; `None` once exhausted.
    from: Option<u64>,
}

impl<'a> Listing<'a> {
    fn new(w: &'a Rc<Worker>, filter: Filter) -> Self {
        Listing {
            w,
            filter,
            from: Some(0),
        }
    }

    /// The next page's keys (`None`: done), or an error reply.
    async fn next(&mut self) -> Result<Option<Vec<(u64, Vec<u8>)>>, Vec<u8>> {
        let Some(from) = self.from else {
            return Ok(None);
        };
        let (keys, next) = cluster_page(self.w, from, LIST_PAGE, &self.filter)
            .await
            .map_err(|e| err(&e))?;
        self.from = next;
        Ok(Some(keys))
    }
}

/// `KEYS`: every matching key, within [`MAX_KEYS_REPLY`] keys and the node's reply limit.
async fn keys(w: &Rc<Worker>, filter: Filter) -> Result<Vec<Vec<u8>>, Vec<u8>> {
    let max_bytes = w.shared.config.limits.max_reply_bytes.max(1);
    let (mut all, mut bytes) = (Vec::new(), 0usize);
    let mut listing = Listing::new(w, filter);
    while let Some(page) = listing.next().await? {
        for (_, k) in page {
            bytes += k.len() + 16;
            all.push(k);
            if all.len() > MAX_KEYS_REPLY {
                return Err(err(&format!(
                    "ERR KEYS would answer more than {MAX_KEYS_REPLY} keys: use SCAN"
                )));
            }
            if bytes > max_bytes {
                return Err(err(&format!(
                    "ERR KEYS would answer more than the {max_bytes}-byte reply limit: use SCAN"
                )));
            }
        }
    }
    Ok(all)
}

/// `FLUSHDB`: deletes every listed key, in batches, each at its worker.
async fn flush(w: &Rc<Worker>) -> Result<(), Vec<u8>> {
    let mut listing = Listing::new(w, Filter::default());
    while let Some(page) = listing.next().await? {
        for chunk in page.chunks(FLUSH_BATCH) {
            let ops = chunk
                .iter()
                .map(|(_, k)| Op::Delete { key: &k[..] })
                .collect();
            let results = run_ops(w, ops).await;
            if let Some(OpResult::Error(e)) =
                results.iter().find(|r| matches!(r, OpResult::Error(_)))
            {
                return Err(err(&e.resp_message()));
            }
        }
    }
    Ok(())
}

/// `DBSIZE` of the cluster: the keys a whole listing finds (one node: its workers' counts).
pub(crate) async fn dbsize(w: &Rc<Worker>) -> Vec<u8> {
    if super::listing::same_tier_members(w).is_empty() {
        let (keys, _) = super::info::keyspace(w).await;
        return ready(|o| resp::integer(o, keys as i64));
    }
    let mut listing = Listing::new(w, Filter::default());
    let mut count = 0i64;
    loop {
        match listing.next().await {
            Ok(Some(page)) => count += page.len() as i64,
            Ok(None) => return ready(|o| resp::integer(o, count)),
            Err(e) => return e,
        }
    }
}

/// Runs a key-space job.
pub(crate) async fn run_job(w: &Rc<Worker>, job: KeyJob, v: Version) -> Vec<u8> {
    match job {
        KeyJob::Keys(pattern) => {
            let filter = Filter {
                pattern: (pattern != b"*").then_some(pattern),
                ty: None,
            };
            match keys(w, filter).await {
                Ok(all) => ready(|o| {
                    resp::array_header(o, all.len());
                    all.iter().for_each(|k| resp::bulk(o, k));
                }),
                Err(e) => e,
            }
        }
        KeyJob::Scan {
            cursor,
            pattern,
            count,
            ty,
        } => {
            let filter = Filter { pattern, ty };
            let (keys, next) = match cluster_page(w, cursor, count, &filter).await {
                Ok(p) => p,
                Err(e) => return err(&e),
            };
            let next = next.unwrap_or(0).to_string();
            ready(|o| {
                resp::array_header(o, 2);
                resp::bulk(o, next.as_bytes());
                resp::array_header(o, keys.len());
                keys.iter().for_each(|(_, k)| resp::bulk(o, k));
            })
        }
        KeyJob::RandomKey => {
            let all = Filter::default();
            let mut keys = match cluster_page(w, fastrand::u64(..), 1, &all).await {
                Ok(p) => p.0,
                Err(e) => return err(&e),
            };
            if keys.is_empty() {
                keys = match cluster_page(w, 0, 1, &all).await {
                    Ok(p) => p.0,
                    Err(e) => return err(&e),
                };
            }
            ready(|o| match keys.first() {
                Some((_, k)) => resp::bulk(o, k),
                None => resp::null(o, v),
            })
        }
        KeyJob::Flush => match flush(w).await {
            Ok(()) => ready(|o| resp::simple(o, "OK")),
            Err(e) => e,
        },
        KeyJob::Rename {
            src,
            dest,
            nx,
            copy,
        } => super::rename::rename(w, &src, &dest, nx, copy).await,
    }
}
