//! A Redis Cluster connection made on first use and made again after it fails.
//!
//! `ClusterClient` needs a reachable node to build a connection, so the origin cannot connect
//! at start-up (Redis may be down). The first caller starts one attempt in a spawned task;
//! callers arriving meanwhile wait on the same attempt (bounded by their own timeouts); a failed
//! attempt is forgotten so the next call tries again. The task outlives cancelled callers, so a
//! slow handshake is not restarted by every short read timeout.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures_util::future::{BoxFuture, FutureExt, Shared};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;

use gcounter_engine::regional::OriginError;

type Attempt = Shared<BoxFuture<'static, Result<ClusterConnection, Arc<str>>>>;

enum Phase {
    Idle,
    Connecting(Attempt),
    Ready(ClusterConnection),
}

struct State {
    phase: Phase,
    /// Counts connections made, so a failure resets only the connection that failed.
    generation: u64,
}

pub struct LazyCluster {
    client: ClusterClient,
    state: Mutex<State>,
}

impl LazyCluster {
    pub fn new(client: ClusterClient) -> Self {
        Self {
            client,
            state: Mutex::new(State {
                phase: Phase::Idle,
                generation: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves the state whole; a panic elsewhere changes nothing.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current connection and its generation, connecting first if there is none.
    pub async fn connection(&self) -> Result<(ClusterConnection, u64), OriginError> {
        let attempt = {
            let mut state = self.lock();
            match &state.phase {
                Phase::Ready(conn) => return Ok((conn.clone(), state.generation)),
                Phase::Connecting(attempt) => attempt.clone(),
                Phase::Idle => {
                    let attempt = self.start();
                    state.phase = Phase::Connecting(attempt.clone());
                    attempt
                }
            }
        };
        let outcome = attempt.clone().await;
        let mut state = self.lock();
        // The first caller to see the outcome records it; later ones find it recorded.
        let current = matches!(&state.phase, Phase::Connecting(a) if a.ptr_eq(&attempt));
        if current {
            match &outcome {
                Ok(conn) => {
                    state.generation += 1;
                    state.phase = Phase::Ready(conn.clone());
                }
                Err(_) => state.phase = Phase::Idle,
            }
        }
        match outcome {
            Ok(conn) => Ok((conn, state.generation)),
            Err(reason) => Err(OriginError::Unavailable(format!(
                "cannot connect to the Redis cluster: {reason}"
            ))),
        }
    }

    /// Drops the connection of `generation` so the next call connects anew.
    pub fn reset(&self, generation: u64) {
        let mut state = self.lock();
        if matches!(state.phase, Phase::Ready(_)) && state.generation == generation {
            state.phase = Phase::Idle;
        }
    }

    fn start(&self) -> Attempt {
        let client = self.client.clone();
        let task = tokio::spawn(async move { client.get_async_connection().await });
        async move {
            match task.await {
                Ok(Ok(conn)) => Ok(conn),
                Ok(Err(error)) => Err(Arc::from(error.to_string())),
                Err(join) => Err(Arc::from(format!("connection task failed: {join}"))),
            }
        }
        .boxed()
        .shared()
    }
}
