use super::*;

#[test]
fn parses_content_length_and_chunked_responses() {
    let r = parse_response(b"HTTP/1.1 429 Too Many Requests\r\nX-RateLimit-Limit: 5, 5;w=60\r\ncontent-length: 2\r\n\r\nno")
            .expect("parse plain response");
    assert_eq!(r.status, 429);
    assert_eq!(r.header("x-ratelimit-limit"), Some("5, 5;w=60"));
    assert_eq!(r.body, b"no");

    let r = parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n3;x=y\r\n!!!\r\n0\r\n\r\n")
            .expect("parse chunked response");
    assert_eq!(r.status, 200);
    assert_eq!(r.body_text(), "ok!!!");
}
