//! The Kubernetes, Istio and container files — `deploy/kubernetes/`, `kind-cluster.yaml`,
//! `Dockerfile` — checked offline, without a cluster (the `container` tests build the image
//! from the Dockerfile and run it):
//!
//! - every Kubernetes manifest against the Kubernetes schemas (`kubernetes-validate`
//!   from PyPI, strict, installed by `integration/install-k8s-validate.sh`);
//! - the Istio EnvoyFilters' structure against Istio's API, and the Envoy config they
//!   patch in, applied to a gateway-shaped bootstrap, through the real Envoy's
//!   `--mode validate` and then through a running Envoy in front of the real service
//!   serving the ConfigMap's limits;
//! - the ConfigMap's limits with `gcounter-rls check-config`, and the agreement between
//!   the Deployment, the service's flags, the Services, the filters, kind and the
//!   Dockerfile.
//!
//! Each check has a negative control showing that it rejects what it should.

use gcounter_rls_integration as support;

mod dockerfile;
mod envoy_filter;
mod kube_validate;
mod manifests;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use manifests::{Doc, at, find, items, manifests, of_kind, str_at, u64_at};
use support::process::describe;
use support::redis_admin::{LOCAL_REDIS_URL, require_local_redis, unique_prefix};
use support::{Envoy, Service, envoy_binary, http_get, repo_path};

const NAMESPACE: &str = "gcounter-rls";
const LIMITS_CONFIGMAP: &str = "gcounter-rls-limits";
/// The gRPC health service the readiness probe asks (the service's own name; it turns
/// NOT_SERVING on SIGTERM, unlike the overall "" status).
const RLS_HEALTH_SERVICE: &str = "envoy.service.ratelimit.v3.RateLimitService";

fn envoy_filters(docs: &[Doc]) -> Vec<&Doc> {
    let filters = of_kind(docs, "EnvoyFilter");
    assert!(
        !filters.is_empty(),
        "no EnvoyFilter under deploy/kubernetes"
    );
    filters
}

/// The rate-limit service's container in its Deployment.
fn rls_container(docs: &[Doc]) -> &Value {
    let deployment = find(docs, "Deployment", "gcounter-rls");
    let containers = items(&deployment.value, "spec.template.spec.containers");
    containers
        .iter()
        .find(|c| str_at(c, "name") == Some("gcounter-rls"))
        .expect("the gcounter-rls Deployment has a container named gcounter-rls")
}

/// The one container of the Deployment kept under `dir` as its authors wrote it, checked to
/// run our image as upstream's: `/bin/ratelimit`, which the image provides.
fn foreign_deployment_container<'d>(docs: &'d [Doc], dir: &str) -> &'d Value {
    let deployment = of_kind(docs, "Deployment")
        .into_iter()
        .find(|d| d.file.starts_with(dir))
        .unwrap_or_else(|| panic!("a Deployment under {dir}"));
    let containers = items(&deployment.value, "spec.template.spec.containers");
    assert_eq!(containers.len(), 1, "{}", deployment.describe());
    let container = &containers[0];
    assert_eq!(str_at(container, "image"), Some("gcounter-rls:dev"));
    assert_eq!(
        strings(items(container, "command")),
        ["/bin/ratelimit"],
        "upstream's command, which the image provides"
    );
    container
}

/// A container's `env:` as written: (name, value) pairs.
fn env_of(container: &Value) -> Vec<(String, String)> {
    items(container, "env")
        .iter()
        .map(|e| {
            (
                str_at(e, "name").expect("env name").to_string(),
                str_at(e, "value").expect("env value").to_string(),
            )
        })
        .collect()
}

/// Asserts that `env` sets every one of `expected`.
fn assert_sets(env: &[(String, String)], expected: &[&str]) {
    let names: Vec<&str> = env.iter().map(|(n, _)| n.as_str()).collect();
    for expected in expected {
        assert!(names.contains(expected), "{expected} not in {names:?}");
    }
}

/// The value following `flag` in `args` (`--flag value` or `--flag=value`).
fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter().enumerate().find_map(|(i, a)| {
        if a == flag {
            args.get(i + 1).map(String::as_str)
        } else {
            a.strip_prefix(flag)?.strip_prefix('=')
        }
    })
}

fn strings(values: &[Value]) -> Vec<String> {
    values
        .iter()
        .map(|v| v.as_str().expect("a string").to_string())
        .collect()
}

/// The limits file inside the ConfigMap: its file name and text.
fn configmap_limits(docs: &[Doc]) -> (String, String) {
    let configmap = find(docs, "ConfigMap", LIMITS_CONFIGMAP);
    let data = at(&configmap.value, "data")
        .and_then(Value::as_object)
        .expect("the limits ConfigMap has data");
    assert_eq!(
        data.len(),
        1,
        "the limits ConfigMap holds one limits file: {data:?}"
    );
    let (name, text) = data.iter().next().expect("one entry");
    let text = text.as_str().expect("the limits file is a string");
    (name.clone(), text.to_string())
}

/// The ConfigMap's limits in a temporary directory, as the service would see them.
fn configmap_limits_file(docs: &[Doc]) -> (tempfile::TempDir, PathBuf) {
    let (name, text) = configmap_limits(docs);
    let dir = tempfile::tempdir().expect("create temp dir for the limits");
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    (dir, path)
}

