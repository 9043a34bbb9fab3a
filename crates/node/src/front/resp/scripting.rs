//! Scripts: `EVAL`, `EVALSHA`, `EVAL_RO`, `EVALSHA_RO`, `SCRIPT LOAD|EXISTS|FLUSH`, and the
//! commands a script calls.
//!
//! `EVAL` becomes one [`Op::Script`] routed like any op to the worker holding its first key
//! (a script without keys goes to the worker holding its SHA1 as a key); the shard checks
//! that every key of `KEYS` is served there and runs the script as one op
//! (`shard::script`), calling back into [`run`] — installed as the shard's script runner —
//! which hands the Lua engine ([`crate::script`]) a [`Host`] that plans each `redis.call`
//! with the RESP command table and executes its ops on that worker, synchronously.
//!
//! The node's script cache ([`ScriptCache`]) is what `EVALSHA` and `SCRIPT` see; `EVAL`
//! adds its script to it, as Redis does.

use std::sync::Arc;

use bytes::Bytes;
use wire::resp::{self, Args, Reply, Version};

use super::commands::{self, parse_i64, Cmd, Plan};
use super::reply::{encode, err, ready, Shape};
use super::server;
use super::ConnState;
use crate::op::{Op, OpResult};
use crate::script::{self as engine, Budget, Host, KillOutcome, RunFlags, ScriptCache};
use crate::shard::{ScriptCall, Shard};

/// Plans the script commands; `None` for any other command.
pub(super) fn plan<'a>(name: &[u8], cmd: &Cmd<'a>, state: &ConnState) -> Option<Plan<'a>> {
    let (by_sha, read_only) = match name {
        b"EVAL" => (false, false),
        b"EVALSHA" => (true, false),
        b"EVAL_RO" => (false, true),
        b"EVALSHA_RO" => (true, true),
        b"SCRIPT" => return Some(Plan::Reply(script(cmd, &state.scripts))),
        _ => return None,
    };
    Some(eval(cmd, state, by_sha, read_only))
}

