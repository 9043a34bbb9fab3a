//! Client requests and their error replies, counted per worker by protocol and command (the
//! RESP command's name, the native request's operation), for `latticekv_requests_total` and
//! `latticekv_request_errors_total`. Commands are slots of fixed tables (RESP: the COMMAND
//! table, anything else `other`; native: the request's `op` field), so the series stay
//! bounded whatever clients send.

/// A client protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// RESP (Redis clients).
    Resp,
    /// The native protobuf protocol.
    Native,
}

impl Protocol {
    /// Its label value.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Resp => "resp",
            Protocol::Native => "native",
        }
    }
}

/// A request's command: its protocol and a slot in that protocol's table of names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Command {
    /// The protocol.
    pub protocol: Protocol,
    /// Its slot (see [`RequestCounts::names`]).
    pub slot: u16,
}

/// Requests and error replies of one worker, by command.
#[derive(Clone, Debug, Default)]
pub struct RequestCounts {
    /// RESP, by slot of [`resp_names`]: (requests, errors).
    resp: Vec<(u64, u64)>,
    /// Native, by slot of [`NATIVE_NAMES`]: (requests, errors).
    native: Vec<(u64, u64)>,
}

impl RequestCounts {
    /// Counts one request of `c`, an error reply if `error`.
    pub fn record(&mut self, c: Command, error: bool) {
        let table = match c.protocol {
            Protocol::Resp => &mut self.resp,
            Protocol::Native => &mut self.native,
        };
        let i = usize::from(c.slot);
        if table.len() <= i {
            table.resize(i + 1, (0, 0));
        }
        table[i].0 += 1;
        table[i].1 += u64::from(error);
    }

    /// Every command seen: (protocol, command name, requests, errors).
    pub fn counts(&self) -> impl Iterator<Item = (Protocol, &'static str, u64, u64)> + '_ {
        let resp = self
            .resp
            .iter()
            .enumerate()
            .filter_map(|(i, &(n, e))| (n > 0).then(|| (Protocol::Resp, resp_name(i), n, e)));
        let native =
            self.native.iter().enumerate().filter_map(|(i, &(n, e))| {
                (n > 0).then(|| (Protocol::Native, native_name(i), n, e))
            });
        resp.chain(native)
    }
}

/// The RESP command names, in slot order (the COMMAND table's); the last slot is `other`.
pub fn resp_names() -> &'static [&'static str] {
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let mut v: Vec<&'static str> = crate::front::resp::command_names().collect();
        v.push("other");
        v
    })
}

fn resp_name(slot: usize) -> &'static str {
    resp_names().get(slot).copied().unwrap_or("other")
}

/// The slot of RESP command `name` (any case); `other`'s for a name latticekv does not know.
pub fn resp_slot(name: &[u8]) -> u16 {
    static SLOTS: std::sync::OnceLock<std::collections::HashMap<&'static [u8], u16>> =
        std::sync::OnceLock::new();
    let slots = SLOTS.get_or_init(|| {
        resp_names()
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_bytes(), i as u16))
            .collect()
    });
    let other = (resp_names().len() - 1) as u16;
    let mut lower = [0u8; 32];
    let Some(buf) = lower.get_mut(..name.len()) else {
        return other;
    };
    for (d, s) in buf.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    slots.get(&buf[..]).copied().unwrap_or(other)
}

/// The native operations by the number of their field in `Request.op`; gaps and unknown
/// numbers are `other`.
pub const NATIVE_NAMES: [&str; 28] = [
    "other",
    "other",
    "get",
    "put",
    "delete",
    "update",
    "get_many",
    "put_many",
    "delete_many",
    "set_replication",
    "topology",
    "status",
    "ping",
    "locate",
    "holds",
    "replicate",
    "forward",
    "anti_entropy",
    "sync_cluster",
    "leave",
    "fetch",
    "get_all",
    "put_all",
    "get_delta",
    "subscribe",
    "unsubscribe",
    "admin",
    "auth",
];

fn native_name(slot: usize) -> &'static str {
    NATIVE_NAMES.get(slot).copied().unwrap_or("other")
}

