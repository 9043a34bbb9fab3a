//! The libraries Redis loads for scripts, written in Rust: `bit` (LuaBitOp) and `cjson`
//! (lua-cjson's `encode`, `decode` and `null`).
//!
//! `bit` follows LuaBitOp 1.0: numbers are brought to 32-bit integers as it does (rounded,
//! modulo 2^32), shifts take their count modulo 32, results are signed. `cjson` follows
//! lua-cjson 2.1 as Redis configures it: an empty table encodes as `{}`, a table whose
//! keys are the integers 1..n (holes allowed unless the array is "excessively sparse")
//! as an array, numbers with 14 significant digits, `/` escaped; `decode` gives arrays as
//! tables 1..n and JSON `null` as `cjson.null` (a light userdata, as in lua-cjson). Error
//! messages name the same problem as lua-cjson's, not always in its words. (`cmsgpack` is
//! in `msgpack`, `struct` in `structs`.)

use mlua::{Lua, Table, Value, Variadic};

/// Deepest nesting `cjson.encode` follows (lua-cjson: 1,000; 64 here, to keep the
/// recursion well inside a worker thread's stack).
const MAX_ENCODE_DEPTH: usize = 64;

/// Adds `bit`, and the Rust side of `cjson`, `cmsgpack` (`msgpack`) and `struct`
/// (`structs`), to `globals`.
/// `cjson.encode` and `cjson.decode` return `(nil, message)` on failure: the prelude wraps
/// them to raise a string error at the script's line, as lua-cjson's errors read.
pub(super) fn install(lua: &Lua, globals: &Table) -> mlua::Result<()> {
    globals.raw_set("bit", bit(lua)?)?;
    let cjson = lua.create_table()?;
    cjson.raw_set("null", Value::NULL)?;
    cjson.raw_set("_NAME", "cjson")?;
    cjson.raw_set("_VERSION", "2.1.0")?;
    cjson.raw_set(
        "encode",
        lua.create_function(|lua, v: Value| {
            let mut out = Vec::new();
            Ok(match encode(&v, &mut out, 0) {
                Ok(()) => (Value::String(lua.create_string(&out)?), Value::Nil),
                Err(msg) => (Value::Nil, Value::String(lua.create_string(&msg)?)),
            })
        })?,
    )?;
    cjson.raw_set(
        "decode",
        lua.create_function(|lua, s: mlua::String| {
            Ok(
                match serde_json::from_slice::<serde_json::Value>(&s.as_bytes()) {
                    Ok(json) => (to_lua(lua, json)?, Value::Nil),
                    Err(e) => (
                        Value::Nil,
                        Value::String(lua.create_string(format!("Expected valid JSON: {e}"))?),
                    ),
                },
            )
        })?,
    )?;
    globals.raw_set("cjson", cjson)?;
    super::msgpack::install(lua, globals)?;
    super::structs::install(lua, globals)
}

// ---- bit ----------------------------------------------------------------------------------

/// LuaBitOp's conversion of a number to 32 bits: add 2^52 + 2^51 and keep the low word of
/// the double (rounds to nearest, wraps modulo 2^32).
fn tobit(n: f64) -> i32 {
    (n + 6_755_399_441_055_744.0).to_bits() as u32 as i32
}

fn bit(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    let unary = |f: fn(i32) -> i32| lua.create_function(move |_, n: f64| Ok(f(tobit(n))));
    t.raw_set("tobit", unary(|x| x)?)?;
    t.raw_set("bnot", unary(|x| !x)?)?;
    t.raw_set("bswap", unary(i32::swap_bytes)?)?;
    let fold = |f: fn(i32, i32) -> i32| {
        lua.create_function(move |_, (first, rest): (f64, Variadic<f64>)| {
            Ok(rest.iter().fold(tobit(first), |acc, &n| f(acc, tobit(n))))
        })
    };
    t.raw_set("band", fold(|a, b| a & b)?)?;
    t.raw_set("bor", fold(|a, b| a | b)?)?;
    t.raw_set("bxor", fold(|a, b| a ^ b)?)?;
    let shift = |f: fn(i32, u32) -> i32| {
        lua.create_function(move |_, (x, n): (f64, f64)| Ok(f(tobit(x), tobit(n) as u32 & 31)))
    };
    t.raw_set("lshift", shift(|x, n| ((x as u32) << n) as i32)?)?;
    t.raw_set("rshift", shift(|x, n| ((x as u32) >> n) as i32)?)?;
    t.raw_set("arshift", shift(|x, n| x >> n)?)?;
    t.raw_set("rol", shift(|x, n| (x as u32).rotate_left(n) as i32)?)?;
    t.raw_set("ror", shift(|x, n| (x as u32).rotate_right(n) as i32)?)?;
    t.raw_set(
        "tohex",
        lua.create_function(|_, (x, n): (f64, Option<f64>)| Ok(tohex(tobit(x), n.map(tobit))))?,
    )?;
    Ok(t)
}

/// `bit.tohex(x [, n])`: the low `|n|` hex digits (8 by default), upper case if `n < 0`.
fn tohex(x: i32, n: Option<i32>) -> String {
    let n = n.unwrap_or(8);
    let digits = n.unsigned_abs().min(8) as usize;
    let full = if n < 0 {
        format!("{:08X}", x as u32)
    } else {
        format!("{:08x}", x as u32)
    };
    full[8 - digits..].to_string()
}

