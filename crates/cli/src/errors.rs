//! How a failed command reports its error: each cause once, then the likely fix.

use std::io::ErrorKind;

/// The message printed after `error: `: the chain of causes joined by `: `, leaving out a
/// cause whose text the message already holds (an error that prints its source, as
/// `cannot connect to ADDR: Connection refused` does, is followed by that same source in
/// the chain), then a `hint:` line when the cause has a usual fix.
pub(crate) fn report(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let line = cause.to_string();
        if line.is_empty() || text.contains(&line) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&line);
    }
    if let Some(hint) = hint(e) {
        text.push_str("\nhint: ");
        text.push_str(&hint);
    }
    text
}

/// The likely fix of the deepest cause we know one for.
fn hint(e: &anyhow::Error) -> Option<String> {
    for cause in e.chain() {
        if let Some(client::ClientError::Connect { addr, source }) = cause.downcast_ref() {
            return Some(match source.kind() {
                ErrorKind::ConnectionRefused => format!(
                    "is a node running at {addr}? start one with `latticekv local`, or point \
                     --addr (LATTICEKV_ADDR) at one"
                ),
                _ => format!(
                    "is {addr} reachable from here? check --addr (LATTICEKV_ADDR) and the \
                     node's --listen / --advertise"
                ),
            });
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            match io.kind() {
                ErrorKind::AddrInUse => {
                    return Some(
                        "another process listens on that port (another latticekv?): stop \
                         it or choose other ports (--listen, --resp, --http)"
                            .into(),
                    )
                }
                ErrorKind::PermissionDenied => {
                    return Some(
                        "check the permissions of --data-dir (and of the files named above)".into(),
                    )
                }
                _ => {}
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(addr: &str) -> anyhow::Error {
        let source = std::io::Error::from(ErrorKind::ConnectionRefused);
        anyhow::Error::new(client::ClientError::Connect {
            addr: addr.into(),
            source,
        })
        .context(format!("connecting to {addr}"))
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let text = report(&refused("127.0.0.1:1"));
        let first = text.lines().next().unwrap();
        let io = std::io::Error::from(ErrorKind::ConnectionRefused).to_string();
        assert_eq!(
            first,
            format!("connecting to 127.0.0.1:1: cannot connect to 127.0.0.1:1: {io}")
        );
        assert_eq!(first.matches(&io).count(), 1, "{text}");
    }

    #[test]
    fn a_refused_connection_hints_at_starting_a_node() {
        let text = report(&refused("10.0.0.9:7700"));
        let hint = text.lines().nth(1).unwrap();
        assert!(
            hint.starts_with("hint: is a node running at 10.0.0.9:7700?"),
            "{text}"
        );
        assert!(hint.contains("latticekv local"), "{text}");
    }

    #[test]
    fn distinct_causes_all_show_and_plain_errors_get_no_hint() {
        let e = anyhow::anyhow!("disk full").context("writing the snapshot");
        assert_eq!(report(&e), "writing the snapshot: disk full");
    }
}
