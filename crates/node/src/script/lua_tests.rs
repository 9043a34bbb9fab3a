//! The engine against a fake host: conversions, errors, bounds.

use std::time::Duration;

use wire::resp::{Reply, Version};

use super::*;

/// Answers `GET` with a bulk string, `SET` with `+OK`, `NIL` with a null, `BAD` with an
/// error reply, `LIST` with an array; records every call.
#[derive(Default)]
struct Fake {
    calls: Vec<Vec<Vec<u8>>>,
}

impl Host for Fake {
    fn call(&mut self, args: &[&[u8]]) -> Reply {
        self.calls.push(args.iter().map(|a| a.to_vec()).collect());
        match args.first().map(|a| a.to_ascii_uppercase()).as_deref() {
            Some(b"GET") => Reply::Bulk(Some(b"v".to_vec())),
            Some(b"SET") => Reply::Simple(b"OK".to_vec()),
            Some(b"NIL") => Reply::Bulk(None),
            Some(b"INT") => Reply::Integer(7),
            Some(b"LIST") => Reply::Array(Some(vec![
                Reply::Integer(1),
                Reply::Bulk(None),
                Reply::Bulk(Some(b"x".to_vec())),
            ])),
            _ => Reply::Error(b"ERR bad".to_vec()),
        }
    }
}

fn budget() -> Budget {
    Budget {
        time: Duration::from_secs(5),
        memory: 8 << 20,
        max_reply: 1 << 20,
    }
}

fn run_with(body: &str, keys: &[&[u8]], args: &[&[u8]], budget: &Budget) -> (Vec<u8>, Fake) {
    let mut host = Fake::default();
    let call = Call {
        keys,
        args,
        version: Version::Resp2,
        redis_version: "7.0.15",
        flags: None,
    };
    let out = eval(body.as_bytes(), "sha", &call, budget, &mut host);
    (out, host)
}

fn run(body: &str) -> String {
    String::from_utf8(run_with(body, &[b"k1", b"k2"], &[b"a1"], &budget()).0).unwrap()
}

#[test]
fn values_convert_as_redis_converts_them() {
    assert_eq!(run("return 1"), ":1\r\n");
    assert_eq!(run("return 3.99"), ":3\r\n");
    assert_eq!(run("return -3.99"), ":-3\r\n");
    assert_eq!(run("return 'hi'"), "$2\r\nhi\r\n");
    assert_eq!(run("return true"), ":1\r\n");
    assert_eq!(run("return false"), "$-1\r\n");
    assert_eq!(run("return nil"), "$-1\r\n");
    assert_eq!(
        run("return {1, 'a', {ok='fine'}, {err='bad'}, true, false, 'after'}"),
        "*7\r\n:1\r\n$1\r\na\r\n+fine\r\n-bad\r\n:1\r\n$-1\r\n$5\r\nafter\r\n"
    );
    assert_eq!(run("return {1, nil, 3}"), "*1\r\n:1\r\n");
    assert_eq!(run("return {}"), "*0\r\n");
    assert_eq!(
        run("return {ok=1}"),
        "*0\r\n",
        "only a string ok is a status"
    );
    assert_eq!(run("return {err='a\\r\\nb'}"), "-a  b\r\n");
    assert_eq!(run("return redis.status_reply('FINE')"), "+FINE\r\n");
    assert_eq!(run("return redis.error_reply('My Error')"), "-My Error\r\n");
    assert_eq!(run("return 1e20"), format!(":{}\r\n", i64::MIN));
}

#[test]
fn keys_argv_and_calls() {
    assert_eq!(run("return KEYS"), "*2\r\n$2\r\nk1\r\n$2\r\nk2\r\n");
    assert_eq!(run("return ARGV[1]"), "$2\r\na1\r\n");
    let (out, host) = run_with(
        "return redis.call('SET', KEYS[1], 5)",
        &[b"k"],
        &[],
        &budget(),
    );
    assert_eq!(out, b"+OK\r\n");
    assert_eq!(
        host.calls,
        vec![vec![b"SET".to_vec(), b"k".to_vec(), b"5".to_vec()]]
    );
    assert_eq!(run("return redis.call('GET', 'k')"), "$1\r\nv\r\n");
    assert_eq!(run("return type(redis.call('NIL'))"), "$7\r\nboolean\r\n");
    assert_eq!(run("return redis.call('INT') + 1"), ":8\r\n");
    assert_eq!(
        run("return redis.call('LIST')"),
        "*3\r\n:1\r\n$-1\r\n$1\r\nx\r\n"
    );
    assert_eq!(run("return redis.call('SET','a','b').ok"), "$2\r\nOK\r\n");
}

