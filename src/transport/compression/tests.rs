use std::io::Write;

use super::*;

fn compressed(encoding: Compression, message: &[u8]) -> Vec<u8> {
    let level = flate2::Compression::best();
    match encoding {
        Compression::Gzip => {
            let mut encoder = flate2::write::GzEncoder::new(Vec::new(), level);
            encoder.write_all(message).expect("compressed in memory");
            encoder.finish().expect("compressed in memory")
        }
        Compression::Deflate => {
            let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), level);
            encoder.write_all(message).expect("compressed in memory");
            encoder.finish().expect("compressed in memory")
        }
    }
}

#[test]
fn each_encoding_decompresses_to_the_message() {
    let message = b"a rate limit request, compressed".repeat(8);
    for encoding in Compression::ALL {
        let decompressed = decompress(encoding, &compressed(encoding, &message), 4_096);
        assert_eq!(
            decompressed.ok().as_deref(),
            Some(&message[..]),
            "{encoding:?}"
        );
    }
}

/// 1 MiB of zeros is about 1 KiB of gzip: the bound is on what it inflates to.
#[test]
fn a_message_over_the_bound_once_decompressed_is_refused() {
    let bomb = vec![0u8; 1 << 20];
    for encoding in Compression::ALL {
        let small = compressed(encoding, &bomb);
        assert!(small.len() < 4_096, "{}", small.len());
        let refused = decompress(encoding, &small, 4_096).expect_err("over the bound");
        assert_eq!(
            refused.code(),
            tonic::Code::ResourceExhausted,
            "{refused:?}"
        );
        // Exactly at the bound is accepted.
        let at = compressed(encoding, &bomb[..4_096]);
        assert_eq!(
            decompress(encoding, &at, 4_096).map(|m| m.len()).ok(),
            Some(4_096)
        );
    }
}

#[test]
fn bytes_that_are_not_the_encoding_are_invalid() {
    for encoding in Compression::ALL {
        let refused = decompress(encoding, b"not compressed at all", 4_096).expect_err("garbage");
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    }
}

#[test]
fn the_request_names_an_accepted_encoding_or_is_unimplemented() {
    let with = |value: &'static str| {
        let mut headers = http::HeaderMap::new();
        headers.insert(GRPC_ENCODING, http::HeaderValue::from_static(value));
        Compression::of_request(&headers)
    };
    assert_eq!(
        Compression::of_request(&http::HeaderMap::new()).ok(),
        Some(None)
    );
    assert_eq!(with("identity").ok(), Some(None));
    assert_eq!(with("gzip").ok(), Some(Some(Compression::Gzip)));
    assert_eq!(with("deflate").ok(), Some(Some(Compression::Deflate)));
    let refused = with("snappy").expect_err("not accepted");
    assert_eq!(refused.code(), tonic::Code::Unimplemented);
    let listed = refused.metadata().get(GRPC_ACCEPT_ENCODING);
    assert_eq!(
        listed.and_then(|v| v.to_str().ok()),
        Some("gzip,deflate,identity")
    );
}
