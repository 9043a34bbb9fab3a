//! The Lua engine: runs one script in the worker's Lua 5.1 state (`engine`) and returns its
//! reply.
//!
//! Errors read as Redis 7's: a runtime error is `ERR user_script:<line>: <message> script:
//! <sha>, on @user_script:<line>.`, an error reply raised by `redis.call` is that reply's
//! text followed by the same ` script: …` suffix, a compile error is `ERR Error compiling
//! script (new function): user_script:<line>: <message>`.

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::Duration;

use mlua::{Lua, MultiValue, Value};
use wire::resp::{self, Reply, Version};

use super::convert::{self, ReplyError};
use super::engine::{with_engine, Engine, Stop};
use super::runs::RunFlags;

/// The commands a script calls (`redis.call` / `redis.pcall`).
pub(crate) trait Host {
    /// Runs one command; its reply as RESP2 carries it (a refused command is an error reply
    /// with Redis's text, e.g. `ERR This Redis command is not allowed from script`).
    fn call(&mut self, args: &[&[u8]]) -> Reply;
}

/// What one run may use.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    /// Running time before the script is aborted.
    pub(crate) time: Duration,
    /// Bytes of Lua heap.
    pub(crate) memory: usize,
    /// Bytes of the reply.
    pub(crate) max_reply: usize,
}

/// What a run is given besides its source.
pub(crate) struct Call<'a> {
    /// `KEYS`.
    pub(crate) keys: &'a [&'a [u8]],
    /// `ARGV`.
    pub(crate) args: &'a [&'a [u8]],
    /// The reply's protocol.
    pub(crate) version: Version,
    /// `redis.REDIS_VERSION`.
    pub(crate) redis_version: &'a str,
    /// The run's `SCRIPT KILL` flags, if it is registered with the node's runs.
    pub(crate) flags: Option<Arc<RunFlags>>,
}

/// Runs `body` and returns its reply encoded for `call.version` (an error reply if it
/// failed). `sha` names it in error messages.
pub(crate) fn eval(
    body: &[u8],
    sha: &str,
    call: &Call<'_>,
    budget: &Budget,
    host: &mut dyn Host,
) -> Vec<u8> {
    let mut out = Vec::new();
    match run(body, sha, call, budget, host, &mut out) {
        Ok(()) => out,
        Err(msg) => {
            let mut out = Vec::with_capacity(msg.len() + 3);
            resp::error(&mut out, &msg);
            out
        }
    }
}

fn run(
    body: &[u8],
    sha: &str,
    call: &Call<'_>,
    budget: &Budget,
    host: &mut dyn Host,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let outcome = with_engine(call.redis_version, |engine| {
        let result = run_in(engine, body, sha, call, budget, host, out);
        let stop = engine.end();
        match (result, stop) {
            // A stopped run leaves the state behind (its coroutines, its garbage): a new
            // one serves the next run.
            (_, Some(stop)) => (Err(stopped(stop, sha, budget)), false),
            (Err(Failure::Engine(e)), None) => (Err(internal(&e)), false),
            (Err(Failure::Reply(msg)), None) => (Err(msg), true),
            (Ok(()), None) => (Ok(()), true),
        }
    });
    outcome.unwrap_or_else(|e| Err(internal(&e)))
}

/// How a run failed.
enum Failure {
    /// The engine failed (the state is dropped).
    Engine(mlua::Error),
    /// The script's error reply.
    Reply(String),
}

impl From<mlua::Error> for Failure {
    fn from(e: mlua::Error) -> Self {
        Failure::Engine(e)
    }
}

fn internal(e: &mlua::Error) -> String {
    format!("ERR script engine: {}", root_message(e))
}

/// The error reply of a run stopped by its time limit or `SCRIPT KILL`.
fn stopped(stop: Stop, sha: &str, budget: &Budget) -> String {
    match stop {
        Stop::TimeLimit => format!(
            "ERR Script killed: it ran longer than the script time limit ({} ms) and was \
             aborted; the writes it made before are kept. script: {sha}",
            budget.time.as_millis()
        ),
        Stop::Killed => format!("ERR Script killed by user with SCRIPT KILL... script: {sha}"),
    }
}

