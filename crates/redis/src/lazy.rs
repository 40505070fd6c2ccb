//! A connection made on first use and made again after it fails: a Redis Cluster's, or the
//! Sentinel-named master's.
//!
//! Neither can be made at start-up (Redis may be down): `ClusterClient` needs a reachable node,
//! and the master's address is only known once a sentinel answers. The first caller starts one
//! attempt in a spawned task; callers arriving meanwhile wait on the same attempt (bounded by
//! their own timeouts); a failed attempt is forgotten so the next call tries again. The task
//! outlives cancelled callers, so a slow handshake is not restarted by every short read timeout,
//! and nothing a caller drops can leave the state half-changed.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures_util::future::{BoxFuture, FutureExt, Shared};

use gcounter_engine::regional::OriginError;

type Attempt<C> = Shared<BoxFuture<'static, Result<C, Arc<str>>>>;

/// Makes one connection (in a spawned task); the error is the reason, for the log.
pub type Connect<C> = Box<dyn Fn() -> BoxFuture<'static, Result<C, String>> + Send + Sync>;

enum Phase<C: Clone> {
    Idle,
    Connecting(Attempt<C>),
    Ready(C),
}

struct State<C: Clone> {
    phase: Phase<C>,
    /// Counts connections made, so a failure resets only the connection that failed.
    generation: u64,
}

pub struct LazyConnection<C: Clone> {
    /// What is connected to, for the error text ("the Redis cluster", ...).
    what: &'static str,
    connect: Connect<C>,
    state: Mutex<State<C>>,
}

impl<C: Clone + Send + Sync + 'static> LazyConnection<C> {
    pub fn new(what: &'static str, connect: Connect<C>) -> Self {
        Self {
            what,
            connect,
            state: Mutex::new(State {
                phase: Phase::Idle,
                generation: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<C>> {
        // Every critical section leaves the state whole; a panic elsewhere changes nothing.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current connection and its generation, connecting first if there is none.
    pub async fn connection(&self) -> Result<(C, u64), OriginError> {
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
                "cannot connect to {}: {reason}",
                self.what
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

    fn start(&self) -> Attempt<C> {
        let task = tokio::spawn((self.connect)());
        async move {
            match task.await {
                Ok(Ok(conn)) => Ok(conn),
                Ok(Err(reason)) => Err(Arc::from(reason)),
                Err(join) => Err(Arc::from(format!("connection task failed: {join}"))),
            }
        }
        .boxed()
        .shared()
    }
}
