//! TTL commands: `SET`'s `EX/PX/EXAT/PXAT/KEEPTTL`, `SETEX`, `PSETEX`, `EXPIRE`,
//! `PEXPIRE`, `EXPIREAT`, `PEXPIREAT` (with `NX/XX/GT/LT`), `TTL`, `PTTL`, `PERSIST`,
//! `GETEX`; and the answer to `FCALL` / `FUNCTION` (Redis functions), which latticekv does
//! not run (scripts: `scripting`).
//!
//! Deadlines are resolved to absolute times by the worker running the op and travel with
//! the key's record (`shard::expiry`, docs/protocol.md).

use super::commands::{arity_error, parse_i64, syntax_error, Cmd, Plan};
use super::reply::{err, Shape};
use crate::op::{Condition, Deadline, ExpireWhen, Op};

/// The plan of TTL command `name` (upper case), or `None` if it is not one.
pub(super) fn plan<'a>(name: &[u8], cmd: &Cmd<'a>) -> Option<Plan<'a>> {
    let argc = cmd.len();
    let lower = cmd.name_lower();
    Some(match name {
        b"SETEX" | b"PSETEX" => {
            if argc != 4 {
                return Some(Plan::Reply(arity_error(cmd)));
            }
            let unit = if name == b"SETEX" { 1000 } else { 1 };
            match relative(cmd.arg(2), unit, &lower) {
                Err(reply) => Plan::Reply(reply),
                Ok(deadline) => Plan::One(
                    Shape::Set,
                    Op::AssignTtl {
                        key: cmd.arg(1),
                        value: cmd.arg(3),
                        condition: Condition::Always,
                        deadline,
                    },
                ),
            }
        }
        b"EXPIRE" | b"PEXPIRE" | b"EXPIREAT" | b"PEXPIREAT" => {
            if argc < 3 {
                return Some(Plan::Reply(arity_error(cmd)));
            }
            let Some(n) = parse_i64(cmd.arg(2)) else {
                return Some(Plan::Reply(not_an_integer()));
            };
            let ms = if name.starts_with(b"P") {
                Some(n)
            } else {
                n.checked_mul(1000)
            };
            let Some(ms) = ms else {
                return Some(Plan::Reply(invalid(&lower)));
            };
            let deadline = if name.ends_with(b"AT") {
                Deadline::At(ms.max(0) as u64)
            } else if ms <= 0 {
                // Already past: the key is deleted (as Redis).
                Deadline::At(0)
            } else {
                Deadline::In(ms as u64)
            };
            let when = match expire_when(cmd, 3) {
                Ok(w) => w,
                Err(reply) => return Some(Plan::Reply(reply)),
            };
            Plan::One(
                Shape::Int,
                Op::Expire {
                    key: cmd.arg(1),
                    deadline,
                    when,
                },
            )
        }
        b"PERSIST" => {
            if argc != 2 {
                return Some(Plan::Reply(arity_error(cmd)));
            }
            Plan::One(
                Shape::Int,
                Op::Expire {
                    key: cmd.arg(1),
                    deadline: Deadline::Persist,
                    when: ExpireWhen::Always,
                },
            )
        }
        b"TTL" | b"PTTL" => {
            if argc != 2 {
                return Some(Plan::Reply(arity_error(cmd)));
            }
            let shape = if name == b"TTL" {
                Shape::TtlSeconds
            } else {
                Shape::Int
            };
            Plan::One(shape, Op::Ttl { key: cmd.arg(1) })
        }
        b"GETEX" => {
            if argc < 2 {
                return Some(Plan::Reply(arity_error(cmd)));
            }
            let mut deadline = None;
            let mut i = 2;
            while i < argc {
                let opt = cmd.arg(i);
                let is = |o: &str| opt.eq_ignore_ascii_case(o.as_bytes());
                if deadline.is_some() {
                    return Some(Plan::Reply(syntax_error()));
                }
                if is("PERSIST") {
                    deadline = Some(Deadline::Persist);
                    i += 1;
                    continue;
                }
                if i + 1 >= argc {
                    return Some(Plan::Reply(syntax_error()));
                }
                let d = match expiry_option(opt, cmd.arg(i + 1), &lower) {
                    Some(Ok(d)) => d,
                    Some(Err(reply)) => return Some(Plan::Reply(reply)),
                    None => return Some(Plan::Reply(syntax_error())),
                };
                deadline = Some(d);
                i += 2;
            }
            Plan::One(
                Shape::Get,
                Op::GetEx {
                    key: cmd.arg(1),
                    deadline,
                },
            )
        }
        b"FCALL" | b"FCALL_RO" | b"FUNCTION" => Plan::Reply(err(
            "ERR Redis functions are not supported by latticekv: use EVAL / EVALSHA (Lua \
             scripts), see docs/protocol.md",
        )),
        _ => return None,
    })
}

