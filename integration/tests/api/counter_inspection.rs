//! Counter inspection on the real binary's admin port ("why was this client limited?"):
//! `GET /counters?domain=..&descriptor=k=v,..` answers the matched rule, the counter's cells
//! (regional, global, own), the sliding count, the estimated rates, strict mode and the
//! penalty box; `GET /counters/top` lists the busiest counters and those nearest their limit
//! from the engine's sampled sketch; both bounded, on the debug listener (the HTTP listener
//! only when asked), with request values hashed unless the operator asks to show them.

use gcounter_rls_integration as support;

use std::time::Duration;

use serde_json::Value;
use support::HttpResponse;
use support::grpc::Code;
use support::rls::Rls;

const LIMITS: &str = "
domain: api
descriptors:
  - key: client
    rate_limit: { unit: minute, requests_per_unit: 5, penalty: 5m }
  - key: path
    value: /busy
    rate_limit: { unit: minute, requests_per_unit: 100000 }
";

fn json(r: &HttpResponse) -> Value {
    serde_json::from_slice(&r.body)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {} {:?}", r.status, r.body_text()))
}

#[tokio::test]
async fn a_counter_shows_its_rule_cells_rates_and_penalty() {
    let mut rls = Rls::start(LIMITS, &[]).await;
    // Every request below inside one minute, counted from now that the service is up.
    support::stay_in_one_minute(Duration::from_secs(10));
    // Five within the limit, the sixth over.
    let codes = rls.codes_in_a_row(6, "api", &[("client", "alice")]).await;
    assert_eq!(codes[..5], [Code::Ok; 5], "{codes:?}");
    assert_eq!(codes[5], Code::OverLimit, "{codes:?}");

    let r = rls
        .service
        .debug_get("/counters?domain=api&descriptor=client%3Dalice");
    assert_eq!(r.status, 200, "{}", r.body_text());
    let v = json(&r);
    assert_eq!(v["rule"]["path"], "api.client", "{v}");
    assert_eq!(v["rule"]["limit"], 5, "{v}");
    assert_eq!(v["rule"]["penalty_ms"], 300_000, "{v}");
    assert!(
        v["rule"]["config"]
            .as_str()
            .is_some_and(|c| c.contains("penalty: 5m")),
        "{v}"
    );
    assert_eq!(
        v["current"]["regional"], 5,
        "the accepts, not the denial: {v}"
    );
    assert_eq!(v["current"]["own"], 5, "{v}");
    assert_eq!(v["current"]["global"], 0, "{v}");
    assert_eq!(v["sliding_count"], 5, "{v}");
    assert_eq!(v["remaining"], 0, "{v}");
    assert!(v["rate_10s"].as_f64().is_some_and(|r| r > 0.0), "{v}");
    assert!(v["rate_60s"].as_f64().is_some_and(|r| r > 0.0), "{v}");
    let left = v["penalty"]["left_ms"].as_u64().unwrap_or(0);
    assert!((290_000..=300_000).contains(&left), "in the box: {v}");
    assert_eq!(v["strict_mode"], false, "in-process: no strict mode: {v}");

    // Someone who never came: the rule, no cells, not in the box.
    let v = json(
        &rls.service
            .debug_get("/counters?domain=api&descriptor=client%3Dbob"),
    );
    assert_eq!(v["current"], Value::Null, "{v}");
    assert_eq!(v["penalty"], Value::Null, "{v}");

    // Bounded and explained.
    for (path, status, needle) in [
        (
            "/counters?domain=nope&descriptor=client=a",
            404,
            "no domain",
        ),
        ("/counters?domain=api&descriptor=other=a", 404, "no rule"),
        ("/counters?domain=api", 400, "missing `descriptor`"),
        ("/counters?domain=api&descriptor=client", 400, "key=value"),
        ("/counters/top?n=1000", 400, "`n` must be"),
    ] {
        let r = rls.service.debug_get(path);
        assert_eq!(r.status, status, "{path}: {}", r.body_text());
        assert!(r.body_text().contains(needle), "{path}: {}", r.body_text());
    }
    let long = format!(
        "/counters?domain=api&descriptor=client={}",
        "x".repeat(5_000)
    );
    let r = rls.service.debug_get(&long);
    assert!(
        r.status == 400 || r.status == 414 || r.status == 431,
        "{}",
        r.status
    );
}

