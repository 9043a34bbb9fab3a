//! Redis hashes on the [`Hash`] lattice: `HSET`, `HMSET`, `HSETNX`, `HGET`, `HMGET`,
//! `HGETALL`, `HDEL`, `HEXISTS`, `HLEN`, `HKEYS`, `HVALS`, `HSTRLEN`, `HINCRBY`,
//! `HINCRBYFLOAT`, `HRANDFIELD`, `HSCAN`.
//!
//! A write is a delta of the fields it sets (or removes, as timestamped tombstones), stamped
//! by the worker's clock, merged into the key's current incarnation like any non-LWW type.
//! Read-modify-writes (`HSETNX`, `HINCRBY`, `HINCRBYFLOAT`) read the field at this replica
//! and write the result as a new register: two replicas incrementing the same field
//! concurrently each compute from their own state, and the later write wins (one increment
//! is lost; docs/protocol.md). A hash whose fields were all removed does not exist for
//! users; the removal that empties it also clears its deadline, as Redis deletes the key.

use lattice::{FieldReg, Hash, LatticeType, Record, Value};

use super::coll::{
    arity, bulk, int_arg, invalid, parse_scan, scan_page, ScanArgs, NIL, NOT_FLOAT, SYNTAX,
};
use super::strings::{format_float, parse_float};
use super::Shard;
use crate::error::NodeError;
use crate::op::OpResult;

/// Largest `-count` of `HRANDFIELD` (picks with repetitions; bounded replies).
const MAX_RANDOM: i64 = 1 << 20;

