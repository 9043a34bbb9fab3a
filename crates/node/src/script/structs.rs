//! `struct` for scripts, as the lua-struct Redis loads: `pack`, `unpack`, `size`, with
//! x86-64's C sizes (`h` 2 bytes, `l`/`T` 8, `i` 4 unless given).
//!
//! Format options: `>`/`<` big/little endian (little by default), `![n]` alignment (8 if no
//! `n`; 1 by default), `x` a zero byte, `b`/`B` `h`/`H` `l`/`L` `T` `i[n]`/`I[n]` signed and
//! unsigned integers (`n` bytes, up to 32), `f`/`d` float and double, `c[n]` `n` bytes of a
//! string (`c0`: packing, the whole string; unpacking, as many bytes as the number read just
//! before, which it replaces), `s` a zero-terminated string, spaces ignored.

use mlua::{Lua, MultiValue, Table, Value};

/// Widest integer (lua-struct's `MAXINTSIZE`).
const MAX_INT_SIZE: usize = 32;
/// Largest alignment (`!` alone).
const MAX_ALIGN: usize = 8;

/// Adds the Rust side of `struct` to `globals`: each function returns `true` and its
/// values, or `false` and a message (the prelude raises it at the script's line).
pub(super) fn install(lua: &Lua, globals: &Table) -> mlua::Result<()> {
    let t = lua.create_table()?;
    t.raw_set(
        "pack",
        lua.create_function(|lua, args: mlua::Variadic<Value>| {
            let out = pack(lua, &args);
            reply(lua, out.map(|b| vec![Bytes(b)]))
        })?,
    )?;
    t.raw_set(
        "unpack",
        lua.create_function(|lua, args: mlua::Variadic<Value>| {
            let values = unpack(lua, &args);
            match values {
                Ok(values) => {
                    let mut out = vec![Value::Boolean(true)];
                    out.extend(values);
                    Ok(MultiValue::from_vec(out))
                }
                Err(msg) => failed(lua, &msg),
            }
        })?,
    )?;
    t.raw_set(
        "size",
        lua.create_function(|lua, args: mlua::Variadic<Value>| {
            match text(lua, &args, 0, "size").and_then(|fmt| size(&fmt)) {
                Ok(n) => Ok(MultiValue::from_vec(vec![
                    Value::Boolean(true),
                    Value::Integer(n as i64),
                ])),
                Err(msg) => failed(lua, &msg),
            }
        })?,
    )?;
    globals.raw_set("struct", t)
}

/// Bytes to return as a Lua string.
struct Bytes(Vec<u8>);

fn reply(lua: &Lua, out: Result<Vec<Bytes>, String>) -> mlua::Result<MultiValue> {
    match out {
        Ok(items) => {
            let mut values = vec![Value::Boolean(true)];
            for Bytes(b) in items {
                values.push(Value::String(lua.create_string(&b)?));
            }
            Ok(MultiValue::from_vec(values))
        }
        Err(msg) => failed(lua, &msg),
    }
}

fn failed(lua: &Lua, msg: &str) -> mlua::Result<MultiValue> {
    Ok(MultiValue::from_vec(vec![
        Value::Boolean(false),
        Value::String(lua.create_string(msg)?),
    ]))
}

fn bad(n: usize, func: &str, why: &str) -> String {
    format!("bad argument #{n} to '{func}' ({why})")
}

/// Argument `i` (0-based) as a string (numbers converted, as `luaL_checklstring`).
fn text(lua: &Lua, args: &[Value], i: usize, func: &str) -> Result<Vec<u8>, String> {
    let v = args.get(i).cloned().unwrap_or(Value::Nil);
    let name = v.type_name();
    match lua.coerce_string(v) {
        Ok(Some(s)) => Ok(s.as_bytes().to_vec()),
        _ => Err(bad(i + 1, func, &format!("string expected, got {name}"))),
    }
}

/// Argument `i` (0-based) as a number (`luaL_checknumber`).
fn number(lua: &Lua, args: &[Value], i: usize, func: &str) -> Result<f64, String> {
    let v = args.get(i).cloned().unwrap_or(Value::Nil);
    let name = v.type_name();
    match lua.coerce_number(v) {
        Ok(Some(n)) => Ok(n),
        _ => Err(bad(i + 1, func, &format!("number expected, got {name}"))),
    }
}