/// The virtual host name Istio gives the demo Gateway's server: `<host>:<port>`.
fn gateway_vhost_name(docs: &[Doc]) -> String {
    let gateway = find(docs, "Gateway", "demo-gateway");
    let host = str_at(&gateway.value, "spec.servers.0.hosts.0").expect("the Gateway has a host");
    let port =
        u64_at(&gateway.value, "spec.servers.0.port.number").expect("the Gateway has a port");
    format!("{host}:{port}")
}

/// `envoy --mode validate` on `bootstrap` (its ports are distinct: validation rejects two
/// listeners on one address).
fn envoy_validate(bootstrap: &Value) -> Output {
    let text = envoy_filter::bootstrap_text(bootstrap);
    let dir = tempfile::tempdir().expect("create temp dir for the bootstrap");
    let path = dir.path().join("gateway-bootstrap.yaml");
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    Command::new(envoy_binary())
        .args([
            "--mode",
            "validate",
            "--disable-hot-restart",
            "-l",
            "warning",
            "-c",
        ])
        .arg(&path)
        .stdin(Stdio::null())
        .output()
        .expect("run envoy --mode validate")
}

// ---------------------------------------------------------------------------------------
// Kubernetes schemas

#[test]
fn every_kubernetes_manifest_passes_the_offline_schema_check() {
    let docs = manifests();
    let kinds: Vec<&str> = docs
        .iter()
        .filter(|d| !d.is_istio())
        .map(Doc::kind)
        .collect();
    for kind in [
        "Namespace",
        "ConfigMap",
        "ServiceAccount",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
    ] {
        assert!(
            kinds.contains(&kind),
            "no {kind} among the Kubernetes manifests: {kinds:?}"
        );
    }

    let output = kube_validate::run(&manifests::manifest_files());
    let all: Vec<&Doc> = docs.iter().collect();
    let failures = kube_validate::failures(&all, &output);
    assert!(
        failures.is_empty(),
        "Kubernetes {} schema check failed:\n{}\n{}",
        kube_validate::KUBERNETES_VERSION,
        failures.join("\n"),
        describe(&output)
    );
}

#[test]
fn the_schema_check_rejects_broken_manifests() {
    // An unknown field (strict), a wrong type, and an apiVersion with no schema (which
    // kubernetes-validate only warns about, with exit status 0).
    let broken = "\
apiVersion: apps/v1
kind: Deployment
metadata: { name: typo }
spec:
  selector: { matchLabels: { app: x } }
  template:
    metadata: { labels: { app: x } }
    spec:
      containers:
        - name: x
          image: x
          readinessProbe: { grpcc: { port: 8081 } }
---
apiVersion: v1
kind: Service
metadata: { name: wrong-type }
spec:
  ports: [{ name: grpc, port: grpc }]
---
apiVersion: apps/v2
kind: Deployment
metadata: { name: no-schema }
spec: {}
";
    let dir = tempfile::tempdir().expect("create temp dir for the broken manifest");
    let path = dir.path().join("broken.yaml");
    std::fs::write(&path, broken).expect("write the broken manifest");
    let file = path.to_string_lossy().into_owned();

    let output = kube_validate::run(std::slice::from_ref(&file));
    let docs: Vec<Doc> = manifests::parse_documents(broken)
        .expect("parse the broken manifest")
        .into_iter()
        .map(|value| Doc {
            file: file.clone(),
            value,
        })
        .collect();
    let all: Vec<&Doc> = docs.iter().collect();
    let failures = kube_validate::failures(&all, &output).join("\n");
    for needle in [
        "'grpcc' was unexpected",
        "'grpc' is not of type 'integer'",
        "Deployment /no-schema",
    ] {
        assert!(
            failures.contains(needle),
            "the schema check should report {needle:?}; it reported:\n{failures}\n{}",
            describe(&output)
        );
    }
}

// ---------------------------------------------------------------------------------------
// Istio

#[test]
fn envoy_filters_have_the_istio_structure() {
    let docs = manifests();
    for filter in envoy_filters(&docs) {
        let problems = envoy_filter::problems(&filter.value);
        assert!(
            problems.is_empty(),
            "{}:\n{}",
            filter.describe(),
            problems.join("\n")
        );
    }
    // Both halves of Istio's global rate-limit pattern are there.
    let patches: Vec<&Value> = envoy_filters(&docs)
        .iter()
        .flat_map(|d| items(&d.value, "spec.configPatches"))
        .collect();
    assert!(
        patches
            .iter()
            .any(|p| str_at(p, "applyTo") == Some("HTTP_FILTER")
                && str_at(p, "patch.operation") == Some("INSERT_BEFORE")
                && str_at(p, "match.listener.filterChain.filter.subFilter.name")
                    == Some(envoy_filter::ROUTER)
                && str_at(p, "patch.value.name") == Some("envoy.filters.http.ratelimit")),
        "no patch inserts envoy.filters.http.ratelimit before the router"
    );
    assert!(
        patches.iter().any(
            |p| matches!(str_at(p, "applyTo"), Some("VIRTUAL_HOST" | "HTTP_ROUTE"))
                && str_at(p, "patch.operation") == Some("MERGE")
                && !items(p, "patch.value.rate_limits").is_empty()
        ),
        "no patch merges rate_limits actions into a virtual host or route"
    );
}

