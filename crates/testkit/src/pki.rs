//! A throwaway certificate authority for TLS tests: a CA certificate and leaf certificates
//! it signed, as PEM files in a temporary directory.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// A CA and the directory its files are written to (removed on drop).
pub struct Pki {
    dir: tempfile::TempDir,
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate (PEM).
    pub ca: PathBuf,
}

/// A leaf certificate and its key, as files.
#[derive(Clone, Debug)]
pub struct Leaf {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// The private key (PEM, PKCS#8).
    pub key: PathBuf,
}

impl Pki {
    /// A new CA named `name`.
    pub fn new(name: &str) -> Pki {
        let dir = tempfile::tempdir().expect("temp dir");
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("CA certificate");
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, cert.pem()).expect("write CA");
        Pki {
            dir,
            issuer: Issuer::new(params, key),
            ca,
        }
    }

    /// The directory the files are in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A leaf certificate for `sans` (DNS names or IP addresses) signed by this CA, written
    /// to `<name>.pem` and `<name>-key.pem` (replacing files of that name).
    pub fn leaf(&self, name: &str, sans: &[&str]) -> Leaf {
        let key = KeyPair::generate().expect("leaf key");
        let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(sans).expect("leaf params");
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("leaf certificate");
        let leaf = Leaf {
            cert: self.dir.path().join(format!("{name}.pem")),
            key: self.dir.path().join(format!("{name}-key.pem")),
        };
        std::fs::write(&leaf.cert, cert.pem()).expect("write certificate");
        std::fs::write(&leaf.key, key.serialize_pem()).expect("write key");
        leaf
    }
}
