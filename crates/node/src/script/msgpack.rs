//! `cmsgpack` for scripts, as lua-cmsgpack 0.4.0 (the version Redis loads): `pack`,
//! `unpack`, `unpack_one`, `unpack_limit`.
//!
//! Packing: a number that is an integer (and fits 64 bits) takes the smallest integer
//! format, any other a float32 if it is exactly one, else a float64; a string the smallest
//! `str` format; a table whose keys are exactly 1..n an array (an empty table an empty
//! array), any other a map in the table's own order; tables nested deeper than
//! [`MAX_NESTING`] and values MessagePack has no type for (functions, `cjson.null`) are
//! `nil`. Unpacking accepts what packing writes (no `bin` or `ext` types: `Bad data format
//! in input.`, as lua-cmsgpack); a `uint64` above the largest `int64` wraps, as its C cast.

use mlua::{Lua, MultiValue, Table, Value};

/// Tables packed inside each other, at most (lua-cmsgpack's `LUACMSGPACK_MAX_NESTING`).
pub(super) const MAX_NESTING: usize = 16;

/// Containers unpacked inside each other, at most (lua-cmsgpack is bounded by the C
/// stack; this keeps a hostile string from exhausting ours).
const MAX_DEPTH: usize = 64;

const MISSING: &str = "Missing bytes in input.";
const BAD: &str = "Bad data format in input.";

/// Adds the Rust side of `cmsgpack` to `globals`. Each function returns `true` and its
/// values, or `false` and a message: the prelude raises it at the script's line.
pub(super) fn install(lua: &Lua, globals: &Table) -> mlua::Result<()> {
    let t = lua.create_table()?;
    t.raw_set("_NAME", "cmsgpack")?;
    t.raw_set("_VERSION", "lua-cmsgpack 0.4.0")?;
    t.raw_set("_COPYRIGHT", "Copyright (C) 2012, Salvatore Sanfilippo")?;
    t.raw_set("_DESCRIPTION", "MessagePack C implementation for Lua")?;
    t.raw_set(
        "pack",
        lua.create_function(|lua, args: mlua::Variadic<Value>| {
            if args.is_empty() {
                return failed(
                    lua,
                    "bad argument #0 to 'pack' (MessagePack pack needs input.)",
                );
            }
            let mut out = Vec::new();
            for v in args.iter() {
                pack(v, &mut out, 0)?;
            }
            Ok(MultiValue::from_vec(vec![
                Value::Boolean(true),
                Value::String(lua.create_string(&out)?),
            ]))
        })?,
    )?;
    t.raw_set(
        "unpack",
        lua.create_function(|lua, s: mlua::String| {
            let bytes = s.as_bytes();
            match unpack(lua, &bytes, usize::MAX) {
                Ok((mut values, _)) => {
                    values.insert(0, Value::Boolean(true));
                    Ok(MultiValue::from_vec(values))
                }
                Err(Failure::Input(msg)) => failed(lua, msg),
                Err(Failure::Lua(e)) => Err(e),
            }
        })?,
    )?;
    t.raw_set(
        "unpack_limit",
        lua.create_function(
            |lua, (s, limit, offset): (mlua::String, i64, Option<i64>)| {
                unpack_from(lua, &s.as_bytes(), limit, offset.unwrap_or(0))
            },
        )?,
    )?;
    t.raw_set(
        "unpack_one",
        lua.create_function(|lua, (s, offset): (mlua::String, Option<i64>)| {
            unpack_from(lua, &s.as_bytes(), 1, offset.unwrap_or(0))
        })?,
    )?;
    globals.raw_set("cmsgpack", t)
}

fn failed(lua: &Lua, msg: &str) -> mlua::Result<MultiValue> {
    Ok(MultiValue::from_vec(vec![
        Value::Boolean(false),
        Value::String(lua.create_string(msg)?),
    ]))
}

/// `unpack_limit`: `true`, the offset after the values (-1 at the end), the values.
fn unpack_from(lua: &Lua, s: &[u8], limit: i64, offset: i64) -> mlua::Result<MultiValue> {
    if offset < 0 || limit < 0 {
        return failed(
            lua,
            &format!("Invalid request to unpack with offset of {offset} and limit of {limit}."),
        );
    }
    let Some(rest) = usize::try_from(offset).ok().and_then(|o| s.get(o..)) else {
        return failed(
            lua,
            &format!(
                "Start offset {offset} greater than input length {}.",
                s.len()
            ),
        );
    };
    match unpack(lua, rest, usize::try_from(limit).unwrap_or(usize::MAX)) {
        Ok((values, used)) => {
            let next = if used == rest.len() {
                -1
            } else {
                offset + used as i64
            };
            let mut out = Vec::with_capacity(values.len() + 2);
            out.push(Value::Boolean(true));
            out.push(Value::Integer(next));
            out.extend(values);
            Ok(MultiValue::from_vec(out))
        }
        Err(Failure::Input(msg)) => failed(lua, msg),
        Err(Failure::Lua(e)) => Err(e),
    }
}

