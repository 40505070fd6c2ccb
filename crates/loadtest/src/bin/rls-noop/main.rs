//! A no-op RateLimitService: every request is answered OK, nothing else happens.
//!
//! It is the ceiling of the benchmarks (BENCHMARKS.md): what gRPC itself costs on this
//! machine, measured in the same run as the service, so each of the service's figures is a
//! ratio to it. Two stacks:
//!
//! - `--stack hyper` (the default): hyper's HTTP/2 server with the message framed, decoded
//!   and encoded here, nothing else. The service runs on hyper's HTTP/2 too, so this is the
//!   transport's own limit: what the service costs beyond it is the service.
//! - `--stack tonic`: tonic's `Server` and generated service, what a plain tonic server costs.
//!
//! ```sh
//! taskset -c 0 target/release/rls-noop --grpc-addr 127.0.0.1:9081 --runtime current-thread
//! ```

mod hyper_stack;

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use gcounter_runtime::{self as runtime, Flavor};
use tonic::{Request, Response, Status};

#[derive(Debug, Parser)]
#[command(about = "A no-op RateLimitService (always OK): the gRPC ceiling for benchmarks")]
struct Args {
    #[arg(long, default_value = "127.0.0.1:9081")]
    grpc_addr: SocketAddr,
    #[arg(long, value_enum, default_value = "current-thread")]
    runtime: Flavor,
    /// Worker threads of the multi-thread runtime (default: the cores this process may use).
    #[arg(long)]
    workers: Option<usize>,
    /// The HTTP/2 and gRPC stack that serves the no-op answer.
    #[arg(long, value_enum, default_value = "hyper")]
    stack: Stack,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Stack {
    /// hyper's HTTP/2 server, the gRPC framing and prost codec written out here.
    Hyper,
    /// tonic's server and generated service.
    Tonic,
}

struct Noop;

/// One OK status per descriptor, as a real service answers: the same response size.
fn all_ok(request: &RateLimitRequest) -> RateLimitResponse {
    let statuses = request
        .descriptors
        .iter()
        .map(|_| DescriptorStatus {
            code: Code::Ok as i32,
            ..Default::default()
        })
        .collect();
    RateLimitResponse {
        overall_code: Code::Ok as i32,
        statuses,
        ..Default::default()
    }
}

#[tonic::async_trait]
impl RateLimitService for Noop {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        Ok(Response::new(all_ok(request.get_ref())))
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    // A dispatcher that records nothing, so tonic's and h2's spans cost what they cost in a
    // server of its own. Without any, a dependency of this workspace that turns on
    // `tracing`'s `log` feature makes every span fall back to the `log` crate: ~5,000
    // instructions per request (callgrind), a ceiling lower than gRPC's own.
    if tracing::subscriber::set_global_default(tracing::subscriber::NoSubscriber::default())
        .is_err()
    {
        eprintln!("error: a tracing dispatcher was already set");
        return ExitCode::FAILURE;
    }
    let workers = args.workers.unwrap_or_else(runtime::available_cores);
    let rt = match runtime::build(args.runtime, workers) {
        Ok(rt) => rt,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let served = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.grpc_addr).await?;
        eprintln!(
            "rls-noop: serving on {} ({:?} stack, {:?} runtime, {workers} worker(s))",
            args.grpc_addr, args.stack, args.runtime
        );
        if let Stack::Hyper = args.stack {
            return hyper_stack::serve(listener).await;
        }
        tonic::transport::Server::builder()
            .add_service(RateLimitServiceServer::new(Noop))
            .serve_with_incoming(
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            )
            .await
            .map_err(std::io::Error::other)
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
