//! The container image, built and run as a user builds and runs it.
//!
//! Built by podman from the repository's own Dockerfile with `--pull=never` on stand-in
//! bases (`integration/container/stand-in-bases.sh`: Debian 12 roots standing in for
//! `rust:1.95-slim-bookworm` and distroless `cc-debian12:nonroot`, passed as the Dockerfile's
//! build arguments), then started as envoyproxy/ratelimit's Deployment in Istio's sample
//! starts it (`deploy/kubernetes/upstream/`): `/bin/ratelimit` with no arguments and the
//! sample's variables, as user 65532, a read-only root file system, no capabilities, the
//! limits mounted as a ConfigMap is, Redis at `redis:6379`. Through the published ports: health
//! answered, decisions counted in Redis, a ConfigMap update reloaded, and SIGTERM drained
//! within the grace period with exit 0.
//!
//! A missing podman, runc or debootstrap fails the test saying how to install them
//! (`.ci/run` does). The first build compiles the release binary (tens of minutes on two
//! cores); later ones reuse the layers or the Dockerfile's cargo cache.

mod podman;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use gcounter_rls_integration as support;
use serde_json::Value;

use podman::{ConfigMapVolume, Container, IMAGE, Podman, short_commit};
use support::grpc::{self, Code, HealthCheckRequest, ServingStatus, hit};
use support::redis_admin::{self, LOCAL_REDIS_URL, require_local_redis};
use support::{free_port, http_get, repo_path};

/// Istio's sample Deployment of envoyproxy/ratelimit, only the image changed.
const UPSTREAM_DEPLOYMENT: &str = "deploy/kubernetes/upstream/rate-limit-service.yaml";
/// Kubernetes' default `terminationGracePeriodSeconds` (the sample sets none).
const GRACE: Duration = Duration::from_secs(30);
/// How long the service may take to answer after the container starts, or to reload.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// The address slirp4netns gives the host's loopback inside the container (`allow_host_loopback`):
/// the machine's Redis listens on 127.0.0.1 only.
const HOST_LOOPBACK: &str = "10.0.2.2";

/// The sample Deployment's container: its image, command, `env:` and the config mount.
struct SampleContainer {
    image: String,
    command: Vec<String>,
    env: Vec<(String, String)>,
    mount_path: String,
}

fn sample_container() -> SampleContainer {
    let text = std::fs::read_to_string(repo_path(UPSTREAM_DEPLOYMENT))
        .unwrap_or_else(|e| panic!("read {UPSTREAM_DEPLOYMENT}: {e}"));
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .unwrap_or_else(|e| panic!("parse {UPSTREAM_DEPLOYMENT}: {e}"));
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .unwrap_or_else(|| panic!("no Deployment in {UPSTREAM_DEPLOYMENT}"));
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let text_of = |v: &Value| v.as_str().expect("a string").to_string();
    SampleContainer {
        image: text_of(&container["image"]),
        command: container["command"]
            .as_array()
            .expect("the sample names its command")
            .iter()
            .map(text_of)
            .collect(),
        env: container["env"]
            .as_array()
            .expect("the sample sets env")
            .iter()
            .map(|e| (text_of(&e["name"]), text_of(&e["value"])))
            .collect(),
        mount_path: text_of(&container["volumeMounts"][0]["mountPath"]),
    }
}

fn limits(domain: &str, per_minute: u32) -> String {
    format!(
        "domain: {domain}\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      \
         requests_per_unit: {per_minute}\n"
    )
}

