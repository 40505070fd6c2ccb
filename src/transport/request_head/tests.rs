use super::*;

fn request(method: Method, content_type: Option<&'static str>) -> http::Request<()> {
    let mut request = http::Request::new(());
    *request.method_mut() = method;
    if let Some(value) = content_type {
        request
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, HeaderValue::from_static(value));
    }
    request
}

fn status_of(method: Method, content_type: Option<&'static str>) -> Option<StatusCode> {
    refusal(&request(method, content_type)).map(|response| response.status())
}

#[test]
fn a_grpc_call_passes() {
    for content_type in [
        "application/grpc",
        "application/grpc+proto",
        "application/grpc;charset=utf-8",
        "Application/GRPC",
    ] {
        assert_eq!(
            status_of(Method::POST, Some(content_type)),
            None,
            "{content_type}"
        );
    }
}

#[test]
fn another_content_type_is_415() {
    for content_type in [
        None,
        Some("text/plain"),
        Some("application/json"),
        Some("application/grpcx"),
        Some("application/grp"),
        Some(""),
    ] {
        assert_eq!(
            status_of(Method::POST, content_type),
            Some(StatusCode::UNSUPPORTED_MEDIA_TYPE),
            "{content_type:?}"
        );
    }
}

#[test]
fn another_method_is_405_with_allow_and_no_body() {
    for method in [
        Method::GET,
        Method::PUT,
        Method::HEAD,
        Method::DELETE,
        Method::OPTIONS,
    ] {
        let response = refusal(&request(method.clone(), Some("application/grpc")))
            .unwrap_or_else(|| panic!("{method} refused"));
        assert_eq!(
            response.status(),
            StatusCode::METHOD_NOT_ALLOWED,
            "{method}"
        );
        assert_eq!(
            response.headers().get(http::header::ALLOW),
            Some(&HeaderValue::from_static("POST"))
        );
        assert_eq!(
            response.headers().get(&GRPC_STATUS),
            Some(&HeaderValue::from_static("13"))
        );
        assert!(http_body::Body::is_end_stream(response.body()), "{method}");
    }
}
