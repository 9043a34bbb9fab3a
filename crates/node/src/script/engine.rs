//! One Lua state per worker thread, reused by every run on it.
//!
//! The state is made once (libraries, `redis.*`, the protections below) and keeps each
//! script compiled, by its source, in a cache bounded by [`FUNCTIONS_PER_WORKER`] (least
//! recently used dropped first). Nothing a script does can outlive its run, as in Redis 7:
//! - the globals table and every library table (`string`, `table`, `math`, `coroutine`,
//!   `redis`, `bit`, `cjson`, `cmsgpack`, `struct`, the strings' metatable) are read-only:
//!   assigning to them — directly, with `rawset`, `setmetatable` or `table.insert` —
//!   raises `Attempt to modify a readonly table`, and reading a missing global raises
//!   `Script attempted to access nonexistent global variable`. Each is an empty proxy over the real table (`pairs`,
//!   `next` and `rawget` see through it), so the real tables are out of a script's reach;
//! - `setfenv` and `getfenv` are not there (as in Redis 7): a script cannot swap an
//!   environment;
//! - `KEYS` and `ARGV` are new tables each run.
//!
//! A run that was stopped (time limit, `SCRIPT KILL`) drops the state: the next run builds
//! a new one. So does a state whose heap stays above [`ENGINE_MEMORY`] after a collection.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlua::{Function, HookTriggers, Lua, LuaOptions, StdLib, Table, VmState};

use super::runs::RunFlags;
use super::{libs, HOOK_EVERY};

/// Most compiled scripts a worker keeps (a script dropped is compiled again when run).
pub const FUNCTIONS_PER_WORKER: usize = 1024;

/// Bytes of Lua heap a worker's state may keep between runs (compiled scripts and
/// garbage); past it, after a full collection, the state is dropped and built again.
pub const ENGINE_MEMORY: usize = 64 << 20;

/// Growth of the heap between two full collections (see `Engine::settle`).
const GARBAGE_BYTES: usize = 1 << 20;

/// Why a run was stopped before its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stop {
    /// It ran past its time limit.
    TimeLimit,
    /// `SCRIPT KILL`.
    Killed,
}

/// The run in progress, read by the instruction hook.
#[derive(Debug)]
pub(super) struct RunState {
    started: Cell<Instant>,
    limit: Cell<Duration>,
    stop: Cell<Option<Stop>>,
    flags: RefCell<Option<Arc<RunFlags>>>,
}

impl RunState {
    /// Why the run was stopped, if it was (as last noticed: see [`RunState::stopped`]).
    pub(super) fn stop(&self) -> Option<Stop> {
        self.stop.get()
    }

    /// Why the run must stop, if it must (a kill request or the time limit is noticed
    /// here).
    pub(super) fn stopped(&self) -> Option<Stop> {
        if self.stop.get().is_none() {
            if self
                .flags
                .borrow()
                .as_ref()
                .is_some_and(|f| f.kill_requested())
            {
                self.stop.set(Some(Stop::Killed));
            } else if self.started.get().elapsed() > self.limit.get() {
                self.stop.set(Some(Stop::TimeLimit));
            }
        }
        self.stop.get()
    }
}

/// A worker's Lua state.
pub(super) struct Engine {
    pub(super) lua: Lua,
    /// What the globals table stands for: `KEYS` and `ARGV` are set here.
    pub(super) backing: Table,
    /// Where `redis.call` finds the host call of the run in progress (`raw`).
    pub(super) hidden: Table,
    /// Calls a script function under `pcall`: `(ok, value)`.
    pub(super) runner: Function,
    pub(super) state: Rc<RunState>,
    /// Compiled scripts by source (not by the SHA1 a caller names them with: a cached
    /// function is always its source's), and their last use.
    functions: HashMap<Rc<[u8]>, (Function, u64)>,
    /// The cached sources by last use, least recent first.
    by_use: BTreeMap<u64, Rc<[u8]>>,
    clock: u64,
    /// The heap after the last full collection.
    baseline: usize,
}

