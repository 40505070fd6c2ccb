//! `guarantee: never_above` across regions: one service process per region, every region on
//! one MariaDB (the global counters). Each admission spends a right taken from the database's
//! `ratelimit_rights`, so the regions together never admit more than one process deciding
//! alone would. Each test goes red with `GCOUNTER_PLANT=never-above-unshared` (each process
//! decides from its own counts).

use gcounter_rls_integration as support;

use std::time::Duration;

use support::proxy::{Cut, Proxy};
use support::sql_admin::{Backend, FAST_GLOBAL, TestDb, region_args};
use support::{Service, bounded, grpc, load};

const REGIONS: [&str; 3] = ["r1", "r2", "r3"];
const HIT: (&str, &str, &str) = ("bounded", "api_key", "k");

/// One service per region on `url`, each once it took a right from the database (its schema
/// migrated, its pool connected).
async fn regions(url: &str, limits: &str) -> (tempfile::TempDir, Vec<Service>) {
    let (dir, path) = support::limits_file(&bounded::with_ready(limits));
    let mut services = Vec::new();
    for region in REGIONS {
        let service = Service::start(&path, &region_args(region, url, &FAST_GLOBAL));
        bounded::await_first_right(&service, region).await;
        services.push(service);
    }
    (dir, services)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn regions_never_go_above_the_sliding_window_rule() {
    let db = TestDb::create(Backend::MariaDb, "bounded");
    let (_dir, services) = regions(&db.url(), &bounded::sliding_limits()).await;
    bounded::assert_never_above_the_sliding_rule(&services, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn regions_admit_exactly_the_limit_of_a_fixed_window() {
    let db = TestDb::create(Backend::MariaDb, "bounded_fixed");
    let limits = "domain: bounded\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 300, guarantee: never_above}\n";
    let (_dir, services) = regions(&db.url(), limits).await;
    bounded::assert_exactly_the_limit_of_a_fixed_window(&services).await;
}

/// A region cut from the database spends the rights it holds, then refuses; the others go
/// on, and together they stay within the limit; every call is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_region_cut_from_the_database_spends_what_it_holds_then_refuses() {
    let db = TestDb::create(Backend::MariaDb, "bounded_cut");
    let proxy = Proxy::start(db.server_addr());
    let cut_url = db.url_via(proxy.addr);
    let limits = "domain: bounded\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 600, guarantee: never_above}\n";
    let (_dir, path) = support::limits_file(limits);
    let mut extra: Vec<&str> = FAST_GLOBAL.to_vec();
    extra.extend(["--global-timeout", "300ms"]);
    let cut = Service::start(&path, &region_args("cut", &cut_url, &extra));
    let url = db.url();
    let other = Service::start(&path, &region_args("other", &url, &extra));
    // Up to 10 s to warm (a process starting beside a busy suite may need seconds to migrate
    // and reach the database, and rests a second after each failed take), 4 s of load.
    support::stay_in_one_minute(Duration::from_secs(20));
    let mut client = grpc::rls_client(cut.grpc_addr).await;
    let mut warm = 0;
    let warming = std::time::Instant::now();
    while warm < 30 && warming.elapsed() < Duration::from_secs(10) {
        warm += bounded::burst(&mut client, 1, HIT).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(warm, 30, "the region took rights: {}", cut.log_tail(20));
    proxy.cut(Cut::Freeze);
    // What the cut region took before the cut: only it has asked so far. Its asks double
    // with its demand, so it may hold more than it spent.
    let taken: usize = match db.query("SELECT taken FROM ratelimit_rights").as_slice() {
        [row] => row
            .first()
            .and_then(|taken| taken.parse().ok())
            .expect("a count of rights taken"),
        rows => panic!("one counter's rights: {rows:?}"),
    };
    assert!(taken >= 30, "{taken} taken for 30 admitted");
    let clients = vec![
        grpc::rls_client(cut.grpc_addr).await,
        grpc::rls_client(other.grpc_addr).await,
    ];
    let sent = load::paced(clients, 200.0, Duration::from_secs(4), |_| {
        grpc::hit(HIT.0, HIT.1, HIT.2)
    })
    .await;
    proxy.restore();
    load::assert_no_grpc_errors(&sent, "calls with a region cut off");
    let admitted_cut = bounded::admitted(sent.iter().filter(|s| s.target == 0)).len();
    let admitted_other = bounded::admitted(sent.iter().filter(|s| s.target == 1)).len();
    println!("cut region admitted {admitted_cut}, the other {admitted_other}");
    // The cut region spends at most what it held; the other region takes the rest.
    assert!(
        30 + admitted_cut <= taken,
        "{admitted_cut} admitted by the cut region, which held {}",
        taken - 30
    );
    assert!(
        admitted_other > 300,
        "{admitted_other} admitted by the other region"
    );
    assert!(30 + admitted_cut + admitted_other <= 600);
}