fn not_an_integer() -> Vec<u8> {
    err("ERR value is not an integer or out of range")
}

fn invalid(command: &str) -> Vec<u8> {
    err(&format!("ERR invalid expire time in '{command}' command"))
}

/// A relative time in `unit` ms (`EX`, `PX`, `SETEX`): positive, not overflowing.
fn relative(arg: &[u8], unit: i64, command: &str) -> Result<Deadline, Vec<u8>> {
    let n = parse_i64(arg).ok_or_else(not_an_integer)?;
    match n.checked_mul(unit) {
        Some(ms) if n > 0 && ms.checked_add(now_ms() as i64).is_some() => {
            Ok(Deadline::In(ms as u64))
        }
        _ => Err(invalid(command)),
    }
}

/// An absolute time in `unit` ms (`EXAT`, `PXAT`): positive.
fn absolute(arg: &[u8], unit: i64, command: &str) -> Result<Deadline, Vec<u8>> {
    let n = parse_i64(arg).ok_or_else(not_an_integer)?;
    match n.checked_mul(unit) {
        Some(ms) if n > 0 => Ok(Deadline::At(ms as u64)),
        _ => Err(invalid(command)),
    }
}

/// `EX/PX/EXAT/PXAT value`, or `None` if `opt` is not one of them.
pub(super) fn expiry_option(
    opt: &[u8],
    value: &[u8],
    command: &str,
) -> Option<Result<Deadline, Vec<u8>>> {
    let is = |o: &str| opt.eq_ignore_ascii_case(o.as_bytes());
    Some(if is("EX") {
        relative(value, 1000, command)
    } else if is("PX") {
        relative(value, 1, command)
    } else if is("EXAT") {
        absolute(value, 1000, command)
    } else if is("PXAT") {
        absolute(value, 1, command)
    } else {
        return None;
    })
}

/// `EXPIRE`'s options from argument `from` on.
fn expire_when(cmd: &Cmd<'_>, from: usize) -> Result<ExpireWhen, Vec<u8>> {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for i in from..cmd.len() {
        let opt = cmd.arg(i);
        let is = |o: &str| opt.eq_ignore_ascii_case(o.as_bytes());
        if is("NX") {
            nx = true;
        } else if is("XX") {
            xx = true;
        } else if is("GT") {
            gt = true;
        } else if is("LT") {
            lt = true;
        } else {
            return Err(err(&format!(
                "ERR Unsupported option {}",
                String::from_utf8_lossy(opt)
            )));
        }
    }
    if nx && (xx || gt || lt) {
        return Err(err(
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if gt && lt {
        return Err(err(
            "ERR GT and LT options at the same time are not compatible",
        ));
    }
    Ok(if nx {
        ExpireWhen::Nx
    } else if gt {
        // GT/LT with XX: a key without a deadline fails GT anyway ("infinite"), and LT
        // with XX needs one; XX alone is the check.
        ExpireWhen::Gt
    } else if lt && xx {
        ExpireWhen::LtXx
    } else if lt {
        ExpireWhen::Lt
    } else if xx {
        ExpireWhen::Xx
    } else {
        ExpireWhen::Always
    })
}

/// The wall clock, to bound relative times (Redis refuses a deadline past `i64`).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
