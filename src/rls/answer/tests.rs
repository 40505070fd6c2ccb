use super::*;
use envoy_types::pb::google::protobuf::{Value, value::Kind};
use prost::Message;

fn limited(code: Code, remaining: u32, name: Option<&str>, reset_ms: u64) -> Status {
    Status {
        code: code as i32,
        current_limit: Some(CurrentLimit {
            name: name.map(Arc::from),
            requests_per_unit: 10,
            unit: 3,
        }),
        limit_remaining: remaining,
        until_reset_ms: Some(reset_ms),
    }
}

/// Every shape the service answers: empty, statuses inline and spilled, headers,
/// metadata, and the default code.
fn answers() -> Vec<Answer> {
    let metadata = Struct {
        fields: [(
            "domain".to_owned(),
            Value {
                kind: Some(Kind::StringValue("d".into())),
            },
        )]
        .into(),
    };
    let header = HeaderValue {
        key: "RateLimit-Limit".into(),
        value: "10".into(),
        ..Default::default()
    };
    let names = [None, Some(""), Some("named"), Some("ünïcode name")];
    let resets = [0, 999, 1_000, 12_500, 86_400_000 * 366, u64::MAX];
    let many: Statuses = (0..7)
        .map(|i| limited(Code::Ok, i, names[i as usize % 4], resets[i as usize % 6]))
        .collect();
    // Zeros left out as proto3 leaves them: no limit values, no code, nothing remaining.
    let zeros = Status {
        code: 0,
        current_limit: Some(CurrentLimit::default()),
        limit_remaining: 0,
        until_reset_ms: Some(0),
    };
    vec![
        Answer::default(),
        Answer {
            overall_code: Code::Ok,
            statuses: [
                Status::ok(),
                zeros,
                Status {
                    limit_remaining: u32::MAX,
                    ..Status::ok()
                },
            ]
            .into_iter()
            .collect(),
            ..Default::default()
        },
        Answer {
            overall_code: Code::OverLimit,
            statuses: [
                limited(Code::OverLimit, 0, Some("r"), 12_500),
                limited(Code::Ok, 9, None, 1),
            ]
            .into_iter()
            .collect(),
            response_headers_to_add: vec![header.clone(), header],
            dynamic_metadata: Some(Box::new(metadata)),
        },
        Answer {
            overall_code: Code::Ok,
            statuses: many,
            ..Default::default()
        },
    ]
}

/// tonic copies the answer several times per request (module doc): keep it small.
#[test]
fn an_answer_stays_small() {
    assert!(size_of::<Status>() <= 56, "{}", size_of::<Status>());
    assert!(size_of::<Answer>() <= 280, "{}", size_of::<Answer>());
}

#[test]
fn an_answer_encodes_to_prosts_bytes_for_the_same_response() {
    for answer in answers() {
        let ours = answer.encode_to_vec();
        assert_eq!(ours.len(), answer.encoded_len());
        let prosts = answer.clone().into_response().encode_to_vec();
        assert_eq!(ours, prosts, "{answer:?}");
        // And the bytes read back as the same response.
        assert_eq!(
            RateLimitResponse::decode(ours.as_slice()).ok(),
            Some(answer.into_response())
        );
    }
}
