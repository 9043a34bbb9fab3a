//! TLS for latticekv's ports and clients (rustls with the `ring` provider).
//!
//! - [`Identity`]: a certificate chain and its private key, read from PEM files, that can be
//!   reloaded while connections use it (new handshakes get the new certificate; connections
//!   already open keep theirs). It presents itself as a server certificate on a node's ports
//!   and as the client certificate of a node's outgoing peer connections (mutual TLS).
//! - [`server_config`] and [`client_config`]: the rustls configurations built from it, with
//!   client certificates required when a CA is given (the peer port).
//! - [`Stream`]: a TCP connection, plain or TLS, that a node can move from the thread that
//!   accepted it to the worker thread that serves it ([`Stream::detach`]).
//!
//! Nothing here opens a socket or spawns a thread: callers do the I/O and decide when to
//! [`Identity::reload_if_changed`].

mod identity;
mod stream;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use identity::Identity;
pub use rustls;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
pub use stream::{Detached, Stream};
pub use tokio_rustls::{TlsAcceptor, TlsConnector};

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {reason}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A certificate file holds no certificate.
    #[error("{path} holds no PEM certificate")]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// A key file holds no private key, or one rustls cannot use.
    #[error("{path} holds no usable PEM private key: {reason}")]
    BadKey {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The certificate and the key do not belong together.
    #[error("the private key in {key} does not match the certificate in {cert}")]
    KeyMismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// A CA file's certificate was refused as a trust anchor.
    #[error("{path}: not a usable CA certificate: {reason}")]
    BadCa {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// No trust anchors at all (no CA file, and none installed on this system).
    #[error("no CA certificates: give a CA file (the system has none installed)")]
    NoRoots,
    /// An address whose host cannot be a TLS server name.
    #[error("'{addr}' has no host usable as a TLS server name")]
    ServerName {
        /// The address.
        addr: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration refused: {0}")]
    Config(#[from] rustls::Error),
}

/// The crypto provider every configuration here uses.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads every certificate of the PEM file at `path` (a chain: leaf first).
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let read = |reason: String| TlsError::Read {
        path: path.to_path_buf(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| read(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| read(e.to_string()))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// Reads the private key (PKCS#8, PKCS#1 or SEC1) of the PEM file at `path`.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::BadKey {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Trust anchors: the certificates of the PEM file `ca`, or the system's when `None`.
pub fn roots(ca: Option<&Path>) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    match ca {
        Some(path) => {
            for cert in load_certs(path)? {
                store.add(cert).map_err(|e| TlsError::BadCa {
                    path: path.to_path_buf(),
                    reason: e.to_string(),
                })?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(TlsError::NoRoots);
            }
        }
    }
    Ok(store)
}

/// Whether a server asks clients for certificates.
#[derive(Debug)]
pub enum ClientAuth {
    /// No client certificates.
    None,
    /// Clients must present a certificate one of these CAs signed (mutual TLS).
    Required(RootCertStore),
    /// Clients may present one (then it must be signed by one of these CAs), or none.
    Optional(RootCertStore),
}

/// A server configuration presenting `identity`, asking clients for certificates as
/// `client_auth` says.
pub fn server_config(
    identity: Arc<Identity>,
    client_auth: ClientAuth,
) -> Result<Arc<ServerConfig>, TlsError> {
    let builder =
        ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    let verifier = |ca: RootCertStore, optional: bool| {
        let b = WebPkiClientVerifier::builder_with_provider(Arc::new(ca), provider());
        let b = if optional {
            b.allow_unauthenticated()
        } else {
            b
        };
        b.build().map_err(|e| rustls::Error::General(e.to_string()))
    };
    let builder = match client_auth {
        ClientAuth::Required(ca) => builder.with_client_cert_verifier(verifier(ca, false)?),
        ClientAuth::Optional(ca) => builder.with_client_cert_verifier(verifier(ca, true)?),
        ClientAuth::None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(identity);
    config.alpn_protocols.clear();
    Ok(Arc::new(config))
}

/// A client configuration trusting `roots`, presenting `identity` if the server asks for a
/// client certificate.
pub fn client_config(
    roots: RootCertStore,
    identity: Option<Arc<Identity>>,
) -> Result<Arc<ClientConfig>, TlsError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let config = match identity {
        Some(id) => builder.with_client_cert_resolver(id),
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// The TLS server name of `addr` (`host:port`, `[v6]:port` or a bare host): an IP address
/// or a DNS name, which the server's certificate must name.
pub fn server_name(addr: &str) -> Result<ServerName<'static>, TlsError> {
    let host = if let Some(rest) = addr.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else if addr.matches(':').count() == 1 {
        addr.rsplit_once(':').map_or(addr, |(h, _)| h)
    } else {
        addr
    };
    ServerName::try_from(host.to_string()).map_err(|_| TlsError::ServerName {
        addr: addr.to_string(),
    })
}

#[cfg(test)]
mod tests;
