//! The Lua engine: runs one script in a fresh Lua 5.1 state and returns its reply.
//!
//! Errors read as Redis 7's: a runtime error is `ERR user_script:<line>: <message> script:
//! <sha>, on @user_script:<line>.`, an error reply raised by `redis.call` is that reply's
//! text followed by the same ` script: …` suffix, a compile error is `ERR Error compiling
//! script (new function): user_script:<line>: <message>`.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use mlua::{HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Value, VmState};
use wire::resp::{self, Reply, Version};

use super::convert::{self, ReplyError};
use super::HOOK_EVERY;

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
}

/// The chunk name: error messages say `user_script:<line>:` as Redis's do.
const CHUNK: &str = "@user_script";

/// Defines `redis.call` and `redis.pcall` over the host's raw call (see [`raw_call`]), the
/// helper functions, and makes the globals read-only. `pcall`, `xpcall` and
/// `coroutine.resume` raise again once the script is past its time limit (`killed`): the
/// hook's error could otherwise be caught at the same point of a loop every time.
const PRELUDE: &str = r#"
local raw, redis, killed = ...
local rawpcall, rawxpcall, resume = pcall, xpcall, coroutine.resume
local function check(...)
  if killed() then error('Script killed', 0) end
  return ...
end
pcall = function(...) return check(rawpcall(...)) end
xpcall = function(...) return check(rawxpcall(...)) end
coroutine.resume = function(...) return check(resume(...)) end
redis.pcall = function(...)
  local v, kind = raw({...}, select('#', ...))
  if kind == 2 then error(v, 2) end
  return v
end
redis.call = function(...)
  local v, kind = raw({...}, select('#', ...))
  if kind == 2 then error(v, 2) elseif kind == 1 then error(v.err, 0) end
  return v
end
local rawlog = redis.log
redis.log = function(level, ...)
  local parts = {...}
  for i = 1, select('#', ...) do parts[i] = tostring(parts[i]) end
  rawlog(tonumber(level) or 2, table.concat(parts, ' '))
end
redis.error_reply = function(msg)
  if type(msg) ~= 'string' then error('wrong number or type of arguments', 2) end
  return {err = msg}
end
redis.status_reply = function(msg)
  if type(msg) ~= 'string' then error('wrong number or type of arguments', 2) end
  return {ok = msg}
end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL = 0, 1, 2, 2, 3
redis.set_repl = function() end
redis.replicate_commands = function() return true end
redis.setresp = function(n)
  if n == 2 then return end
  if n == 3 then error('RESP3 replies inside scripts are not supported by latticekv', 2) end
  error('RESP version must be 2 or 3.', 2)
