//! RESP commands and their mapping onto lattice operations.
//!
//! | commands | lattice | notes |
//! |---|---|---|
//! | GET, SET [NX\|XX] [GET], MGET, MSET | `Lww` | timestamps from the worker's hybrid logical clock; GET also reads a `Counter` as its decimal value |
//! | INCR, INCRBY, DECR, DECRBY | `Counter` (PN) | a key created by SET is not a counter (WRONGTYPE) |
//! | SADD, SREM, SMEMBERS, SISMEMBER, SCARD | `OrSet` (add-wins) | SMEMBERS/SISMEMBER/SCARD also read grow-only and ordered sets |
//! | DEL, EXISTS, TYPE | any | DEL writes a tombstone |
//! | PING, ECHO, HELLO, SELECT 0, QUIT, AUTH, CLIENT, COMMAND, CONFIG GET, INFO, DBSIZE | — | connection and server commands |
//!
//! A key's lattice type is fixed by its first write; a command for another type gets
//! `-WRONGTYPE` (unlike Redis, `SET` does not replace a set or a counter: `DEL` it first).

use std::rc::Rc;

use lattice::{LatticeType, Value};
use store::RecordRef;
use wire::resp::{self, Args, Version};

use super::{ConnState, Queued};
use crate::error::NodeError;
use crate::op::{Condition, Op, OpResult};
use crate::worker::WorkerCtx;

/// The Redis version whose protocol and replies latticekv follows (reported by HELLO and
/// INFO, so clients enable the matching features).
pub const REDIS_COMPAT_VERSION: &str = "7.0.0";

/// How a command's op results become its reply.
#[derive(Debug)]
pub enum Shape {
    /// GET: bulk string, or null.
    Get,
    /// SET: +OK if written, null if the NX/XX condition failed.
    Set,
    /// SET … GET: the old value (bulk or null), then the write's outcome is not reported.
    SetGet,
    /// An integer reply from the single result.
    Int,
    /// The sum of all integer results (DEL, EXISTS with several keys).
    Sum,
    /// MGET: an array of bulk strings or nulls (values of other types read as null).
    MultiGet,
    /// +OK unless some op failed (MSET).
    Ok,
    /// SMEMBERS: a set of members.
    Members,
    /// TYPE: a simple string.
    Type,
}

/// A command with its arguments, borrowed from the connection's read buffer.
#[derive(Clone, Copy)]
struct Cmd<'a> {
    buf: &'a [u8],
    args: &'a Args,
}

impl<'a> Cmd<'a> {
    fn len(&self) -> usize {
        self.args.len()
    }
    /// Argument `i` (empty if out of range; callers check `len` first).
    fn arg(&self, i: usize) -> &'a [u8] {
        self.args.get(self.buf, i).unwrap_or_default()
    }
    fn name_lower(&self) -> String {
        String::from_utf8_lossy(self.arg(0)).to_lowercase()
    }
}

fn err(msg: &str) -> Queued {
    let mut out = Vec::with_capacity(msg.len() + 3);
    resp::error(&mut out, msg);
    Queued::Ready(out)
}

fn ready(f: impl FnOnce(&mut Vec<u8>)) -> Queued {
    let mut out = Vec::new();
    f(&mut out);
    Queued::Ready(out)
}

fn arity_error(cmd: &Cmd<'_>) -> Queued {
    err(&format!(
        "ERR wrong number of arguments for '{}' command",
        cmd.name_lower()
    ))
}

fn syntax_error() -> Queued {
    err("ERR syntax error")
}