/// A format being read: position, endianness, alignment.
struct Format<'a> {
    fmt: &'a [u8],
    at: usize,
    little: bool,
    align: usize,
}

impl<'a> Format<'a> {
    fn new(fmt: &'a [u8]) -> Self {
        Format {
            fmt,
            at: 0,
            little: true,
            align: 1,
        }
    }

    /// The number following an option, or `default`.
    fn num(&mut self, default: usize) -> Result<usize, String> {
        if !self.fmt.get(self.at).is_some_and(u8::is_ascii_digit) {
            return Ok(default);
        }
        let mut n: usize = 0;
        while let Some(&d) = self.fmt.get(self.at).filter(|d| d.is_ascii_digit()) {
            n = n
                .checked_mul(10)
                .and_then(|n| n.checked_add(usize::from(d - b'0')))
                .filter(|&n| n <= i32::MAX as usize)
                .ok_or("integral size overflow")?;
            self.at += 1;
        }
        Ok(n)
    }

    /// The next option and its size (0 for options without one).
    fn next(&mut self) -> Result<Option<(u8, usize)>, String> {
        let Some(&opt) = self.fmt.get(self.at) else {
            return Ok(None);
        };
        self.at += 1;
        let size = match opt {
            b'b' | b'B' | b'x' => 1,
            b'h' | b'H' => 2,
            b'l' | b'L' | b'T' | b'd' => 8,
            b'f' => 4,
            b'c' => self.num(1)?,
            b'i' | b'I' => {
                let n = self.num(4)?;
                if n > MAX_INT_SIZE {
                    return Err(format!(
                        "integral size {n} is larger than limit of {MAX_INT_SIZE}"
                    ));
                }
                n
            }
            _ => 0,
        };
        Ok(Some((opt, size)))
    }

    /// A control option (`opt` is none of the data options).
    fn control(&mut self, opt: u8, func: &str) -> Result<(), String> {
        match opt {
            b' ' => {}
            b'>' => self.little = false,
            b'<' => self.little = true,
            b'!' => {
                let a = self.num(MAX_ALIGN)?;
                if !a.is_power_of_two() {
                    return Err(format!("alignment {a} is not a power of 2"));
                }
                self.align = a;
            }
            _ => {
                return Err(bad(
                    1,
                    func,
                    &format!("invalid format option '{}'", char::from(opt)),
                ))
            }
        }
        Ok(())
    }

    /// Padding before an item of `size` at `len`.
    fn padding(&self, len: usize, opt: u8, size: usize) -> usize {
        if size == 0 || opt == b'c' {
            return 0;
        }
        let size = size.min(self.align);
        (size - (len & (size - 1))) & (size - 1)
    }
}

fn is_integer(opt: u8) -> bool {
    matches!(
        opt,
        b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I'
    )
}

fn pack(lua: &Lua, args: &[Value]) -> Result<Vec<u8>, String> {
    let fmt = text(lua, args, 0, "pack")?;
    let mut f = Format::new(&fmt);
    let mut out = Vec::new();
    let mut arg = 1;
    while let Some((opt, size)) = f.next()? {
        let pad = f.padding(out.len(), opt, size);
        out.resize(out.len() + pad, 0);
        match opt {
            _ if is_integer(opt) => {
                let n = number(lua, args, arg, "pack")?;
                arg += 1;
                // As lua-struct: a negative number through `long long`, else through
                // `unsigned long long`; bytes past the eighth are zero.
                let v = if n < 0.0 { n as i64 as u64 } else { n as u64 };
                let bytes: Vec<u8> = (0..size)
                    .map(|i| if i < 8 { (v >> (8 * i)) as u8 } else { 0 })
                    .collect();
                push(&mut out, bytes, f.little);
            }
            b'x' => out.push(0),
            b'f' => {
                let n = number(lua, args, arg, "pack")? as f32;
                arg += 1;
                push(&mut out, n.to_le_bytes().to_vec(), f.little);
            }
            b'd' => {
                let n = number(lua, args, arg, "pack")?;
                arg += 1;
                push(&mut out, n.to_le_bytes().to_vec(), f.little);
            }
            b'c' | b's' => {
                let s = text(lua, args, arg, "pack")?;
                arg += 1;
                let size = if size == 0 { s.len() } else { size };
                if s.len() < size {
                    return Err(bad(arg, "pack", "string too short"));
                }
                out.extend_from_slice(&s[..size]);
                if opt == b's' {
                    out.push(0);
                }
            }
            _ => f.control(opt, "pack")?,
        }
    }
    Ok(out)
}