#[test]
fn errors_read_as_redis_errors() {
    assert_eq!(
        run("\nlocal r = redis.call('BAD') return r"),
        "-ERR bad script: sha, on @user_script:2.\r\n"
    );
    // In a tail call the caller's line is gone (Redis's redis.call is a C function, ours a
    // Lua wrapper): the message says no line.
    assert_eq!(run("return redis.call('BAD')"), "-ERR bad script: sha\r\n");
    assert_eq!(run("return redis.pcall('BAD')"), "-ERR bad\r\n");
    assert_eq!(
        run("local ok, e = pcall(redis.call, 'BAD') return e"),
        "$7\r\nERR bad\r\n",
        "the raised error is the reply's text, as in Redis 7"
    );
    assert_eq!(
        run("\n\nerror('boom')"),
        "-ERR user_script:3: boom script: sha, on @user_script:3.\r\n"
    );
    assert_eq!(
        run("x = 1"),
        "-ERR user_script:1: Attempt to modify a readonly table script: sha, on @user_script:1.\r\n"
    );
    assert_eq!(
        run("return y"),
        "-ERR user_script:1: Script attempted to access nonexistent global variable 'y' \
         script: sha, on @user_script:1.\r\n"
    );
    assert!(run("return 'a' ..").starts_with(
        "-ERR Error compiling script (new function): user_script:1: unexpected symbol"
    ));
    assert!(run("return redis.call({})")
        .contains("Lua redis lib command arguments must be strings or integers"));
    assert!(run("return redis.call()").contains("Please specify at least one argument"));
}

#[test]
fn no_way_out_to_the_os() {
    for name in [
        "os", "io", "dofile", "loadfile", "print", "require", "package", "debug",
    ] {
        let out = run(&format!("return type({name})"));
        assert!(out.contains("nonexistent global variable"), "{name}: {out}");
    }
    assert_eq!(run("return type(string.format)"), "$8\r\nfunction\r\n");
    assert_eq!(run("return type(loadstring)"), "$8\r\nfunction\r\n");
}

#[test]
fn helpers() {
    assert_eq!(
        run("return redis.sha1hex('')"),
        "$40\r\nda39a3ee5e6b4b0d3255bfef95601890afd80709\r\n"
    );
    assert_eq!(run("redis.log(redis.LOG_WARNING, 'hi') return 1"), ":1\r\n");
    assert_eq!(run("return redis.REDIS_VERSION"), "$6\r\n7.0.15\r\n");
    assert_eq!(run("#!lua flags=no-writes\nreturn 2"), ":2\r\n");
    assert!(declares_no_writes(
        b"#!lua flags=no-writes,allow-stale\nreturn 1"
    ));
    assert!(!declares_no_writes(b"#!lua\nreturn 1"));
    assert!(!declares_no_writes(b"return 1"));
}

#[test]
fn a_script_looping_forever_is_aborted_even_if_it_catches_the_error() {
    let short = Budget {
        time: Duration::from_millis(100),
        ..budget()
    };
    for body in [
        "while true do end",
        "while true do pcall(function() while true do end end) end",
        "local ok = pcall(function() while true do end end) return 'escaped'",
    ] {
        let started = std::time::Instant::now();
        let (out, _) = run_with(body, &[], &[], &short);
        let out = String::from_utf8(out).unwrap();
        assert!(out.starts_with("-ERR Script killed"), "{body}: {out}");
        assert!(started.elapsed() < Duration::from_secs(3), "{body}");
    }
}

#[test]
fn hostile_scripts_get_errors_not_crashes() {
    // Memory: the Lua heap is bounded.
    let out = run("local t = {} for i = 1, 1e8 do t[i] = string.rep('x', 100) .. i end");
    assert!(out.starts_with("-ERR"), "{out}");
    assert!(run("return string.rep('x', 1e9)").starts_with("-ERR"));
    // A table containing itself, and deep nesting.
    let out = run("local t = {} t[1] = t return t");
    assert!(out.contains("nested tables"), "{out}");
    // A reply over the limit.
    let out = run("local t = {} for i = 1, 100000 do t[i] = string.rep('y', 100) end return t");
    assert!(out.contains("reply limit"), "{out}");
    // Deep recursion.
    assert!(run("local function f(n) return f(n + 1) + 1 end return f(1)").starts_with("-ERR"));
    // Invalid UTF-8 everywhere.
    let (out, host) = run_with(
        "redis.call('SET', KEYS[1], ARGV[1]) return {ARGV[1], {err = ARGV[1]}}",
        &[b"\xff\xfe"],
        &[b"\xc3\x28"],
        &budget(),
    );
    assert_eq!(host.calls[0][1], b"\xff\xfe");
    assert!(out.starts_with(b"*2\r\n$2\r\n\xc3\x28\r\n-"));
}

