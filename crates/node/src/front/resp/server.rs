//! Connection and server commands: PING, ECHO, HELLO, SELECT, QUIT, AUTH, ACL, CLIENT,
//! COMMAND, CONFIG, INFO, DBSIZE, TIME, LASTSAVE, SAVE, BGSAVE, WAIT; and the jobs of the
//! key-space and set commands that ask every worker or write after reading (`keys`,
//! `sets`).

use wire::resp::{self, Version};

use super::acl;
use super::commands::{arity_error, parse_i64, syntax_error, Cmd};
use super::reply::{err, ready};
use super::ConnState;
use crate::driver::worker::Worker;

/// The Redis version whose protocol and replies latticekv follows (reported by HELLO and
/// INFO, so clients enable the matching features). 7.2: the commands latticekv implements
/// behave as Redis 7.2's (`SINTERCARD`, `EXPIRETIME`, `CLIENT SETINFO`, which redis-py 5
/// sends on connect), and clients gate no feature latticekv lacks on a later version.
pub const REDIS_COMPAT_VERSION: &str = "7.2.0";

/// What a server command needs.
pub(super) enum Server {
    /// The reply is known.
    Reply(Vec<u8>),
    /// INFO: every worker's counters, for these sections.
    Info(Vec<&'static str>),
    /// DBSIZE: the cluster's key count.
    DbSize,
    // ---- keys, server and sets ----
    /// A key-space command asking every worker, or writing after reading (`keys`).
    Keys(super::keys::KeyJob),
    /// A set command writing after reading (`sets`).
    Sets(super::sets::SetJob),
    /// LASTSAVE: the node's start (writes are made durable continuously, no snapshots).
    LastSave,
    /// CONFIG GET with these patterns (lower case).
    Config(Vec<Vec<u8>>),
    /// `CONFIG SET notify-keyspace-events <flags>` (the value, and the command's length).
    Notify(Vec<u8>, usize),
}

/// A server command `name` (upper case), or `None` if `name` is not one.
pub(super) fn plan(name: &[u8], cmd: &Cmd<'_>, state: &mut ConnState) -> Option<Server> {
    use Server::Reply;
    let argc = cmd.len();
    let v = state.version;
    Some(match name {
        b"PING" => Reply(match argc {
            1 => ready(|o| resp::simple(o, "PONG")),
            2 => ready(|o| resp::bulk(o, cmd.arg(1))),
            _ => arity_error(cmd),
        }),
        b"ECHO" => Reply(if argc == 2 {
            ready(|o| resp::bulk(o, cmd.arg(1)))
        } else {
            arity_error(cmd)
        }),
        b"HELLO" => Reply(hello(cmd, state)),
        b"SELECT" => Reply(if argc != 2 {
            arity_error(cmd)
        } else {
            match parse_i64(cmd.arg(1)) {
                Some(0) => ready(|o| resp::simple(o, "OK")),
                Some(_) => err("ERR DB index is out of range"),
                None => err("ERR value is not an integer or out of range"),
            }
        }),
        b"QUIT" => {
            state.quit = true;
            Reply(ready(|o| resp::simple(o, "OK")))
        }
        b"AUTH" => Reply(acl::auth(cmd, state)),
        b"ACL" => Reply(acl::acl(cmd, state)),
        b"CLIENT" => Reply(super::client::client(cmd, state)),
        b"COMMAND" => Reply(command(cmd, v)),
        b"CONFIG" => {
            if argc < 2 {
                Reply(arity_error(cmd))
            } else {
                config(cmd)
            }
        }
        b"INFO" => {
            let args: Vec<String> = (1..argc)
                .map(|i| String::from_utf8_lossy(cmd.arg(i)).to_lowercase())
                .collect();
            Server::Info(super::info::sections(&args))
        }
        b"TIME" if argc == 1 => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            let (secs, micros) = (now.as_secs().to_string(), now.subsec_micros().to_string());
            Reply(ready(|o| {
                resp::array_header(o, 2);
                resp::bulk(o, secs.as_bytes());
                resp::bulk(o, micros.as_bytes());
            }))
        }
        // Writes are durable as the node's log and disk tier make them, continuously:
        // there is no snapshot to take. LASTSAVE is the node's start.
        b"LASTSAVE" if argc == 1 => Server::LastSave,
        b"SAVE" if argc == 1 => Reply(ready(|o| resp::simple(o, "OK"))),
        b"BGSAVE" if argc <= 2 => Reply(ready(|o| resp::simple(o, "Background saving started"))),
        b"WAIT" if argc == 3 => Reply(match (parse_i64(cmd.arg(1)), parse_i64(cmd.arg(2))) {
            // Replication is asynchronous gossip with no per-write acknowledgement to
            // count: the honest answer is 0 replicas.
            (Some(n), Some(t)) if n >= 0 && t >= 0 => ready(|o| resp::integer(o, 0)),
            (Some(_), Some(_)) => err("ERR timeout is negative"),
            _ => err("ERR value is not an integer or out of range"),
        }),
        b"TIME" | b"LASTSAVE" | b"SAVE" | b"BGSAVE" | b"WAIT" => Reply(arity_error(cmd)),
        b"DBSIZE" => {
            if argc != 1 {
                Reply(arity_error(cmd))
            } else {
                Server::DbSize
            }
        }
        _ => return None,
    })
}

