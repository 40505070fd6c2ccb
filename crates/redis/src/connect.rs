//! Connecting to the region's Redis: the settings, their checks, TLS, and the choice between
//! one node (a multiplexed connection manager) and a cluster (made lazily, see [`crate::cluster`]).

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::{Client, TlsCertificates};

use crate::cluster::LazyCluster;
use gcounter_engine::redact::{redact_in, redact_url};

/// Each connection attempt gives up after this long.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// A reply slower than this fails the call (the guard's timeouts are usually shorter).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Where the region's Redis is and how its keys are named.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisSettings {
    /// `redis://[user:password@]host:port[/db]` or `rediss://…` for TLS. Several URLs (or
    /// `cluster`) mean Redis Cluster; they are the seed nodes.
    pub urls: Vec<String>,
    /// Redis Cluster even with a single seed URL.
    pub cluster: bool,
    /// Prepended to every key (e.g. `rl:`); it may not contain `{` or `}`.
    pub key_prefix: String,
}

impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // URLs may carry a password.
        let urls: Vec<String> = self.urls.iter().map(|url| redact_url(url)).collect();
        f.debug_struct("RedisSettings")
            .field("urls", &urls)
            .field("cluster", &self.cluster)
            .field("key_prefix", &self.key_prefix)
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
    Cluster(Box<LazyCluster>),
}

impl Backend {
    /// Checks the URLs and prepares the connections without making any: one node, or a
    /// cluster for several URLs or `cluster`. Must run inside a Tokio runtime.
    pub(crate) fn new(
        urls: &[String],
        cluster: bool,
        root_ca_pem: Option<Vec<u8>>,
    ) -> Result<Self, RedisConfigError> {
        if urls.is_empty() {
            return Err(RedisConfigError::NoUrl);
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(RedisConfigError::NoRuntime);
        }
        if root_ca_pem.is_some()
            && let Some(url) = urls.iter().find(|url| !is_tls_url(url))
        {
            return Err(bad_url(
                url,
                "a CA certificate is given but the URL is not rediss://",
            ));
        }
        let certificates = |root_cert: Vec<u8>| TlsCertificates {
            client_tls: None,
            root_cert: Some(root_cert),
        };
        let single = match urls {
            [url] if !cluster => Some(url.as_str()),
            _ => None,
        };
        let backend = if let Some(url) = single {
            let client = match root_ca_pem {
                Some(ca) => Client::build_with_tls(url, certificates(ca)),
                None => Client::open(url),
            }
            .map_err(|error| bad_url(url, &error.to_string()))?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(CONNECT_TIMEOUT))
                .set_response_timeout(Some(RESPONSE_TIMEOUT))
                // One quick retry per attempt; the next call starts a fresh attempt anyway.
                .set_number_of_retries(1)
                .set_min_delay(Duration::from_millis(50))
                .set_max_delay(Duration::from_secs(1));
            let manager = ConnectionManager::new_lazy_with_config(client, config)
                .map_err(|error| bad_url(url, &error.to_string()))?;
            Backend::Single(manager)
        } else {
            for url in urls {
                Client::open(url.as_str()).map_err(|error| bad_url(url, &error.to_string()))?;
            }
            let mut builder = ClusterClient::builder(urls.iter().map(String::as_str))
                .connection_timeout(CONNECT_TIMEOUT)
                .response_timeout(RESPONSE_TIMEOUT)
                .overall_response_timeout(Some(2 * RESPONSE_TIMEOUT))
                // Redirects and slot refreshes need a few retries; long waits are the guard's.
                .retries(3)
                .min_retry_wait(50)
                .max_retry_wait(500);
            if let Some(ca) = root_ca_pem {
                builder = builder.certs(certificates(ca));
            }
            let client = builder
                .build()
                .map_err(|error| RedisConfigError::Cluster(error.to_string()))?;
            Backend::Cluster(Box::new(LazyCluster::new(client)))
        };
        Ok(backend)
    }
}

fn is_tls_url(url: &str) -> bool {
    url.starts_with("rediss://") || url.starts_with("valkeys://")
}

fn bad_url(url: &str, reason: &str) -> RedisConfigError {
    RedisConfigError::BadUrl {
        url: redact_url(url),
        reason: redact_in(reason, url),
    }
}