/// Polls `probe` until it is true; panics with `what` and the container's log after `timeout`.
async fn until(container: &Container<'_>, what: &str, mut probe: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !probe().await {
        assert!(
            started.elapsed() < READY_TIMEOUT,
            "{what} not within {READY_TIMEOUT:?}\n{}",
            container.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_image_runs_as_the_istio_sample_deployment_runs_it() {
    require_local_redis();
    let podman = Podman::new();
    let bases = podman.stand_in_bases();
    let commit = short_commit();
    let built_in = podman.build_image(&bases, &commit);
    eprintln!("image {IMAGE} built (or reused) in {built_in:.0?}");

    // The image as the Deployments name it: the same name the manifests use, the non-root
    // user, no shell, and a binary that names the commit it was built from.
    let sample = sample_container();
    assert_eq!(
        sample.image, IMAGE,
        "{UPSTREAM_DEPLOYMENT} names another image"
    );
    assert_eq!(sample.command, ["/bin/ratelimit"]);
    assert_eq!(
        podman.ok(&["image", "inspect", "--format", "{{.Config.User}}", IMAGE]),
        "65532:65532"
    );
    let version = podman.ok(&["run", "--rm", IMAGE, "--version"]);
    assert!(
        version.contains(&commit) && version.contains(env!("CARGO_PKG_VERSION")),
        "--version should name {} and the commit {commit}:\n{version}",
        env!("CARGO_PKG_VERSION")
    );
    for shell in ["/bin/sh", "/usr/bin/sh", "/bin/bash"] {
        let out = podman.output(&["run", "--rm", "--entrypoint", shell, IMAGE, "-c", "true"]);
        assert!(!out.status.success(), "the image has a shell: {shell}");
    }

    // The limits as a ConfigMap volume, under the mount path the sample names.
    let domain = format!("container-{}", std::process::id());
    let mut volume = ConfigMapVolume::new("config.yaml", &limits(&domain, 3));
    let grpc_port = free_port();
    let http_port = free_port();
    let mut args: Vec<String> = [
        "--read-only",
        "--read-only-tmpfs=false",
        "--cap-drop=all",
        "--security-opt=no-new-privileges",
        "--network=slirp4netns:allow_host_loopback=true",
    ]
    .map(String::from)
    .to_vec();
    args.push(format!("--add-host=redis:{HOST_LOOPBACK}"));
    args.push(format!("--publish=127.0.0.1:{grpc_port}:8081"));
    args.push(format!("--publish=127.0.0.1:{http_port}:8080"));
    args.push(format!(
        "--volume={}:{}:ro",
        volume.path().display(),
        sample.mount_path
    ));
    for (name, value) in &sample.env {
        args.push(format!("--env={name}={value}"));
    }
    args.push(format!("--entrypoint={}", sample.command[0]));
    args.push(IMAGE.to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let container = Container::run(&podman, &args);

    // Non-root and read-only, as the container runs.
    let status = std::fs::read_to_string(format!("/proc/{}/status", container.pid()))
        .expect("read the container process's status");
    let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap_or("");
    assert_eq!(
        uid.split_whitespace().skip(1).collect::<Vec<_>>(),
        ["65532"; 4],
        "{uid}"
    );
    assert_eq!(container.inspect("{{.HostConfig.ReadonlyRootfs}}"), "true");

    // Health through the published admin port, then the gRPC health service.
    let http_addr = SocketAddr::from(([127, 0, 0, 1], http_port));
    let grpc_addr = SocketAddr::from(([127, 0, 0, 1], grpc_port));
    until(&container, "GET /healthcheck answered 200", async || {
        http_get(http_addr, "/healthcheck", &[]).is_ok_and(|r| r.status == 200)
    })
    .await;
    let mut health = grpc::health_client(grpc_addr).await;
    let serving = health
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap_or_else(|e| panic!("gRPC health: {e}\n{}", container.logs()))
        .into_inner();
    assert_eq!(serving.status, ServingStatus::Serving as i32);

    // Decisions through the published gRPC port, counted in Redis (reached as `redis`).
    let mut client = grpc::rls_client(grpc_addr).await;
    support::avoid_window_boundary(Duration::from_secs(60), Duration::from_secs(20));
    let mut codes = Vec::new();
    for _ in 0..4 {
        let response = grpc::should_rate_limit(&mut client, hit(&domain, "k", "v")).await;
        codes.push(grpc::overall(&response));
    }
    assert_eq!(
        codes,
        [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit],
        "3 a minute\n{}",
        container.logs()
    );
    let mut redis = redis_admin::connect(LOCAL_REDIS_URL);
    let pattern = format!("*{domain}*");
    until(&container, "the counts reaching Redis", async || {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(&pattern)
            .query(&mut redis)
            .unwrap_or_default();
        !keys.is_empty()
    })
    .await;

    // The kubelet's update of the ConfigMap: the new limit answers.
    volume.update(&limits(&domain, 7));
    until(&container, "the updated limit (7) answered", async || {
        grpc::limit_of(client.clone(), &domain, &[("k", "v")]).await == Some(7)
    })
    .await;

    // SIGTERM: drained and exited 0 before the grace period's SIGKILL.
    let (took, code) = container.stop(GRACE);
    assert_eq!(
        code,
        0,
        "exit code after SIGTERM ({took:.1?}, grace {GRACE:?})\n{}",
        container.logs()
    );
    assert!(
        took < GRACE,
        "stopped after {took:?}, past the grace period"
    );
    eprintln!("stopped by SIGTERM in {took:.1?}, exit 0");

    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(&pattern)
        .query(&mut redis)
        .unwrap_or_default();
    if !keys.is_empty() {
        let _: Result<(), _> = redis::cmd("DEL").arg(&keys).query(&mut redis);
    }
}
