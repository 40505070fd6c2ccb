use super::*;

#[test]
fn one_worker_runs_on_a_current_thread_runtime() {
    assert_eq!(flavor_for(0), Flavor::CurrentThread);
    assert_eq!(flavor_for(1), Flavor::CurrentThread);
    assert_eq!(flavor_for(2), Flavor::MultiThread);
    assert!(available_cores() >= 1);
}

#[test]
fn both_flavours_run_tasks() {
    for flavor in [Flavor::CurrentThread, Flavor::MultiThread] {
        let runtime = build(flavor, 2).unwrap();
        assert_eq!(
            runtime.block_on(async { tokio::spawn(async { 7 }).await.unwrap() }),
            7
        );
    }
}

#[test]
fn an_error_quoting_its_source_prints_it_once() {
    #[derive(Debug)]
    struct Quoting(std::io::Error);
    impl std::fmt::Display for Quoting {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "cannot listen on 127.0.0.1:6070: {}", self.0)
        }
    }
    impl std::error::Error for Quoting {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
    let os = std::io::Error::from(std::io::ErrorKind::AddrInUse);
    let error = anyhow::Error::new(Quoting(os)).context("cannot start");
    let line = one_line(&error);
    assert_eq!(
        line.matches(&std::io::Error::from(std::io::ErrorKind::AddrInUse).to_string())
            .count(),
        1,
        "{line}"
    );
    assert!(line.starts_with("cannot start: cannot listen"), "{line}");
    let plain = anyhow::anyhow!("inner").context("outer");
    assert_eq!(one_line(&plain), "outer: inner");
}
