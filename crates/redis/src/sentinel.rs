//! Redis Sentinel: the master of a named set, as the sentinels name it now.
//!
//! The sentinels are asked (redis-rs's async `SentinelClient`: each sentinel in turn, the
//! named master checked with `ROLE`) whenever there is no connection to the master: at first
//! use, and after the connection failed or the node answered as a replica (`READONLY`, which is
//! what a failover leaves behind: the old master, reconfigured as a replica, still accepts the
//! connection). While calls come, the sentinels are also asked once a second whether the
//! master moved, so a master that was replaced but still answers (not yet reconfigured, or cut
//! off from the sentinels) is left within a second. Everything is async and bounded by
//! timeouts: lookups run in spawned tasks, never on a caller's thread, and no caller's
//! cancellation can leave them half-done.
//!
//! Each move to a master at another address bumps [`SentinelBackend::epoch`]: the engine then
//! republishes every cell's cumulative count, since the new master may lack writes the old one
//! took but never replicated.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, ConnectionAddr, ErrorKind, IntoConnectionInfo, RedisError,
    ServerErrorKind, TlsCertificates, TlsMode,
};

use crate::lazy::LazyConnection;
use crate::settings::{
    CONNECT_TIMEOUT, RESPONSE_TIMEOUT, RedisConfigError, SentinelMaster, bad_url,
};
use gcounter_engine::regional::OriginError;

/// A whole lookup (every sentinel, the master's `ROLE`, the connection) gives up after this.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);
/// While calls come, the sentinels are asked this often whether the master moved.
const RECHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The connection to the master the sentinels name, and what tells a move.
pub(crate) struct SentinelBackend {
    master: Arc<LazyConnection<MultiplexedConnection>>,
    client: Arc<tokio::sync::Mutex<SentinelClient>>,
    name: String,
    tracking: Arc<Tracking>,
}

/// Where the master is, for the recheck and the epoch.
struct Tracking {
    /// The address of the master last connected to.
    current: Mutex<Option<String>>,
    /// Moves to another address.
    switches: AtomicU64,
    /// When the last recheck started; one runs at a time.
    last_check: Mutex<Instant>,
    checking: AtomicBool,
}

impl Tracking {
    fn current(&self) -> Option<String> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records a connection to `addr`; a different address than before is a switch.
    fn connected(&self, addr: &str) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current.as_deref().is_some_and(|old| old != addr) {
            self.switches.fetch_add(1, Ordering::AcqRel);
        }
        *current = Some(addr.to_owned());
    }
}

impl SentinelBackend {
    /// The master's connection and its generation (see [`LazyConnection`]); starts a recheck
    /// in the background when one is due.
    pub(crate) async fn connection(&self) -> Result<(MultiplexedConnection, u64), OriginError> {
        let (conn, generation) = self.master.connection().await?;
        self.maybe_recheck(generation);
        Ok((conn, generation))
    }

    /// Forgets the connection of `generation`: the next call asks the sentinels.
    pub(crate) fn reset(&self, generation: u64) {
        self.master.reset(generation);
    }

    /// Bumped on each move to a master at another address.
    pub(crate) fn epoch(&self) -> u64 {
        self.tracking.switches.load(Ordering::Acquire)
    }

    fn maybe_recheck(&self, generation: u64) {
        {
            let mut last = self
                .tracking
                .last_check
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if last.elapsed() < RECHECK_INTERVAL
                || self.tracking.checking.swap(true, Ordering::AcqRel)
            {
                return;
            }
            *last = Instant::now();
        }
        let (client, master, tracking) = (
            Arc::clone(&self.client),
            Arc::clone(&self.master),
            Arc::clone(&self.tracking),
        );
        let name = self.name.clone();
        tokio::spawn(async move {
            let named = tokio::time::timeout(LOOKUP_TIMEOUT, async {
                client.lock().await.async_get_client().await
            })
            .await;
            if let Ok(Ok(named)) = named {
                let addr = named.get_connection_info().addr().to_string();
                if let Some(current) = tracking.current()
                    && current != addr
                {
                    tracing::warn!(master = %name, from = %current, to = %addr, "Redis Sentinel names another master: reconnecting");
                    master.reset(generation);
                }
            }
            // A failed recheck changes nothing: the calls' own errors lead to a new lookup.
            tracking.checking.store(false, Ordering::Release);
        });
    }
}

