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

/// A request's command: its protocol, and its name with its slot in that protocol's fixed
/// table of names (RESP: `front::resp`'s, from COMMAND's table; native: [`NATIVE_NAMES`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Command {
    /// The protocol.
    pub protocol: Protocol,
    /// Its slot in the protocol's table.
    pub slot: u16,
    /// Its name (the label value).
    pub name: &'static str,
}

/// Requests and error replies of one worker, by command.
#[derive(Clone, Debug, Default)]
pub struct RequestCounts {
    /// RESP, by slot: (name, requests, errors).
    resp: Vec<(&'static str, u64, u64)>,
    /// Native, by slot: (name, requests, errors).
    native: Vec<(&'static str, u64, u64)>,
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
            table.resize(i + 1, ("", 0, 0));
        }
        let entry = &mut table[i];
        entry.0 = c.name;
        entry.1 += 1;
        entry.2 += u64::from(error);
    }

    /// Every command seen: (protocol, command name, requests, errors).
    pub fn counts(&self) -> impl Iterator<Item = (Protocol, &'static str, u64, u64)> + '_ {
        let resp = self
            .resp
            .iter()
            .filter(|c| c.1 > 0)
            .map(|&(name, n, e)| (Protocol::Resp, name, n, e));
        let native = self
            .native
            .iter()
            .filter(|c| c.1 > 0)
            .map(|&(name, n, e)| (Protocol::Native, name, n, e));
        resp.chain(native)
    }
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

/// The command of a native request (its operation, by its field number in `Request.op`);
/// `other` without one (an undecodable request).
pub fn native_command(op: Option<&wire::pb::request::Op>) -> Command {
    let slot = op.map_or(0, native_slot);
    Command {
        protocol: Protocol::Native,
        slot,
        name: NATIVE_NAMES[usize::from(slot)],
    }
}

fn native_slot(op: &wire::pb::request::Op) -> u16 {
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
    fn counts_by_command_name() {
        let put = native_command(Some(&pb::request::Op::Put(pb::Put::default())));
        assert_eq!((put.slot, put.name), (3, "put"));
        assert_eq!(native_command(None).name, "other");
        let get = Command {
            protocol: Protocol::Resp,
            slot: 7,
            name: "get",
        };
        let mut c = RequestCounts::default();
        c.record(get, false);
        c.record(get, true);
        c.record(put, false);
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