end
redis.breakpoint = function() return false end
redis.debug = function() end
_G.redis = redis
dofile, loadfile, print = nil, nil, nil
setmetatable(_G, {
  __newindex = function() error('Attempt to modify a readonly table', 2) end,
  __index = function(_, name)
    error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
  end,
})
"#;

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
    let internal = |e: mlua::Error| format!("ERR script engine: {}", root_message(&e));
    let lua = Lua::new_with(
        StdLib::TABLE | StdLib::STRING | StdLib::MATH,
        LuaOptions::new(),
    )
    .map_err(internal)?;
    lua.set_memory_limit(budget.memory).map_err(internal)?;
    let killed = Rc::new(Cell::new(false));
    {
        let (killed, started, limit) = (killed.clone(), Instant::now(), budget.time);
        lua.set_hook(
            HookTriggers::new().every_nth_instruction(HOOK_EVERY),
            move |_, _| {
                // Once past the limit, every later check raises again, so a script that
                // catches the error with pcall cannot go on.
                if killed.get() || started.elapsed() > limit {
                    killed.set(true);
                    return Err(mlua::Error::RuntimeError("script time limit".into()));
                }
                Ok(VmState::Continue)
            },
        );
    }
    let source = strip_shebang(body);
    let script = lua
        .load(source)
        .set_name(CHUNK)
        .into_function()
        .map_err(|e| {
            format!(
                "ERR Error compiling script (new function): {}",
                root_message(&e)
            )
        })?;
    let globals = lua.globals();
    let table = |items: &[&[u8]]| -> mlua::Result<mlua::Table> {
        let t = lua.create_table_with_capacity(items.len(), 0)?;
        for (i, item) in items.iter().enumerate() {
            t.raw_set(i + 1, lua.create_string(item)?)?;
        }
        Ok(t)
    };
    globals
        .raw_set("KEYS", table(call.keys).map_err(internal)?)
        .map_err(internal)?;
    globals
        .raw_set("ARGV", table(call.args).map_err(internal)?)
        .map_err(internal)?;
    let redis = lua.create_table().map_err(internal)?;
    let host = RefCell::new(host);
    // The line of the last `redis.call`, and the last error reply it got: raised as a
    // string (as Redis 7 does), its message reads as the reply's, not as a Lua error's.
    let call_line = Cell::new(0);
    let last_error: RefCell<Option<Vec<u8>>> = RefCell::new(None);
    let outcome = lua.scope(|scope| {
        let raw = scope.create_function(|lua, (args, n): (mlua::Table, usize)| {
            call_line.set(user_line(lua));
            raw_call(lua, &args, n, &host, &last_error)
        })?;
        redis.raw_set(
            "sha1hex",
            scope.create_function(|_, s: mlua::String| Ok(super::sha1_hex(&s.as_bytes())))?,
        )?;
        redis.raw_set(
            "log",
            scope.create_function(|_, (level, text): (i64, mlua::String)| {
                log(level, &String::from_utf8_lossy(&text.as_bytes()));
                Ok(())
            })?,
        )?;
        redis.raw_set("REDIS_VERSION", call.redis_version)?;
        redis.raw_set("REDIS_VERSION_NUM", version_num(call.redis_version))?;
        let is_killed = {
            let killed = killed.clone();
            scope.create_function(move |_, ()| Ok(killed.get()))?
        };
        lua.load(PRELUDE)
            .set_name("=prelude")
            .call::<()>((raw, redis.clone(), is_killed))?;
        // The first value the script returns, or what it raised.
        let protected: MultiValue = lua
            .load("local f = ... return pcall(f)")
            .set_name("=run")
            .call(script)?;
        let mut values = protected.into_iter();
        let ok = matches!(values.next(), Some(Value::Boolean(true)));
        let value = values.next().unwrap_or(Value::Nil);
        if killed.get() {
            return Ok(Err(format!(
                "ERR Script killed: it ran longer than the script time limit ({} ms) and was \
                 aborted; the writes it made before are kept. script: {sha}",
                budget.time.as_millis()
            )));
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
    match outcome {
        Ok(result) => result,
        Err(_) if killed.get() => Err(format!(
            "ERR Script killed: it ran longer than the script time limit ({} ms) script: {sha}",
            budget.time.as_millis()
        )),
        Err(e) => Err(internal(e)),
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

/// `redis.log(level, message, …)`: to the node's log.
fn log(level: i64, text: &str) {
    match level {
        0 => tracing::debug!(target: "latticekv::script", "{text}"),
        1 | 2 => tracing::info!(target: "latticekv::script", "{text}"),
        _ => tracing::warn!(target: "latticekv::script", "{text}"),
    }
}

/// `7.0.15` → `0x07000f`, as `REDIS_VERSION_NUM`.
fn version_num(v: &str) -> i64 {
    let mut n = 0i64;
    for part in v.split('.').take(3) {
        n = (n << 8) | part.parse::<i64>().unwrap_or(0).clamp(0, 255);
    }
    n
}

/// The source without a `#!lua …` first line (Redis 7's shebang), its line kept empty so
/// line numbers stay those of the text sent.
fn strip_shebang(body: &[u8]) -> Vec<u8> {
    if !body.starts_with(b"#!") {
        return body.to_vec();
    }
    match body.iter().position(|&b| b == b'\n') {
        Some(end) => body[end..].to_vec(),
        None => Vec::new(),
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
