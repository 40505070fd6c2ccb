//! Helpers the unit tests of several modules share.

/// What clap says when it refuses `argv` (empty when it accepts it).
pub(crate) fn clap_refusal<P: clap::Parser>(argv: &[&str]) -> String {
    P::try_parse_from(argv)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
}

/// A closure as a service called through a shared reference (hyper's `Service`), for any
/// request and answer: the transport's layers are such services.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FnService<F>(pub(crate) F);

impl<F, Request, Answer, T, E> hyper::service::Service<Request> for FnService<F>
where
    F: Fn(Request) -> Answer,
    Answer: std::future::Future<Output = Result<T, E>>,
{
    type Response = T;
    type Error = E;
    type Future = Answer;

    fn call(&self, request: Request) -> Answer {
        (self.0)(request)
    }
}
