use super::*;
use crate::environment::Environment;

fn tags(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    tag_set(
        &pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<Vec<_>>(),
    )
}

#[test]
fn statsd_lines_carry_tags_in_the_name_as_gostats_writes_them() {
    let mut out = String::new();
    let name = "ratelimit.service.rate_limit.d.k_v.total_hits";
    counter_line(Format::Statsd, name, &[], &[], 3, &mut out);
    counter_line(
        Format::Statsd,
        name,
        &tags(&[("zone", "eu.west:1"), ("app", "api"), ("empty", "")]),
        &[],
        2,
        &mut out,
    );
    assert_eq!(
        out,
        "ratelimit.service.rate_limit.d.k_v.total_hits:3|c\n\
         ratelimit.service.rate_limit.d.k_v.total_hits.__app=api.__zone=eu_west_1:2|c\n"
    );
}

#[test]
fn dogstatsd_lines_carry_tags_after_the_value() {
    let mut out = String::new();
    let name = "ratelimit.service.config_load_success";
    counter_line(Format::DogStatsd, name, &[], &[], 1, &mut out);
    counter_line(
        Format::DogStatsd,
        name,
        &tags(&[("b", "2"), ("a", "1")]),
        &[],
        4,
        &mut out,
    );
    assert_eq!(
        out,
        "ratelimit.service.config_load_success:1|c\n\
         ratelimit.service.config_load_success:4|c|#a:1,b:2\n"
    );
}

#[test]
fn mogrifiers_rename_and_tag_as_upstreams() {
    let env = Environment::from_pairs([
        (
            "DOG_STATSD_MOGRIFIER_RL_PATTERN",
            r"^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$",
        ),
        (
            "DOG_STATSD_MOGRIFIER_RL_NAME",
            "ratelimit.service.rate_limit.$3",
        ),
        (
            "DOG_STATSD_MOGRIFIER_RL_TAGS",
            "domain:$1,descriptor:$2,kept:$9",
        ),
    ]);
    let mogrifiers = Mogrifier::from_env(&["RL".to_owned()], &env).expect("valid");
    let mut out = String::new();
    counter_line(
        Format::DogStatsd,
        "ratelimit.service.rate_limit.d.k_v.total_hits",
        &tags(&[("env", "prod")]),
        &mogrifiers,
        5,
        &mut out,
    );
    let (head, tags) = out.trim_end().split_once("|#").expect("tags");
    assert_eq!(head, "ratelimit.service.rate_limit.total_hits:5|c");
    let mut tags: Vec<&str> = tags.split(',').collect();
    tags.sort_unstable();
    assert_eq!(tags, ["descriptor:k_v", "domain:d", "env:prod", "kept:$9"]);
    // A name the pattern does not match is sent as it is.
    let mut other = String::new();
    counter_line(
        Format::DogStatsd,
        "ratelimit_server.x",
        &[],
        &mogrifiers,
        1,
        &mut other,
    );
    assert_eq!(other, "ratelimit_server.x:1|c\n");
}

#[test]
fn a_mogrifier_without_its_parts_is_refused_naming_the_variable() {
    let env = Environment::from_pairs([("DOG_STATSD_MOGRIFIER_X_PATTERN", "(")]);
    let error = Mogrifier::from_env(&["X".to_owned()], &env).expect_err("bad pattern");
    assert_eq!(error.variable, "DOG_STATSD_MOGRIFIER_X_PATTERN");
    let env = Environment::from_pairs([("DOG_STATSD_MOGRIFIER_X_PATTERN", "a")]);
    let error = Mogrifier::from_env(&["X".to_owned()], &env).expect_err("no name");
    assert_eq!(error.variable, "DOG_STATSD_MOGRIFIER_X_NAME");
}

#[test]
fn names_are_sanitized_as_upstreams_stat_names() {
    assert_eq!(
        sanitize("ratelimit.service.rate_limit.d.ip_10.0.0.1.k:v|w.total_hits"),
        "ratelimit.service.rate_limit.d.ip_10_0_0_1.k_v_w.total_hits"
    );
}

#[test]
fn datagrams_end_at_line_ends_within_the_size() {
    let line = format!("{}:1|c\n", "a".repeat(95));
    let payload = line.repeat(40);
    let pieces = datagrams(&payload, DATAGRAM_BYTES);
    assert_eq!(pieces.concat(), payload);
    for piece in &pieces {
        assert!(piece.len() <= DATAGRAM_BYTES && piece.ends_with('\n'));
    }
    assert_eq!(pieces.len(), 40_usize.div_ceil(DATAGRAM_BYTES / line.len()));
    let long = format!("{}:1|c\n", "b".repeat(2_000));
    assert_eq!(datagrams(&long, DATAGRAM_BYTES), [long.as_str()]);
}

/// Against a UDP socket of the test: the growth of each counter since the last flush, once.
#[tokio::test]
async fn each_flush_sends_what_grew_since_the_last_one() {
    let collector = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let target = collector.local_addr().expect("addr").to_string();
    let metrics = Arc::new(Metrics::with_settings(
        crate::telemetry::MetricsSettings::default(),
    ));
    let mut exporter = Exporter::new(StatsdSettings {
        target,
        protocol: Protocol::Udp,
        format: Format::Statsd,
        flush_interval: Duration::from_secs(10),
        tags: Vec::new(),
        mogrifiers: Vec::new(),
    });
    let received = async || {
        let mut buffer = vec![0; 65_536];
        let (n, _) = tokio::time::timeout(Duration::from_secs(5), collector.recv_from(&mut buffer))
            .await
            .expect("a datagram")
            .expect("recv");
        String::from_utf8_lossy(&buffer[..n]).into_owned()
    };
    metrics.config_loaded(3);
    exporter.flush(&metrics).await;
    assert_eq!(
        received().await,
        "ratelimit.service.config_load_success:1|c\n"
    );
    metrics.config_loaded(3);
    metrics.config_loaded(3);
    metrics.config_rejected();
    exporter.flush(&metrics).await;
    let lines = received().await;
    assert!(
        lines.contains("ratelimit.service.config_load_success:2|c\n"),
        "{lines}"
    );
    assert!(
        lines.contains("ratelimit.service.config_load_error:1|c\n"),
        "{lines}"
    );
    // Nothing grew: nothing is sent.
    exporter.flush(&metrics).await;
    metrics.config_rejected();
    exporter.flush(&metrics).await;
    assert_eq!(
        received().await,
        "ratelimit.service.config_load_error:1|c\n"
    );
}