/// The slot of a native request's operation (its field number in `Request.op`).
pub fn native_slot(op: &wire::pb::request::Op) -> u16 {
    use wire::pb::request::Op;
    match op {
        Op::Get(_) => 2,
        Op::Put(_) => 3,
        Op::Delete(_) => 4,
        Op::Update(_) => 5,
        Op::GetMany(_) => 6,
        Op::PutMany(_) => 7,
        Op::DeleteMany(_) => 8,
        Op::SetReplication(_) => 9,
        Op::Topology(_) => 10,
        Op::Status(_) => 11,
        Op::Ping(_) => 12,
        Op::Locate(_) => 13,
        Op::Holds(_) => 14,
        Op::Replicate(_) => 15,
        Op::Forward(_) => 16,
        Op::AntiEntropy(_) => 17,
        Op::SyncCluster(_) => 18,
        Op::Leave(_) => 19,
        Op::Fetch(_) => 20,
        Op::GetAll(_) => 21,
        Op::PutAll(_) => 22,
        Op::GetDelta(_) => 23,
        Op::Subscribe(_) => 24,
        Op::Unsubscribe(_) => 25,
        Op::Admin(_) => 26,
        Op::Auth(_) => 27,
    }
}

/// True if the RESP reply starting `reply` is an error (`-…`, or RESP3's blob error `!…`).
pub fn resp_is_error(reply: &[u8]) -> bool {
    matches!(reply.first(), Some(b'-' | b'!'))
}

/// True if the native reply frame starting `reply` is an `Error` response: after the 4-byte
/// header, the encoded `Response` has its `id` (field 1, a varint, absent when 0) and then
/// its result, whose tag is field 2's (`error`, length-delimited: 0x12) for an error.
pub fn native_is_error(reply: &[u8]) -> bool {
    let mut body = reply.get(wire::frame::HEADER_LEN..).unwrap_or_default();
    if body.first() == Some(&0x08) {
        // Skip the id's varint.
        let Some(end) = body[1..].iter().position(|b| b & 0x80 == 0) else {
            return false;
        };
        body = &body[end + 2..];
    }
    body.first() == Some(&0x12)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use wire::pb;

    fn frame(r: &pb::Response) -> Vec<u8> {
        let body = r.encode_to_vec();
        let mut out = (body.len() as u32).to_be_bytes().to_vec();
        out.extend(body);
        out
    }

    #[test]
    fn native_error_replies_are_recognised_from_their_bytes() {
        let error = pb::response::Result::Error(pb::Error {
            message: "no".into(),
            ..Default::default()
        });
        let ack = pb::response::Result::Ack(pb::Ack::default());
        for id in [0u64, 1, 300, u64::MAX] {
            let e = pb::Response {
                id,
                result: Some(error.clone()),
            };
            assert!(native_is_error(&frame(&e)), "id {id}");
            let ok = pb::Response {
                id,
                result: Some(ack.clone()),
            };
            assert!(!native_is_error(&frame(&ok)), "id {id}");
        }
        assert!(!native_is_error(&[]));
        assert!(!native_is_error(&[0, 0, 0, 1, 0x08]));
    }

    #[test]
    fn resp_slots_are_case_insensitive_and_bounded() {
        let names = resp_names();
        let get = resp_slot(b"GET");
        assert_eq!(names[usize::from(get)], "get");
        assert_eq!(resp_slot(b"gEt"), get);
        let other = resp_slot(b"NOSUCHCOMMAND");
        assert_eq!(names[usize::from(other)], "other");
        assert_eq!(resp_slot(&[b'x'; 100]), other);
        let mut c = RequestCounts::default();
        c.record(
            Command {
                protocol: Protocol::Resp,
                slot: get,
            },
            false,
        );
        c.record(
            Command {
                protocol: Protocol::Resp,
                slot: get,
            },
            true,
        );
        c.record(
            Command {
                protocol: Protocol::Native,
                slot: 3,
            },
            false,
        );
        let all: Vec<_> = c.counts().collect();
        assert_eq!(
            all,
            vec![
                (Protocol::Resp, "get", 2, 1),
                (Protocol::Native, "put", 1, 0)
            ]
        );
    }
}
