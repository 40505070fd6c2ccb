//! A hostile gRPC client (HTTP/2 slow-loris, idle-connection flood) for `scripts/abuse.py`:
//! prints one JSON line of what it managed. Loopback targets only, by design.
//!
//! ```sh
//! target/release/rls-abuse slow-loris --target 127.0.0.1:8081 --connections 4 --streams 250 \
//!     --announce-bytes 4000000 --send-bytes 3900000 --trickle-every 5s --duration 60s
//! target/release/rls-abuse idle --target 127.0.0.1:8081 --connections 20000 --duration 30s
//! ```

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use gcounter_loadtest::abuse::{self, IdleFlood, SlowLoris};
use gcounter_runtime::{self as runtime, Flavor};

#[derive(Debug, Parser)]
#[command(about = "A hostile HTTP/2 client for soak tests (loopback only)")]
struct Args {
    #[command(subcommand)]
    attack: Attack,
}

#[derive(Debug, Subcommand)]
enum Attack {
    /// Streams that announce a large message and never finish sending it.
    SlowLoris(SlowLoris),
    /// TCP connections that never send a byte.
    Idle(IdleFlood),
}

fn main() -> ExitCode {
    let args = Args::parse();
    let target = match &args.attack {
        Attack::SlowLoris(SlowLoris { target, .. }) | Attack::Idle(IdleFlood { target, .. }) => {
            *target
        }
    };
    if !target.ip().is_loopback() {
        eprintln!("error: rls-abuse only targets loopback addresses, not {target}");
        return ExitCode::FAILURE;
    }
    // The idle flood holds thousands of sockets: take what the hard limit allows.
    if let Err(error) = rlimit::increase_nofile_limit(u64::MAX) {
        eprintln!("warning: cannot raise the open-files limit: {error}");
    }
    let attack = async {
        let line = match args.attack {
            Attack::SlowLoris(attack) => serde_json::to_string(&abuse::slow_loris(attack).await),
            Attack::Idle(attack) => serde_json::to_string(&abuse::idle_flood(attack).await),
        }?;
        println!("{line}");
        Ok(())
    };
    let cores = runtime::available_cores();
    runtime::run_main(Flavor::MultiThread, cores, attack)
}