#[test]
fn nothing_a_run_does_reaches_the_next() {
    for body in [
        "x = 1",
        "tostring = nil",
        "KEYS = {}",
        "string.len = nil",
        "string.mine = 1",
        "redis.call = nil",
        "cjson.encode = nil",
        "rawset(_G, 'x', 1)",
        "rawset(string, 'x', 1)",
        "setmetatable(_G, nil)",
        "setmetatable(string, {})",
        "getmetatable('').__index = nil",
        "getmetatable('').__index.upper = nil",
        "table.insert(math, 1)",
        "_G._G.redis = nil",
    ] {
        let out = run(body);
        assert!(
            out.contains("Attempt to modify a readonly table"),
            "{body}: {out}"
        );
    }
    // Nor could a run reach an environment to swap.
    for name in ["setfenv", "getfenv", "newproxy"] {
        let out = run(&format!("return type({name})"));
        assert!(out.contains("nonexistent global variable"), "{name}: {out}");
    }
    // Everything is still there, and a new run's tables are its own.
    assert_eq!(
        run("return {rawget(_G, 'x'), type(tostring), ('abc'):upper(), type(redis.call)}"),
        "*0\r\n",
        "rawget(_G, 'x') is nil: the table ends there"
    );
    assert_eq!(
        run("return {type(tostring), ('abc'):upper(), type(redis.call), rawget(string, 'mine') == nil}"),
        "*4\r\n$8\r\nfunction\r\n$3\r\nABC\r\n$8\r\nfunction\r\n:1\r\n"
    );
    assert_eq!(run("KEYS[3] = 'mine' return #KEYS"), ":3\r\n");
    assert_eq!(run("return #KEYS"), ":2\r\n");
    // The proxies read as the tables they stand for.
    assert_eq!(
        run("local n = 0 for _ in pairs(string) do n = n + 1 end return n"),
        ":15\r\n"
    );
    assert_eq!(run("return rawget(_G, 'redis') ~= nil"), ":1\r\n");
    assert_eq!(run("return next(math) ~= nil"), ":1\r\n");
    assert_eq!(run("return type(getmetatable(''))"), "$5\r\ntable\r\n");
    assert_eq!(run("return type(getmetatable(string))"), "$3\r\nnil\r\n");
    assert_eq!(run("return _G == _G._G"), ":1\r\n");
    // A function made by loadstring sees the same read-only globals.
    assert!(run("return loadstring('y = 1')()").contains("readonly table"));
    // A script's own tables are its to change.
    assert_eq!(
        run("local t = {} rawset(t, 'a', 1) setmetatable(t, {}) table.insert(t, 2) return {t.a, t[1]}"),
        "*2\r\n:1\r\n:2\r\n"
    );
}

#[test]
fn a_worker_compiles_each_script_once_and_keeps_a_bounded_number() {
    let cached = || super::super::engine::with_engine("7.0.15", |e| (e.cached(), true)).unwrap();
    let before = cached();
    for _ in 0..3 {
        assert_eq!(run("return 'same'"), "$4\r\nsame\r\n");
    }
    assert_eq!(cached(), before + 1);
    let (out, _) = {
        let mut host = Fake::default();
        let call = Call {
            keys: &[],
            args: &[],
            version: Version::Resp2,
            redis_version: "7.0.15",
            flags: None,
        };
        for i in 0..super::super::FUNCTIONS_PER_WORKER + 10 {
            let body = format!("return {i}");
            let out = eval(
                body.as_bytes(),
                &format!("sha{i}"),
                &call,
                &budget(),
                &mut host,
            );
            assert_eq!(out, format!(":{i}\r\n").into_bytes());
        }
        (Vec::<u8>::new(), host)
    };
    assert!(out.is_empty());
    assert_eq!(cached(), super::super::FUNCTIONS_PER_WORKER);
    // A compile error is not cached.
    assert!(run("return +").starts_with("-ERR Error compiling script"));
}

