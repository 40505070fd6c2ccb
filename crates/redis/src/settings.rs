//! The region's Redis settings as given (URLs, key prefix, Sentinel master, TLS files), the
//! errors they can have, and the connection timeouts: the vocabulary both [`crate::connect`]
//! and [`crate::sentinel`] build on, kept apart so neither needs the other for it.

use std::time::Duration;

use redis::{ClientTlsConfig, TlsCertificates};

use gcounter_engine::redact::{redact_in, redact_url};

/// Each connection attempt gives up after this long.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// A reply slower than this fails the call (the guard's timeouts are usually shorter).
pub(crate) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Where the region's Redis is and how its keys are named.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RedisSettings {
    /// `redis://[user:password@]host:port[/db]`, `rediss://…` for TLS, or
    /// `redis+unix:///path?user=…&pass=…`. Several URLs (or `cluster`) mean Redis Cluster;
    /// they are the seed nodes. With `sentinel`, they are the sentinels (their credentials
    /// are the sentinels').
    pub urls: Vec<String>,
    /// Redis Cluster even with a single seed URL.
    pub cluster: bool,
    /// Prepended to every key (e.g. `rl:`); it may not contain `{` or `}`.
    pub key_prefix: String,
    /// Redis Sentinel: the master the sentinels in `urls` name.
    pub sentinel: Option<SentinelMaster>,
    /// TLS beyond the system's roots, for `rediss://` URLs.
    pub tls: RedisTls,
}

/// The master set the sentinels watch, and how to log in to it (not to the sentinels).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SentinelMaster {
    /// The name the sentinels know it by (`sentinel monitor <name> …`).
    pub name: String,
    pub username: Option<String>,
    pub password: Option<String>,
}

/// TLS files (PEM) for `rediss://` URLs: a private CA, a client certificate for a Redis with
/// `tls-auth-clients yes`, and whether to skip the hostname check.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RedisTls {
    /// CA certificates trusted instead of the system's roots.
    pub root_ca_pem: Option<Vec<u8>>,
    /// The client certificate chain and its private key, both or neither.
    pub client_cert_pem: Option<Vec<u8>>,
    pub client_key_pem: Option<Vec<u8>>,
    /// The server's chain is still checked against the roots; only its name is not (a Redis
    /// whose certificate does not name the address it is reached by, such as GCP
    /// Memorystore's). One node only.
    pub skip_hostname_verification: bool,
}

impl RedisTls {
    pub(crate) fn is_set(&self) -> bool {
        self.root_ca_pem.is_some()
            || self.client_cert_pem.is_some()
            || self.client_key_pem.is_some()
            || self.skip_hostname_verification
    }

    /// What redis-rs takes, or `None` when only the system's roots are used.
    pub(crate) fn certificates(&self) -> Result<Option<TlsCertificates>, RedisConfigError> {
        let client_tls = match (&self.client_cert_pem, &self.client_key_pem) {
            (Some(cert), Some(key)) => Some(ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
            (None, None) => None,
            _ => {
                return Err(RedisConfigError::Tls(
                    "a client certificate needs its key, and a key its certificate".into(),
                ));
            }
        };
        if client_tls.is_none() && self.root_ca_pem.is_none() {
            return Ok(None);
        }
        Ok(Some(TlsCertificates {
            client_tls,
            root_cert: self.root_ca_pem.clone(),
        }))
    }
}

impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // URLs may carry a password; the master's password and the key are never shown.
        let urls: Vec<String> = self.urls.iter().map(|url| redact_url(url)).collect();
        f.debug_struct("RedisSettings")
            .field("urls", &urls)
            .field("cluster", &self.cluster)
            .field("key_prefix", &self.key_prefix)
            .field(
                "sentinel_master",
                &self.sentinel.as_ref().map(|master| &master.name),
            )
            .field("tls_ca", &self.tls.root_ca_pem.is_some())
            .field("tls_client_cert", &self.tls.client_cert_pem.is_some())
            .field(
                "tls_skip_hostname_verification",
                &self.tls.skip_hostname_verification,
            )
            .finish()
    }
}

/// Settings the Redis origin cannot work with. Redis being down is never one of them.
#[derive(Debug, thiserror::Error)]
pub enum RedisConfigError {
    #[error("no Redis URL given")]
    NoUrl,
    #[error("Redis URL {url} is not usable: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("Redis key prefix {0:?} contains '{{' or '}}': Redis Cluster would hash on it")]
    BadPrefix(String),
    #[error("Redis cluster settings are not usable: {0}")]
    Cluster(String),
    #[error("Redis Sentinel settings are not usable: {0}")]
    Sentinel(String),
    #[error("Redis TLS settings are not usable: {0}")]
    Tls(String),
    #[error("the Redis origin must be created inside a Tokio runtime")]
    NoRuntime,
}

/// Installs ring as rustls' process-wide crypto provider, which `rediss://` needs.
///
/// Call it once at start-up, before the first TLS connection; calling it again, or after the
/// embedding program installed its own provider, changes nothing.
pub fn install_tls_provider() {
    // An error only says a provider is already installed: that one serves as well.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub(crate) fn is_tls_url(url: &str) -> bool {
    url.starts_with("rediss://") || url.starts_with("valkeys://")
}

pub(crate) fn bad_url(url: &str, reason: &str) -> RedisConfigError {
    RedisConfigError::BadUrl {
        url: redact_url(url),
        reason: redact_in(reason, url),
    }
}
