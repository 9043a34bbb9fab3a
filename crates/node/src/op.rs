//! Protocol-neutral operations.
//!
//! Both protocols translate requests into [`Op`]s; a worker executes the ops on keys it holds
//! and forwards the others. `Op<B>` is generic over its byte strings so the local path can
//! borrow them from the connection's read buffer (`Op<&[u8]>`) while a forwarded op owns
//! them (`Op<Bytes>`).

use bytes::Bytes;
use lattice::{LatticeType, Value};

use crate::error::NodeError;
// ---- lists (helper B) ----
use crate::list_op::ListOp;

/// When an LWW assignment applies (SET's NX / XX), judged at the replica receiving it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    /// Always write.
    Always,
    /// Only if the key has no live value.
    IfAbsent,
    /// Only if the key has a live value.
    IfPresent,
}

/// One operation on one key.
#[derive(Clone, Debug, PartialEq)]
pub enum Op<B> {
    /// Read the value. → [`OpResult::Value`].
    Get {
        /// The key.
        key: B,
    },
    /// Read the value's causal metadata only → [`OpResult::Value`]: causal versions with
    /// empty payloads, an LWW register with an empty value, other types in full
    /// (`GetMany.metadata_only`).
    GetMeta {
        /// The key.
        key: B,
    },
    /// Does the key hold a live value? → [`OpResult::Int`] 0 or 1.
    Exists {
        /// The key.
        key: B,
    },
    /// The key's lattice type. → [`OpResult::Type`].
    TypeOf {
        /// The key.
        key: B,
    },
    /// Is `member` in the set at `key`? → [`OpResult::Int`] 0 or 1.
    SetContains {
        /// The key.
        key: B,
        /// The member.
        member: B,
    },
    /// Number of members of the set at `key` (0 if absent). → [`OpResult::Int`].
    SetLen {
        /// The key.
        key: B,
    },
    /// Merge a lattice value into the key. → [`OpResult::Done`].
    Put {
        /// The key.
        key: B,
        /// The value to merge.
        value: Value,
    },
    /// Delete the key. → [`OpResult::Int`] 1 if it held a live value.
    Delete {
        /// The key.
        key: B,
    },
    /// LWW assignment with a timestamp from the worker's clock. → [`OpResult::Int`] 1 if
    /// written, 0 if the condition failed.
    Assign {
        /// The key.
        key: B,
        /// The new value.
        value: B,
        /// When to write.
        condition: Condition,
    },
    /// Add members to the OR-set at `key`. → [`OpResult::Int`] members newly added.
    SetAdd {
        /// The key.
        key: B,
        /// Members to add.
        members: Vec<B>,
    },
    /// Remove members from the OR-set at `key`. → [`OpResult::Int`] members removed.
    SetRemove {
        /// The key.
        key: B,
        /// Members to remove.
        members: Vec<B>,
    },
    /// Add `delta` to the PN-counter at `key`. → [`OpResult::Int`] the new value.
    CounterAdd {
        /// The key.
        key: B,
        /// The amount.
        delta: i64,
    },
    /// Replace the string at `key`, reading the old one (`GETSET`). → [`OpResult::Value`]
    /// the old value.
    GetSet {
        /// The key.
        key: B,
        /// The new value.
        value: B,
    },
    /// Delete `key`, reading its string first (`GETDEL`). → [`OpResult::Value`] the old
    /// value.
    GetDel {
        /// The key.
        key: B,
    },
    /// Append to the string at `key` (`APPEND`). → [`OpResult::Int`] the new length.
    Append {
        /// The key.
        key: B,
        /// The suffix.
        value: B,
    },
    /// Overwrite the string at `key` from `offset`, padding with zero bytes (`SETRANGE`).
    /// → [`OpResult::Int`] the new length.
    SetRange {
        /// The key.
        key: B,
        /// Where the bytes go.
        offset: u64,
        /// The bytes.
        value: B,
    },
    /// Add `by` to the decimal number in the string at `key` (`INCRBYFLOAT`). →
    /// [`OpResult::Value`] the new string.
    IncrByFloat {
        /// The key.
        key: B,
        /// The increment.
        by: f64,
    },
    /// Add `delta` to the integer at `key` (RESP `INCRBY`): a string holding a decimal
    /// integer is rewritten (as Redis), anything else is a PN-counter as with
    /// [`Op::CounterAdd`]. → [`OpResult::Int`] the new value.
    IncrBy {
        /// The key.
        key: B,
        /// The amount.
        delta: i64,
    },
    /// LWW assignment whose record carries a deadline (`SET … EX/PX/EXAT/PXAT/KEEPTTL`,
    /// `SETEX`, `PSETEX`). → [`OpResult::Int`] 1 if written, 0 if the condition failed.
    AssignTtl {
        /// The key.
        key: B,
        /// The new value.
        value: B,
        /// When to write.
        condition: Condition,
        /// The deadline.
        deadline: Deadline,
    },
    /// Set or clear `key`'s deadline (`EXPIRE` family, `PERSIST`). → [`OpResult::Int`] 1
    /// if done, 0 if the key is missing or the condition failed.
    Expire {
        /// The key.
        key: B,
        /// The deadline ([`Deadline::Persist`] clears it).
        deadline: Deadline,
        /// The condition (`NX`, `XX`, `GT`, `LT`).
        when: ExpireWhen,
    },
    /// `key`'s time to live in ms (`PTTL`). → [`OpResult::Int`]: ms, -1 without a deadline,
    /// -2 if missing.
    Ttl {
        /// The key.
        key: B,
    },
    /// Read the string at `key` and change its deadline if asked (`GETEX`). →
    /// [`OpResult::Value`].
    GetEx {
        /// The key.
        key: B,
        /// The new deadline, if any.
        deadline: Option<Deadline>,
    },
    /// A fingerprint of `key`'s record (RESP `WATCH`), read where the key's only replica
    /// is: → [`OpResult::Int`]; an error if the key has several replicas (a write at
    /// another one could go unseen).
    Version {
        /// The key.
        key: B,
    },
    /// Ops run as one unit on the worker holding `key` (RESP `EXEC` after `WATCH`,
    /// `MSETNX`): nothing runs unless every guard holds, and nothing else runs on the
    /// worker in between. Every key must be held by that worker alone (see
    /// [`Guard`]). → [`OpResult::Multi`] with one result per op, or [`OpResult::Int`] 0
    /// if a guard failed (nothing was applied).
    Exec {
        /// Where the unit runs: the first guarded or written key.
        key: B,
        /// Conditions on keys, checked first.
        guards: Vec<(B, Guard)>,
        /// The ops, run in order.
        ops: Vec<Op<B>>,
    },
    // ---- lists (helper B) ----
    /// A RESP list operation on the list at `key` (see [`ListOp`] for each result).
    List {
        /// The key.
        key: B,
        /// The operation.
        op: ListOp<B>,
    },
    // Redis hashes and sorted sets.
    /// A Redis hash command on `key` (`HSET`, `HGET`, …): `args` are the command's name
    /// (upper case) and its arguments after the key, checked by the front end and parsed
    /// again where the op runs (`shard::hash`). → what that command returns there.
    Hash {
        /// The key.
        key: B,
        /// The command name and the arguments after the key.
        args: Vec<B>,
    },
    /// A Redis sorted-set command on `key` (`ZADD`, `ZRANGE`, …), as [`Op::Hash`]
    /// (`shard::zset`).
    Zset {
        /// The key.
        key: B,
        /// The command name and the arguments after the key.
        args: Vec<B>,
    },
    // ---- keys and sets (RESP `SPOP`) ----
    /// Remove up to `count` random members of the OR-set at `key` (`SPOP`). →
    /// [`OpResult::Value`] the removed members as a grow-only set, `None` if absent.
    SetPop {
        /// The key.
        key: B,
        /// Most members removed.
        count: u64,
    },
    /// `key`'s absolute deadline (`PEXPIRETIME`). → [`OpResult::Int`]: ms since the
    /// epoch, -1 without a deadline, -2 if missing.
    ExpireTime {
        /// The key.
        key: B,
    },
    /// A Lua script (RESP `EVAL`), run as one unit on the worker holding `key`: nothing
    /// else runs on the worker until it ends, and every key it touches must be held there.
    /// → [`OpResult::Reply`], the script's reply encoded for the client.
    Script {
        /// Where it runs: its first key (or a key of the connection's worker, without keys).
        key: B,
        /// The script's source.
        body: B,
        /// `KEYS`.
        keys: Vec<B>,
        /// `ARGV`.
        args: Vec<B>,
        /// `EVAL_RO` / `EVALSHA_RO`: the script may only read.
        read_only: bool,
        /// The reply is for a RESP3 connection.
        resp3: bool,
    },
}