/// How to reach the master the sentinels at `urls` name `master.name`: the sentinels' URLs
/// carry the sentinels' credentials (one set for all) and scheme (`rediss://` is TLS to the
/// sentinels and the master alike, as upstream); `master` carries the master's.
pub(crate) fn backend(
    urls: &[String],
    master: &SentinelMaster,
    certificates: Option<TlsCertificates>,
) -> Result<SentinelBackend, RedisConfigError> {
    if master.name.is_empty() || master.name.contains(char::is_whitespace) {
        return Err(RedisConfigError::Sentinel(format!(
            "{:?} is not a master name",
            master.name
        )));
    }
    let mut addrs = Vec::with_capacity(urls.len());
    let mut credentials = None;
    let mut tls = None;
    for url in urls {
        let info = url
            .as_str()
            .into_connection_info()
            .map_err(|error| bad_url(url, &error.to_string()))?;
        let is_tls = match info.addr() {
            ConnectionAddr::Tcp(..) => false,
            ConnectionAddr::TcpTls { .. } => true,
            _ => return Err(bad_url(url, "a sentinel is reached over TCP (host:port)")),
        };
        if *tls.get_or_insert(is_tls) != is_tls {
            return Err(bad_url(
                url,
                "the sentinels are all TLS (rediss://) or all plain (redis://)",
            ));
        }
        let redis = info.redis_settings();
        let these = (
            redis.username().map(str::to_owned),
            redis.password().map(str::to_owned),
        );
        if *credentials.get_or_insert_with(|| these.clone()) != these {
            return Err(bad_url(
                url,
                "every sentinel URL must carry the same user and password (or none)",
            ));
        }
        addrs.push(info.addr().clone());
    }
    let (username, password) = credentials.unwrap_or_default();
    let tls = tls.unwrap_or(false);
    if certificates.is_some() && !tls {
        return Err(RedisConfigError::Tls(
            "TLS files are given but the sentinels' URLs are not rediss://".into(),
        ));
    }
    let mut builder = SentinelClientBuilder::new(addrs, &master.name, SentinelServerType::Master)
        .map_err(|error| RedisConfigError::Sentinel(error.to_string()))?;
    if let Some(username) = username {
        builder = builder.set_client_to_sentinel_username(username);
    }
    if let Some(password) = password {
        builder = builder.set_client_to_sentinel_password(password);
    }
    if let Some(username) = &master.username {
        builder = builder.set_client_to_redis_username(username);
    }
    if let Some(password) = &master.password {
        builder = builder.set_client_to_redis_password(password);
    }
    if tls {
        builder = builder
            .set_client_to_sentinel_tls_mode(TlsMode::Secure)
            .set_client_to_redis_tls_mode(TlsMode::Secure);
        if let Some(certificates) = certificates {
            builder = builder
                .set_client_to_sentinel_certificates(certificates.clone())
                .set_client_to_redis_certificates(certificates);
        }
    }
    let client = builder
        .build()
        .map_err(|error| RedisConfigError::Sentinel(error.to_string()))?;
    let client = Arc::new(tokio::sync::Mutex::new(client));
    let tracking = Arc::new(Tracking {
        current: Mutex::new(None),
        switches: AtomicU64::new(0),
        last_check: Mutex::new(Instant::now()),
        checking: AtomicBool::new(false),
    });
    let name = master.name.clone();
    let connect = {
        let (client, tracking, name) = (Arc::clone(&client), Arc::clone(&tracking), name.clone());
        Box::new(move || {
            let (client, tracking, name) =
                (Arc::clone(&client), Arc::clone(&tracking), name.clone());
            async move {
                match tokio::time::timeout(LOOKUP_TIMEOUT, connect_master(&client)).await {
                    Ok(Ok((conn, addr))) => {
                        tracking.connected(&addr);
                        tracing::info!(master = %name, %addr, "Redis Sentinel: connected to the master");
                        Ok(conn)
                    }
                    Ok(Err(error)) => Err(format!("Redis Sentinel, master {name:?}: {error}")),
                    Err(_) => Err(format!(
                        "Redis Sentinel, master {name:?}: no master found within {LOOKUP_TIMEOUT:?}"
                    )),
                }
            }
            .boxed()
        })
    };
    Ok(SentinelBackend {
        master: Arc::new(LazyConnection::new(
            "the master named by Redis Sentinel",
            connect,
        )),
        client,
        name,
        tracking,
    })
}

/// Ask the sentinels for the master and connect to it.
async fn connect_master(
    client: &tokio::sync::Mutex<SentinelClient>,
) -> Result<(MultiplexedConnection, String), RedisError> {
    let master = client.lock().await.async_get_client().await?;
    let addr = master.get_connection_info().addr().to_string();
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT));
    let conn = master
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    Ok((conn, addr))
}

/// The error says the connection is not to a working master any more: ask the sentinels
/// again. A lost or timed-out connection, or a node that answers as a replica or says its
/// master is down (a failover moved the master elsewhere).
pub(crate) fn lost_master(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_unrecoverable_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || is_replica_answer(error)
}

/// `READONLY` (or `MASTERDOWN`): the node is, or follows, a replica now. Before Redis 7 an
/// error inside a script arrives as `ERR … READONLY …`.
pub(crate) fn is_replica_answer(error: &RedisError) -> bool {
    matches!(
        error.kind(),
        ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
    ) || error.code() == Some("READONLY")
        || error
            .detail()
            .is_some_and(|detail| detail.contains("READONLY"))
}
