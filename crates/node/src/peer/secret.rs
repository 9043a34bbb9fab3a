//! The cluster secret: proof in every peer hello that the caller belongs to the cluster.
//!
//! With `cluster_secret` set, a hello carries the time it was sent and an HMAC-SHA256,
//! keyed by the secret, of the caller's node id, its worker ids and that time. The peer port
//! refuses a hello without a valid proof or sent more than [`MAX_HELLO_SKEW_MS`] away from
//! its own clock, so a node without the secret can neither gossip membership (it never
//! joins) nor send or receive replication. The secret itself never crosses the network;
//! without TLS the traffic that follows is still readable on the wire.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use wire::pb;

/// How far a hello's send time may be from the receiver's clock.
pub const MAX_HELLO_SKEW_MS: u64 = 5 * 60 * 1000;

/// The proof of `hello` under `secret`.
fn proof(secret: &str, hello: &pb::PeerHello) -> [u8; 32] {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(b"latticekv peer hello v1\0");
    mac.update(hello.node_id.as_bytes());
    mac.update(&[0]);
    let worker = |w: Option<u32>| w.map_or(u64::MAX, u64::from);
    mac.update(&worker(hello.from_worker).to_le_bytes());
    mac.update(&worker(hello.to_worker).to_le_bytes());
    mac.update(&hello.sent_ms.to_le_bytes());
    mac.finalize().into_bytes().into()
}

/// Stamps `hello` (sent now, `now_ms`) with its proof when there is a secret.
pub fn sign(hello: &mut pb::PeerHello, secret: Option<&str>, now_ms: u64) {
    hello.sent_ms = now_ms;
    hello.proof = match secret {
        Some(s) => proof(s, hello).to_vec().into(),
        None => Default::default(),
    };
}

/// The proof of a `GetTopology` sent at `sent_ms` under `secret`.
fn topology_proof(secret: &str, sent_ms: u64) -> [u8; 32] {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(b"latticekv topology v1\0");
    mac.update(&sent_ms.to_le_bytes());
    mac.finalize().into_bytes().into()
}

/// Stamps a `GetTopology` (sent now, `now_ms`) with its proof when there is a secret: how
/// a joining node asks a seed's client port for the members before it could authenticate.
pub fn sign_topology(req: &mut pb::GetTopology, secret: Option<&str>, now_ms: u64) {
    req.sent_ms = now_ms;
    req.proof = match secret {
        Some(s) => topology_proof(s, now_ms).to_vec().into(),
        None => Default::default(),
    };
}

/// Checks a `GetTopology`'s proof against `secret`, as [`verify`] does a hello's.
pub fn verify_topology(req: &pb::GetTopology, secret: &str, now_ms: u64) -> Result<(), HelloError> {
    let expected = topology_proof(secret, req.sent_ms);
    if req.proof.len() != expected.len() || !bool::from(req.proof.ct_eq(&expected)) {
        return Err(HelloError::BadProof);
    }
    let skew = now_ms.abs_diff(req.sent_ms);
    if skew > MAX_HELLO_SKEW_MS {
        return Err(HelloError::Skew(skew));
    }
    Ok(())
}

/// Why a hello was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HelloError {
    /// No proof, or a wrong one: the caller does not hold the cluster secret.
    #[error("the hello does not prove the cluster secret")]
    BadProof,
    /// Sent too far from this node's clock (a replay, or a badly wrong clock).
    #[error("the hello was sent {0} ms away from this node's clock")]
    Skew(u64),
}

/// Checks `hello` against this node's `secret` (none: every hello is accepted).
pub fn verify(hello: &pb::PeerHello, secret: Option<&str>, now_ms: u64) -> Result<(), HelloError> {
    let Some(secret) = secret else {
        return Ok(());
    };
    let expected = proof(secret, hello);
    if hello.proof.len() != expected.len() || !bool::from(hello.proof.ct_eq(&expected)) {
        return Err(HelloError::BadProof);
    }
    let skew = now_ms.abs_diff(hello.sent_ms);
    if skew > MAX_HELLO_SKEW_MS {
        return Err(HelloError::Skew(skew));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> pb::PeerHello {
        pb::PeerHello {
            version: 1,
            node_id: "n1".into(),
            from_worker: Some(0),
            to_worker: Some(1),
            ..Default::default()
        }
    }

    #[test]
    fn only_the_secret_proves_a_hello() {
        let now = 1_000_000_000;
        let mut h = hello();
        sign(&mut h, Some("s3cret"), now);
        assert_eq!(verify(&h, Some("s3cret"), now + 1000), Ok(()));
        assert_eq!(verify(&h, Some("other"), now), Err(HelloError::BadProof));
        assert_eq!(verify(&h, None, now), Ok(()), "no secret: open");
        let mut unsigned = hello();
        sign(&mut unsigned, None, now);
        assert_eq!(
            verify(&unsigned, Some("s3cret"), now),
            Err(HelloError::BadProof)
        );
        // The proof covers who calls and whom: changing either breaks it.
        let mut forged = h.clone();
        forged.node_id = "n2".into();
        assert_eq!(
            verify(&forged, Some("s3cret"), now),
            Err(HelloError::BadProof)
        );
        let mut forged = h.clone();
        forged.to_worker = Some(0);
        assert_eq!(
            verify(&forged, Some("s3cret"), now),
            Err(HelloError::BadProof)
        );
        // An old hello (a replay) is refused.
        assert!(matches!(
            verify(&h, Some("s3cret"), now + MAX_HELLO_SKEW_MS + 1),
            Err(HelloError::Skew(_))
        ));
    }
}