// ---- cjson --------------------------------------------------------------------------------

fn encode(v: &Value, out: &mut Vec<u8>, depth: usize) -> Result<(), String> {
    match v {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(p) if p.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(n) => out.extend_from_slice(number(*n as f64)?.as_bytes()),
        Value::Number(n) => out.extend_from_slice(number(*n)?.as_bytes()),
        Value::String(s) => string(&s.as_bytes(), out),
        Value::Table(t) => {
            if depth >= MAX_ENCODE_DEPTH {
                return Err(format!(
                    "Cannot serialise, excessive nesting ({})",
                    depth + 1
                ));
            }
            table(t, out, depth + 1)?;
        }
        other => {
            return Err(format!(
                "Cannot serialise {}: type not supported",
                other.type_name()
            ))
        }
    }
    Ok(())
}

/// A number as lua-cjson writes it (`%.14g`); NaN and infinities are refused.
fn number(n: f64) -> Result<String, String> {
    if !n.is_finite() {
        return Err("Cannot serialise number: must not be NaN or Inf".into());
    }
    Ok(format_g14(n))
}

/// C's `%.14g`.
pub(super) fn format_g14(n: f64) -> String {
    const P: i32 = 14;
    if n == 0.0 {
        return if n.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let sci = format!("{:.*e}", (P - 1) as usize, n);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..P).contains(&exp) {
        let m = strip_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{m}e{sign}{:02}", exp.abs())
    } else {
        strip_zeros(&format!("{:.*}", (P - 1 - exp) as usize, n)).to_string()
    }
}

fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

fn string(s: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &b in s {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            b if b < 0x20 || b == 0x7f => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            b => out.push(b),
        }
    }
    out.push(b'"');
}

/// A table: an array if its keys are the integers 1..n (some missing: `null`), else an
/// object; empty: `{}`.
fn table(t: &Table, out: &mut Vec<u8>, depth: usize) -> Result<(), String> {
    let err = |e: mlua::Error| e.to_string();
    // lua-cjson's array test: every key a positive integer, not too sparse.
    let (mut max, mut items, mut array) = (0f64, 0usize, true);
    for pair in t.clone().pairs::<Value, Value>() {
        let (k, _) = pair.map_err(err)?;
        let k = match k {
            Value::Integer(i) => i as f64,
            Value::Number(n) => n,
            _ => {
                array = false;
                break;
            }
        };
        if k < 1.0 || k.fract() != 0.0 {
            array = false;
            break;
        }
        max = max.max(k);
        items += 1;
    }
    if array && max > 0.0 {
        if max > 10.0 && max > 2.0 * items as f64 {
            return Err("Cannot serialise table: excessively sparse array".into());
        }
        out.push(b'[');
        for i in 1..=max as usize {
            if i > 1 {
                out.push(b',');
            }
            encode(&t.raw_get::<Value>(i).map_err(err)?, out, depth)?;
        }
        out.push(b']');
        return Ok(());
    }
    out.push(b'{');
    let mut first = true;
    for pair in t.clone().pairs::<Value, Value>() {
        let (k, v) = pair.map_err(err)?;
        if !first {
            out.push(b',');
        }
        first = false;
        match &k {
            Value::String(s) => string(&s.as_bytes(), out),
            Value::Integer(n) => string(number(*n as f64)?.as_bytes(), out),
            Value::Number(n) => string(number(*n)?.as_bytes(), out),
            _ => return Err("Cannot serialise table: table key must be a number or string".into()),
        }
        out.push(b':');
        encode(&v, out, depth)?;
    }
    out.push(b'}');
    Ok(())
}

/// A decoded JSON value as lua-cjson gives it.
fn to_lua(lua: &Lua, json: serde_json::Value) -> mlua::Result<Value> {
    use serde_json::Value as J;
    Ok(match json {
        J::Null => Value::NULL,
        J::Bool(b) => Value::Boolean(b),
        J::Number(n) => Value::Number(n.as_f64().unwrap_or(f64::NAN)),
        J::String(s) => Value::String(lua.create_string(&s)?),
        J::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
        J::Object(map) => {
            let t = lua.create_table_with_capacity(0, map.len())?;
            for (k, v) in map {
                t.raw_set(lua.create_string(&k)?, to_lua(lua, v)?)?;
            }
            Value::Table(t)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_c_g14() {
        for (n, s) in [
            (100.0, "100"),
            (1.0 / 3.0, "0.33333333333333"),
            (9_007_199_254_740_992.0, "9.007199254741e+15"),
            (1e300, "1e+300"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (-2.5, "-2.5"),
            (123_456_789_012_345.0, "1.2345678901234e+14"),
            (12_345_678_901_234.0, "12345678901234"),
        ] {
            assert_eq!(format_g14(n), s, "{n}");
        }
    }

    #[test]
    fn bits_as_luabitop() {
        assert_eq!(tobit(4_294_967_301.0), 5);
        assert_eq!(tobit(-1.0), -1);
        assert_eq!(tobit(2_147_483_648.0), i32::MIN);
        assert_eq!(tohex(255, None), "000000ff");
        assert_eq!(tohex(-1, Some(-4)), "FFFF");
        assert_eq!(i32::swap_bytes(0x1234_5678), 0x7856_3412);
    }
}
