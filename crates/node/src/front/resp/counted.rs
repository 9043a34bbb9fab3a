//! The command of a RESP request for the request counts (`latticekv_requests_total`):
//! its slot in COMMAND's table, so the series stay bounded whatever clients send.

use crate::stats::requests::{Command, Protocol};

use super::server::COMMANDS;

/// The command named `name` (any case) for the request counts: its slot in COMMAND's
/// table, or `other` (the slot past it) for a name latticekv does not implement, so
/// clients cannot add series.
pub(super) fn command(name: &[u8]) -> Command {
    // foldhash, not SipHash: a lookup per request, of names the server chose.
    type Slots = std::collections::HashMap<&'static [u8], u16, foldhash::fast::FixedState>;
    static SLOTS: std::sync::OnceLock<Slots> = std::sync::OnceLock::new();
    let slots = SLOTS.get_or_init(|| {
        COMMANDS
            .iter()
            .enumerate()
            .map(|(i, c)| (c.0.as_bytes(), i as u16))
            .collect()
    });
    let mut lower = [0u8; 32];
    let slot = lower.get_mut(..name.len()).and_then(|buf| {
        for (d, s) in buf.iter_mut().zip(name) {
            *d = s.to_ascii_lowercase();
        }
        slots.get(&buf[..]).copied()
    });
    let (slot, name) = match slot {
        Some(i) => (i, COMMANDS[usize::from(i)].0),
        None => (COMMANDS.len() as u16, "other"),
    };
    Command {
        protocol: Protocol::Resp,
        slot,
        name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_found_in_any_case_and_unknown_ones_are_other() {
        let get = command(b"GET");
        assert_eq!(get.name, "get");
        assert_eq!(command(b"gEt"), get);
        assert_eq!(command(b"lpush").name, "lpush");
        let other = command(b"NOSUCHCOMMAND");
        assert_eq!(
            (other.name, usize::from(other.slot)),
            ("other", COMMANDS.len())
        );
        assert_eq!(command(&[b'g'; 100]), other);
        assert_eq!(command(b""), other);
    }
}
