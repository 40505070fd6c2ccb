//! TLS on the gRPC listener: the server certificate, the client CA that turns on mTLS, the
//! client SAN check, and re-reading the files when they change.
//!
//! Certificates are rotated on disk (cert-manager rewrites a Secret, the kubelet swaps the
//! mounted files): [`TlsReloader::watch`] re-reads them every interval and swaps in a new
//! [`ServerConfig`] when their bytes changed. Each handshake takes the current config, so a
//! rotation applies to the next connection and never drops the listener or an open one.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_util::sync::CancellationToken;

use crate::capped_read::read_at_most;

/// A PEM file larger than this is refused: a chain and a key are a few KiB; a CA bundle a few
/// hundred.
pub const MAX_PEM_BYTES: u64 = 1 << 20;

/// Where the TLS material of the gRPC listener lives, and whom mTLS admits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// PEM CA certificates: when set, a client must present a certificate they signed.
    pub client_ca: Option<PathBuf>,
    /// With `client_ca`: the client certificate must also carry this DNS name or IP address
    /// as a subject alternative name.
    pub client_san: Option<String>,
}

/// Which setting a file or value came from, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsSetting {
    Cert,
    Key,
    ClientCa,
    ClientSan,
}

impl fmt::Display for TlsSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Cert => "--grpc-tls-cert (GRPC_SERVER_TLS_CERT)",
            Self::Key => "--grpc-tls-key (GRPC_SERVER_TLS_KEY)",
            Self::ClientCa => "--grpc-tls-client-ca (GRPC_CLIENT_TLS_CACERT)",
            Self::ClientSan => "--grpc-tls-client-san (GRPC_CLIENT_TLS_SAN)",
        })
    }
}

/// Why the TLS material cannot be used; each names its setting and file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{setting}: cannot read {path}: {source}")]
    Read {
        setting: TlsSetting,
        path: PathBuf,
        source: io::Error,
    },
    #[error("{setting}: {path} is not a regular file")]
    NotAFile { setting: TlsSetting, path: PathBuf },
    #[error("{setting}: {path} is larger than {MAX_PEM_BYTES} bytes")]
    TooLarge { setting: TlsSetting, path: PathBuf },
    #[error("{setting}: {path}: {problem}")]
    Invalid {
        setting: TlsSetting,
        path: PathBuf,
        problem: String,
    },
    #[error("{setting}: {value:?} is not a DNS name or an IP address")]
    BadSan { setting: TlsSetting, value: String },
    #[error("the certificate and key cannot serve TLS: {0}")]
    Config(rustls::Error),
}

/// The bytes of the files, to tell whether anything changed since the last load.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Pems {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
}

/// The current TLS config of the gRPC listener, re-read from its files.
pub struct TlsReloader {
    files: TlsFiles,
    client_san: Option<ServerName<'static>>,
    current: ArcSwap<ServerConfig>,
    /// What the files held at the last look (loaded or not), so a bad rotation is logged
    /// once, and the next change is tried again.
    last: Mutex<Pems>,
}

impl TlsReloader {
    /// Reads and checks the files once; an error here stops start-up.
    pub fn load(files: TlsFiles) -> Result<Arc<Self>, TlsError> {
        let client_san = files
            .client_san
            .as_deref()
            .map(|san| {
                ServerName::try_from(san.to_owned()).map_err(|_| TlsError::BadSan {
                    setting: TlsSetting::ClientSan,
                    value: san.to_owned(),
                })
            })
            .transpose()?;
        let pems = read_pems(&files)?;
        let config = build(&files, client_san.as_ref(), &pems)?;
        Ok(Arc::new(Self {
            files,
            client_san,
            current: ArcSwap::from(config),
            last: Mutex::new(pems),
        }))
    }

