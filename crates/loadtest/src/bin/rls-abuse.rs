//! A hostile gRPC client (HTTP/2 slow-loris, idle-connection flood) for `scripts/abuse.py`:
//! prints one JSON line of what it managed. Loopback targets only, by design.
//!
//! ```sh
//! target/release/rls-abuse slow-loris --target 127.0.0.1:8081 --connections 4 --streams 250 \
//!     --announce-bytes 4000000 --send-bytes 3900000 --trickle-every 5s --duration 60s
//! target/release/rls-abuse idle --target 127.0.0.1:8081 --connections 20000 --duration 30s
//! ```

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use gcounter_loadtest::abuse::{self, IdleFlood, SlowLoris};

#[derive(Debug, Parser)]
#[command(about = "A hostile HTTP/2 client for soak tests (loopback only)")]
struct Args {
    #[command(subcommand)]
    attack: Attack,
}

#[derive(Debug, Subcommand)]
enum Attack {
    /// Streams that announce a large message and never finish sending it.
    SlowLoris {
        #[arg(long, default_value = "127.0.0.1:8081")]
        target: SocketAddr,
        #[arg(long, default_value_t = 4)]
        connections: usize,
        #[arg(long, default_value_t = 250)]
        streams: usize,
        #[arg(long, default_value_t = 4_000_000)]
        announce_bytes: u32,
        #[arg(long, default_value_t = 3_900_000)]
        send_bytes: usize,
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
        trickle_every: Duration,
        #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
        duration: Duration,
    },
    /// TCP connections that never send a byte.
    Idle {
        #[arg(long, default_value = "127.0.0.1:8081")]
        target: SocketAddr,
        #[arg(long, default_value_t = 1_000)]
        connections: usize,
        #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
        duration: Duration,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    let target = match &args.attack {
        Attack::SlowLoris { target, .. } | Attack::Idle { target, .. } => *target,
    };
    if !target.ip().is_loopback() {
        eprintln!("error: rls-abuse only targets loopback addresses, not {target}");
        return ExitCode::FAILURE;
    }
    // The idle flood holds thousands of sockets: take what the hard limit allows.
    if let Err(error) = rlimit::increase_nofile_limit(u64::MAX) {
        eprintln!("warning: cannot raise the open-files limit: {error}");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let line = runtime.block_on(async {
        match args.attack {
            Attack::SlowLoris {
                target,
                connections,
                streams,
                announce_bytes,
                send_bytes,
                trickle_every,
                duration,
            } => serde_json::to_string(
                &abuse::slow_loris(SlowLoris {
                    target,
                    connections,
                    streams_per_connection: streams,
                    announce_bytes,
                    send_bytes,
                    trickle_every,
                    duration,
                })
                .await,
            ),
            Attack::Idle {
                target,
                connections,
                duration,
            } => serde_json::to_string(
                &abuse::idle_flood(IdleFlood {
                    target,
                    connections,
                    duration,
                })
                .await,
            ),
        }
    });
    match line {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