// ---- packing ------------------------------------------------------------------------------

fn pack(v: &Value, out: &mut Vec<u8>, level: usize) -> mlua::Result<()> {
    match v {
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(i) => number(*i as f64, out),
        Value::Number(n) => number(*n, out),
        Value::String(s) => string(&s.as_bytes(), out),
        Value::Table(t) if level < MAX_NESTING => table(t, out, level)?,
        _ => out.push(0xc0),
    }
    Ok(())
}

fn number(n: f64, out: &mut Vec<u8>) {
    // 2^63: the first double past i64::MAX.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if n.fract() == 0.0 && (-LIMIT..LIMIT).contains(&n) {
        integer(n as i64, out);
    } else if f64::from(n as f32) == n || n.is_infinite() {
        out.push(0xca);
        out.extend_from_slice(&(n as f32).to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn integer(i: i64, out: &mut Vec<u8>) {
    if i >= 0 {
        match i {
            0..=0x7f => out.push(i as u8),
            0x80..=0xff => out.extend_from_slice(&[0xcc, i as u8]),
            0x100..=0xffff => {
                out.push(0xcd);
                out.extend_from_slice(&(i as u16).to_be_bytes());
            }
            0x1_0000..=0xffff_ffff => {
                out.push(0xce);
                out.extend_from_slice(&(i as u32).to_be_bytes());
            }
            _ => {
                out.push(0xcf);
                out.extend_from_slice(&(i as u64).to_be_bytes());
            }
        }
    } else if i >= -32 {
        out.push(i as u8);
    } else if i >= -128 {
        out.extend_from_slice(&[0xd0, i as u8]);
    } else if i >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(i as i16).to_be_bytes());
    } else if i >= i64::from(i32::MIN) {
        out.push(0xd2);
        out.extend_from_slice(&(i as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&i.to_be_bytes());
    }
}

fn string(s: &[u8], out: &mut Vec<u8>) {
    let len = s.len();
    if len < 32 {
        out.push(0xa0 | len as u8);
    } else if len <= 0xff {
        out.extend_from_slice(&[0xd9, len as u8]);
    } else if len <= 0xffff {
        out.push(0xda);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
    out.extend_from_slice(s);
}

/// A container header: `fix` (the 4-bit form's tag) up to 15 items, else `x16`/`x32`.
fn header(n: usize, fix: u8, x16: u8, out: &mut Vec<u8>) {
    if n <= 15 {
        out.push(fix | n as u8);
    } else if n <= 0xffff {
        out.push(x16);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(x16 + 1);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

fn table(t: &Table, out: &mut Vec<u8>, level: usize) -> mlua::Result<()> {
    // An array if its keys are exactly 1..n.
    let (mut count, mut max, mut array) = (0usize, 0f64, true);
    for pair in t.clone().pairs::<Value, Value>() {
        let (k, _) = pair?;
        count += 1;
        let k = match k {
            Value::Integer(i) => i as f64,
            Value::Number(n) => n,
            _ => {
                array = false;
                continue;
            }
        };
        if k < 1.0 || k.fract() != 0.0 {
            array = false;
        }
        max = max.max(k);
    }
    if array && max == count as f64 {
        header(count, 0x90, 0xdc, out);
        for i in 1..=count {
            pack(&t.raw_get::<Value>(i)?, out, level + 1)?;
        }
        return Ok(());
    }
    header(count, 0x80, 0xde, out);
    for pair in t.clone().pairs::<Value, Value>() {
        let (k, v) = pair?;
        pack(&k, out, level + 1)?;
        pack(&v, out, level + 1)?;
    }
    Ok(())
}

// ---- unpacking ----------------------------------------------------------------------------

enum Failure {
    /// The input is not what `pack` writes.
    Input(&'static str),
    /// Lua failed (memory, a `nil` or NaN map key).
    Lua(mlua::Error),
}

impl From<mlua::Error> for Failure {
    fn from(e: mlua::Error) -> Self {
        Failure::Lua(e)
    }
}

/// Up to `limit` values from the start of `s`, and the bytes they took.
fn unpack(lua: &Lua, s: &[u8], limit: usize) -> Result<(Vec<Value>, usize), Failure> {
    let mut cur = Cursor { s, at: 0 };
    let mut values = Vec::new();
    while cur.at < s.len() && values.len() < limit {
        values.push(cur.value(lua, 0)?);
    }
    Ok((values, cur.at))
}

struct Cursor<'a> {
    s: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], Failure> {
        let end = self.at.checked_add(n).ok_or(Failure::Input(MISSING))?;
        let bytes = self.s.get(self.at..end).ok_or(Failure::Input(MISSING))?;
        self.at = end;
        Ok(bytes)
    }

    fn uint(&mut self, n: usize) -> Result<u64, Failure> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    fn value(&mut self, lua: &Lua, depth: usize) -> Result<Value, Failure> {
        if depth > MAX_DEPTH {
            return Err(Failure::Input(BAD));
        }
        let tag = self.take(1)?[0];
        let int = |n: i64| Value::Integer(n);
        Ok(match tag {
            0x00..=0x7f => int(i64::from(tag)),
            0xe0..=0xff => int(i64::from(tag as i8)),
            0x80..=0x8f => self.map(lua, usize::from(tag & 15), depth)?,
            0x90..=0x9f => self.array(lua, usize::from(tag & 15), depth)?,
            0xa0..=0xbf => self.string(lua, usize::from(tag & 31))?,
            0xc0 => Value::Nil,
            0xc2 => Value::Boolean(false),
            0xc3 => Value::Boolean(true),
            0xca => {
                let bits = self.uint(4)? as u32;
                Value::Number(f64::from(f32::from_bits(bits)))
            }
            0xcb => Value::Number(f64::from_bits(self.uint(8)?)),
            0xcc => int(self.uint(1)? as i64),
            0xcd => int(self.uint(2)? as i64),
            0xce => int(self.uint(4)? as i64),
            // Above i64::MAX it wraps, as lua-cmsgpack's cast.
            0xcf => number_value(self.uint(8)? as i64),
            0xd0 => int(i64::from(self.uint(1)? as u8 as i8)),
            0xd1 => int(i64::from(self.uint(2)? as u16 as i16)),
            0xd2 => int(i64::from(self.uint(4)? as u32 as i32)),
            0xd3 => number_value(self.uint(8)? as i64),
            0xd9 => {
                let n = self.uint(1)? as usize;
                self.string(lua, n)?
            }
            0xda => {
                let n = self.uint(2)? as usize;
                self.string(lua, n)?
            }
            0xdb => {
                let n = self.uint(4)? as usize;
                self.string(lua, n)?
            }
            0xdc => {
                let n = self.uint(2)? as usize;
                self.array(lua, n, depth)?
            }
            0xdd => {
                let n = self.uint(4)? as usize;
                self.array(lua, n, depth)?
            }
            0xde => {
                let n = self.uint(2)? as usize;
                self.map(lua, n, depth)?
            }
            0xdf => {
                let n = self.uint(4)? as usize;
                self.map(lua, n, depth)?
            }
            _ => return Err(Failure::Input(BAD)),
        })
    }

    fn string(&mut self, lua: &Lua, n: usize) -> Result<Value, Failure> {
        let bytes = self.take(n)?;
        Ok(Value::String(lua.create_string(bytes)?))
    }

    /// Items each take a byte at least: a count beyond what is left is missing bytes,
    /// found before anything is allocated for it.
    fn room(&self, n: usize) -> Result<(), Failure> {
        if n > self.s.len() - self.at {
            return Err(Failure::Input(MISSING));
        }
        Ok(())
    }

    fn array(&mut self, lua: &Lua, n: usize, depth: usize) -> Result<Value, Failure> {
        self.room(n)?;
        let t = lua.create_table_with_capacity(n, 0)?;
        for i in 1..=n {
            let v = self.value(lua, depth + 1)?;
            t.raw_set(i, v)?;
        }
        Ok(Value::Table(t))
    }

    fn map(&mut self, lua: &Lua, n: usize, depth: usize) -> Result<Value, Failure> {
        self.room(n.saturating_mul(2))?;
        let t = lua.create_table_with_capacity(0, n)?;
        for _ in 0..n {
            let k = self.value(lua, depth + 1)?;
            let v = self.value(lua, depth + 1)?;
            t.raw_set(k, v)?;
        }
        Ok(Value::Table(t))
    }
}

/// A 64-bit integer as a Lua number (which holds 53 bits exactly).
fn number_value(i: i64) -> Value {
    Value::Number(i as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(v: f64) -> String {
        let mut out = Vec::new();
        number(v, &mut out);
        out.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn numbers_take_lua_cmsgpacks_formats() {
        for (n, h) in [
            (1.0, "01"),
            (-1.0, "ff"),
            (-33.0, "d0df"),
            (128.0, "cc80"),
            (256.0, "cd0100"),
            (65536.0, "ce00010000"),
            (4_294_967_296.0, "cf0000000100000000"),
            (-129.0, "d1ff7f"),
            (-2_147_483_649.0, "d3ffffffff7fffffff"),
            (1.5, "ca3fc00000"),
            (0.1, "cb3fb999999999999a"),
            (9_223_372_036_854_775_808.0, "ca5f000000"),
            (-9_223_372_036_854_775_808.0, "d38000000000000000"),
            (f64::INFINITY, "ca7f800000"),
        ] {
            assert_eq!(hex(n), h, "{n}");
        }
    }
}