/// A deadline as a command gives it, resolved by the worker running the op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deadline {
    /// In this many ms from now (`EX`, `PX`, `EXPIRE`, `PEXPIRE`).
    In(u64),
    /// At this time, ms since the Unix epoch (`EXAT`, `PXAT`, `EXPIREAT`, `PEXPIREAT`).
    At(u64),
    /// No deadline (`PERSIST`, `GETEX PERSIST`).
    Persist,
    /// The key's current deadline (`SET … KEEPTTL`).
    Keep,
}

/// `EXPIRE`'s condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpireWhen {
    /// Always.
    Always,
    /// `NX`: only if the key has no deadline.
    Nx,
    /// `XX`: only if it has one.
    Xx,
    /// `GT`: only if the new deadline is later (no deadline counts as infinite).
    Gt,
    /// `LT`: only if the new deadline is earlier.
    Lt,
    /// `LT XX`: only if the key has a deadline and the new one is earlier.
    LtXx,
}

/// A condition of an [`Op::Exec`] on one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    /// The key's record is the one a [`Op::Version`] read (`WATCH`); the key must have one
    /// replica, else a change at another replica could go unseen.
    Version(u64),
    /// The key holds no live value (`MSETNX`), judged at the replica running the unit,
    /// like `SET … NX`.
    Absent,
}

