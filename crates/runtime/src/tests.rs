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
