//! Connecting to the region's Redis: the checks of its settings ([`crate::settings`]), TLS
//! (a private CA, a client certificate, the hostname check), and the choice between one node
//! (a multiplexed connection manager), a cluster and a Sentinel-named master (both made lazily, see
//! [`crate::lazy`] and [`crate::sentinel`]).

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Client, IntoConnectionInfo};

use crate::lazy::LazyConnection;
use crate::sentinel::SentinelBackend;
use crate::settings::{
    CONNECT_TIMEOUT, RESPONSE_TIMEOUT, RedisConfigError, RedisSettings, bad_url, is_tls_url,
};

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
