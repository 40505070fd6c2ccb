//! Certificates made in the test (rcgen) and a gRPC client over TLS / mTLS.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tonic::transport::Endpoint;

use super::grpc::{RateLimitServiceClient, RlsClient};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A test certificate authority.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its private key, PEM.
#[derive(Clone)]
pub struct Identity {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("CA key");
        Ca {
            issuer: CertifiedIssuer::self_signed(params, key).expect("self-signed CA"),
        }
    }

    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate for `localhost` and 127.0.0.1.
    pub fn server(&self) -> Identity {
        self.leaf(
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// A client certificate with these SANs (DNS names or IP addresses).
    pub fn client(&self, sans: &[&str]) -> Identity {
        self.leaf(sans, ExtendedKeyUsagePurpose::ClientAuth)
    }

    /// One certificate for `localhost` and 127.0.0.1 usable both ways, as Envoy Gateway's
    /// rate-limit Secret (its gRPC server and its xDS client share it).
    pub fn server_and_client(&self) -> Identity {
        self.leaf_for(
            &["localhost", "127.0.0.1"],
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        )
    }

    fn leaf(&self, sans: &[&str], usage: ExtendedKeyUsagePurpose) -> Identity {
        self.leaf_for(sans, vec![usage])
    }

    fn leaf_for(&self, sans: &[&str], usages: Vec<ExtendedKeyUsagePurpose>) -> Identity {
        let sans: Vec<String> = sans.iter().map(|s| (*s).to_owned()).collect();
        let mut params = CertificateParams::new(sans).expect("leaf params");
        params.distinguished_name.push(DnType::CommonName, "leaf");
        params.extended_key_usages = usages;
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign leaf");
        Identity {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

/// The service's TLS files in a directory: `cert.pem`, `key.pem`, `client-ca.pem`.
pub struct TlsDir {
    pub dir: tempfile::TempDir,
}

impl Default for TlsDir {
    fn default() -> Self {
        Self::new()
    }
}

impl TlsDir {
    pub fn new() -> TlsDir {
        TlsDir {
            dir: tempfile::tempdir().expect("temp dir for TLS files"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn cert(&self) -> PathBuf {
        self.path("cert.pem")
    }

    pub fn key(&self) -> PathBuf {
        self.path("key.pem")
    }

    pub fn client_ca(&self) -> PathBuf {
        self.path("client-ca.pem")
    }

    /// Writes the server identity (each file replaced by a rename, as a Secret update does).
    pub fn write_server(&self, identity: &Identity) {
        super::replace_file(&self.cert(), &identity.cert_pem);
        super::replace_file(&self.key(), &identity.key_pem);
    }

    pub fn write_client_ca(&self, ca: &Ca) {
        super::replace_file(&self.client_ca(), &ca.cert_pem());
    }

    /// `--grpc-tls-cert … --grpc-tls-key …` as owned strings.
    pub fn server_args(&self) -> Vec<String> {
        vec![
            "--grpc-tls-cert".into(),
            path_arg(&self.cert()),
            "--grpc-tls-key".into(),
            path_arg(&self.key()),
        ]
    }
}

/// mTLS as upstream's variables turn it on: a server identity from `server_ca` in `dir`, and
/// `client_ca` trusted for clients whose certificate names [`UpstreamMtls::SAN`].
pub struct UpstreamMtls {
    server_ca: Ca,
    client_ca: Ca,
    _dir: TlsDir,
    cert: String,
    key: String,
    client_ca_file: String,
}

impl Default for UpstreamMtls {
    fn default() -> Self {
        Self::new()
    }
}

impl UpstreamMtls {
    /// The SAN a client certificate must carry (`GRPC_CLIENT_TLS_SAN`).
    pub const SAN: &str = "envoy.internal";

    pub fn new() -> UpstreamMtls {
        let server_ca = Ca::new("server CA");
        let client_ca = Ca::new("client CA");
        let dir = TlsDir::new();
        dir.write_server(&server_ca.server());
        dir.write_client_ca(&client_ca);
        UpstreamMtls {
            cert: path_arg(&dir.cert()),
            key: path_arg(&dir.key()),
            client_ca_file: path_arg(&dir.client_ca()),
            server_ca,
            client_ca,
            _dir: dir,
        }
    }

    /// `GRPC_SERVER_USE_TLS=true` and the files and SAN upstream reads with it.
    pub fn env(&self) -> [(&str, &str); 5] {
        [
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", &self.cert),
            ("GRPC_SERVER_TLS_KEY", &self.key),
            ("GRPC_CLIENT_TLS_CACERT", &self.client_ca_file),
            ("GRPC_CLIENT_TLS_SAN", Self::SAN),
        ]
    }

    /// A client trusting the server, presenting a certificate from the client CA with
    /// `sans` (`None`: no certificate).
    pub fn client(&self, sans: Option<&[&str]>) -> Arc<rustls::ClientConfig> {
        let identity = sans.map(|sans| self.client_ca.client(sans));
        client_config(&self.server_ca, identity.as_ref())
    }
}

fn path_arg(path: &Path) -> String {
    path.to_str().expect("UTF-8 temp path").to_owned()
}

/// A client trusting `server_ca`, presenting `identity` if given, verifying `localhost`.
pub fn client_config(server_ca: &Ca, identity: Option<&Identity>) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    let ca = CertificateDer::from_pem_slice(server_ca.cert_pem().as_bytes()).expect("CA PEM");
    roots.add(ca).expect("add CA");
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots);
    let mut config = match identity {
        Some(identity) => {
            let certs = CertificateDer::pem_slice_iter(identity.cert_pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .expect("client cert PEM");
            let key =
                PrivateKeyDer::from_pem_slice(identity.key_pem.as_bytes()).expect("client key");
            builder
                .with_client_auth_cert(certs, key)
                .expect("client identity")
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(config)
}

/// A RateLimitService client over TLS to `addr` (one connection, made now). An error if
/// the connection or the handshake fails.
pub async fn tls_rls_client(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> Result<RlsClient, String> {
    let connector = TlsConnector::from(config);
    let channel = Endpoint::from_static("http://localhost")
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(CALL_TIMEOUT)
        .connect_with_connector(tower::service_fn(move |_uri| {
            let connector = connector.clone();
            async move {
                let tcp = TcpStream::connect(addr).await?;
                let name = ServerName::try_from("localhost").expect("valid name");
                let tls = connector.connect(name, tcp).await?;
                Ok::<_, std::io::Error>(TokioIo::new(tls))
            }
        }))
        .await
        .map_err(|e| format!("connect over TLS to {addr}: {e:?}"))?;
    Ok(RateLimitServiceClient::new(channel))
}