fn parse_i64(b: &[u8]) -> Option<i64> {
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// Upper-cases a command name into a fixed buffer (no allocation); `None` if too long to be
/// a command we know.
fn upper(name: &[u8]) -> Option<([u8; 16], usize)> {
    if name.len() > 16 {
        return None;
    }
    let mut buf = [0u8; 16];
    for (d, s) in buf.iter_mut().zip(name) {
        *d = s.to_ascii_uppercase();
    }
    Some((buf, name.len()))
}

/// What a command needs done.
enum Plan<'a> {
    /// GET: read one key (without copying the value when this worker holds it).
    Get(&'a [u8]),
    /// Run one op on the worker holding its key; encode the result with the shape.
    One(Shape, Op<&'a [u8]>),
    /// Run ops on the workers holding their keys; encode the results with the shape.
    Ops(Shape, Vec<Op<&'a [u8]>>),
    /// The reply is already known.
    Reply(Queued),
    /// INFO: collect every worker's counters.
    Info,
    /// DBSIZE: count keys on every worker.
    DbSize,
}

/// Runs one command. With `direct` (no earlier reply is still pending on this connection),
/// a reply that needs no other worker is encoded straight into `out` and `None` returned;
/// otherwise the reply is returned to be queued.
pub async fn run(
    ctx: &Rc<WorkerCtx>,
    state: &mut ConnState,
    buf: &[u8],
    args: &Args,
    out: &mut Vec<u8>,
    direct: bool,
) -> Option<Queued> {
    let cmd = Cmd { buf, args };
    let v = state.version;
    match plan(&cmd, state) {
        Plan::Get(key) => {
            let mut reply = None;
            let local = ctx.read_local(key, |record| {
                reply = emit(out, direct, |o| encode_get(o, v, record));
            });
            match local {
                Some(()) => reply,
                None => dispatch(ctx, v, Shape::Get, vec![Op::Get { key }], out, direct).await,
            }
        }
        Plan::One(shape, op) => match ctx.run_local(op) {
            Ok(result) => emit(out, direct, |o| {
                encode(o, v, &shape, std::slice::from_ref(&result))
            }),
            Err(op) => dispatch(ctx, v, shape, vec![op], out, direct).await,
        },
        Plan::Ops(shape, list) => dispatch(ctx, v, shape, list, out, direct).await,
        Plan::Reply(q) => Some(q),
        Plan::Info => {
            let text = info(ctx).await;
            Some(ready(|o| resp::verbatim(o, text.as_bytes(), v)))
        }
        Plan::DbSize => {
            let keys: u64 = ctx
                .shared
                .mesh
                .stats()
                .await
                .iter()
                .map(|s| s.shard.primary_keys)
                .sum();
            Some(ready(|o| resp::integer(o, keys as i64)))
        }
    }
}

/// Appends a reply made by `f` to `out` if replies go there directly, else returns it to be
/// queued.
fn emit(out: &mut Vec<u8>, direct: bool, f: impl FnOnce(&mut Vec<u8>)) -> Option<Queued> {
    if direct {
        f(out);
        None
    } else {
        let mut bytes = Vec::new();
        f(&mut bytes);
        Some(Queued::Ready(bytes))
    }
}

/// Runs ops wherever their keys live; the reply is encoded now if every result is local.
async fn dispatch(
    ctx: &Rc<WorkerCtx>,
    v: Version,
    shape: Shape,
    list: Vec<Op<&[u8]>>,
    out: &mut Vec<u8>,
    direct: bool,
) -> Option<Queued> {
    if ctx.durable_by_default() && list.iter().any(Op::is_write) {
        let ack = ctx.default_ack();
        if ctx.all_local(&list) {
            // Run now, in command order; the acknowledgement waits in a task of its own.
            let owned: Vec<Op<bytes::Bytes>> = list.iter().map(|op| op.to_owned_op()).collect();
            let (results, written) = ctx.execute_acked_here(owned);
            let (tx, rx) = tokio::sync::oneshot::channel();
            let ctx = ctx.clone();
            tokio::task::spawn_local(async move {
                let results = ctx.finish_acked(results, written, ack).await;
                let mut bytes = Vec::new();
                encode(&mut bytes, v, &shape, &results);
                let _ = tx.send(bytes);
            });
            return Some(Queued::Later(rx));
        }
        let results = ctx.dispatch_acked(list, false, ack).await;
        return emit(out, direct, |o| encode(o, v, &shape, &results));
    }
    let pending = ctx.dispatch(list, false).await;
    if !pending.is_ready() {
        return Some(Queued::Ops {
            shape,
            pending,
            version: v,
        });
    }
    let results = pending.into_ready();
    emit(out, direct, |o| encode(o, v, &shape, &results))
}

/// Encodes a GET reply straight from the stored record.
fn encode_get(out: &mut Vec<u8>, v: Version, record: Result<Option<RecordRef<'_>>, NodeError>) {
    match record {
        Err(e) => write_error(out, &e),
        Ok(None) => resp::null(out, v),
        Ok(Some(RecordRef::Lww { value, .. })) => resp::bulk(out, value),
        Ok(Some(RecordRef::Full(r))) => match &r.value {
            Some(Value::Lww(l)) => resp::bulk(out, &l.value),
            Some(Value::Counter(c)) => resp::bulk(out, c.value().to_string().as_bytes()),
            Some(other) => write_error(out, &NodeError::wrong_type("lww", other.lattice_type())),
            None => resp::null(out, v),
        },
    }
}

/// Decides what a command needs (no I/O, no waiting).
fn plan<'a>(cmd: &Cmd<'a>, state: &mut ConnState) -> Plan<'a> {
    use Plan::{Ops, Reply};
    let Some((name, n)) = upper(cmd.arg(0)) else {
        return Reply(unknown(cmd));
    };
    let v = state.version;
    let argc = cmd.len();
    let cmd = *cmd;
    match &name[..n] {
        b"GET" => {
            if argc != 2 {
                return Reply(arity_error(&cmd));
            }
            Plan::Get(cmd.arg(1))
        }
        b"SET" => set(&cmd),
        b"DEL" | b"UNLINK" => {
            if argc < 2 {
                return Reply(arity_error(&cmd));
            }
            if argc == 2 {
                return Plan::One(Shape::Sum, Op::Delete { key: cmd.arg(1) });
            }
            let list = (1..argc).map(|i| Op::Delete { key: cmd.arg(i) }).collect();
            Ops(Shape::Sum, list)
        }
        b"EXISTS" => {
            if argc < 2 {
                return Reply(arity_error(&cmd));
            }
            if argc == 2 {
                return Plan::One(Shape::Sum, Op::Exists { key: cmd.arg(1) });
            }
            let list = (1..argc).map(|i| Op::Exists { key: cmd.arg(i) }).collect();
            Ops(Shape::Sum, list)
        }
        b"TYPE" => {
            if argc != 2 {
                return Reply(arity_error(&cmd));
            }
            Plan::One(Shape::Type, Op::TypeOf { key: cmd.arg(1) })
        }
        b"MGET" => {
            if argc < 2 {
                return Reply(arity_error(&cmd));
            }
            let list = (1..argc).map(|i| Op::Get { key: cmd.arg(i) }).collect();
            Ops(Shape::MultiGet, list)
        }
        b"MSET" => {
            if argc < 3 || argc.is_multiple_of(2) {
                return Reply(arity_error(&cmd));
            }
            let list = (1..argc)
                .step_by(2)
                .map(|i| Op::Assign {
                    key: cmd.arg(i),
                    value: cmd.arg(i + 1),
                    condition: Condition::Always,
                })
                .collect();
            Ops(Shape::Ok, list)
        }
        b"INCR" | b"DECR" => {
            if argc != 2 {
                return Reply(arity_error(&cmd));
            }
            let delta = if &name[..n] == b"INCR" { 1 } else { -1 };
            Plan::One(
                Shape::Int,
                Op::CounterAdd {
                    key: cmd.arg(1),
                    delta,
                },
            )
        }
        b"INCRBY" | b"DECRBY" => {
            if argc != 3 {
                return Reply(arity_error(&cmd));
            }
            let Some(by) = parse_i64(cmd.arg(2)) else {
                return Reply(err("ERR value is not an integer or out of range"));
            };
            let delta = if &name[..n] == b"INCRBY" {
                Some(by)
            } else {
                by.checked_neg()
            };
            let Some(delta) = delta else {
                return Reply(err("ERR decrement would overflow"));
            };
            Plan::One(
                Shape::Int,
                Op::CounterAdd {
                    key: cmd.arg(1),
                    delta,
                },
            )
        }
        b"SADD" | b"SREM" => {
            if argc < 3 {
                return Reply(arity_error(&cmd));
            }
            let key = cmd.arg(1);
            let members = (2..argc).map(|i| cmd.arg(i)).collect();
            let o = if &name[..n] == b"SADD" {
                Op::SetAdd { key, members }
            } else {
                Op::SetRemove { key, members }
            };
            Plan::One(Shape::Int, o)
        }
        b"SMEMBERS" => {
            if argc != 2 {
                return Reply(arity_error(&cmd));
            }
            Plan::One(Shape::Members, Op::Get { key: cmd.arg(1) })
        }
        b"SISMEMBER" => {
            if argc != 3 {
                return Reply(arity_error(&cmd));
            }
            let o = Op::SetContains {
                key: cmd.arg(1),
                member: cmd.arg(2),
            };
            Plan::One(Shape::Int, o)
        }
        b"SCARD" => {
            if argc != 2 {
                return Reply(arity_error(&cmd));
            }
            Plan::One(Shape::Int, Op::SetLen { key: cmd.arg(1) })
        }
        b"PING" => Reply(match argc {
            1 => ready(|o| resp::simple(o, "PONG")),
            2 => ready(|o| resp::bulk(o, cmd.arg(1))),
            _ => arity_error(&cmd),
        }),
        b"ECHO" => {
            if argc != 2 {
                return Reply(arity_error(&cmd));
            }
            Reply(ready(|o| resp::bulk(o, cmd.arg(1))))
        }
        b"HELLO" => Reply(hello(&cmd, state)),
        b"SELECT" => {
            if argc != 2 {
                return Reply(arity_error(&cmd));
            }
            Reply(match parse_i64(cmd.arg(1)) {
                Some(0) => ready(|o| resp::simple(o, "OK")),
                Some(_) => err("ERR DB index is out of range"),
                None => err("ERR value is not an integer or out of range"),
            })
        }
        b"QUIT" => {
            state.quit = true;
            Reply(ready(|o| resp::simple(o, "OK")))
        }
        b"AUTH" => Reply(err(
            "ERR AUTH <password> called without any password configured for the default user. \
             Are you sure your configuration is correct?",
        )),
        b"CLIENT" => Reply(client(&cmd, state)),
        b"COMMAND" => Reply(command(&cmd, v)),
        b"CONFIG" => Reply(config(&cmd, v)),
        b"INFO" => Plan::Info,
        b"DBSIZE" => {
            if argc != 1 {
                return Reply(arity_error(&cmd));
            }
            Plan::DbSize
        }
        _ => Reply(unknown(&cmd)),
    }
}

fn unknown(cmd: &Cmd<'_>) -> Queued {
    let mut msg = format!(
        "ERR unknown command '{}', with args beginning with: ",
        String::from_utf8_lossy(cmd.arg(0))
    );
    for i in 1..cmd.len().min(4) {
        msg.push('\'');
        msg.push_str(&String::from_utf8_lossy(cmd.arg(i)));
        msg.push_str("' ");
    }
    err(&msg)
}

fn set<'a>(cmd: &Cmd<'a>) -> Plan<'a> {
    if cmd.len() < 3 {
        return Plan::Reply(arity_error(cmd));
    }
    let mut condition = Condition::Always;
    let mut get = false;
    for i in 3..cmd.len() {
        let opt = cmd.arg(i);
        if opt.eq_ignore_ascii_case(b"NX") && condition == Condition::Always {
            condition = Condition::IfAbsent;
        } else if opt.eq_ignore_ascii_case(b"XX") && condition == Condition::Always {
            condition = Condition::IfPresent;
        } else if opt.eq_ignore_ascii_case(b"GET") {
            get = true;
        } else if [&b"EX"[..], b"PX", b"EXAT", b"PXAT", b"KEEPTTL"]
            .iter()
            .any(|o| opt.eq_ignore_ascii_case(o))
        {
            return Plan::Reply(err(
                "ERR expiry options (EX, PX, EXAT, PXAT, KEEPTTL) are not supported",
            ));
        } else {
            return Plan::Reply(syntax_error());
        }
    }
    let key = cmd.arg(1);
    let assign = Op::Assign {
        key,
        value: cmd.arg(2),
        condition,
    };
    if get {
        // Read and write run back to back on the same worker, so nothing interleaves.
        Plan::Ops(Shape::SetGet, vec![Op::Get { key }, assign])
    } else {
        Plan::One(Shape::Set, assign)
    }
}

