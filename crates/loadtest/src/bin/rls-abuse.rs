//! A hostile gRPC client (HTTP/2 slow-loris, idle-connection flood, RLQS bucket floods) and a
//! well-behaved RLQS probe, for `scripts/abuse.py`: prints one JSON line of what it managed.
//! Loopback targets only, by design.
//!
//! ```sh
//! target/release/rls-abuse slow-loris --target 127.0.0.1:8081 --connections 4 --streams 250 \
//!     --announce-bytes 4000000 --send-bytes 3900000 --trickle-every 5s --duration 60s
//! target/release/rls-abuse idle --target 127.0.0.1:8081 --connections 20000 --duration 30s
//! target/release/rls-abuse rlqs-flood --target 127.0.0.1:8081 --streams 2 --buckets 20000 \
//!     --usages-per-report 5000 --reports 10 --duration 30s
//! target/release/rls-abuse rlqs-probe --target 127.0.0.1:8081 --duration 30s
//! ```

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use gcounter_loadtest::abuse::{self, IdleFlood, SlowLoris};
use gcounter_loadtest::quota_abuse::{self, QuotaFlood, QuotaProbe};
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
    /// RLQS streams reporting many buckets (one counter's group, the largest ids, no reading).
    RlqsFlood(QuotaFlood),
    /// A well-behaved RLQS client: what assignments it gets.
    RlqsProbe(QuotaProbe),
}

fn main() -> ExitCode {
    let args = Args::parse();
    let target = match &args.attack {
        Attack::SlowLoris(SlowLoris { target, .. })
        | Attack::Idle(IdleFlood { target, .. })
        | Attack::RlqsFlood(QuotaFlood { target, .. })
        | Attack::RlqsProbe(QuotaProbe { target, .. }) => *target,
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
            Attack::RlqsFlood(attack) => {
                serde_json::to_string(&quota_abuse::quota_flood(attack).await)
            }
            Attack::RlqsProbe(probe) => {
                serde_json::to_string(&quota_abuse::quota_probe(probe).await)
            }
        }?;
        println!("{line}");
        Ok(())
    };
    let cores = runtime::available_cores();
    runtime::run_main(Flavor::MultiThread, cores, attack)
}
