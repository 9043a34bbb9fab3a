//! TLS on a node's ports: what it presents and whom it trusts, built once at start from
//! [`TlsConfig`] and reloaded from the same files while the node runs.
//!
//! - Client ports (native front, workers' own ports, RESP) are TLS-only when a certificate
//!   is configured; clients are not asked for certificates (they authenticate with
//!   passwords).
//! - The peer port is TLS-only too. With a CA (`ca`), peers must present a certificate it
//!   signed (mutual TLS): a node without one cannot join, gossip or exchange data. Without
//!   a CA, the peer port encrypts but does not authenticate peers (the cluster secret may).
//! - Outgoing peer connections verify the peer's certificate against the CA (or the
//!   system's roots without one) and the host of the peer's published address, and present
//!   this node's certificate.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;
use tls::{ClientAuth, Identity, TlsAcceptor, TlsConnector, TlsError};

/// TLS settings of a node (`[tls]` in the config file; `--tls-cert`, `--tls-key`,
/// `--tls-ca`).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// The node's certificate chain (PEM, leaf first). With `key`, every port is TLS-only.
    /// Default: unset (no TLS).
    pub cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    pub key: Option<PathBuf>,
    /// CA certificates (PEM) that signed the cluster's node certificates: peers must
    /// present a certificate signed by one (mutual TLS), and outgoing peer connections
    /// trust only these. Default: unset (peers are not asked for certificates; outgoing
    /// connections trust the system's CAs).
    pub ca: Option<PathBuf>,
    /// How often the files are checked for changes, in seconds (changed files are
    /// reloaded; so is everything on SIGHUP). 0: only on SIGHUP. Default: 10.
    pub reload_secs: u64,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            cert: None,
            key: None,
            ca: None,
            reload_secs: 10,
        }
    }
}

impl TlsConfig {
    /// True if TLS is configured.
    pub fn enabled(&self) -> bool {
        self.cert.is_some() || self.key.is_some()
    }
}

/// The TLS state of a running node.
pub struct NodeTls {
    identity: Arc<Identity>,
    /// Handshakes on client ports.
    pub clients: TlsAcceptor,
    /// Handshakes on the peer port.
    pub peers_in: TlsAcceptor,
    /// Handshakes of connections this node opens to peers (and to seeds).
    pub peers_out: TlsConnector,
}

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    /// A certificate without a key or a key without a certificate.
    #[error("TLS needs both a certificate (--tls-cert) and its key (--tls-key)")]
    Incomplete,
    /// A CA without a certificate.
    #[error("--tls-ca is for a node with TLS: give --tls-cert and --tls-key too")]
    CaWithoutCert,
    /// A file is unusable.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

impl std::fmt::Debug for NodeTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeTls")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl NodeTls {
    /// The TLS state `config` describes, or `None` without TLS.
    pub fn from_config(config: &TlsConfig) -> Result<Option<Arc<NodeTls>>, TlsSetupError> {
        let (cert, key) = match (&config.cert, &config.key) {
            (None, None) if config.ca.is_some() => return Err(TlsSetupError::CaWithoutCert),
            (None, None) => return Ok(None),
            (Some(c), Some(k)) => (c, k),
            _ => return Err(TlsSetupError::Incomplete),
        };
        let identity = Identity::load(cert, key)?;
        let ca = config.ca.as_deref();
        // With a CA, client ports accept (but do not require) a node certificate: it lets a
        // joining node ask for the members before it could authenticate.
        let (clients, peers_in) = match ca {
            Some(_) => (
                tls::server_config(identity.clone(), ClientAuth::Optional(tls::roots(ca)?))?,
                tls::server_config(identity.clone(), ClientAuth::Required(tls::roots(ca)?))?,
            ),
            None => {
                let c = tls::server_config(identity.clone(), ClientAuth::None)?;
                (c.clone(), c)
            }
        };
        let peers_out = tls::client_config(tls::roots(ca)?, Some(identity.clone()))?;
        Ok(Some(Arc::new(NodeTls {
            identity,
            clients: TlsAcceptor::from(clients),
            peers_in: TlsAcceptor::from(peers_in),
            peers_out: TlsConnector::from(peers_out),
        })))
    }

    /// Reads the certificate and key again (new handshakes use them).
    pub fn reload(&self) -> Result<(), TlsError> {
        self.identity.reload()
    }

    /// Reloads if the files changed; true if it did.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        self.identity.reload_if_changed()
    }
}

/// Checks the certificate files every `every` until `shutdown`, reloading them when they
/// change (errors are logged; the node keeps the certificate it has).
pub async fn watch_files(
    tls: Arc<NodeTls>,
    every: std::time::Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        match tls.reload_if_changed() {
            Ok(true) => tracing::info!("TLS certificate reloaded"),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(error = %e, "TLS certificate not reloaded; keeping the current one")
            }
        }
    }
}
