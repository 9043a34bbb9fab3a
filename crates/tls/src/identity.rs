//! A certificate and key from PEM files, reloadable while in use.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use rustls::client::ResolvesClientCert;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::SignatureScheme;

use crate::{load_certs, load_key, provider, TlsError};

/// What a file looked like when it was last read (to notice it changed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: meta.modified().ok(),
        len: meta.len(),
    })
}

/// A certificate chain and its private key, read from PEM files; [`reload`](Self::reload)
/// replaces both for new handshakes, and a failed reload keeps the previous pair.
pub struct Identity {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
    stamps: Mutex<(Option<Stamp>, Option<Stamp>)>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("cert", &self.cert_path)
            .field("key", &self.key_path)
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// Reads the certificate chain at `cert` and the private key at `key`.
    pub fn load(cert: &Path, key: &Path) -> Result<Arc<Identity>, TlsError> {
        let stamps = (stamp(cert), stamp(key));
        let current = read_pair(cert, key)?;
        Ok(Arc::new(Identity {
            cert_path: cert.to_path_buf(),
            key_path: key.to_path_buf(),
            current: RwLock::new(current),
            stamps: Mutex::new(stamps),
        }))
    }

    /// Reads both files again; new handshakes present what they hold now. On an error the
    /// identity keeps what it had.
    pub fn reload(&self) -> Result<(), TlsError> {
        let stamps = (stamp(&self.cert_path), stamp(&self.key_path));
        let pair = read_pair(&self.cert_path, &self.key_path)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = pair;
        *self.stamps.lock().unwrap_or_else(|e| e.into_inner()) = stamps;
        Ok(())
    }

    /// Reloads if either file changed (modification time or size) since it was last read;
    /// true if it did reload.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let now = (stamp(&self.cert_path), stamp(&self.key_path));
        let last = *self.stamps.lock().unwrap_or_else(|e| e.into_inner());
        if now == last {
            return Ok(false);
        }
        match self.reload() {
            Ok(()) => Ok(true),
            Err(e) => {
                // Don't retry a broken pair (e.g. a half-written file) at every check:
                // the next change of either file tries again.
                *self.stamps.lock().unwrap_or_else(|e| e.into_inner()) = now;
                Err(e)
            }
        }
    }

    /// The pair handshakes present now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

fn read_pair(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, TlsError> {
    let chain = load_certs(cert)?;
    let der = load_key(key)?;
    let signing = provider()
        .key_provider
        .load_private_key(der)
        .map_err(|e| TlsError::BadKey {
            path: key.to_path_buf(),
            reason: e.to_string(),
        })?;
    let pair = CertifiedKey::new(chain, signing);
    pair.keys_match().map_err(|_| TlsError::KeyMismatch {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
    })?;
    Ok(Arc::new(pair))
}

impl ResolvesServerCert for Identity {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

impl ResolvesClientCert for Identity {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}