/// Appends `le` (little-endian bytes) in the format's order.
fn push(out: &mut Vec<u8>, mut le: Vec<u8>, little: bool) {
    if !little {
        le.reverse();
    }
    out.extend_from_slice(&le);
}

fn unpack(lua: &Lua, args: &[Value]) -> Result<Vec<Value>, String> {
    let fmt = text(lua, args, 0, "unpack")?;
    let data = text(lua, args, 1, "unpack")?;
    let start = match args.get(2) {
        None | Some(Value::Nil) => 1.0,
        Some(_) => number(lua, args, 2, "unpack")?,
    };
    if start < 1.0 {
        return Err(bad(3, "unpack", "offset must be 1 or greater"));
    }
    let mut pos = start as usize - 1;
    let mut f = Format::new(&fmt);
    let mut values: Vec<Value> = Vec::new();
    let short = || bad(2, "unpack", "data string too short");
    while let Some((opt, mut size)) = f.next()? {
        pos += f.padding(pos, opt, size);
        if size > data.len() || pos > data.len() - size {
            return Err(short());
        }
        let bytes = &data[pos..pos + size];
        let mut le = bytes.to_vec();
        if !f.little {
            le.reverse();
        }
        match opt {
            _ if is_integer(opt) => {
                let v = le
                    .iter()
                    .take(8)
                    .rev()
                    .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
                let n = if opt.is_ascii_lowercase() {
                    let bits = (size * 8).min(64);
                    // Sign-extend from the item's top bit.
                    ((v << (64 - bits)) as i64 >> (64 - bits)) as f64
                } else {
                    v as f64
                };
                values.push(Value::Number(n));
            }
            b'x' => {}
            b'f' => {
                let b: [u8; 4] = le[..4].try_into().map_err(|_| short())?;
                values.push(Value::Number(f64::from(f32::from_le_bytes(b))));
            }
            b'd' => {
                let b: [u8; 8] = le[..8].try_into().map_err(|_| short())?;
                values.push(Value::Number(f64::from_le_bytes(b)));
            }
            b'c' => {
                if size == 0 {
                    let n = match values.pop() {
                        Some(Value::Number(n)) => n,
                        Some(Value::Integer(n)) => n as f64,
                        _ => return Err("format 'c0' needs a previous size".into()),
                    };
                    size = if n > 0.0 { n as usize } else { 0 };
                    if size > data.len() || pos > data.len() - size {
                        return Err(short());
                    }
                }
                values.push(Value::String(
                    lua.create_string(&data[pos..pos + size])
                        .map_err(|e| e.to_string())?,
                ));
            }
            b's' => {
                let Some(end) = data[pos..].iter().position(|&b| b == 0) else {
                    return Err("unfinished string in data".into());
                };
                values.push(Value::String(
                    lua.create_string(&data[pos..pos + end])
                        .map_err(|e| e.to_string())?,
                ));
                size = end + 1;
            }
            _ => f.control(opt, "unpack")?,
        }
        pos += size;
    }
    values.push(Value::Integer(pos as i64 + 1));
    Ok(values)
}

fn size(fmt: &[u8]) -> Result<usize, String> {
    let mut f = Format::new(fmt);
    let mut pos = 0usize;
    while let Some((opt, size)) = f.next()? {
        pos += f.padding(pos, opt, size);
        match opt {
            b's' => return Err(bad(1, "size", "option 's' has no fixed size")),
            b'c' if size == 0 => return Err(bad(1, "size", "option 'c0' has no fixed size")),
            _ if is_integer(opt) || matches!(opt, b'x' | b'f' | b'd' | b'c') => {}
            _ => f.control(opt, "size")?,
        }
        pos += size;
    }
    Ok(pos)
}
