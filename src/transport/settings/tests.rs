use super::*;

#[test]
fn defaults_are_valid() {
    assert_eq!(TransportSettings::default().validate(), Ok(()));
}

#[test]
fn zero_and_absurd_values_are_refused_with_the_flag() {
    let cases: Vec<(&str, TransportSettings)> = vec![
        (
            "--max-connections",
            TransportSettings {
                max_connections: 0,
                ..Default::default()
            },
        ),
        (
            "--max-concurrent-streams",
            TransportSettings {
                max_concurrent_streams: 0,
                ..Default::default()
            },
        ),
        (
            "--max-request-bytes",
            TransportSettings {
                max_request_bytes: 1 << 30,
                ..Default::default()
            },
        ),
        (
            "--max-buffered-request-bytes",
            TransportSettings {
                max_buffered_request_bytes: 1 << 10,
                ..Default::default()
            },
        ),
        (
            "--preface-timeout",
            TransportSettings {
                preface_timeout: Duration::ZERO,
                ..Default::default()
            },
        ),
        (
            "--request-timeout",
            TransportSettings {
                request_timeout: Duration::ZERO,
                ..Default::default()
            },
        ),
        (
            "--http2-stream-window",
            TransportSettings {
                http2_stream_window: 1,
                ..Default::default()
            },
        ),
    ];
    for (flag, settings) in cases {
        let error = settings.validate().expect_err(flag).to_string();
        assert!(error.starts_with(flag), "{flag}: {error}");
    }
}
