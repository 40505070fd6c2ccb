//! Connecting to the region's Redis: the settings, their checks, TLS (a private CA, a client
//! certificate, the hostname check), and the choice between one node (a multiplexed
//! connection manager), a cluster and a Sentinel-named master (both made lazily, see
//! [`crate::lazy`] and [`crate::sentinel`]).

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Client, ClientTlsConfig, IntoConnectionInfo, TlsCertificates};

use crate::lazy::LazyConnection;
use crate::sentinel::SentinelBackend;
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
    fn is_set(&self) -> bool {
        self.root_ca_pem.is_some()
            || self.client_cert_pem.is_some()
            || self.client_key_pem.is_some()
            || self.skip_hostname_verification
    }

    /// What redis-rs takes, or `None` when only the system's roots are used.
    fn certificates(&self) -> Result<Option<TlsCertificates>, RedisConfigError> {
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

pub(crate) enum Backend {
    /// Multiplexed, reconnects by itself.
    Single(ConnectionManager),
    /// Boxed: the cluster client is large and built once.
    Cluster(Box<LazyConnection<ClusterConnection>>),
    /// The master the sentinels name; asked again after the connection fails or the node
    /// turns out to be a replica.
    Sentinel(Box<SentinelBackend>),
}

/// The backend, checked and parsed but not yet connected: everything [`Backend::new`] does
/// that needs no Tokio runtime, so a server refuses bad settings with its other settings errors
/// before it starts anything (see [`RedisSettings::check`]).
enum Prepared {
    Single { client: Client, url: String },
    Cluster(ClusterClient),
    Sentinel(Box<SentinelBackend>),
}

impl RedisSettings {
    /// Checks the settings as [`RedisOrigin::connect`](crate::RedisOrigin::connect) would,
    /// without connecting and without a Tokio runtime: the URLs, the key prefix, TLS and
    /// Sentinel. Redis being down is never an error here.
    pub fn check(&self) -> Result<(), RedisConfigError> {
        self.prepare().map(|_| ())
    }

    /// One node, a cluster for several URLs or `cluster`, or the master named by the
    /// sentinels: the clients built, no connection made.
    fn prepare(&self) -> Result<Prepared, RedisConfigError> {
        let urls = &self.urls;
        if urls.is_empty() {
            return Err(RedisConfigError::NoUrl);
        }
        if self.key_prefix.contains(['{', '}']) {
            return Err(RedisConfigError::BadPrefix(self.key_prefix.clone()));
        }
        if self.tls.is_set()
            && let Some(url) = urls.iter().find(|url| !is_tls_url(url))
        {
            return Err(bad_url(
                url,
                "TLS files or settings are given but the URL is not rediss://",
            ));
        }
        let certificates = self.tls.certificates()?;
        if let Some(master) = &self.sentinel {
            if self.cluster {
                return Err(RedisConfigError::Sentinel(
                    "Sentinel and Cluster exclude each other".into(),
                ));
            }
            if self.tls.skip_hostname_verification {
                return Err(RedisConfigError::Tls(
                    "skipping the hostname check is supported with one node only, not with Sentinel"
                        .into(),
                ));
            }
            let backend = crate::sentinel::backend(urls, master, certificates)?;
            return Ok(Prepared::Sentinel(Box::new(backend)));
        }
        let single = match urls.as_slice() {
            [url] if !self.cluster => Some(url.as_str()),
            _ => None,
        };
        if let Some(url) = single {
            let mut client = match certificates {
                Some(certificates) => Client::build_with_tls(url, certificates),
                None => Client::open(url),
            }
            .map_err(|error| bad_url(url, &error.to_string()))?;
            if self.tls.skip_hostname_verification {
                let info = client.get_connection_info().clone();
                let mut addr = info.addr().clone();
                addr.set_danger_accept_invalid_hostnames(true);
                client = Client::open(info.set_addr(addr))
                    .map_err(|error| bad_url(url, &error.to_string()))?;
            }
            return Ok(Prepared::Single {
                client,
                url: url.to_owned(),
            });
        }
        if self.tls.skip_hostname_verification {
            return Err(RedisConfigError::Tls(
                "skipping the hostname check is supported with one node only, not with a cluster"
                    .into(),
            ));
        }
        for url in urls {
            url.as_str()
                .into_connection_info()
                .map_err(|error| bad_url(url, &error.to_string()))?;
        }
        let mut builder = ClusterClient::builder(urls.iter().map(String::as_str))
            .connection_timeout(CONNECT_TIMEOUT)
            .response_timeout(RESPONSE_TIMEOUT)
            .overall_response_timeout(Some(2 * RESPONSE_TIMEOUT))
            // Redirects and slot refreshes need a few retries; long waits are the guard's.
            .retries(3)
            .min_retry_wait(50)
            .max_retry_wait(500);
        if let Some(certificates) = certificates {
            builder = builder.certs(certificates);
        }
        let client = builder
            .build()
            .map_err(|error| RedisConfigError::Cluster(error.to_string()))?;
        Ok(Prepared::Cluster(client))
    }
}

impl Backend {
    /// Checks the settings ([`RedisSettings::check`]) and prepares the connections without
    /// making any. Must run inside a Tokio runtime (the single node's connection manager
    /// starts its task).
    pub(crate) fn new(settings: &RedisSettings) -> Result<Self, RedisConfigError> {
        let prepared = settings.prepare()?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(RedisConfigError::NoRuntime);
        }
        Ok(match prepared {
            Prepared::Single { client, url } => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(RESPONSE_TIMEOUT))
                    // One quick retry per attempt; the next call starts a fresh attempt anyway.
                    .set_number_of_retries(1)
                    .set_min_delay(Duration::from_millis(50))
                    .set_max_delay(Duration::from_secs(1));
                let manager = ConnectionManager::new_lazy_with_config(client, config)
                    .map_err(|error| bad_url(&url, &error.to_string()))?;
                Backend::Single(manager)
            }
            Prepared::Sentinel(backend) => Backend::Sentinel(backend),
            Prepared::Cluster(client) => Backend::Cluster(Box::new(LazyConnection::new(
                "the Redis cluster",
                Box::new(move || {
                    let client = client.clone();
                    Box::pin(async move {
                        client
                            .get_async_connection()
                            .await
                            .map_err(|error| error.to_string())
                    })
                }),
            ))),
        })
    }
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