#[tokio::test]
async fn top_lists_the_busiest_and_the_nearest_to_their_limit() {
    let mut rls = Rls::start(LIMITS, &[]).await;
    // Every request below inside one minute, counted from now that the service is up.
    support::stay_in_one_minute(Duration::from_secs(20));
    // A busy path far from its limit, a client at its limit, and a crowd of one-off clients.
    for i in 0..400 {
        rls.one("api", &[("path", "/busy")]).await;
        if i % 80 == 0 {
            rls.one("api", &[("client", "carol")]).await;
        }
        if i % 2 == 0 {
            rls.one("api", &[("client", &format!("once-{i}"))]).await;
        }
    }
    // The client at its limit keeps knocking.
    for _ in 0..100 {
        rls.one("api", &[("client", "carol")]).await;
    }
    let r = rls.service.debug_get("/counters/top?n=3");
    assert_eq!(r.status, 200, "{}", r.body_text());
    let v = json(&r);
    let tracked = v["tracked"].as_u64().unwrap_or(0);
    assert!((2..=64).contains(&tracked), "{v}");
    // Values are hashed: a row is matched with the `/counters` answer of the same descriptor.
    let identifier = |descriptor: &str| {
        let answer = json(
            &rls.service
                .debug_get(&format!("/counters?domain=api&descriptor={descriptor}")),
        );
        answer["counter"]["identifier"].clone()
    };
    let by_rate = v["by_rate"].as_array().cloned().unwrap_or_default();
    assert_eq!(by_rate.len(), 3, "{v}");
    assert_eq!(
        by_rate[0]["identifier"],
        identifier("path%3D%2Fbusy"),
        "{v}"
    );
    let by_nearness = v["by_nearness"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        by_nearness[0]["identifier"],
        identifier("client%3Dcarol"),
        "{v}"
    );
    assert!(
        by_nearness[0]["nearness"]
            .as_f64()
            .is_some_and(|n| n >= 1.0),
        "{v}"
    );
    assert!(
        by_nearness[0]["penalty"]["left_ms"].as_u64().is_some(),
        "{v}"
    );
}

/// An API key sent as a descriptor value.
const SECRET: &str = "sk-live-0123456789abcdef";

/// `/counters/top` and `/counters` for the secret's counter, after requests with it.
async fn inspect_secret(args: &[&str]) -> (Rls, HttpResponse, HttpResponse) {
    let mut rls = Rls::start(LIMITS, args).await;
    // The sketch samples decisions: enough of them to be tracked.
    for _ in 0..200 {
        rls.one("api", &[("client", SECRET)]).await;
    }
    let top = rls.service.debug_get("/counters/top");
    let one = rls.service.debug_get(&format!(
        "/counters?domain=api&descriptor=client%3D{SECRET}"
    ));
    assert_eq!(top.status, 200, "{}", top.body_text());
    assert_eq!(one.status, 200, "{}", one.body_text());
    (rls, top, one)
}

#[tokio::test]
async fn request_values_are_hashed_unless_the_operator_shows_them() {
    support::stay_in_one_minute(Duration::from_secs(10));
    let (rls, top, one) = inspect_secret(&[]).await;
    for body in [top.body_text(), one.body_text()] {
        assert!(!body.contains(SECRET), "the raw value leaked: {body}");
        assert!(
            !body.contains("0123456789abcdef"),
            "part of it leaked: {body}"
        );
    }
    let (top, one) = (json(&top), json(&one));
    assert_eq!(
        (&top["values"], &one["values"]),
        (&"hashed".into(), &"hashed".into())
    );
    let hashed = one["descriptor"][0]["value"].as_str().unwrap_or_default();
    assert!(hashed.starts_with("hash:") && hashed.len() == 21, "{one}");
    // The same counter in both answers, under the same hash.
    let identifier = &one["counter"]["identifier"];
    assert!(
        identifier.as_str().is_some_and(|i| i.starts_with("hash:")),
        "{one}"
    );
    let rows = top["by_rate"].as_array().cloned().unwrap_or_default();
    assert!(
        rows.iter().any(|row| &row["identifier"] == identifier),
        "{identifier} not in {top}"
    );
    // Nor does the log carry it (info level, the harness's).
    let log = std::fs::read_to_string(&rls.service.log_path).unwrap_or_default();
    assert!(!log.contains(SECRET), "the log holds the value:\n{log}");

    let (_rls, top, one) = inspect_secret(&["--inspection-show-values"]).await;
    assert!(top.body_text().contains(SECRET), "{}", top.body_text());
    assert!(one.body_text().contains(SECRET), "{}", one.body_text());
    assert_eq!(json(&one)["values"], "shown");
}

/// The status of `route` on the HTTP listener and on the debug one.
fn assert_on_listeners(rls: &Rls, route: &str, http: u16, debug: u16) {
    assert_eq!(
        rls.service.admin_get(route).status,
        http,
        "{route} on --http-addr"
    );
    assert_eq!(
        rls.service.debug_get(route).status,
        debug,
        "{route} on --debug-addr"
    );
}

#[tokio::test]
async fn inspection_is_on_the_debug_listener_unless_restored_on_the_http_one() {
    let path = "/counters?domain=api&descriptor=client%3Dalice";
    let rls = Rls::start(LIMITS, &[]).await;
    for route in [path, "/counters/top"] {
        assert_on_listeners(&rls, route, 404, 200);
    }
    // What stays on the HTTP listener.
    for route in ["/healthz", "/healthcheck", "/rlconfig", "/metrics"] {
        assert_eq!(rls.service.admin_get(route).status, 200, "{route}");
    }
    assert_eq!(rls.service.debug_get("/rlconfig").status, 200);

    let rls = Rls::start(LIMITS, &["--inspection-on-http-addr"]).await;
    for route in [path, "/counters/top"] {
        assert_on_listeners(&rls, route, 200, 200);
    }
}