#[test]
fn a_stopped_run_leaves_a_working_state() {
    let short = Budget {
        time: Duration::from_millis(50),
        ..budget()
    };
    let (out, _) = run_with("while true do end", &[], &[], &short);
    assert!(out.starts_with(b"-ERR Script killed"));
    assert_eq!(run("return 'next'"), "$4\r\nnext\r\n");
    // A run past its memory budget: the next one has its whole budget again.
    assert!(run("local t = {} for i = 1, 1e8 do t[i] = i end").starts_with("-ERR"));
    assert_eq!(run("return #string.rep('x', 1000000)"), ":1000000\r\n");
}

#[test]
fn script_kill_stops_a_run_at_its_next_check() {
    let runs = std::sync::Arc::new(super::super::Runs::default());
    let guard = runs.start();
    assert_eq!(runs.kill(), super::super::KillOutcome::Killed);
    let mut host = Fake::default();
    let call = Call {
        keys: &[],
        args: &[],
        version: Version::Resp2,
        redis_version: "7.0.15",
        flags: Some(guard.flags().clone()),
    };
    for body in [
        "while true do end",
        "while true do pcall(function() while true do end end) end",
        "redis.call('GET', 'k') return 1",
    ] {
        let out = eval(body.as_bytes(), "sha", &call, &budget(), &mut host);
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.starts_with("-ERR Script killed by user with SCRIPT KILL"),
            "{body}: {out}"
        );
    }
    assert!(host.calls.is_empty(), "a killed run calls nothing");
}

#[test]
fn bit_and_cjson_as_redis_has_them() {
    assert_eq!(
        run(
            "return {bit.tobit(2^32+5), bit.bnot(0), bit.lshift(1,31), bit.rshift(-1,28), \
             bit.arshift(-256,4), bit.rol(1,33), bit.ror(1,1), bit.bswap(0x12345678), \
             bit.band(0xff, 0x0f, 0x3), bit.bor(1, 2, 4), bit.bxor(5, 1)}"
        ),
        "*11\r\n:5\r\n:-1\r\n:-2147483648\r\n:15\r\n:-16\r\n:2\r\n:-2147483648\r\n\
         :2018915346\r\n:3\r\n:7\r\n:4\r\n"
    );
    assert_eq!(
        run("return {bit.tohex(255), bit.tohex(-1, -4), bit.tohex(0x1234, 2)}"),
        "*3\r\n$8\r\n000000ff\r\n$4\r\nFFFF\r\n$2\r\n34\r\n"
    );
    let json = |body: &str| {
        let out = run(body);
        out.split("\r\n").nth(1).unwrap_or(&out).to_string()
    };
    assert_eq!(json("return cjson.encode({})"), "{}");
    assert_eq!(json("return cjson.encode({1, 2, 'a'})"), "[1,2,\"a\"]");
    assert_eq!(
        json("return cjson.encode({a = {b = true}})"),
        "{\"a\":{\"b\":true}}"
    );
    assert_eq!(
        json("return cjson.encode({[1] = 1, [3] = 3})"),
        "[1,null,3]"
    );
    assert_eq!(json("return cjson.encode(1/3)"), "0.33333333333333");
    assert_eq!(json("return cjson.encode('a/b\"\\n')"), "\"a\\/b\\\"\\n\"");
    assert_eq!(
        json("return cjson.encode(cjson.decode('[1,null,{\"a\":[]}]'))"),
        "[1,null,{\"a\":{}}]"
    );
    assert_eq!(run("return cjson.decode('null') == cjson.null"), ":1\r\n");
    assert_eq!(run("return cjson.decode('{\"a\":[5,6]}').a[2]"), ":6\r\n");
    // Not as tail calls, which lose the line (as `redis.call`'s errors do).
    for body in [
        "local s = cjson.encode({[1] = 1, [20] = 3}) return s",
        "local s = cjson.encode(0/0) return s",
        "local s = cjson.encode(function() end) return s",
        "local v = cjson.decode('[1,2') return v",
    ] {
        let out = run(body);
        assert!(out.starts_with("-ERR user_script:1: "), "{body}: {out}");
    }
    let out = run("local ok, e = pcall(cjson.decode, '{') return type(e)");
    assert_eq!(
        out, "$6\r\nstring\r\n",
        "a caught error is a string, as in Redis"
    );
}