    /// The config for the next handshake.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.current.load_full()
    }

    /// Whether clients must present a certificate.
    pub fn mutual(&self) -> bool {
        self.files.client_ca.is_some()
    }

    /// Re-reads the files every `interval` until `stop`; a change that loads is swapped in,
    /// one that does not is logged and the running config stays.
    pub async fn watch(self: Arc<Self>, interval: Duration, stop: CancellationToken) {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                () = stop.cancelled() => return,
            }
            let this = Arc::clone(&self);
            // File reads block: off the request threads.
            let outcome = tokio::task::spawn_blocking(move || this.reload_if_changed()).await;
            match outcome {
                Ok(Ok(true)) => tracing::info!(
                    cert = %self.files.cert.display(),
                    "gRPC TLS certificates changed on disk: new connections use them"
                ),
                Ok(Ok(false)) => {}
                Ok(Err(error)) => tracing::warn!(
                    %error,
                    "gRPC TLS files changed but cannot be used; the running certificates stay"
                ),
                Err(error) => tracing::warn!(%error, "gRPC TLS reload task failed"),
            }
        }
    }

    /// True if the files changed and the new config is in place.
    fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let pems = read_pems(&self.files)?;
        {
            let mut last = self
                .last
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if *last == pems {
                return Ok(false);
            }
            // Remember even a broken state: cert and key are often written one after the
            // other, and the next look (with both new) must be tried, not this one repeated.
            *last = pems.clone();
        }
        let config = build(&self.files, self.client_san.as_ref(), &pems)?;
        self.current.store(config);
        Ok(true)
    }
}

fn read_pems(files: &TlsFiles) -> Result<Pems, TlsError> {
    Ok(Pems {
        cert: read_pem(TlsSetting::Cert, &files.cert)?,
        key: read_pem(TlsSetting::Key, &files.key)?,
        client_ca: files
            .client_ca
            .as_deref()
            .map(|path| read_pem(TlsSetting::ClientCa, path))
            .transpose()?,
    })
}

/// A regular file of at most [`MAX_PEM_BYTES`] (symlinks followed: Kubernetes mounts are).
/// Opened non-blocking, so a FIFO at that path is refused instead of blocking start-up or the
/// reload thread.
fn read_pem(setting: TlsSetting, path: &Path) -> Result<Vec<u8>, TlsError> {
    use std::os::unix::fs::OpenOptionsExt;
    let read_error = |source| TlsError::Read {
        setting,
        path: path.to_owned(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(read_error)?;
    let metadata = file.metadata().map_err(read_error)?;
    if !metadata.is_file() {
        return Err(TlsError::NotAFile {
            setting,
            path: path.to_owned(),
        });
    }
    read_at_most(file, MAX_PEM_BYTES)
        .map_err(read_error)?
        .ok_or_else(|| TlsError::TooLarge {
            setting,
            path: path.to_owned(),
        })
}

fn build(
    files: &TlsFiles,
    client_san: Option<&ServerName<'static>>,
    pems: &Pems,
) -> Result<Arc<ServerConfig>, TlsError> {
    let invalid = |setting, path: &Path, problem: String| TlsError::Invalid {
        setting,
        path: path.to_owned(),
        problem,
    };
    let certs = CertificateDer::pem_slice_iter(&pems.cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(TlsSetting::Cert, &files.cert, format!("bad PEM: {e}")))?;
    if certs.is_empty() {
        return Err(invalid(
            TlsSetting::Cert,
            &files.cert,
            "no CERTIFICATE in it".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(&pems.key)
        .map_err(|e| invalid(TlsSetting::Key, &files.key, format!("no private key: {e}")))?;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?;
    let builder = match (&files.client_ca, &pems.client_ca) {
        (Some(path), Some(pem)) => {
            let verifier = client_verifier(path, pem, client_san, provider)?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(TlsError::Config)?;
    // gRPC is HTTP/2 only; a client that offers ALPN must offer h2 (as grpc-go requires).
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// Clients must present a certificate chaining to one of the CAs in `pem` (only those: the
/// system roots are not trusted for clients), valid now, for client authentication; with a
/// SAN, carrying it too.
fn client_verifier(
    path: &Path,
    pem: &[u8],
    client_san: Option<&ServerName<'static>>,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let invalid = |problem: String| TlsError::Invalid {
        setting: TlsSetting::ClientCa,
        path: path.to_owned(),
        problem,
    };
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| invalid(format!("bad PEM: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| invalid(format!("not a usable CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(invalid("no CERTIFICATE in it".into()));
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| invalid(e.to_string()))?;
    Ok(match client_san {
        Some(san) => Arc::new(SanVerifier {
            inner: verifier,
            san: san.clone(),
        }),
        None => verifier,
    })
}

/// The CA check, then the SAN: upstream (`GRPC_CLIENT_TLS_SAN`) verifies the client chain
/// with the SAN as its DNS name; a DNS or IP SAN of the leaf must match.
#[derive(Debug)]
struct SanVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    san: ServerName<'static>,
}

impl ClientCertVerifier for SanVerifier {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let cert = webpki::EndEntityCert::try_from(end_entity).map_err(|_| {
            rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding)
        })?;
        cert.verify_is_valid_for_subject_name(&self.san)
            .map_err(|_| {
                rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName)
            })?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests;