fn hello(cmd: &Cmd<'_>, state: &mut ConnState) -> Queued {
    let mut i = 1;
    if cmd.len() > 1 {
        match parse_i64(cmd.arg(1)) {
            Some(2) => state.version = Version::Resp2,
            Some(3) => state.version = Version::Resp3,
            _ => return err("NOPROTO unsupported protocol version"),
        }
        i = 2;
    }
    while i < cmd.len() {
        let opt = cmd.arg(i);
        if opt.eq_ignore_ascii_case(b"AUTH") && i + 2 < cmd.len() {
            return err("WRONGPASS invalid username-password pair or user is disabled.");
        } else if opt.eq_ignore_ascii_case(b"SETNAME") && i + 1 < cmd.len() {
            state.name = Some(cmd.arg(i + 1).to_vec());
            i += 2;
        } else {
            return syntax_error();
        }
    }
    let v = state.version;
    let proto = if v == Version::Resp3 { 3 } else { 2 };
    ready(|o| {
        resp::map_header(o, 7, v);
        resp::bulk(o, b"server");
        resp::bulk(o, b"latticekv");
        resp::bulk(o, b"version");
        resp::bulk(o, REDIS_COMPAT_VERSION.as_bytes());
        resp::bulk(o, b"proto");
        resp::integer(o, proto);
        resp::bulk(o, b"id");
        resp::integer(o, state.id as i64);
        resp::bulk(o, b"mode");
        resp::bulk(o, b"standalone");
        resp::bulk(o, b"role");
        resp::bulk(o, b"master");
        resp::bulk(o, b"modules");
        resp::array_header(o, 0);
    })
}