#[test]
fn cmsgpack_as_redis_has_it() {
    let hex = |expr: &str| {
        run(&format!(
            "local s = cmsgpack.pack({expr}) local h = {{}} \
             for i = 1, #s do h[i] = string.format('%02x', s:byte(i)) end \
             return table.concat(h)"
        ))
    };
    for (expr, packed) in [
        ("{}", "90"),
        ("nil", "c0"),
        ("true", "c3"),
        ("'abc'", "a3616263"),
        ("{1, 2, 3}", "93010203"),
        ("{a = 1}", "81a16101"),
        ("{1, nil, 3}", "8201010303"),
        ("function() end", "c0"),
        ("1, 2", "0102"),
    ] {
        assert_eq!(
            hex(expr),
            format!("${}\r\n{packed}\r\n", packed.len()),
            "{expr}"
        );
    }
    // Tables nested deeper than 16 are nil; a table holding itself ends there too.
    let deep = format!("{}1{}", "{".repeat(18), "}".repeat(18));
    assert_eq!(hex(&deep), format!("$34\r\n{}c0\r\n", "91".repeat(16)));
    assert!(run("local t = {} t[1] = t return #cmsgpack.pack(t)").starts_with(":"));
    assert_eq!(
        run("return {cmsgpack.unpack(cmsgpack.pack(1, 'x', {5, {a = 6}}))}"),
        "*3\r\n:1\r\n$1\r\nx\r\n*2\r\n:5\r\n*0\r\n"
    );
    assert_eq!(
        run("return cmsgpack.unpack(cmsgpack.pack({a = {1, 2}})).a[2]"),
        ":2\r\n"
    );
    assert_eq!(
        run("return tostring(cmsgpack.unpack(cmsgpack.pack(0.1)))"),
        "$3\r\n0.1\r\n"
    );
    assert_eq!(run("return select('#', cmsgpack.unpack(''))"), ":0\r\n");
    assert_eq!(
        run("return select('#', cmsgpack.unpack('\\192'))"),
        ":1\r\n"
    );
    assert_eq!(
        run("return {cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3), 1)}"),
        "*2\r\n:2\r\n:2\r\n"
    );
    assert_eq!(
        run("return {cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 2, 1)}"),
        "*3\r\n:-1\r\n:2\r\n:3\r\n"
    );
    for (body, msg) in [
        (
            "local v = cmsgpack.unpack('\\193') return v",
            "Bad data format in input.",
        ),
        (
            "local v = cmsgpack.unpack('\\146\\1') return v",
            "Missing bytes in input.",
        ),
        // A huge announced count is missing bytes, not an allocation.
        (
            "local v = cmsgpack.unpack('\\221\\255\\255\\255\\255') return v",
            "Missing bytes",
        ),
        (
            "local v = cmsgpack.unpack(string.rep('\\145', 100000)) return v",
            "Bad data format",
        ),
        (
            "local v = cmsgpack.unpack_one('\\1', 9) return v",
            "Start offset 9 greater",
        ),
        (
            "local v = cmsgpack.pack() return v",
            "MessagePack pack needs input.",
        ),
    ] {
        let out = run(body);
        assert!(
            out.starts_with("-ERR user_script:1: ") && out.contains(msg),
            "{body}: {out}"
        );
    }
    assert!(run("cmsgpack.pack = nil").contains("readonly table"));
    // cjson too keeps a deep or self-holding table from running away.
    assert!(
        run("local t = {} t[1] = t local s = cjson.encode(t) return s")
            .contains("excessive nesting")
    );
}

#[test]
fn struct_as_redis_has_it() {
    assert_eq!(
        run("return {struct.unpack('>i2 B c0 s', struct.pack('>i2 B c0 s', -2, 3, 'abc', 'z'))}"),
        "*4\r\n:-2\r\n$3\r\nabc\r\n$1\r\nz\r\n:9\r\n",
        "c0 takes the count before it"
    );
    assert_eq!(run("return #struct.pack('!4 b i d', 1, 2, 3)"), ":16\r\n");
    assert_eq!(run("return struct.size('!4 b i d')"), ":16\r\n");
    for (body, msg) in [
        ("local v = struct.size('c0') return v", "no fixed size"),
        (
            "local v = struct.unpack('i', '\\1') return v",
            "data string too short",
        ),
        (
            "local v = struct.pack('q', 1) return v",
            "invalid format option 'q'",
        ),
        (
            "local v = struct.pack('i40', 1) return v",
            "larger than limit of 32",
        ),
        (
            "local v = struct.pack('i') return v",
            "number expected, got nil",
        ),
        (
            "local v = struct.unpack('s', 'abc') return v",
            "unfinished string",
        ),
        (
            "local v = struct.pack('i99999999999', 1) return v",
            "integral size overflow",
        ),
    ] {
        let out = run(body);
        assert!(
            out.starts_with("-ERR user_script:1: ") && out.contains(msg),
            "{body}: {out}"
        );
    }
}