impl<B> Op<B> {
    /// The key, as the value the op was built with.
    pub fn key_ref(&self) -> &B {
        match self {
            Op::Get { key }
            | Op::GetMeta { key }
            | Op::Exists { key }
            | Op::TypeOf { key }
            | Op::SetContains { key, .. }
            | Op::SetLen { key }
            | Op::Put { key, .. }
            | Op::Delete { key }
            | Op::Assign { key, .. }
            | Op::SetAdd { key, .. }
            | Op::SetRemove { key, .. }
            | Op::CounterAdd { key, .. }
            | Op::GetSet { key, .. }
            | Op::GetDel { key }
            | Op::Append { key, .. }
            | Op::SetRange { key, .. }
            | Op::IncrByFloat { key, .. }
            | Op::IncrBy { key, .. }
            | Op::AssignTtl { key, .. }
            | Op::Expire { key, .. }
            | Op::Ttl { key }
            | Op::GetEx { key, .. }
            | Op::Version { key }
            | Op::Exec { key, .. }
            // ---- lists (helper B) ----
            | Op::List { key, .. }
            // Redis hashes and sorted sets.
            | Op::Hash { key, .. }
            | Op::Zset { key, .. }
            | Op::SetPop { key, .. }
            | Op::ExpireTime { key }
            | Op::Script { key, .. } => key,
        }
    }
}

impl<B: AsRef<[u8]>> Op<B> {
    /// The key the op reads or writes.
    pub fn key(&self) -> &[u8] {
        self.key_ref().as_ref()
    }