/// A parsed hash command (the key apart).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum HashCmd<'a> {
    /// `HSET`/`HMSET` (`nx: false`), `HSETNX` (`nx: true`).
    Set {
        /// Field/value pairs, in order.
        pairs: Vec<(&'a [u8], &'a [u8])>,
        /// Only if the field is absent.
        nx: bool,
    },
    /// `HGET`.
    Get(&'a [u8]),
    /// `HMGET`.
    MGet(Vec<&'a [u8]>),
    /// `HGETALL`.
    GetAll,
    /// `HKEYS`.
    Keys,
    /// `HVALS`.
    Vals,
    /// `HLEN`.
    Len,
    /// `HDEL`.
    Del(Vec<&'a [u8]>),
    /// `HEXISTS`.
    Exists(&'a [u8]),
    /// `HSTRLEN`.
    StrLen(&'a [u8]),
    /// `HINCRBY`.
    IncrBy(&'a [u8], i64),
    /// `HINCRBYFLOAT`.
    IncrByFloat(&'a [u8], f64),
    /// `HRANDFIELD [count [WITHVALUES]]`.
    RandField {
        /// The count, if given.
        count: Option<i64>,
        /// `WITHVALUES`.
        with_values: bool,
    },
    /// `HSCAN`.
    Scan(ScanArgs<'a>),
}

/// Parses hash command `name` with the arguments after the key; `Err` is Redis's error
/// message (without `ERR `).
pub(crate) fn parse_hash<'a>(name: &[u8], args: &[&'a [u8]]) -> Result<HashCmd<'a>, String> {
    let n = args.len();
    let upper = name.to_ascii_uppercase();
    let exact = |k: usize| if n == k { Ok(()) } else { Err(arity(name)) };
    let at_least = |k: usize| if n >= k { Ok(()) } else { Err(arity(name)) };
    Ok(match upper.as_slice() {
        b"HSET" | b"HMSET" => {
            if n < 2 || !n.is_multiple_of(2) {
                return Err(arity(name));
            }
            let pairs = args.chunks(2).map(|p| (p[0], p[1])).collect();
            HashCmd::Set { pairs, nx: false }
        }
        b"HSETNX" => {
            exact(2)?;
            HashCmd::Set {
                pairs: vec![(args[0], args[1])],
                nx: true,
            }
        }
        b"HGET" => exact(1).map(|_| HashCmd::Get(args[0]))?,
        b"HMGET" => at_least(1).map(|_| HashCmd::MGet(args.to_vec()))?,
        b"HGETALL" => exact(0).map(|_| HashCmd::GetAll)?,
        b"HKEYS" => exact(0).map(|_| HashCmd::Keys)?,
        b"HVALS" => exact(0).map(|_| HashCmd::Vals)?,
        b"HLEN" => exact(0).map(|_| HashCmd::Len)?,
        b"HDEL" => at_least(1).map(|_| HashCmd::Del(args.to_vec()))?,
        b"HEXISTS" => exact(1).map(|_| HashCmd::Exists(args[0]))?,
        b"HSTRLEN" => exact(1).map(|_| HashCmd::StrLen(args[0]))?,
        b"HINCRBY" => {
            exact(2)?;
            HashCmd::IncrBy(args[0], int_arg(args[1])?)
        }
        b"HINCRBYFLOAT" => {
            exact(2)?;
            let by = parse_float(args[1])
                .filter(|b| b.is_finite())
                .ok_or_else(|| NOT_FLOAT.to_string())?;
            HashCmd::IncrByFloat(args[0], by)
        }
        b"HRANDFIELD" => {
            if n > 2 {
                return Err(SYNTAX.into());
            }
            let count = args.first().map(|c| int_arg(c)).transpose()?;
            let with_values = match args.get(1) {
                None => false,
                Some(w) if w.eq_ignore_ascii_case(b"WITHVALUES") => true,
                Some(_) => return Err(SYNTAX.into()),
            };
            // A positive count is at most the hash; a negative one repeats, so it is bounded.
            if count.is_some_and(|c| c < -MAX_RANDOM) {
                return Err("value is out of range".into());
            }
            HashCmd::RandField { count, with_values }
        }
        b"HSCAN" => {
            at_least(1)?;
            HashCmd::Scan(parse_scan(args, true)?)
        }
        _ => {
            return Err(format!(
                "unknown command '{}'",
                String::from_utf8_lossy(name)
            ))
        }
    })
}

impl Shard {
    /// Runs hash command `args[0]` with `args[1..]` on `key`.
    pub(super) fn hash_op<B: AsRef<[u8]>>(&mut self, key: &[u8], args: &[B]) -> OpResult {
        let args: Vec<&[u8]> = args.iter().map(AsRef::as_ref).collect();
        let Some((name, rest)) = args.split_first() else {
            return OpResult::Error(invalid("hash op without a command"));
        };
        let cmd = match parse_hash(name, rest) {
            Ok(c) => c,
            Err(e) => return OpResult::Error(invalid(&e)),
        };
        if let Err(e) = self.check_type(key, LatticeType::Hash) {
            return OpResult::Error(e);
        }
        self.run_hash(key, cmd).into()
    }

    /// The live hash at `key`, if any.
    fn hash_at(&self, key: &[u8]) -> Option<&Hash> {
        self.live(key)?;
        match self.live_full(key) {
            Some(Value::Hash(h)) => Some(h),
            _ => None,
        }
    }

    fn run_hash(&mut self, key: &[u8], cmd: HashCmd<'_>) -> Result<OpResult, NodeError> {
        let h = self.hash_at(key);
        let get = |f: &[u8]| h.and_then(|h| h.get(f));
        Ok(match cmd {
            HashCmd::Get(f) => get(f).map_or(NIL, |v| bulk(v)),
            HashCmd::MGet(fs) => {
                OpResult::Multi(fs.iter().map(|f| get(f).map_or(NIL, |v| bulk(v))).collect())
            }
            HashCmd::GetAll => OpResult::Multi(
                h.into_iter()
                    .flat_map(Hash::iter)
                    .flat_map(|(f, v)| [bulk(f), bulk(v)])
                    .collect(),
            ),
            HashCmd::Keys => OpResult::Multi(
                h.into_iter()
                    .flat_map(Hash::iter)
                    .map(|(f, _)| bulk(f))
                    .collect(),
            ),
            HashCmd::Vals => OpResult::Multi(
                h.into_iter()
                    .flat_map(Hash::iter)
                    .map(|(_, v)| bulk(v))
                    .collect(),
            ),
            HashCmd::Len => OpResult::Int(h.map_or(0, Hash::len) as i64),
            HashCmd::Exists(f) => OpResult::Int(get(f).is_some() as i64),
            HashCmd::StrLen(f) => OpResult::Int(get(f).map_or(0, |v| v.len()) as i64),
            HashCmd::RandField { count, with_values } => self.rand_fields(key, count, with_values),
            HashCmd::Scan(scan) => {
                let Some(h) = h else {
                    return Ok(OpResult::Multi(vec![bulk(b"0")]));
                };
                let (next, page) = scan_page(h.iter(), h.len(), &scan);
                let mut out = vec![bulk(next.to_string().as_bytes())];
                for (f, v) in page {
                    out.push(bulk(f));
                    if !scan.novalues {
                        out.push(bulk(v));
                    }
                }
                OpResult::Multi(out)
            }
            HashCmd::Set { pairs, nx } => {
                if nx && get(pairs[0].0).is_some() {
                    return Ok(OpResult::Int(0));
                }
                let mut fields: std::collections::BTreeMap<&[u8], &[u8]> = Default::default();
                for (f, v) in &pairs {
                    fields.insert(f, v);
                }
                let added = fields.keys().filter(|f| get(f).is_none()).count();
                let incoming: usize = fields.iter().map(|(f, v)| f.len() + v.len()).sum();
                self.check_coll_size(key, incoming)?;
                self.write_fields(key, fields.into_iter().map(|(f, v)| (f, Some(v))))?;
                OpResult::Int(added as i64)
            }
            HashCmd::Del(fs) => {
                let Some(h) = h else {
                    return Ok(OpResult::Int(0));
                };
                let mut gone: Vec<&[u8]> = fs.into_iter().filter(|f| h.get(f).is_some()).collect();
                gone.sort_unstable();
                gone.dedup();
                let empties = gone.len() == h.len();
                let removed = gone.len();
                if removed > 0 {
                    self.write_fields(key, gone.into_iter().map(|f| (f, None)))?;
                    if empties {
                        self.forget_deadline(key)?;
                    }
                }
                OpResult::Int(removed as i64)
            }
            HashCmd::IncrBy(f, by) => {
                let current = match get(f) {
                    None => 0,
                    Some(v) => super::parse_strict_i64(v)
                        .ok_or_else(|| invalid("hash value is not an integer"))?,
                };
                let new = current.checked_add(by).ok_or(NodeError::Overflow)?;
                let text = new.to_string();
                self.check_coll_size(key, f.len() + text.len())?;
                self.write_fields(key, [(f, Some(text.as_bytes()))])?;
                OpResult::Int(new)
            }
            HashCmd::IncrByFloat(f, by) => {
                let current = match get(f) {
                    None => 0.0,
                    Some(v) => {
                        parse_float(v).ok_or_else(|| invalid("hash value is not a float"))?
                    }
                };
                let new = current + by;
                if !new.is_finite() {
                    return Err(invalid("increment would produce NaN or Infinity"));
                }
                let text = format_float(new);
                self.check_coll_size(key, f.len() + text.len())?;
                self.write_fields(key, [(f, Some(text.as_bytes()))])?;
                bulk(text.as_bytes())
            }
        })
    }

    /// Writes fields (`None`: removes them) as one delta, stamped by the worker's clock.
    fn write_fields<'f>(
        &mut self,
        key: &[u8],
        fields: impl IntoIterator<Item = (&'f [u8], Option<&'f [u8]>)>,
    ) -> Result<(), NodeError> {
        let ts = self.hlc.tick(self.clock_ms());
        let epoch = self.write_epoch(key, LatticeType::Hash);
        let delta = Hash::from_entries(
            fields
                .into_iter()
                .map(|(f, v)| (Box::from(f), FieldReg::new(ts, v.map(Box::from)))),
        );
        self.apply(key, Record::new(epoch, Some(Value::Hash(Box::new(delta)))))
    }

    /// Fails if `incoming` more bytes would take `key`'s value past the value size limit.
    pub(super) fn check_coll_size(&self, key: &[u8], incoming: usize) -> Result<(), NodeError> {
        let total = incoming + self.store.size_of(key);
        let max = self.config.limits.max_value_size;
        if total > max {
            return Err(NodeError::ValueTooLarge { len: total, max });
        }
        Ok(())
    }

    /// Clears the deadline of a hash or sorted set just emptied, as Redis deletes the key.
    pub(super) fn forget_deadline(&mut self, key: &[u8]) -> Result<(), NodeError> {
        let has_deadline = self.store.get(key).is_some_and(|r| match r {
            store::RecordRef::Full(r) => r.deadline_ms().is_some(),
            store::RecordRef::Lww { .. } => false,
        });
        if has_deadline {
            let ts = self.hlc.tick(self.clock_ms());
            let epoch = self.store.get(key).map_or(ts, |r| r.epoch());
            let mut delta = Record::tombstone(epoch);
            delta.expiry = Some(Box::new(lattice::Expiry::new(ts, None)));
            self.apply(key, delta)?;
        }
        Ok(())
    }

    /// `HRANDFIELD`: one field (or nil), or `count` of them — distinct if positive, with
    /// repetitions if negative — with their values if asked.
    fn rand_fields(&mut self, key: &[u8], count: Option<i64>, with_values: bool) -> OpResult {
        let Some(len) = self.hash_at(key).map(Hash::len) else {
            return match count {
                None => NIL,
                Some(_) => OpResult::Multi(Vec::new()),
            };
        };
        let picks: Vec<usize> = match count {
            None => vec![self.rng.usize(..len)],
            Some(c) if c >= 0 => {
                let mut all: Vec<usize> = (0..len).collect();
                self.rng.shuffle(&mut all);
                all.truncate(usize::try_from(c).unwrap_or(usize::MAX));
                all
            }
            Some(c) => (0..c.unsigned_abs())
                .map(|_| self.rng.usize(..len))
                .collect(),
        };
        let Some(h) = self.hash_at(key) else {
            return NIL;
        };
        let fields: Vec<(&[u8], &[u8])> = h.iter().map(|(f, v)| (&f[..], &v[..])).collect();
        let mut out = Vec::with_capacity(picks.len() * 2);
        for i in picks {
            let (f, v) = fields[i];
            out.push(bulk(f));
            if with_values {
                out.push(bulk(v));
            }
        }
        match count {
            None => out.pop().unwrap_or(NIL),
            Some(_) => OpResult::Multi(out),
        }
    }
}
