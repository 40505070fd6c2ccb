//! One test per case of a scenario: a scenario run on each SQL backend (or each way a
//! failover happens) stays one `#[tokio::test]` per case, listed, filtered and reported by
//! its own name, without the test attribute and the one-line body written out for each.

/// `scenario_tests!(scenario { name => case, … })`: for each `name`, a multi-threaded
/// `#[tokio::test]` (two workers: the test's load and its checks run beside the service's
/// clients) whose body is `scenario(case).await`. Attributes written before a name (its doc
/// comment) go on its test.
#[macro_export]
macro_rules! scenario_tests {
    ($scenario:ident { $($(#[$attr:meta])* $name:ident => $case:expr),+ $(,)? }) => {
        $(
            $(#[$attr])*
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                $scenario($case).await;
            }
        )+
    };
}