    /// True if the op may change the store.
    pub fn is_write(&self) -> bool {
        match self {
            Op::Put { .. }
            | Op::Delete { .. }
            | Op::Assign { .. }
            | Op::SetAdd { .. }
            | Op::SetRemove { .. }
            | Op::CounterAdd { .. }
            | Op::GetSet { .. }
            | Op::GetDel { .. }
            | Op::Append { .. }
            | Op::SetRange { .. }
            | Op::IncrByFloat { .. }
            | Op::IncrBy { .. }
            | Op::AssignTtl { .. }
            | Op::Expire { .. }
            | Op::SetPop { .. } => true,
            Op::GetEx { deadline, .. } => deadline.is_some(),
            Op::Exec { ops, .. } => ops.iter().any(Op::is_write),
            // What a script does is known only once it ran.
            Op::Script { read_only, .. } => !read_only,
            // ---- lists (helper B) ----
            Op::List { op, .. } => op.is_write(),
            // Redis hashes and sorted sets: by the command's name.
            Op::Hash { args, .. } | Op::Zset { args, .. } => {
                args.first().is_some_and(|n| coll_is_write(n.as_ref()))
            }
            Op::Get { .. }
            | Op::GetMeta { .. }
            | Op::Exists { .. }
            | Op::TypeOf { .. }
            | Op::SetContains { .. }
            | Op::SetLen { .. }
            | Op::Ttl { .. }
            | Op::Version { .. }
            | Op::ExpireTime { .. } => false,
        }
    }

    /// Every key the op reads or writes (an [`Op::Exec`] has several).
    pub fn keys(&self) -> Vec<&[u8]> {
        match self {
            Op::Exec { guards, ops, .. } => guards
                .iter()
                .map(|(k, _)| k.as_ref())
                .chain(ops.iter().flat_map(Op::keys))
                .collect(),
            // ---- lists (helper B) ----
            Op::List { key, op } => std::iter::once(key.as_ref())
                .chain(op.other_key())
                .collect(),
            Op::Script { key, keys, .. } if keys.is_empty() => vec![key.as_ref()],
            Op::Script { keys, .. } => keys.iter().map(AsRef::as_ref).collect(),
            other => vec![other.key()],
        }
    }