thread_local! {
    static ENGINE: RefCell<Option<Engine>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's engine (built with `redis_version` if there is none yet). `f`
/// returns its result and whether the engine may be kept. A nested use (a run inside a
/// run: not something the hosts do) gets an engine of its own.
pub(super) fn with_engine<R>(
    redis_version: &str,
    f: impl FnOnce(&mut Engine) -> (R, bool),
) -> Result<R, mlua::Error> {
    ENGINE.with(|cell| {
        let Ok(mut slot) = cell.try_borrow_mut() else {
            let mut engine = Engine::new(redis_version)?;
            return Ok(f(&mut engine).0);
        };
        if slot.is_none() {
            *slot = Some(Engine::new(redis_version)?);
        }
        let engine = slot.as_mut().expect("just built");
        let (result, keep) = f(engine);
        if !keep || !engine.settle() {
            *slot = None;
        }
        Ok(result)
    })
}

impl Engine {
    fn new(redis_version: &str) -> mlua::Result<Engine> {
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::new(),
        )?;
        let state = Rc::new(RunState {
            started: Cell::new(Instant::now()),
            limit: Cell::new(Duration::MAX),
            stop: Cell::new(None),
            flags: RefCell::new(None),
        });
        {
            let state = state.clone();
            lua.set_hook(
                HookTriggers::new().every_nth_instruction(HOOK_EVERY),
                move |_, _| {
                    // Once stopped, every later check raises again, so a script that
                    // catches the error with pcall cannot go on.
                    match state.stopped() {
                        Some(_) => Err(mlua::Error::RuntimeError("Script killed".into())),
                        None => Ok(VmState::Continue),
                    }
                },
            );
        }
        let globals = lua.globals();
        libs::install(&lua, &globals)?;
        let redis = lua.create_table()?;
        redis.raw_set(
            "sha1hex",
            lua.create_function(|_, s: mlua::String| Ok(super::sha1_hex(&s.as_bytes())))?,
        )?;
        redis.raw_set(
            "log",
            lua.create_function(|_, (level, text): (i64, mlua::String)| {
                log(level, &String::from_utf8_lossy(&text.as_bytes()));
                Ok(())
            })?,
        )?;
        redis.raw_set("REDIS_VERSION", redis_version)?;
        redis.raw_set("REDIS_VERSION_NUM", version_num(redis_version))?;
        let killed = {
            let state = state.clone();
            lua.create_function(move |_, ()| Ok(state.stopped().is_some()))?
        };
        let hidden = lua.create_table()?;
        let (runner, backing): (Function, Table) = lua
            .load(PRELUDE)
            .set_name("=prelude")
            .call((hidden.clone(), redis, killed))?;
        Ok(Engine {
            lua,
            backing,
            hidden,
            runner,
            state,
            functions: HashMap::new(),
            by_use: BTreeMap::new(),
            clock: 0,
            baseline: 0,
        })
    }

    /// Starts a run: its time limit, kill flags and heap budget.
    pub(super) fn begin(
        &self,
        limit: Duration,
        memory: usize,
        flags: Option<Arc<RunFlags>>,
    ) -> mlua::Result<()> {
        self.state.started.set(Instant::now());
        self.state.limit.set(limit);
        self.state.stop.set(None);
        *self.state.flags.borrow_mut() = flags;
        self.lua
            .set_memory_limit(self.lua.used_memory().saturating_add(memory))?;
        Ok(())
    }

    /// Ends a run: why it was stopped, if it was.
    pub(super) fn end(&self) -> Option<Stop> {
        let stop = self.state.stop.get();
        *self.state.flags.borrow_mut() = None;
        self.state.limit.set(Duration::MAX);
        stop
    }

    /// The script `source`, compiled (now if it is not cached).
    pub(super) fn function(&mut self, source: &[u8]) -> mlua::Result<Function> {
        self.clock += 1;
        let now = self.clock;
        if let Some((f, used)) = self.functions.get_mut(source) {
            let before = std::mem::replace(used, now);
            let f = f.clone();
            if let Some(name) = self.by_use.remove(&before) {
                self.by_use.insert(now, name);
            }
            return Ok(f);
        }
        let f = self
            .lua
            .load(strip_shebang(source))
            .set_name(CHUNK)
            .into_function()?;
        while self.functions.len() >= FUNCTIONS_PER_WORKER {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            self.functions.remove(&oldest);
        }
        let source: Rc<[u8]> = source.into();
        self.functions.insert(source.clone(), (f.clone(), now));
        self.by_use.insert(now, source);
        Ok(f)
    }

    /// After a run: a full collection if the heap grew by [`GARBAGE_BYTES`] since the
    /// last one (in Lua 5.1 garbage counts against the next run's heap budget until it is
    /// collected); false if the state holds more than [`ENGINE_MEMORY`] even then.
    fn settle(&mut self) -> bool {
        let used = self.lua.used_memory();
        if used <= self.baseline.saturating_add(GARBAGE_BYTES) {
            return used <= ENGINE_MEMORY;
        }
        if self.lua.gc_collect().is_err() {
            return false;
        }
        self.baseline = self.lua.used_memory();
        self.baseline <= ENGINE_MEMORY
    }

    /// Compiled scripts cached.
    #[cfg(test)]
    pub(super) fn cached(&self) -> usize {
        self.functions.len()
    }
}

/// The chunk name: error messages say `user_script:<line>:` as Redis's do.
const CHUNK: &str = "@user_script";

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
fn strip_shebang(body: &[u8]) -> &[u8] {
    if !body.starts_with(b"#!") {
        return body;
    }
    match body.iter().position(|&b| b == b'\n') {
        Some(end) => &body[end..],
        None => &[],
    }
}