fn eval<'a>(cmd: &Cmd<'a>, state: &ConnState, by_sha: bool, read_only: bool) -> Plan<'a> {
    if cmd.len() < 3 {
        return Plan::Reply(commands::arity_error(cmd));
    }
    let Some(numkeys) = parse_i64(cmd.arg(2)) else {
        return Plan::Reply(err("ERR value is not an integer or out of range"));
    };
    if numkeys < 0 {
        return Plan::Reply(err("ERR Number of keys can't be negative"));
    }
    let numkeys = numkeys as usize;
    if numkeys > cmd.len() - 3 {
        return Plan::Reply(err(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    let keys: Vec<&[u8]> = (3..3 + numkeys).map(|i| cmd.arg(i)).collect();
    let args: Vec<&[u8]> = (3 + numkeys..cmd.len()).map(|i| cmd.arg(i)).collect();
    let (body, sha): (Bytes, String) = if by_sha {
        match state.scripts.get(cmd.arg(1)) {
            Some(body) => {
                let sha = String::from_utf8_lossy(cmd.arg(1)).to_ascii_lowercase();
                (body, sha)
            }
            None => return Plan::Reply(err("NOSCRIPT No matching script. Please use EVAL.")),
        }
    } else {
        let body = Bytes::copy_from_slice(cmd.arg(1));
        let sha = state.scripts.load(body.clone());
        (body, sha)
    };
    let read_only = read_only || engine::declares_no_writes(&body);
    // Routed by its first key; a script without keys by its name (any key will do, the
    // name spreads such scripts over the workers).
    let op = Op::Script {
        key: Bytes::copy_from_slice(keys.first().copied().unwrap_or(sha.as_bytes())),
        body,
        keys: keys.iter().map(|k| Bytes::copy_from_slice(k)).collect(),
        args: args.iter().map(|a| Bytes::copy_from_slice(a)).collect(),
        read_only,
        resp3: state.version == Version::Resp3,
    };
    Plan::Script(op)
}

/// `SCRIPT LOAD | EXISTS | FLUSH | HELP`.
fn script(cmd: &Cmd<'_>, scripts: &Arc<ScriptCache>) -> Vec<u8> {
    let sub = cmd.arg(1).to_ascii_uppercase();
    match sub.as_slice() {
        b"LOAD" if cmd.len() == 3 => {
            let sha = scripts.load(Bytes::copy_from_slice(cmd.arg(2)));
            ready(|o| resp::bulk(o, sha.as_bytes()))
        }
        b"EXISTS" if cmd.len() >= 3 => ready(|o| {
            resp::array_header(o, cmd.len() - 2);
            for i in 2..cmd.len() {
                resp::integer(o, i64::from(scripts.contains(cmd.arg(i))));
            }
        }),
        b"FLUSH" if cmd.len() <= 3 => {
            let mode = cmd.arg(2).to_ascii_uppercase();
            if cmd.len() == 3 && mode != b"SYNC" && mode != b"ASYNC" {
                return err("ERR SCRIPT FLUSH only support SYNC|ASYNC option");
            }
            scripts.flush();
            ready(|o| resp::simple(o, "OK"))
        }
        b"KILL" if cmd.len() == 2 => match scripts.runs.kill() {
            KillOutcome::Killed => ready(|o| resp::simple(o, "OK")),
            KillOutcome::NotBusy => err("NOTBUSY No scripts in execution right now."),
            KillOutcome::Unkillable => err(
                "UNKILLABLE Sorry the script already executed write commands against the \
                 dataset. You can either wait the script termination or kill the server in a \
                 hard way using the SHUTDOWN NOSAVE command.",
            ),
        },
        b"HELP" if cmd.len() == 2 => ready(|o| {
            let lines = [
                "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "EXISTS <sha1> [<sha1> ...]",
                "    Return information about the existence of the scripts in the script cache.",
                "FLUSH [ASYNC|SYNC]",
                "    Flush the Lua scripts cache.",
                "KILL",
                "    Kill the currently executing Lua script.",
                "LOAD <script>",
                "    Load a script into the scripts cache without executing it.",
                "HELP",
                "    Print this help.",
            ];
            resp::array_header(o, lines.len());
            for l in lines {
                resp::simple(o, l);
            }
        }),
        b"LOAD" | b"EXISTS" | b"FLUSH" | b"KILL" | b"HELP" => err(&format!(
            "ERR wrong number of arguments for 'script|{}' command",
            String::from_utf8_lossy(cmd.arg(1)).to_lowercase()
        )),
        _ => err(&format!(
            "ERR unknown subcommand '{}'. Try SCRIPT HELP.",
            String::from_utf8_lossy(cmd.arg(1))
        )),
    }
}

/// The shard's script runner: runs the script of `call` on `shard`.
pub(crate) fn run(shard: &mut Shard, call: ScriptCall<'_>) -> OpResult {
    let limits = *shard.limits();
    let budget = Budget {
        time: std::time::Duration::from_millis(limits.script_time_limit_ms),
        memory: limits.script_memory_bytes,
        max_reply: limits.max_reply_bytes,
    };
    let sha = engine::sha1_hex(call.body);
    let version = if call.resp3 {
        Version::Resp3
    } else {
        Version::Resp2
    };
    // Registered with the node's runs (`SCRIPT KILL`) while it runs.
    let guard = shard.script_runs().map(|runs| runs.start());
    let flags = guard.as_ref().map(|g| g.flags().clone());
    let mut host = ShardHost {
        shard,
        read_only: call.read_only,
        flags: flags.clone(),
    };
    let reply = engine::eval(
        call.body,
        &sha,
        &engine::Call {
            keys: &call.keys,
            args: &call.args,
            version,
            redis_version: server::REDIS_COMPAT_VERSION,
            flags,
        },
        &budget,
        &mut host,
    );
    OpResult::Reply(Bytes::from(reply))
}

/// Runs a script's commands on the worker running it.
struct ShardHost<'s> {
    shard: &'s mut Shard,
    read_only: bool,
    /// The run's `SCRIPT KILL` flags: a write marks the run unkillable, and is refused if
    /// the run was killed first.
    flags: Option<Arc<RunFlags>>,
}

impl Host for ShardHost<'_> {
    fn call(&mut self, args: &[&[u8]]) -> Reply {
        let mut buf = Vec::new();
        resp::reply::command(&mut buf, args);
        let mut parsed = Args::default();
        let limits = resp::Limits {
            max_bulk_len: usize::MAX,
            max_args: usize::MAX,
            max_inline_len: 0,
            max_request_len: usize::MAX,
        };
        if !matches!(resp::parse_command(&buf, &limits, &mut parsed), Ok(Some(_))) {
            return error("ERR Unknown Redis command called from script");
        }
        let cmd = Cmd {
            buf: &buf,
            args: &parsed,
        };
        let name = cmd.name_lower();
        let Some(arity) = server::arity(&name) else {
            return error("ERR Unknown Redis command called from script");
        };
        let argc = cmd.len() as i64;
        if (arity >= 0 && argc != arity) || (arity < 0 && argc < -arity) {
            return error("ERR Wrong number of args calling Redis command from script");
        }
        if server::has_flag(&name, "noscript") {
            return error("ERR This Redis command is not allowed from script");
        }
        let (shape, ops) = match commands::plan_data(&cmd) {
            Some(Plan::Get(key)) => (Shape::Get, vec![Op::Get { key }]),
            Some(Plan::One(shape, op)) => (shape, vec![op]),
            Some(Plan::Ops(shape, ops)) => (shape, ops),
            Some(Plan::Reply(bytes)) => return parse(&bytes),
            Some(Plan::Script(_)) | Some(Plan::Server(_)) | None => {
                return match name.as_str() {
                    "ping" if cmd.len() == 1 => Reply::Simple(b"PONG".to_vec()),
                    "ping" => Reply::Bulk(Some(cmd.arg(1).to_vec())),
                    "echo" => Reply::Bulk(Some(cmd.arg(1).to_vec())),
                    "select" if cmd.arg(1) == b"0" => Reply::Simple(b"OK".to_vec()),
                    _ => error(
                        "ERR This Redis command is not allowed from script (latticekv runs \
                         a script's commands on the worker holding its keys: commands \
                         reading several workers, server commands and scripts are not \
                         available there)",
                    ),
                }
            }
        };
        let writes = ops.iter().any(Op::is_write);
        if self.read_only && writes {
            return error("ERR Write commands are not allowed from read-only scripts.");
        }
        let mut results = Vec::with_capacity(ops.len());
        for op in &ops {
            for key in op.keys() {
                if let Err(e) = self.shard.script_key(key) {
                    return parse(&ready(|o| super::reply::write_error(o, &e)));
                }
            }
        }
        if writes && self.flags.as_ref().is_some_and(|f| !f.try_write()) {
            return error("ERR Script killed by user with SCRIPT KILL...");
        }
        for op in ops {
            results.push(self.shard.execute(op));
        }
        let mut out = Vec::new();
        encode(&mut out, Version::Resp2, &shape, &results);
        parse(&out)
    }
}

fn error(msg: &str) -> Reply {
    Reply::Error(msg.as_bytes().to_vec())
}

/// A reply this module encoded, parsed back for the script.
fn parse(bytes: &[u8]) -> Reply {
    let limits = resp::Limits {
        max_bulk_len: usize::MAX,
        max_args: usize::MAX,
        max_inline_len: 0,
        max_request_len: usize::MAX,
    };
    match resp::parse_reply(bytes, &limits) {
        Ok(Some((reply, _))) => reply,
        _ => error("ERR internal error: an unreadable reply"),
    }
}
