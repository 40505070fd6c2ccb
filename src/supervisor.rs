//! The supervisor: owns `serve`'s long-running tasks and the order in which they stop.
//!
//! Two stages, two signals. *Serving* tasks (the gRPC and HTTP servers) stop accepting when
//! [`Supervisor::shutdown`] begins and get `drain_timeout` to finish in-flight requests.
//! *Background* tasks (replay and reaping, the global loops) are told to finish only after
//! the servers are gone, so the final replay and the final global flush carry every decision
//! answered during the drain. Before shutdown no task may end: one that returns, fails or
//! panics is reported by [`Supervisor::next_failure`], so `serve` can log it and turn health
//! to NOT_SERVING instead of running half-working.

use std::collections::HashMap;
use std::time::Duration;

use tokio::task::{Id, JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

/// When a task is told to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Stops first: answers requests until the drain ends.
    Serving,
    /// Stops after every serving task: does its final work with nothing left to answer.
    Background,
}

/// A task that ended before shutdown, and how.
#[derive(Debug)]
pub struct TaskFailure {
    pub name: &'static str,
    pub reason: String,
}

/// How the shutdown went.
#[derive(Debug, Default)]
pub struct ShutdownReport {
    /// Serving tasks still running at the drain timeout, then aborted.
    pub aborted: Vec<&'static str>,
    /// Tasks that ended with an error or a panic during the shutdown.
    pub failed: Vec<TaskFailure>,
}

type TaskResult = anyhow::Result<()>;

struct StageTasks {
    stop: CancellationToken,
    tasks: JoinSet<TaskResult>,
    names: HashMap<Id, &'static str>,
}

impl StageTasks {
    fn new() -> Self {
        Self {
            stop: CancellationToken::new(),
            tasks: JoinSet::new(),
            names: HashMap::new(),
        }
    }

    fn name(&mut self, id: Id) -> &'static str {
        self.names.remove(&id).unwrap_or("unnamed task")
    }

    /// The next task to end (pending forever while none runs).
    async fn next(&mut self) -> TaskFailure {
        match self.tasks.join_next_with_id().await {
            Some(Ok((id, outcome))) => TaskFailure {
                name: self.name(id),
                reason: match outcome {
                    Ok(()) => "returned before shutdown".to_owned(),
                    Err(error) => format!("{error:#}"),
                },
            },
            Some(Err(error)) => {
                let name = self.name(error.id());
                TaskFailure {
                    name,
                    reason: join_reason(&error),
                }
            }
            None => std::future::pending().await,
        }
    }

    /// Wait for every task; failures (errors, panics) in `report`.
    async fn join_all(&mut self, report: &mut ShutdownReport) {
        while let Some(joined) = self.tasks.join_next_with_id().await {
            match joined {
                Ok((id, Ok(()))) => {
                    self.name(id);
                }
                Ok((id, Err(error))) => report.failed.push(TaskFailure {
                    name: self.name(id),
                    reason: format!("{error:#}"),
                }),
                Err(error) if error.is_cancelled() => {
                    report.aborted.push(self.name(error.id()));
                }
                Err(error) => report.failed.push(TaskFailure {
                    name: self.name(error.id()),
                    reason: join_reason(&error),
                }),
            }
        }
    }
}

fn join_reason(error: &JoinError) -> String {
    if error.is_panic() {
        "panicked".to_owned()
    } else {
        "was cancelled".to_owned()
    }
}

/// Owns the tasks of `serve` (see the module doc).
pub struct Supervisor {
    serving: StageTasks,
    background: StageTasks,
}

impl Default for Supervisor {
    fn default() -> Self {
        Self::new()
    }
}

impl Supervisor {
    pub fn new() -> Self {
        Self {
            serving: StageTasks::new(),
            background: StageTasks::new(),
        }
    }

    fn stage(&mut self, stage: Stage) -> &mut StageTasks {
        match stage {
            Stage::Serving => &mut self.serving,
            Stage::Background => &mut self.background,
        }
    }

    /// The signal a task of `stage` stops on: cancelled when its turn in the shutdown comes.
    pub fn stop_signal(&self, stage: Stage) -> CancellationToken {
        match stage {
            Stage::Serving => self.serving.stop.clone(),
            Stage::Background => self.background.stop.clone(),
        }
    }

    /// Run `task` under supervision. It must run until its stage's stop signal.
    pub fn spawn(
        &mut self,
        stage: Stage,
        name: &'static str,
        task: impl Future<Output = TaskResult> + Send + 'static,
    ) {
        let tasks = self.stage(stage);
        let id = tasks.tasks.spawn(task).id();
        tasks.names.insert(id, name);
    }

    /// Resolves when a task ends before shutdown (never while all run). Call again for the
    /// next one.
    pub async fn next_failure(&mut self) -> TaskFailure {
        tokio::select! {
            failure = self.serving.next() => failure,
            failure = self.background.next() => failure,
        }
    }

    /// Run until `shutdown` resolves. A task that ends before (returns, fails or panics) is
    /// logged with its name and handed to `on_failure`, which `serve` uses to turn health
    /// NOT_SERVING: the process stays up (its in-memory counts are still worth the final
    /// replay) but unhealthy, so the orchestrator replaces it, instead of a process that
    /// answers while nothing reaches Redis.
    pub async fn until<F: Future<Output = ()>>(
        &mut self,
        shutdown: impl Future<Output = ()>,
        mut on_failure: impl FnMut(TaskFailure) -> F,
    ) {
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                failure = self.next_failure() => {
                    tracing::error!(task = failure.name, reason = %failure.reason, "a task stopped before shutdown; health is now NOT_SERVING");
                    on_failure(failure).await;
                }
            }
        }
    }

    /// Stop serving, drain (at most `drain_timeout`, then abort what is left), then let the
    /// background tasks finish their final work and wait for them.
    pub async fn shutdown(mut self, drain_timeout: Duration) -> ShutdownReport {
        let mut report = ShutdownReport::default();
        self.serving.stop.cancel();
        let drained = tokio::time::timeout(drain_timeout, self.serving.join_all(&mut report)).await;
        if drained.is_err() {
            self.serving.tasks.abort_all();
            self.serving.join_all(&mut report).await;
        }
        self.background.stop.cancel();
        self.background.join_all(&mut report).await;
        report
    }
}

#[cfg(test)]
mod tests;