/// A change to an EnvoyFilter document.
type Mutation = fn(&mut Value);

#[test]
fn the_structure_check_rejects_broken_envoy_filters() {
    let docs = manifests();
    let original = find(&docs, "EnvoyFilter", "gcounter-rls-ratelimit")
        .value
        .clone();
    let broken: [(&str, Mutation); 7] = [
        ("apiVersion must be", |f| {
            f["apiVersion"] = json!("networking.istio.io/v1beta2")
        }),
        ("applyTo", |f| {
            f["spec"]["configPatches"][0]["applyTo"] = json!("HTTP_FILTERS")
        }),
        ("patch.operation", |f| {
            f["spec"]["configPatches"][0]["patch"]["operation"] = json!("INSERT_BEFOR")
        }),
        ("unknown field \"subfilter\"", |f| {
            let filter =
                &mut f["spec"]["configPatches"][0]["match"]["listener"]["filterChain"]["filter"];
            filter["subfilter"] = filter["subFilter"].take();
            filter.as_object_mut().expect("object").remove("subFilter");
        }),
        ("cannot match a routeConfiguration", |f| {
            f["spec"]["configPatches"][0]["match"]["routeConfiguration"] =
                json!({ "vhost": { "name": "x" } })
        }),
        ("patch.value (an object) is required", |f| {
            f["spec"]["configPatches"][0]["patch"]
                .as_object_mut()
                .expect("object")
                .remove("value");
        }),
        ("match.context", |f| {
            f["spec"]["configPatches"][0]["match"]["context"] = json!("INGRESS")
        }),
    ];
    for (needle, mutate) in broken {
        let mut filter = original.clone();
        mutate(&mut filter);
        let problems = envoy_filter::problems(&filter).join("\n");
        support::assert_mentions(&problems, needle, "the structure check's problems");
    }
}