fn run_in(
    engine: &mut Engine,
    body: &[u8],
    sha: &str,
    call: &Call<'_>,
    budget: &Budget,
    host: &mut dyn Host,
    out: &mut Vec<u8>,
) -> Result<(), Failure> {
    engine.begin(budget.time, budget.memory, call.flags.clone())?;
    let script = engine.function(body).map_err(|e| {
        Failure::Reply(format!(
            "ERR Error compiling script (new function): {}",
            root_message(&e)
        ))
    })?;
    let lua = &engine.lua;
    let table = |items: &[&[u8]]| -> mlua::Result<mlua::Table> {
        let t = lua.create_table_with_capacity(items.len(), 0)?;
        for (i, item) in items.iter().enumerate() {
            t.raw_set(i + 1, lua.create_string(item)?)?;
        }
        Ok(t)
    };
    engine.backing.raw_set("KEYS", table(call.keys)?)?;
    engine.backing.raw_set("ARGV", table(call.args)?)?;
    let host = RefCell::new(host);
    // The line of the last `redis.call`, and the last error reply it got: raised as a
    // string (as Redis 7 does), its message reads as the reply's, not as a Lua error's.
    let call_line = Cell::new(0);
    let last_error: RefCell<Option<Vec<u8>>> = RefCell::new(None);
    let state = &engine.state;
    let reply = lua.scope(|scope| {
        let raw = scope.create_function(|lua, (args, n): (mlua::Table, usize)| {
            call_line.set(user_line(lua));
            if state.stopped().is_some() {
                return Err(mlua::Error::RuntimeError("Script killed".into()));
            }
            raw_call(lua, &args, n, &host, &last_error)
        })?;
        engine.hidden.raw_set("raw", raw)?;
        // The first value the script returns, or what it raised.
        let protected: MultiValue = engine.runner.call(script)?;
        let mut values = protected.into_iter();
        let ok = matches!(values.next(), Some(Value::Boolean(true)));
        let value = values.next().unwrap_or(Value::Nil);
        if state.stop().is_some() {
            return Ok(Ok(()));
        }
        if !ok {
            let from_call = match &value {
                Value::String(s) => last_error.borrow().as_deref() == Some(&s.as_bytes()[..]),
                _ => false,
            };
            return Ok(Err(error_message(&value, sha, call_line.get(), from_call)));
        }
        Ok(
            match convert::to_resp(&value, call.version, out, budget.max_reply) {
                Ok(()) => Ok(()),
                Err(ReplyError::TooDeep) => Err(format!(
                    "ERR reached the limit of {} nested tables in the script's reply script: {sha}",
                    convert::MAX_DEPTH
                )),
                Err(ReplyError::TooLarge) => Err(format!(
                "ERR the script's reply is larger than the reply limit ({} bytes) script: {sha}",
                budget.max_reply
            )),
            },
        )
    });
    match reply {
        Ok(Ok(())) => Ok(()),
        Ok(Err(msg)) => Err(Failure::Reply(msg)),
        // The hook's error escaping the runner: reported as the stop (see `run`).
        Err(_) if state.stop().is_some() => Ok(()),
        Err(e) => Err(Failure::Engine(e)),
    }
}

