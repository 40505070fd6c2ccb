//! TLS (and mTLS) to the xDS server: rustls on ring, the CA given (only it is trusted), an
//! optional client certificate, and the server name to verify. tonic is given a connector
//! that hands it the handshaken stream, so no TLS feature of tonic is needed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

use super::settings::XdsTls;
use crate::capped_read::read_at_most;

/// PEM files larger than this are refused (a CA bundle is tens of KiB).
const MAX_PEM_BYTES: u64 = 1024 * 1024;

/// A TLS setting of the xDS client that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum XdsTlsError {
    #[error("{path}: {problem}")]
    File { path: PathBuf, problem: String },
    #[error("TLS to the xDS server: {0}")]
    Config(#[from] rustls::Error),
    #[error("--config-xds-san / server name {0:?} is not a DNS name or IP address")]
    ServerName(String),
}

/// What connecting needs: the client config and the name to verify.
#[derive(Clone)]
pub struct TlsClient {
    pub config: Arc<ClientConfig>,
    pub server_name: ServerName<'static>,
}

impl TlsClient {
    /// Reads the files (at every connection attempt, so a rotated certificate is picked up).
    pub fn load(tls: &XdsTls) -> Result<Self, XdsTlsError> {
        let mut roots = RootCertStore::empty();
        let ca = read(&tls.ca)?;
        for cert in CertificateDer::pem_slice_iter(&ca) {
            let cert = cert.map_err(|e| bad(&tls.ca, format!("bad PEM: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| bad(&tls.ca, format!("not a usable CA certificate: {e}")))?;
        }
        if roots.is_empty() {
            return Err(bad(&tls.ca, "no CERTIFICATE in it".into()));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots);
        let mut config = match &tls.client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let pem = read(cert)?;
                let chain = CertificateDer::pem_slice_iter(&pem)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| bad(cert, format!("bad PEM: {e}")))?;
                if chain.is_empty() {
                    return Err(bad(cert, "no CERTIFICATE in it".into()));
                }
                let key_pem = read(key)?;
                let key_der = PrivateKeyDer::from_pem_slice(&key_pem)
                    .map_err(|e| bad(key, format!("no private key: {e}")))?;
                builder.with_client_auth_cert(chain, key_der)?
            }
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        let server_name = ServerName::try_from(tls.server_name.clone())
            .map_err(|_| XdsTlsError::ServerName(tls.server_name.clone()))?;
        Ok(Self {
            config: Arc::new(config),
            server_name,
        })
    }
}

fn bad(path: &Path, problem: String) -> XdsTlsError {
    XdsTlsError::File {
        path: path.to_owned(),
        problem,
    }
}

fn read(path: &Path) -> Result<Vec<u8>, XdsTlsError> {
    let cannot_read = |e| bad(path, format!("cannot read: {e}"));
    let file = std::fs::File::open(path).map_err(cannot_read)?;
    read_at_most(file, MAX_PEM_BYTES)
        .map_err(cannot_read)?
        .ok_or_else(|| bad(path, format!("larger than {MAX_PEM_BYTES} bytes")))
}