/// The reply to INFO or DBSIZE, which ask every worker.
pub(super) async fn ask_workers(w: &std::rc::Rc<Worker>, what: Server, v: Version) -> Vec<u8> {
    match what {
        Server::Reply(bytes) => bytes,
        Server::Info(sections) => {
            let text = super::info::info(w, &sections).await;
            ready(|o| resp::verbatim(o, text.as_bytes(), v))
        }
        // The keys KEYS lists, on every node of the cluster.
        Server::DbSize => super::keys::dbsize(w).await,
        Server::Keys(job) => super::keys::run_job(w, job, v).await,
        Server::Sets(job) => super::sets::run_job(w, job, v).await,
        Server::Config(patterns) => config_get(w, &patterns, v),
        Server::Notify(value, argc) => config_set_notify(w, &value, argc),
        Server::LastSave => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs();
            let at = now.saturating_sub(w.shared.started.elapsed().as_secs());
            ready(|o| resp::integer(o, at as i64))
        }
    }
}

/// `HELLO [protover [AUTH user pass] [SETNAME name]]`: nothing changes unless every
/// option is valid and the credentials (if any) are right.
fn hello(cmd: &Cmd<'_>, state: &mut ConnState) -> Vec<u8> {
    let mut i = 1;
    let mut version = state.version;
    if cmd.len() > 1 {
        match parse_i64(cmd.arg(1)) {
            Some(2) => version = Version::Resp2,
            Some(3) => version = Version::Resp3,
            _ => return err("NOPROTO unsupported protocol version"),
        }
        i = 2;
    }
    let mut credentials = None;
    let mut name = None;
    while i < cmd.len() {
        let opt = cmd.arg(i);
        if opt.eq_ignore_ascii_case(b"AUTH") && i + 2 < cmd.len() {
            credentials = Some((cmd.arg(i + 1), cmd.arg(i + 2)));
            i += 3;
        } else if opt.eq_ignore_ascii_case(b"SETNAME") && i + 1 < cmd.len() {
            name = Some(cmd.arg(i + 1).to_vec());
            i += 2;
        } else {
            return syntax_error();
        }
    }
    match credentials {
        Some((user, password)) => {
            if let Err(reply) = acl::login(state, user, password) {
                return reply;
            }
        }
        None if state.user.is_none() => {
            return err(
                "NOAUTH HELLO must be called with the client already authenticated, otherwise \
                 the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the \
                 client and select the RESP protocol version at the same time",
            )
        }
        None => {}
    }
    state.version = version;
    if name.is_some() {
        state.name = name;
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

/// One COMMAND entry: `(name, arity, flags, first key, last key, step)` as Redis reports it.
type CommandInfo = (&'static str, i64, &'static [&'static str], i64, i64, i64);

/// The commands latticekv implements.
pub(super) const COMMANDS: &[CommandInfo] = &[
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
    ("setnx", 3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("getset", 3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("getdel", 2, &["write", "fast"], 1, 1, 1),
    ("append", 3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("strlen", 2, &["readonly", "fast"], 1, 1, 1),
    ("getrange", 4, &["readonly"], 1, 1, 1),
    ("substr", 4, &["readonly"], 1, 1, 1),
    ("setrange", 4, &["write", "denyoom"], 1, 1, 1),
    ("incrbyfloat", 3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("msetnx", -3, &["write", "denyoom"], 1, -1, 2),
    ("setex", 4, &["write", "denyoom"], 1, 1, 1),
    ("psetex", 4, &["write", "denyoom"], 1, 1, 1),
    ("expire", -3, &["write", "fast"], 1, 1, 1),
    ("pexpire", -3, &["write", "fast"], 1, 1, 1),
    ("expireat", -3, &["write", "fast"], 1, 1, 1),
    ("pexpireat", -3, &["write", "fast"], 1, 1, 1),
    ("persist", 2, &["write", "fast"], 1, 1, 1),
    ("ttl", 2, &["readonly", "fast"], 1, 1, 1),
    ("pttl", 2, &["readonly", "fast"], 1, 1, 1),
    ("getex", -2, &["write", "fast"], 1, 1, 1),
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
        "acl",
        -2,
        &["admin", "noscript", "loading", "stale"],
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
    (
        "multi",
        1,
        &["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
    ),
    ("exec", 1, &["noscript", "loading", "stale"], 0, 0, 0),
    (
        "discard",
        1,
        &["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
    ),
    (
        "watch",
        -2,
        &["noscript", "loading", "stale", "fast"],
        1,
        -1,
        1,
    ),
    (
        "unwatch",
        1,
        &["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
    ),
    // Pub/sub (front/resp/pubsub.rs runs them).
    (
        "subscribe",
        -2,
        &["pubsub", "noscript", "loading", "stale"],
        0,
        0,
        0,
    ),
    (
        "unsubscribe",
        -1,
        &["pubsub", "noscript", "loading", "stale"],
        0,
        0,
        0,
    ),
    (
        "psubscribe",
        -2,
        &["pubsub", "noscript", "loading", "stale"],
        0,
        0,
        0,
    ),
    (
        "punsubscribe",
        -1,
        &["pubsub", "noscript", "loading", "stale"],
        0,
        0,
        0,
    ),
    (
        "ssubscribe",
        -2,
        &["pubsub", "noscript", "loading", "stale"],
        1,
        -1,
        1,
    ),
    (
        "sunsubscribe",
        -1,
        &["pubsub", "noscript", "loading", "stale"],
        1,
        -1,
        1,
    ),
    (
        "publish",
        3,
        &["pubsub", "loading", "stale", "fast"],
        0,
        0,
        0,
    ),
    (
        "spublish",
        3,
        &["pubsub", "loading", "stale", "fast"],
        1,
        1,
        1,
    ),
    ("pubsub", -2, &["pubsub", "loading", "stale"], 0, 0, 0),
    (
        "reset",
        1,
        &["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
    ),
    // ---- lists (helper B) ----
    ("lpush", -3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("rpush", -3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("lpushx", -3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("rpushx", -3, &["write", "denyoom", "fast"], 1, 1, 1),
    ("lpop", -2, &["write", "fast"], 1, 1, 1),
    ("rpop", -2, &["write", "fast"], 1, 1, 1),
    ("lrange", 4, &["readonly"], 1, 1, 1),
    ("llen", 2, &["readonly", "fast"], 1, 1, 1),
    ("lindex", 3, &["readonly"], 1, 1, 1),
    ("lset", 4, &["write", "denyoom"], 1, 1, 1),
    ("lrem", 4, &["write"], 1, 1, 1),
    ("ltrim", 4, &["write"], 1, 1, 1),
    ("linsert", 5, &["write", "denyoom"], 1, 1, 1),
    ("lpos", -3, &["readonly"], 1, 1, 1),
    ("lmove", 5, &["write", "denyoom"], 1, 2, 1),
    ("rpoplpush", 3, &["write", "denyoom"], 1, 2, 1),
    ("blpop", -3, &["write", "noscript", "blocking"], 1, -2, 1),
    ("brpop", -3, &["write", "noscript", "blocking"], 1, -2, 1),
    (
        "blmove",
        6,
        &["write", "denyoom", "noscript", "blocking"],
        1,
        2,
        1,
    ),
    (
        "brpoplpush",
        4,
        &["write", "denyoom", "noscript", "blocking"],
        1,
        2,
        1,
    ),
    // Redis hashes and sorted sets.
    ("hset", -4, &["write", "denyoom", "fast"], 1, 1, 1),
    ("hmset", -4, &["write", "denyoom", "fast"], 1, 1, 1),
    ("hsetnx", 4, &["write", "denyoom", "fast"], 1, 1, 1),
    ("hget", 3, &["readonly", "fast"], 1, 1, 1),
    ("hmget", -3, &["readonly", "fast"], 1, 1, 1),
    ("hgetall", 2, &["readonly"], 1, 1, 1),
    ("hdel", -3, &["write", "fast"], 1, 1, 1),
    ("hexists", 3, &["readonly", "fast"], 1, 1, 1),
    ("hlen", 2, &["readonly", "fast"], 1, 1, 1),
    ("hkeys", 2, &["readonly"], 1, 1, 1),
    ("hvals", 2, &["readonly"], 1, 1, 1),
    ("hstrlen", 3, &["readonly", "fast"], 1, 1, 1),
    ("hincrby", 4, &["write", "denyoom", "fast"], 1, 1, 1),
    ("hincrbyfloat", 4, &["write", "denyoom", "fast"], 1, 1, 1),
    ("hrandfield", -2, &["readonly"], 1, 1, 1),
    ("hscan", -3, &["readonly"], 1, 1, 1),
    ("zadd", -4, &["write", "denyoom", "fast"], 1, 1, 1),
    ("zincrby", 4, &["write", "denyoom", "fast"], 1, 1, 1),
    ("zscore", 3, &["readonly", "fast"], 1, 1, 1),
    ("zmscore", -3, &["readonly", "fast"], 1, 1, 1),
    ("zrem", -3, &["write", "fast"], 1, 1, 1),
    ("zcard", 2, &["readonly", "fast"], 1, 1, 1),
    ("zcount", 4, &["readonly", "fast"], 1, 1, 1),
    ("zlexcount", 4, &["readonly", "fast"], 1, 1, 1),
    ("zrank", 3, &["readonly", "fast"], 1, 1, 1),
    ("zrevrank", 3, &["readonly", "fast"], 1, 1, 1),
    ("zrange", -4, &["readonly"], 1, 1, 1),
    ("zrevrange", -4, &["readonly"], 1, 1, 1),
    ("zrangebyscore", -4, &["readonly"], 1, 1, 1),
    ("zrevrangebyscore", -4, &["readonly"], 1, 1, 1),
    ("zrangebylex", -4, &["readonly"], 1, 1, 1),
    ("zrevrangebylex", -4, &["readonly"], 1, 1, 1),
    ("zpopmin", -2, &["write", "fast"], 1, 1, 1),
    ("zpopmax", -2, &["write", "fast"], 1, 1, 1),
    ("zremrangebyrank", 4, &["write"], 1, 1, 1),
    ("zremrangebyscore", 4, &["write"], 1, 1, 1),
    ("zremrangebylex", 4, &["write"], 1, 1, 1),
    ("zscan", -3, &["readonly"], 1, 1, 1),
    // keys, server and sets
    ("keys", 2, &["readonly"], 0, 0, 0),
    ("scan", -2, &["readonly"], 0, 0, 0),
    ("randomkey", 1, &["readonly"], 0, 0, 0),
    ("flushdb", -1, &["write"], 0, 0, 0),
    ("flushall", -1, &["write"], 0, 0, 0),
    ("rename", 3, &["write"], 1, 2, 1),
    ("renamenx", 3, &["write", "fast"], 1, 2, 1),
    ("copy", -3, &["write", "denyoom"], 1, 2, 1),
    ("touch", -2, &["readonly", "fast"], 1, -1, 1),
    ("expiretime", 2, &["readonly", "fast"], 1, 1, 1),
    ("pexpiretime", 2, &["readonly", "fast"], 1, 1, 1),
    ("object", -2, &["readonly"], 2, 2, 1),
    ("memory", -2, &["readonly"], 0, 0, 0),
    ("swapdb", 3, &["write", "fast"], 0, 0, 0),
    ("move", 3, &["write", "fast"], 1, 1, 1),
    ("time", 1, &["loading", "stale", "fast"], 0, 0, 0),
    ("lastsave", 1, &["loading", "stale", "fast"], 0, 0, 0),
    ("save", 1, &["admin", "noscript"], 0, 0, 0),
    ("bgsave", -1, &["admin", "noscript"], 0, 0, 0),
    ("wait", 3, &["noscript"], 0, 0, 0),
    ("sinter", -2, &["readonly"], 1, -1, 1),
    ("sunion", -2, &["readonly"], 1, -1, 1),
    ("sdiff", -2, &["readonly"], 1, -1, 1),
    ("sinterstore", -3, &["write", "denyoom"], 1, -1, 1),
    ("sunionstore", -3, &["write", "denyoom"], 1, -1, 1),
    ("sdiffstore", -3, &["write", "denyoom"], 1, -1, 1),
    ("sintercard", -3, &["readonly"], 0, 0, 0),
    ("smove", 4, &["write", "fast"], 1, 2, 1),
    ("spop", -2, &["write", "fast"], 1, 1, 1),
    ("srandmember", -2, &["readonly"], 1, 1, 1),
    ("smismember", -3, &["readonly", "fast"], 1, 1, 1),
    ("sscan", -3, &["readonly"], 1, 1, 1),
    // Scripts.
    (
        "eval",
        -3,
        &["noscript", "stale", "skip_monitor", "may_replicate"],
        0,
        0,
        0,
    ),
    (
        "evalsha",
        -3,
        &["noscript", "stale", "skip_monitor", "may_replicate"],
        0,
        0,
        0,
    ),
    (
        "eval_ro",
        -3,
        &["readonly", "noscript", "stale", "skip_monitor"],
        0,
        0,
        0,
    ),
    (
        "evalsha_ro",
        -3,
        &["readonly", "noscript", "stale", "skip_monitor"],
        0,
        0,
        0,
    ),
    ("script", -2, &["noscript"], 0, 0, 0),
];

/// True if command `name` (lower case) has `flag` in its COMMAND entry (`noscript`: not
/// callable from a script).
pub(super) fn has_flag(name: &str, flag: &str) -> bool {
    COMMANDS
        .iter()
        .find(|c| c.0 == name)
        .is_some_and(|c| c.2.contains(&flag))
}

/// The Redis arity of command `name` (lower case): `n` exactly `n` arguments with the
/// name, `-n` at least `n`; `None` if latticekv does not implement it.
pub(super) fn arity(name: &str) -> Option<i64> {
    COMMANDS.iter().find(|c| c.0 == name).map(|c| c.1)
}

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

fn command(cmd: &Cmd<'_>, v: Version) -> Vec<u8> {
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

fn config(cmd: &Cmd<'_>) -> Server {
    let sub = cmd.arg(1);
    if cmd.len() >= 3 && sub.eq_ignore_ascii_case(b"GET") {
        Server::Config(
            (2..cmd.len())
                .map(|i| cmd.arg(i).to_ascii_lowercase())
                .collect(),
        )
    } else if cmd.len() >= 4 && sub.eq_ignore_ascii_case(b"SET") {
        if cmd.arg(2).eq_ignore_ascii_case(b"notify-keyspace-events") {
            return Server::Notify(cmd.arg(3).to_vec(), cmd.len());
        }
        Server::Reply(err(&format!(
            "ERR CONFIG SET {} is not supported: latticekv is configured with its TOML file \
             and command-line options (restart the node to change them)",
            String::from_utf8_lossy(cmd.arg(2))
        )))
    } else if cmd.len() == 2 && sub.eq_ignore_ascii_case(b"RESETSTAT") {
        Server::Reply(ready(|o| resp::simple(o, "OK")))
    } else if cmd.len() == 2 && sub.eq_ignore_ascii_case(b"REWRITE") {
        Server::Reply(err(
            "ERR CONFIG REWRITE is not supported: edit the TOML file",
        ))
    } else {
        Server::Reply(arity_error(cmd))
    }
}

/// `CONFIG SET notify-keyspace-events <flags>`: this node's flags (every node has its own,
/// as every server of a Redis Cluster does), validated as Redis does.
fn config_set_notify(w: &Worker, value: &[u8], argc: usize) -> Vec<u8> {
    let failed = |why: &str| {
        err(&format!(
            "ERR CONFIG SET failed (possibly related to argument 'notify-keyspace-events') - {why}"
        ))
    };
    if argc != 4 {
        // Redis 7.0 takes several parameters in one CONFIG SET; latticekv only this one.
        return err("ERR syntax error");
    }
    match crate::notify::parse(value) {
        Some(flags) => {
            w.shared.pubsub.keyspace.set(flags);
            ready(|o| resp::simple(o, "OK"))
        }
        None => failed(crate::notify::INVALID),
    }
}

/// `CONFIG GET pattern…`: the common Redis parameters, with latticekv's values where one
/// exists (`maxmemory` is the node's memory budget, `maxclients` its connection limit,
/// `port` its RESP port) and Redis's defaults that describe latticekv otherwise.
fn config_get(w: &Worker, patterns: &[Vec<u8>], v: Version) -> Vec<u8> {
    let limits = &w.shared.config.limits;
    let params: Vec<(&str, String)> = vec![
        ("maxmemory", limits.memory_budget_bytes().to_string()),
        ("maxmemory-policy", "noeviction".into()),
        ("maxclients", limits.max_connections.to_string()),
        ("port", w.shared.resp_port.to_string()),
        ("databases", "1".into()),
        ("save", String::new()),
        ("appendonly", "no".into()),
        ("appendfsync", "everysec".into()),
        ("timeout", "0".into()),
        ("tcp-keepalive", "300".into()),
        ("hz", "10".into()),
        (
            "notify-keyspace-events",
            crate::notify::format(w.shared.pubsub.keyspace.get()),
        ),
        ("cluster-enabled", "no".into()),
        ("proto-max-bulk-len", limits.max_frame_size.to_string()),
    ];
    let hits: Vec<&(&str, String)> = params
        .iter()
        .filter(|(name, _)| {
            patterns
                .iter()
                .any(|p| crate::glob::matches(p, name.as_bytes()))
        })
        .collect();
    ready(|o| {
        resp::map_header(o, hits.len(), v);
        for (name, value) in hits {
            resp::bulk(o, name.as_bytes());
            resp::bulk(o, value.as_bytes());
        }
    })
}