/// Sets the state up once: `redis.call` and `redis.pcall` over `hidden.raw` (the host call
/// of the run in progress, see `lua::raw_call`), the helpers, `cjson`'s and `cmsgpack`'s
/// error raising, and the read-only globals and libraries. `pcall`, `xpcall` and
/// `coroutine.resume` raise again once the run is stopped (`killed`): the hook's error
/// could otherwise be caught at the same point of a loop every time. Returns the runner and the globals' backing table.
const PRELUDE: &str = r#"
local hidden, redis, killed = ...
local G = _G
local rawpcall, rawxpcall, resume = pcall, xpcall, coroutine.resume
local rawset_, rawget_, rawnext, rawpairs = rawset, rawget, next, pairs
local getmeta, setmeta = getmetatable, setmetatable
local error, select, tostring, ipairs = error, select, tostring, ipairs
local tinsert, tremove, tsort = table.insert, table.remove, table.sort
local function check(...)
  if killed() then error('Script killed', 0) end
  return ...
end
pcall = function(...) return check(rawpcall(...)) end
xpcall = function(...) return check(rawxpcall(...)) end
coroutine.resume = function(...) return check(resume(...)) end
redis.pcall = function(...)
  local v, kind = hidden.raw({...}, select('#', ...))
  if kind == 2 then error(v, 2) end
  return v
end
redis.call = function(...)
  local v, kind = hidden.raw({...}, select('#', ...))
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
local encode, decode = cjson.encode, cjson.decode
cjson.encode = function(v)
  local s, e = encode(v)
  if e then error(e, 2) end
  return s
end
cjson.decode = function(s)
  local v, e = decode(s)
  if e then error(e, 2) end
  return v
end
local function raised(ok, ...)
  if not ok then error((...), 3) end
  return ...
end
local mp = cmsgpack
local mp_pack, mp_unpack, mp_one, mp_limit = mp.pack, mp.unpack, mp.unpack_one, mp.unpack_limit
mp.pack = function(...) return raised(mp_pack(...)) end
mp.unpack = function(s) return raised(mp_unpack(s)) end
mp.unpack_one = function(s, offset) return raised(mp_one(s, offset)) end
mp.unpack_limit = function(s, limit, offset) return raised(mp_limit(s, limit, offset)) end
local st = struct
local st_pack, st_unpack, st_size = st.pack, st.unpack, st.size
st.pack = function(...) return raised(st_pack(...)) end
st.unpack = function(...) return raised(st_unpack(...)) end
st.size = function(...) return raised(st_size(...)) end
G.redis = redis
dofile, loadfile, print, setfenv, getfenv, newproxy = nil, nil, nil, nil, nil, nil

-- Read-only tables: an empty proxy per table, its real table in `real`.
local real = {}
local function readonly() error('Attempt to modify a readonly table', 2) end
local function refuse() error('Attempt to modify a readonly table', 0) end
local function protect(t)
  local p = setmeta({}, {__index = t, __newindex = readonly, __metatable = false})
  real[p] = t
  return p
end
rawset = function(t, k, v)
  if real[t] then refuse() end
  return rawset_(t, k, v)
end
rawget = function(t, k) return rawget_(real[t] or t, k) end
next = function(t, k) return rawnext(real[t] or t, k) end
pairs = function(t) return rawpairs(real[t] or t) end
-- The globals' metatable reads as a (read-only) table, as in Redis; the libraries' as nil.
local globals_meta
getmetatable = function(t)
  if t == G then return globals_meta end
  if real[t] then return nil end
  return getmeta(t)
end
setmetatable = function(t, m)
  if real[t] then refuse() end
  return setmeta(t, m)
end
table.insert = function(t, ...)
  if real[t] then refuse() end
  return tinsert(t, ...)
end
table.remove = function(t, ...)
  if real[t] then refuse() end
  return tremove(t, ...)
end
table.sort = function(t, ...)
  if real[t] then refuse() end
  return tsort(t, ...)
end

local backing = {}
for k, v in rawnext, G do backing[k] = v end
for k in rawnext, backing do G[k] = nil end
for _, name in ipairs({'string', 'table', 'math', 'coroutine', 'redis', 'bit', 'cjson', 'cmsgpack',
    'struct'}) do
  backing[name] = protect(backing[name])
end
local strings = getmeta('')
strings.__index = backing.string
strings.__metatable = protect(strings)
backing._G = G
setmeta(backing, {__index = function(_, name)
  error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
end})
local meta = {__index = backing, __newindex = readonly, __metatable = false}
setmeta(G, meta)
globals_meta = protect(meta)
real[G] = backing
return function(f) return rawpcall(f) end, backing
"#;