    /// An owned copy, for forwarding to another worker.
    pub fn to_owned_op(&self) -> Op<Bytes> {
        let b = |x: &B| Bytes::copy_from_slice(x.as_ref());
        match self {
            Op::Get { key } => Op::Get { key: b(key) },
            Op::GetMeta { key } => Op::GetMeta { key: b(key) },
            Op::Exists { key } => Op::Exists { key: b(key) },
            Op::TypeOf { key } => Op::TypeOf { key: b(key) },
            Op::SetContains { key, member } => Op::SetContains {
                key: b(key),
                member: b(member),
            },
            Op::SetLen { key } => Op::SetLen { key: b(key) },
            Op::Put { key, value } => Op::Put {
                key: b(key),
                value: value.clone(),
            },
            Op::Delete { key } => Op::Delete { key: b(key) },
            Op::Assign {
                key,
                value,
                condition,
            } => Op::Assign {
                key: b(key),
                value: b(value),
                condition: *condition,
            },
            Op::SetAdd { key, members } => Op::SetAdd {
                key: b(key),
                members: members.iter().map(b).collect(),
            },
            Op::SetRemove { key, members } => Op::SetRemove {
                key: b(key),
                members: members.iter().map(b).collect(),
            },
            Op::CounterAdd { key, delta } => Op::CounterAdd {
                key: b(key),
                delta: *delta,
            },
            Op::GetSet { key, value } => Op::GetSet {
                key: b(key),
                value: b(value),
            },
            Op::GetDel { key } => Op::GetDel { key: b(key) },
            Op::Append { key, value } => Op::Append {
                key: b(key),
                value: b(value),
            },
            Op::SetRange { key, offset, value } => Op::SetRange {
                key: b(key),
                offset: *offset,
                value: b(value),
            },
            Op::IncrByFloat { key, by } => Op::IncrByFloat {
                key: b(key),
                by: *by,
            },
            Op::IncrBy { key, delta } => Op::IncrBy {
                key: b(key),
                delta: *delta,
            },
            Op::AssignTtl {
                key,
                value,
                condition,
                deadline,
            } => Op::AssignTtl {
                key: b(key),
                value: b(value),
                condition: *condition,
                deadline: *deadline,
            },
            Op::Expire {
                key,
                deadline,
                when,
            } => Op::Expire {
                key: b(key),
                deadline: *deadline,
                when: *when,
            },
            Op::Ttl { key } => Op::Ttl { key: b(key) },
            Op::GetEx { key, deadline } => Op::GetEx {
                key: b(key),
                deadline: *deadline,
            },
            Op::Version { key } => Op::Version { key: b(key) },
            Op::Exec { key, guards, ops } => Op::Exec {
                key: b(key),
                guards: guards.iter().map(|(k, g)| (b(k), *g)).collect(),
                ops: ops.iter().map(Op::to_owned_op).collect(),
            },
            // ---- lists (helper B) ----
            Op::List { key, op } => Op::List {
                key: b(key),
                op: op.to_owned_op(),
            },
            // Redis hashes and sorted sets.
            Op::Hash { key, args } => Op::Hash {
                key: b(key),
                args: args.iter().map(b).collect(),
            },
            Op::Zset { key, args } => Op::Zset {
                key: b(key),
                args: args.iter().map(b).collect(),
            },
            Op::SetPop { key, count } => Op::SetPop {
                key: b(key),
                count: *count,
            },
            Op::ExpireTime { key } => Op::ExpireTime { key: b(key) },
            Op::Script {
                key,
                body,
                keys,
                args,
                read_only,
                resp3,
            } => Op::Script {
                key: b(key),
                body: b(body),
                keys: keys.iter().map(b).collect(),
                args: args.iter().map(b).collect(),
                read_only: *read_only,
                resp3: *resp3,
            },
        }
    }
}

// Redis hashes and sorted sets.
/// True if the hash or sorted-set command `name` may write.
fn coll_is_write(name: &[u8]) -> bool {
    const WRITES: [&[u8]; 14] = [
        b"HSET",
        b"HMSET",
        b"HSETNX",
        b"HDEL",
        b"HINCRBY",
        b"HINCRBYFLOAT",
        b"ZADD",
        b"ZINCRBY",
        b"ZREM",
        b"ZPOPMIN",
        b"ZPOPMAX",
        b"ZREMRANGEBYSCORE",
        b"ZREMRANGEBYRANK",
        b"ZREMRANGEBYLEX",
    ];
    WRITES.iter().any(|w| w.eq_ignore_ascii_case(name))
}

impl Op<Bytes> {
    /// The key, as the owned bytes it was built with.
    pub fn key_bytes(&self) -> &Bytes {
        self.key_ref()
    }
}

/// The result of one [`Op`].
#[derive(Clone, Debug, PartialEq)]
pub enum OpResult {
    /// A read value; `None` if the key is absent or deleted.
    Value(Option<Value>),
    /// A count or number (see each op).
    Int(i64),
    /// A lattice type; `None` if the key is absent.
    Type(Option<LatticeType>),
    /// A write without a count.
    Done,
    /// The results of an [`Op::Exec`]'s ops, in order.
    Multi(Vec<OpResult>),
    /// A reply already encoded for the client (an [`Op::Script`]'s).
    Reply(Bytes),
    /// The op failed.
    Error(NodeError),
}

impl From<Result<OpResult, NodeError>> for OpResult {
    fn from(r: Result<OpResult, NodeError>) -> Self {
        r.unwrap_or_else(OpResult::Error)
    }
}