fn client(cmd: &Cmd<'_>, state: &mut ConnState) -> Queued {
    if cmd.len() < 2 {
        return arity_error(cmd);
    }
    let sub = cmd.arg(1);
    if sub.eq_ignore_ascii_case(b"SETNAME") && cmd.len() == 3 {
        state.name = Some(cmd.arg(2).to_vec());
        ready(|o| resp::simple(o, "OK"))
    } else if sub.eq_ignore_ascii_case(b"GETNAME") {
        let name = state.name.clone();
        let v = state.version;
        ready(|o| match &name {
            Some(n) => resp::bulk(o, n),
            None => resp::null(o, v),
        })
    } else if sub.eq_ignore_ascii_case(b"ID") {
        let id = state.id as i64;
        ready(|o| resp::integer(o, id))
    } else if sub.eq_ignore_ascii_case(b"SETINFO") && cmd.len() == 4 {
        ready(|o| resp::simple(o, "OK"))
    } else {
        err(&format!(
            "ERR unknown subcommand '{}'. Try CLIENT HELP.",
            String::from_utf8_lossy(sub)
        ))
    }
}

/// One COMMAND entry: `(name, arity, flags, first key, last key, step)` as Redis reports it.
type CommandInfo = (&'static str, i64, &'static [&'static str], i64, i64, i64);

/// The commands latticekv implements.
const COMMANDS: &[CommandInfo] = &[
    ("get", 2, &["readonly", "fast"], 1, 1, 1),
    ("set", -3, &["write", "denyoom"], 1, 1, 1),
    ("del", -2, &["write"], 1, -1, 1),
    ("unlink", -2, &["write", "fast"], 1, -1, 1),
    ("exists", -2, &["readonly", "fast"], 1, -1, 1),
    ("type", 2, &["readonly", "fast"], 1, 1, 1),
    ("mget", -2, &["readonly", "fast"], 1, -1, 1),
    ("mset", -3, &["write", "denyoom"], 1, -1, 2),
    ("incr", 2, &["write", "denyoom", "fast"], 1, 1, 1),
    ("decr", 2, &["write", "denyoom", "fast"], 1, 1, 1),
    ("incrby", 3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("decrby", 3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("sadd", -3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("srem", -3, &["write", "fast"], 1, 1, 1),
    ("smembers", 2, &["readonly"], 1, 1, 1),
    ("sismember", 3, &["readonly", "fast"], 1, 1, 1),
    ("scard", 2, &["readonly", "fast"], 1, 1, 1),
    ("ping", -1, &["fast"], 0, 0, 0),
    ("echo", 2, &["fast"], 0, 0, 0),
    (
        "hello",
        -1,
        &["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
    ),
    ("select", 2, &["loading", "stale", "fast"], 0, 0, 0),
    (
        "quit",
        -1,
        &["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
    ),
    (
        "auth",
        -2,
        &["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
    ),
    (
        "client",
        -2,
        &["admin", "noscript", "loading", "stale"],
        0,
        0,
        0,
    ),
    ("command", -1, &["loading", "stale"], 0, 0, 0),
    (
        "config",
        -2,
        &["admin", "noscript", "loading", "stale"],
        0,
        0,
        0,
    ),
    ("info", -1, &["loading", "stale"], 0, 0, 0),
    ("dbsize", 1, &["readonly", "fast"], 0, 0, 0),
];

fn command_entry(o: &mut Vec<u8>, c: &CommandInfo, v: Version) {
    resp::array_header(o, 6);
    resp::bulk(o, c.0.as_bytes());
    resp::integer(o, c.1);
    resp::set_header(o, c.2.len(), v);
    for f in c.2 {
        resp::simple(o, f);
    }
    resp::integer(o, c.3);
    resp::integer(o, c.4);
    resp::integer(o, c.5);
}

fn command(cmd: &Cmd<'_>, v: Version) -> Queued {
    if cmd.len() == 1 {
        return ready(|o| {
            resp::array_header(o, COMMANDS.len());
            for c in COMMANDS {
                command_entry(o, c, v);
            }
        });
    }
    let sub = cmd.arg(1);
    if sub.eq_ignore_ascii_case(b"COUNT") {
        ready(|o| resp::integer(o, COMMANDS.len() as i64))
    } else if sub.eq_ignore_ascii_case(b"DOCS") {
        // No documentation entries: redis-cli then simply shows no hints.
        ready(|o| resp::map_header(o, 0, v))
    } else if sub.eq_ignore_ascii_case(b"LIST") {
        ready(|o| {
            resp::array_header(o, COMMANDS.len());
            for c in COMMANDS {
                resp::bulk(o, c.0.as_bytes());
            }
        })
    } else if sub.eq_ignore_ascii_case(b"INFO") {
        let names: Vec<Vec<u8>> = (2..cmd.len())
            .map(|i| cmd.arg(i).to_ascii_lowercase())
            .collect();
        ready(|o| {
            resp::array_header(o, names.len());
            for name in &names {
                match COMMANDS.iter().find(|c| c.0.as_bytes() == &name[..]) {
                    Some(c) => command_entry(o, c, v),
                    None => resp::null_array(o, v),
                }
            }
        })
    } else {
        err(&format!(
            "ERR unknown subcommand '{}'. Try COMMAND HELP.",
            String::from_utf8_lossy(sub)
        ))
    }
}

fn config(cmd: &Cmd<'_>, v: Version) -> Queued {
    if cmd.len() >= 3 && cmd.arg(1).eq_ignore_ascii_case(b"GET") {
        // Persistence and the other Redis settings don't apply: report none, as Redis
        // does for parameters it doesn't know (redis-benchmark asks for `save`).
        ready(|o| resp::map_header(o, 0, v))
    } else if cmd.len() >= 2 && cmd.arg(1).eq_ignore_ascii_case(b"SET") {
        err("ERR CONFIG SET is not supported; configure latticekv with its TOML file")
    } else {
        arity_error(cmd)
    }
}

async fn info(ctx: &WorkerCtx) -> String {
    let shared = &ctx.shared;
    let stats = shared.mesh.stats().await;
    let keys: u64 = stats.iter().map(|s| s.shard.primary_keys).sum();
    let memory: u64 = stats.iter().map(|s| s.shard.bytes).sum();
    let commands: u64 = stats.iter().map(|s| s.shard.requests).sum();
    let clients: u64 = stats.iter().map(|s| s.connections).sum();
    format!(
        "# Server\r\nredis_version:{REDIS_COMPAT_VERSION}\r\nlatticekv_version:{}\r\n\
         redis_mode:standalone\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\n\
         workers:{}\r\n\r\n# Clients\r\nconnected_clients:{clients}\r\n\r\n\
         # Memory\r\nused_memory:{memory}\r\nmaxmemory:{}\r\n\r\n\
         # Persistence\r\nloading:0\r\naof_enabled:0\r\n\r\n\
         # Stats\r\ntotal_commands_processed:{commands}\r\n\r\n\
         # Replication\r\nrole:master\r\n\r\n\
         # Keyspace\r\ndb0:keys={keys},expires=0,avg_ttl=0\r\n",
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        shared.resp_addr.port(),
        shared.started.elapsed().as_secs(),
        shared.mesh.len(),
        shared.config.limits.memory_budget_bytes(),
    )
}

fn write_error(out: &mut Vec<u8>, e: &NodeError) {
    resp::error(out, &e.resp_message());
}

/// Encodes the results of a command's ops as its RESP reply.
pub fn encode(out: &mut Vec<u8>, v: Version, shape: &Shape, results: &[OpResult]) {
    // An error in any op is the command's reply (multi-key commands fail as a whole).
    if let Some(e) = results.iter().find_map(|r| match r {
        OpResult::Error(e) => Some(e),
        _ => None,
    }) {
        write_error(out, e);
        return;
    }
    let first = results.first();
    match shape {
        Shape::Get => match first {
            Some(OpResult::Value(Some(value))) => match value {
                Value::Lww(l) => resp::bulk(out, &l.value),
                Value::Counter(c) => resp::bulk(out, c.value().to_string().as_bytes()),
                other => write_error(out, &NodeError::wrong_type("lww", other.lattice_type())),
            },
            _ => resp::null(out, v),
        },
        Shape::Set => match first {
            Some(OpResult::Int(0)) => resp::null(out, v),
            _ => resp::simple(out, "OK"),
        },
        Shape::SetGet => match first {
            Some(OpResult::Value(Some(Value::Lww(l)))) => resp::bulk(out, &l.value),
            _ => resp::null(out, v),
        },
        Shape::Int => match first {
            Some(OpResult::Int(n)) => resp::integer(out, *n),
            _ => resp::integer(out, 0),
        },
        Shape::Sum => {
            let sum = results
                .iter()
                .map(|r| match r {
                    OpResult::Int(n) => *n,
                    _ => 0,
                })
                .sum();
            resp::integer(out, sum)
        }
        Shape::MultiGet => {
            resp::array_header(out, results.len());
            for r in results {
                match r {
                    OpResult::Value(Some(Value::Lww(l))) => resp::bulk(out, &l.value),
                    OpResult::Value(Some(Value::Counter(c))) => {
                        resp::bulk(out, c.value().to_string().as_bytes())
                    }
                    _ => resp::null(out, v),
                }
            }
        }
        Shape::Ok => resp::simple(out, "OK"),
        Shape::Members => match first {
            Some(OpResult::Value(Some(value))) => match value {
                Value::OrSet(s) => {
                    resp::set_header(out, s.len(), v);
                    for m in s.iter() {
                        resp::bulk(out, m);
                    }
                }
                Value::Set(s) => {
                    resp::set_header(out, s.len(), v);
                    for m in s.iter() {
                        resp::bulk(out, m);
                    }
                }
                Value::OrderedSet(s) => {
                    resp::set_header(out, s.len(), v);
                    for m in s.iter() {
                        resp::bulk(out, m);
                    }
                }
                other => write_error(out, &NodeError::wrong_type("a set", other.lattice_type())),
            },
            _ => resp::set_header(out, 0, v),
        },
        Shape::Type => match first {
            Some(OpResult::Type(Some(t))) => resp::simple(out, redis_type_name(*t)),
            _ => resp::simple(out, "none"),
        },
    }
}

/// The Redis type name of a lattice type (TYPE command): Redis's names where one fits.
fn redis_type_name(t: LatticeType) -> &'static str {
    match t {
        LatticeType::Lww | LatticeType::Counter => "string",
        LatticeType::OrSet | LatticeType::Set => "set",
        LatticeType::OrderedSet => "zset",
        LatticeType::Map => "hash",
        other => other.name(),
    }
}