#[test]
fn envoy_filter_config_passes_envoy_validate() {
    let docs = manifests();
    let filters = envoy_filters(&docs);
    let bootstrap = envoy_filter::gateway_bootstrap(&filters, &gateway_vhost_name(&docs))
        .unwrap_or_else(|e| panic!("apply the EnvoyFilters: {e}"));

    // The patches landed where Istio puts them.
    let hcm = at(
        &bootstrap,
        "static_resources.listeners.0.filter_chains.0.filters.0.typed_config",
    )
    .expect("the gateway's HTTP connection manager");
    let names: Vec<&str> = items(hcm, "http_filters")
        .iter()
        .filter_map(|f| str_at(f, "name"))
        .collect();
    assert_eq!(
        names,
        ["envoy.filters.http.ratelimit", envoy_filter::ROUTER],
        "HTTP filters after the patches"
    );
    assert!(
        !items(hcm, "route_config.virtual_hosts.0.rate_limits").is_empty(),
        "no rate_limits on the gateway's virtual host after the patches"
    );

    let output = envoy_validate(&bootstrap);
    let text = describe(&output);
    assert!(
        output.status.success() && text.contains("OK"),
        "envoy --mode validate rejected the EnvoyFilters' config:\n{text}\n--- bootstrap ---\n{}",
        envoy_filter::bootstrap_text(&bootstrap)
    );

    // Negative controls: a field the ratelimit filter does not have, and an action
    // Envoy does not know, are both refused.
    let mut bad_filter = bootstrap.clone();
    bad_filter["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
        ["http_filters"][0]["typed_config"]["fail_mode_deny"] = json!(true);
    let output = envoy_validate(&bad_filter);
    assert!(
        !output.status.success() && describe(&output).contains("fail_mode_deny"),
        "envoy --mode validate should reject an unknown ratelimit field:\n{}",
        describe(&output)
    );
    let mut bad_action = bootstrap.clone();
    bad_action["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
        ["route_config"]["virtual_hosts"][0]["rate_limits"][0]["actions"][0] =
        json!({ "remote_adress": {} });
    let output = envoy_validate(&bad_action);
    assert!(
        !output.status.success() && describe(&output).contains("remote_adress"),
        "envoy --mode validate should reject an unknown rate-limit action:\n{}",
        describe(&output)
    );
}

#[test]
fn istio_objects_kind_and_readme_fit_together() {
    let docs = manifests();
    for doc in docs.iter().filter(|d| d.is_istio()) {
        assert!(
            !doc.name().is_empty() && at(&doc.value, "spec").is_some_and(Value::is_object),
            "{} needs metadata.name and a spec",
            doc.describe()
        );
    }
    for kind in ["Gateway", "VirtualService"] {
        for doc in of_kind(&docs, kind) {
            assert_eq!(
                doc.api_version(),
                "networking.istio.io/v1",
                "{}",
                doc.describe()
            );
        }
    }

    // The filters, the demo Gateway and the node port all select the ingress gateway.
    let gateway = find(&docs, "Gateway", "demo-gateway");
    let selector = at(&gateway.value, "spec.selector").expect("the Gateway selects a gateway");
    for filter in envoy_filters(&docs) {
        assert_eq!(
            at(&filter.value, "spec.workloadSelector.labels"),
            Some(selector),
            "{} patches another workload than the Gateway runs on",
            filter.describe()
        );
    }
    let nodeport = find(&docs, "Service", "ingressgateway-nodeport");
    assert_eq!(at(&nodeport.value, "spec.selector"), Some(selector));
    assert_eq!(
        u64_at(&nodeport.value, "spec.ports.0.port"),
        u64_at(&gateway.value, "spec.servers.0.port.number"),
        "the node port Service exposes another port than the Gateway serves"
    );
    // Istio's ingress gateway runs as non-root and serves its Gateways' port 80 on 8080.
    assert_eq!(
        u64_at(&nodeport.value, "spec.ports.0.targetPort"),
        Some(8080)
    );

    // The virtual service routes the Gateway to the demo Service, which exists.
    let vs = find(&docs, "VirtualService", "httpbin");
    assert_eq!(
        items(&vs.value, "spec.gateways"),
        [json!(gateway.name())],
        "the VirtualService is bound to the demo Gateway"
    );
    let host = str_at(&vs.value, "spec.http.0.route.0.destination.host").expect("a destination");
    let port = u64_at(&vs.value, "spec.http.0.route.0.destination.port.number");
    let service = find(&docs, "Service", "httpbin");
    assert_eq!(
        host,
        format!(
            "{}.{}.svc.cluster.local",
            service.name(),
            service.namespace()
        )
    );
    assert!(
        items(&service.value, "spec.ports")
            .iter()
            .any(|p| p["port"].as_u64() == port),
        "the httpbin Service has no port {port:?}"
    );

    // kind maps the node port to the host port the deployment guide's walk-through curls.
    let kind_text =
        std::fs::read_to_string(repo_path("kind-cluster.yaml")).expect("read kind-cluster.yaml");
    let kind = &manifests::parse_documents(&kind_text).expect("parse kind-cluster.yaml")[0];
    assert_eq!(str_at(kind, "kind"), Some("Cluster"));
    assert_eq!(str_at(kind, "apiVersion"), Some("kind.x-k8s.io/v1alpha4"));
    let mapping = at(kind, "nodes.0.extraPortMappings.0").expect("an extraPortMapping");
    assert_eq!(
        mapping["containerPort"].as_u64(),
        u64_at(&nodeport.value, "spec.ports.0.nodePort"),
        "kind-cluster.yaml maps another port than the gateway's node port"
    );
    let host_port = mapping["hostPort"].as_u64().expect("a hostPort");
    let guide =
        std::fs::read_to_string(repo_path("docs/deployment.md")).expect("read docs/deployment.md");
    assert!(
        guide.contains(&format!("localhost:{host_port}/")),
        "the walk-through in docs/deployment.md should curl localhost:{host_port}/"
    );
}

// ---------------------------------------------------------------------------------------
// The limits and the Deployment

#[test]
fn configmap_limits_pass_check_config_and_serve_every_action() {
    let docs = manifests();
    let (_dir, path) = configmap_limits_file(&docs);
    support::check_config::accepted(&path, "the ConfigMap's limits");

    let (_, text) = configmap_limits(&docs);
    let limits = &manifests::parse_documents(&text).expect("parse the limits")[0];
    let filters = envoy_filters(&docs);
    for config in envoy_filter::ratelimit_configs(&filters) {
        assert_eq!(
            str_at(&config, "domain"),
            str_at(limits, "domain"),
            "the ratelimit filter's domain is not the limits' domain"
        );
    }
    let descriptors = envoy_filter::descriptors(&filters).expect("understand the actions");
    assert!(
        !descriptors.is_empty(),
        "the EnvoyFilters have no rate_limits actions"
    );
    for descriptor in &descriptors {
        assert!(
            envoy_filter::reaches_a_limit(limits, descriptor),
            "no limit in the ConfigMap for the descriptor {descriptor:?} the actions produce"
        );
    }

    // Negative control: a key the limits lack, and a fixed value no node matches.
    let unknown = [("nope".to_string(), None)];
    assert!(!envoy_filter::reaches_a_limit(limits, &unknown));
    let other_value = [("generic_key".to_string(), Some("not-ingress".to_string()))];
    assert!(!envoy_filter::reaches_a_limit(limits, &other_value));
}

#[test]
fn deployment_agrees_with_the_service_flags_configmap_and_filters() {
    let docs = manifests();
    let deployment = find(&docs, "Deployment", "gcounter-rls");
    let pod = at(&deployment.value, "spec.template").expect("a pod template");
    let container = rls_container(&docs);
    let args = strings(items(container, "args"));
    assert_eq!(
        args.first().map(String::as_str),
        Some("serve"),
        "args: {args:?}"
    );

    // The config path is the ConfigMap's file, mounted as a directory (a subPath mount
    // would never see an update).
    let config = flag_value(&args, "--config").expect("--config in the args");
    let config = Path::new(config);
    let mount = items(container, "volumeMounts")
        .iter()
        .find(|m| str_at(m, "mountPath").map(Path::new) == config.parent())
        .unwrap_or_else(|| panic!("no volume mounted at the directory of {}", config.display()));
    assert!(
        at(mount, "subPath").is_none(),
        "the limits are mounted with subPath"
    );
    let volume = items(pod, "spec.volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mounted volume is declared");
    assert_eq!(str_at(volume, "configMap.name"), Some(LIMITS_CONFIGMAP));
    let (file, _) = configmap_limits(&docs);
    assert_eq!(
        config.file_name().and_then(|f| f.to_str()),
        Some(file.as_str()),
        "--config names another file than the ConfigMap holds"
    );

    // Ports: the flags' (or their defaults), the container's, the probes', the Service's.
    let port_of = |flag: &str, default: u64| -> u64 {
        flag_value(&args, flag).map_or(default, |addr| {
            addr.rsplit_once(':')
                .and_then(|(_, p)| p.parse().ok())
                .unwrap_or_else(|| panic!("{flag} {addr} has no port"))
        })
    };
    let grpc_port = port_of("--grpc-addr", 8081);
    let http_port = port_of("--http-addr", 8080);
    let container_port = |name: &str| -> u64 {
        items(container, "ports")
            .iter()
            .find(|p| p["name"] == name)
            .and_then(|p| p["containerPort"].as_u64())
            .unwrap_or_else(|| panic!("no container port named {name}"))
    };
    assert_eq!(container_port("grpc"), grpc_port);
    assert_eq!(container_port("http-admin"), http_port);
    let resolve = |port: &Value| -> u64 {
        port.as_u64()
            .or_else(|| port.as_str().map(container_port))
            .unwrap_or_else(|| panic!("bad port {port}"))
    };
    let readiness = at(container, "readinessProbe").expect("a readinessProbe");
    assert_eq!(
        resolve(&readiness["grpc"]["port"]),
        grpc_port,
        "readiness: {readiness}"
    );
    assert_eq!(str_at(readiness, "grpc.service"), Some(RLS_HEALTH_SERVICE));
    let liveness = at(container, "livenessProbe").expect("a livenessProbe");
    assert_eq!(str_at(liveness, "httpGet.path"), Some("/healthz"));
    assert_eq!(resolve(&liveness["httpGet"]["port"]), http_port);

    let service = find(&docs, "Service", "gcounter-rls");
    assert_eq!(service.namespace(), NAMESPACE);
    let labels = at(pod, "metadata.labels")
        .and_then(Value::as_object)
        .expect("pod labels");
    for (k, v) in at(&service.value, "spec.selector")
        .and_then(Value::as_object)
        .expect("a selector")
    {
        assert_eq!(
            labels.get(k),
            Some(v),
            "the Service selects {k}={v}, the pods lack it"
        );
    }
    let grpc_service_port = items(&service.value, "spec.ports")
        .iter()
        .find(|p| p["name"] == "grpc")
        .expect("a Service port named grpc");
    assert_eq!(resolve(&grpc_service_port["targetPort"]), grpc_port);
    assert_eq!(str_at(grpc_service_port, "appProtocol"), Some("grpc"));

    // The filters call Istio's cluster for that Service port.
    let cluster = format!(
        "outbound|{}||{}.{}.svc.cluster.local",
        grpc_service_port["port"],
        service.name(),
        service.namespace()
    );
    for config in envoy_filter::ratelimit_configs(&envoy_filters(&docs)) {
        assert_eq!(
            str_at(
                &config,
                "rate_limit_service.grpc_service.envoy_grpc.cluster_name"
            ),
            Some(cluster.as_str())
        );
        assert_eq!(
            str_at(&config, "rate_limit_service.transport_api_version"),
            Some("V3")
        );
    }

    // Redis: the URL names the Redis Service and its port.
    let redis_url = items(container, "env")
        .iter()
        .find(|e| e["name"] == "RLS_REDIS_URL")
        .and_then(|e| str_at(e, "value"))
        .expect("RLS_REDIS_URL in the env");
    let redis = find(&docs, "Service", "redis");
    assert_eq!(
        redis_url,
        format!(
            "redis://{}.{}.svc.cluster.local:{}",
            redis.name(),
            redis.namespace(),
            redis.value["spec"]["ports"][0]["port"]
        )
    );

    // Hardened and sized: every container of every Deployment of ours (upstream's own, under
    // `upstream/`, stays as upstream wrote it but for the image).
    for deployment in of_kind(&docs, "Deployment").into_iter().filter(|d| {
        !d.file.starts_with(UPSTREAM_DEPLOYMENT_DIR)
            && !d.file.starts_with(ENVOY_GATEWAY_DEPLOYMENT_DIR)
    }) {
        let spec = at(&deployment.value, "spec.template.spec").expect("a pod spec");
        assert_eq!(
            at(spec, "securityContext.runAsNonRoot"),
            Some(&json!(true)),
            "{}",
            deployment.describe()
        );
        for c in items(spec, "containers") {
            let what = format!("{} container {}", deployment.describe(), c["name"]);
            assert_eq!(
                at(c, "securityContext.readOnlyRootFilesystem"),
                Some(&json!(true)),
                "{what}"
            );
            assert_eq!(
                at(c, "securityContext.allowPrivilegeEscalation"),
                Some(&json!(false)),
                "{what}"
            );
            assert_eq!(
                at(c, "securityContext.capabilities.drop"),
                Some(&json!(["ALL"])),
                "{what}"
            );
            for resource in ["requests.cpu", "requests.memory", "limits.memory"] {
                assert!(
                    at(c, &format!("resources.{resource}")).is_some(),
                    "{what} has no resources.{resource}"
                );
            }
            assert!(
                at(c, "readinessProbe").is_some(),
                "{what} has no readinessProbe"
            );
        }
    }
}

#[test]
fn dockerfile_builds_a_non_root_image_running_the_deployment_config() {
    let text = std::fs::read_to_string(repo_path("Dockerfile")).expect("read Dockerfile");
    let (problems, cmd) = dockerfile::problems(&text);
    assert!(problems.is_empty(), "Dockerfile:\n{}", problems.join("\n"));

    // The bases are build arguments (the tests build the same file on stand-in bases) whose
    // defaults are the real images a user builds on.
    assert_eq!(
        dockerfile::stage_bases(&text),
        [
            "docker.io/library/rust:1.95-slim-bookworm",
            "gcr.io/distroless/cc-debian12:nonroot"
        ]
    );
    assert_eq!(
        dockerfile::stage_bases("ARG B=x:1\nFROM ${B} AS b\nARG C=y\nFROM ${C}\n"),
        ["x:1", "${C}"],
        "an ARG after the first FROM is not seen by FROM"
    );

    // Without args, the image serves the file the Deployment mounts.
    let docs = manifests();
    let args = strings(items(rls_container(&docs), "args"));
    assert_eq!(
        flag_value(&cmd, "--config"),
        flag_value(&args, "--config"),
        "the image's CMD and the Deployment read different config paths"
    );

    // The build context keeps what the build needs and drops the heavy directories.
    let ignore = std::fs::read_to_string(repo_path(".dockerignore")).expect("read .dockerignore");
    let patterns: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for needed in ["target", ".tools", ".git"] {
        assert!(patterns.contains(&needed), ".dockerignore lacks {needed}");
    }
    for kept in [
        "Cargo.toml",
        "Cargo.lock",
        "src",
        "migrations",
        "integration",
        "*",
        "**",
    ] {
        assert!(!patterns.contains(&kept), ".dockerignore drops {kept}");
    }

    // Negative control: a single-stage image running as root is refused.
    let (problems, _) = dockerfile::problems(
        "FROM rust:1.95\nRUN cargo build --release --locked\nUSER root\nCMD [\"serve\"]\n",
    );
    assert!(
        problems.iter().any(|p| p.contains("multi-stage")),
        "{problems:?}"
    );
    let (problems, _) = dockerfile::problems(
        "FROM rust:1.95 AS builder\nRUN cargo build --release --locked\n\
         FROM debian:12-slim\nCOPY --from=builder /build/target/release/gcounter-rls /usr/local/bin/\n\
         USER 0\nEXPOSE 8081\nENTRYPOINT gcounter-rls\nCMD [\"serve\"]\n",
    );
    let problems = problems.join("\n");
    for needle in ["USER 0", "8080", "ENTRYPOINT", "/bin/ratelimit"] {
        assert!(
            problems.contains(needle),
            "expected {needle:?} in:\n{problems}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Running: the gateway's config in front of the real service

/// The EnvoyFilters applied to a gateway-shaped bootstrap, served by a real Envoy in
/// front of the real service on the ConfigMap's limits with Redis (as the Deployment
/// runs it): the demo path is limited to 3 a minute, the rest passes.
#[test]
fn the_gateway_config_denies_by_the_configmap_limits() {
    require_local_redis();
    let docs = manifests();
    let (dir, limits) = configmap_limits_file(&docs);
    let prefix = unique_prefix("k8s");
    let service = Service::start(
        &limits,
        &["--redis-url", LOCAL_REDIS_URL, "--redis-prefix", &prefix],
    );

    let bootstrap =
        envoy_filter::gateway_bootstrap(&envoy_filters(&docs), &gateway_vhost_name(&docs))
            .unwrap_or_else(|e| panic!("apply the EnvoyFilters: {e}"));
    let template = dir.path().join("gateway-bootstrap.yaml");
    std::fs::write(&template, envoy_filter::bootstrap_text(&bootstrap))
        .expect("write the gateway bootstrap");
    let envoy = Envoy::start(&template, service.grpc_addr.port(), &[]);

    // A 200 where a 429 was expected is often Envoy failing open on an RLS error.
    let context = || {
        format!(
            "\n--- envoy ratelimit stats ---\n{}\n--- envoy log ({}) ---\n{}\n--- service log ({}) ---\n{}",
            envoy.stats_matching("ratelimit"),
            envoy.log_path.display(),
            envoy.log_tail(30),
            service.log_path.display(),
            service.log_tail(30)
        )
    };
    let get = |path: &str, headers: &[(&str, &str)]| {
        http_get(envoy.listen_addr, path, headers)
            .unwrap_or_else(|e| panic!("GET {path} through Envoy: {e}{}", context()))
    };

    support::avoid_window_boundary(Duration::from_secs(60), Duration::from_secs(15));
    for i in 1..=3 {
        let r = get("/anything/limited", &[]);
        assert_eq!(r.status, 200, "request {i} of 3 should pass{}", context());
        assert_eq!(
            r.header("x-ratelimit-limit").map(|v| v.starts_with('3')),
            Some(true),
            "request {i}: the most constrained limit is the demo path's 3/min; headers {:?}{}",
            r.headers,
            context()
        );
    }
    let r = get("/anything/limited", &[]);
    assert_eq!(
        r.status,
        429,
        "request 4 should be limited; headers {:?}{}",
        r.headers,
        context()
    );

    // Other paths, and the unlimited ones, pass; an API key is counted on its own.
    let r = get("/anything/other", &[]);
    assert_eq!(r.status, 200, "another path should pass{}", context());
    let r = get("/status/200", &[("x-api-key", "demo")]);
    assert_eq!(
        r.status,
        200,
        "an unlimited path with an API key should pass{}",
        context()
    );
    assert_eq!(
        r.header("x-ratelimit-limit").map(|v| v.starts_with("60")),
        Some(true),
        "the API key's 60/min should be the most constrained; headers {:?}{}",
        r.headers,
        context()
    );
}

/// The kubelet updates a ConfigMap volume by writing a new timestamped directory and
/// renaming a `..data` symlink over the old one; `config.yaml` is a symlink through
/// `..data`. The service, given that path as the Deployment gives it, reloads.
#[test]
fn a_configmap_style_update_is_hot_reloaded() {
    let docs = manifests();
    let (file, text) = configmap_limits(&docs);
    let updated = text.replacen("requests_per_unit: 3\n", "requests_per_unit: 7\n", 1);
    assert_ne!(updated, text, "the demo limit of 3 is in the ConfigMap");

    let dir = tempfile::tempdir().expect("create the volume directory");
    let volume = dir.path();
    let write_version = |name: &str, contents: &str| {
        let version = volume.join(name);
        std::fs::create_dir(&version).expect("create a version directory");
        std::fs::write(version.join(&file), contents).expect("write the limits");
    };
    write_version("..2026_01_01_00_00_00.000000001", &text);
    std::os::unix::fs::symlink("..2026_01_01_00_00_00.000000001", volume.join("..data"))
        .expect("link ..data");
    std::os::unix::fs::symlink(format!("..data/{file}"), volume.join(&file))
        .expect("link the file");

    let config = volume.join(&file);
    let service = Service::start(&config, &[]);
    let rlconfig = || service.admin_get("/rlconfig").body_text();
    assert!(rlconfig().contains("requests_per_unit=3"), "{}", rlconfig());

    write_version("..2026_01_01_00_01_00.000000002", &updated);
    std::os::unix::fs::symlink("..2026_01_01_00_01_00.000000002", volume.join("..data_tmp"))
        .expect("link ..data_tmp");
    std::fs::rename(volume.join("..data_tmp"), volume.join("..data")).expect("swap ..data");
    std::fs::remove_dir_all(volume.join("..2026_01_01_00_00_00.000000001"))
        .expect("remove the old version");

    // The new limit served after the swap.
    service.wait_rlconfig(Duration::from_secs(20), "requests_per_unit=7");
    assert!(
        !rlconfig().contains("requests_per_unit=3"),
        "{}",
        rlconfig()
    );
}

// ---------------------------------------------------------------------------------------
// Upstream's own Deployment, only the image changed

/// Where envoyproxy/ratelimit's Deployment (Istio's sample) lives, kept as upstream wrote it.
const UPSTREAM_DEPLOYMENT_DIR: &str = "deploy/kubernetes/upstream/";

/// Upstream's Deployment runs our image as it ran upstream's: `/bin/ratelimit` (which the
/// Dockerfile provides), and its `env:` (every variable, as written) is accepted by the real
/// binary, started under that name with no arguments: `/healthcheck` answers 200 and the
/// mounted limits are served. Only the ports move to free ones, and the paths
/// (`RUNTIME_ROOT`, `REDIS_URL`) to this machine's.
#[test]
fn upstreams_deployment_runs_our_image_with_its_env_unchanged() {
    let docs = manifests();
    let container = foreign_deployment_container(&docs, UPSTREAM_DEPLOYMENT_DIR);
    let env = env_of(container);
    assert_sets(
        &env,
        &[
            "REDIS_URL",
            "RUNTIME_ROOT",
            "RUNTIME_SUBDIRECTORY",
            "HOST",
            "GRPC_HOST",
        ],
    );
    let mount = items(container, "volumeMounts")
        .iter()
        .find_map(|m| str_at(m, "mountPath"))
        .expect("the config mount")
        .to_string();

    // The mount, rebased under a temp dir, holds the ConfigMap's limits file.
    let root = tempfile::tempdir().expect("temp dir");
    let runtime_root = env
        .iter()
        .find(|(n, _)| n == "RUNTIME_ROOT")
        .map(|(_, v)| v.clone())
        .expect("RUNTIME_ROOT");
    let local_mount = root.path().join(mount.trim_start_matches('/'));
    std::fs::create_dir_all(&local_mount).expect("create the mount");
    let (limits_name, limits_text) = configmap_limits(&docs);
    std::fs::write(local_mount.join(limits_name), limits_text).expect("write the limits");

    // Every variable as the manifest sets it, but addresses and paths of this machine.
    let mut local: Vec<(String, String)> = env
        .into_iter()
        .map(|(name, value)| match name.as_str() {
            "RUNTIME_ROOT" => {
                let local_root = root.path().join(runtime_root.trim_start_matches('/'));
                (name, local_root.to_string_lossy().into_owned())
            }
            "REDIS_URL" => (name, "127.0.0.1:6379".to_string()),
            // "::" (every address, IPv6 and IPv4) as written: the harness connects to
            // 127.0.0.1 on the ports it chose.
            _ => (name, value),
        })
        .collect();
    local.push((
        "CACHE_KEY_PREFIX".into(),
        format!("k8s-upstream-{}:", std::process::id()),
    ));
    let local: Vec<(&str, &str)> = local
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    let service = support::Service::start_upstream(&local);
    let health = service.admin_get("/healthcheck");
    assert_eq!(health.status, 200, "{}", health.body_text());
    let rlconfig = service.admin_get("/rlconfig");
    assert_eq!(rlconfig.status, 200);
    assert!(
        !rlconfig.body_text().trim().is_empty(),
        "the ConfigMap's limits are not served:\n{}",
        service.log_tail(30)
    );
}

// ---------------------------------------------------------------------------------------
// Envoy Gateway's rate-limit Deployment, only the image changed

/// Where the Deployment Envoy Gateway generates lives, kept as Envoy Gateway writes it.
const ENVOY_GATEWAY_DEPLOYMENT_DIR: &str = "deploy/kubernetes/envoy-gateway/";

/// Envoy Gateway's Deployment runs our image: `/bin/ratelimit` with its `env:` (every
/// variable as written: limits over xDS with mTLS to the xDS server, TLS on gRPC, forced
/// start), started with no arguments against a TLS ADS server standing in for Envoy
/// Gateway's (one Secret's `tls.crt`/`tls.key`/`ca.crt` for everything, as Envoy Gateway
/// mounts it). Only addresses and paths move to this machine's: `/healthcheck` answers before
/// any config (forced start), then a pushed config is ACKed and served.
#[test]
fn envoy_gateways_deployment_runs_our_image_fed_over_xds() {
    use support::tls::{Ca, TlsDir};
    use support::xds::{AdsServer, ServerTls, domain};

    let docs = manifests();
    let container = foreign_deployment_container(&docs, ENVOY_GATEWAY_DEPLOYMENT_DIR);
    let certs_mount = items(container, "volumeMounts")
        .iter()
        .find(|m| str_at(m, "name") == Some("certs"))
        .and_then(|m| str_at(m, "mountPath"))
        .expect("the certs mount")
        .to_string();

    // The Secret Envoy Gateway mounts: one identity for the gRPC server and the xDS client.
    let ca = Ca::new("envoy gateway CA");
    let identity = ca.server_and_client();
    let certs = TlsDir::new();
    std::fs::write(certs.path("tls.crt"), &identity.cert_pem).expect("write tls.crt");
    std::fs::write(certs.path("tls.key"), &identity.key_pem).expect("write tls.key");
    std::fs::write(certs.path("ca.crt"), ca.cert_pem()).expect("write ca.crt");
    let local_certs = certs.dir.path().to_string_lossy().into_owned();

    // Envoy Gateway's xDS server for rate limits: mTLS, clients from the same CA.
    let ads = AdsServer::start_with(0, Some(ServerTls::new(&ca.server(), Some(&ca))));
    let metrics_port = support::free_port();
    let env: Vec<(String, String)> = env_of(container)
        .into_iter()
        .map(|(name, value)| {
            let value = match name.as_str() {
                // Envoy Gateway's Service name; the certificate names localhost.
                "CONFIG_GRPC_XDS_SERVER_URL" => format!("localhost:{}", ads.addr.port()),
                "REDIS_URL" => "127.0.0.1:6379".to_string(),
                "PROMETHEUS_ADDR" => format!(":{metrics_port}"),
                _ if value.starts_with(&certs_mount) => {
                    value.replacen(&certs_mount, &local_certs, 1)
                }
                _ => value,
            };
            (name, value)
        })
        .collect();
    assert_sets(
        &env,
        &[
            "CONFIG_TYPE",
            "CONFIG_GRPC_XDS_SERVER_URL",
            "CONFIG_GRPC_XDS_SERVER_USE_TLS",
            "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
            "FORCE_START_WITHOUT_INITIAL_CONFIG",
            "GRPC_SERVER_USE_TLS",
        ],
    );
    let local: Vec<(&str, &str)> = env.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    let service = Service::start_upstream(&local);
    let health = service.admin_get("/healthcheck");
    assert_eq!(health.status, 200, "{}", health.body_text());

    ads.push(
        "1",
        &[domain(
            "ratelimit-config",
            "envoy-gateway-test",
            &[("k", 3)],
        )],
    );
    ads.wait_ack("1");
    let node = ads.requests()[0].node.clone().unwrap_or_default();
    assert_eq!(node.id, "envoy-ratelimit");
    // The pushed limits served.
    let pushed = "envoy-gateway-test.k: unit=MINUTE requests_per_unit=3";
    service.wait_rlconfig(Duration::from_secs(10), pushed);
}