/// `redis.call`'s work on its `n` arguments packed in `args`: `(reply, nil)`, `(error
/// table, 1)` for an error reply, `(message, 2)` for a call that could not be made (bad
/// arguments). Arguments are read one at a time: mlua keeps a bounded number of Lua values
/// alive at once.
fn raw_call(
    lua: &Lua,
    args: &mlua::Table,
    n: usize,
    host: &RefCell<&mut dyn Host>,
    last_error: &RefCell<Option<Vec<u8>>>,
) -> mlua::Result<(Value, Value)> {
    if n == 0 {
        let msg =
            lua.create_string("Please specify at least one argument for this redis lib call")?;
        return Ok((Value::String(msg), Value::Number(2.0)));
    }
    let mut bytes: Vec<Vec<u8>> = Vec::with_capacity(n.min(1024));
    for i in 1..=n {
        let a: Value = args.raw_get(i)?;
        match a {
            Value::String(_) | Value::Number(_) | Value::Integer(_) => {
                match lua.coerce_string(a)? {
                    Some(s) => bytes.push(s.as_bytes().to_vec()),
                    None => return bad_arguments(lua),
                }
            }
            _ => return bad_arguments(lua),
        }
    }
    let slices: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
    let reply = host.borrow_mut().call(&slices);
    let is_error = match &reply {
        Reply::Error(e) => {
            *last_error.borrow_mut() = Some(e.clone());
            true
        }
        _ => false,
    };
    let value = convert::from_reply(lua, reply)?;
    Ok((
        value,
        if is_error {
            Value::Number(1.0)
        } else {
            Value::Nil
        },
    ))
}

fn bad_arguments(lua: &Lua) -> mlua::Result<(Value, Value)> {
    let msg = lua.create_string("Lua redis lib command arguments must be strings or integers")?;
    Ok((Value::String(msg), Value::Number(2.0)))
}

/// The line of the script's code that is running (the innermost frame of the script).
fn user_line(lua: &Lua) -> i32 {
    for level in 1..8 {
        let Some(frame) = lua.inspect_stack(level) else {
            break;
        };
        if frame
            .source()
            .source
            .is_some_and(|s| s.trim_start_matches('@') == "user_script")
        {
            return frame.curr_line();
        }
    }
    0
}

/// The error reply of a script that raised `value` (`from_call`: the error reply a
/// `redis.call` raised).
fn error_message(value: &Value, sha: &str, call_line: i32, from_call: bool) -> String {
    let at = |line: i32| {
        if line > 0 {
            format!(" script: {sha}, on @user_script:{line}.")
        } else {
            // A `return redis.call(…)` is a tail call: its line is gone from the stack.
            format!(" script: {sha}")
        }
    };
    match value {
        Value::String(s) if from_call => {
            format!(
                "{}{}",
                String::from_utf8_lossy(&s.as_bytes()),
                at(call_line)
            )
        }
        // A table the script raised (`error({err = …})`, `error(redis.error_reply(…))`).
        Value::Table(t) => {
            let msg = convert::text_field(t, "err").unwrap_or_else(|| "ERR unknown error".into());
            format!("{msg}{}", at(call_line))
        }
        Value::String(s) => {
            let msg = String::from_utf8_lossy(&s.as_bytes()).into_owned();
            let line = line_of(&msg).unwrap_or(call_line);
            format!("ERR {msg}{}", at(line))
        }
        Value::Error(e) => format!("ERR {} script: {sha}", root_message(e)),
        other => format!(
            "ERR the script raised a {} script: {sha}",
            other.type_name()
        ),
    }
}

/// The line in a Lua error message `user_script:<line>: …`.
fn line_of(msg: &str) -> Option<i32> {
    let rest = msg.strip_prefix("user_script:")?;
    rest.split(':').next()?.parse().ok()
}

/// The message of an error without mlua's wrapping (tracebacks, "callback error").
fn root_message(e: &mlua::Error) -> String {
    match e {
        mlua::Error::CallbackError { cause, .. } => root_message(cause),
        mlua::Error::RuntimeError(m) => m.clone(),
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        mlua::Error::MemoryError(_) => "not enough memory".into(),
        other => other.to_string(),
    }
}

/// True if `body` declares `flags=no-writes` in a `#!lua` shebang (it may then run as a
/// read-only script).
pub(crate) fn declares_no_writes(body: &[u8]) -> bool {
    let line = match body.iter().position(|&b| b == b'\n') {
        Some(end) => &body[..end],
        None => body,
    };
    let Some(rest) = line.strip_prefix(b"#!lua") else {
        return false;
    };
    String::from_utf8_lossy(rest)
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("flags="))
        .any(|flags| flags.split(',').any(|f| f == "no-writes"))
}

#[cfg(test)]
#[path = "lua_tests.rs"]
mod tests;
