//! `gcounter-sim`: run accuracy scenarios of the global counters on a virtual clock.
//!
//! ```text
//! gcounter-sim --scenario all --seed 1 --format markdown
//! gcounter-sim --scenario even-10x5 --floor 0.1 --flush-ms 1000 --sync-ms 1000
//! gcounter-sim --bounded --scenario all --seed 1
//! ```

use clap::{Parser, ValueEnum};
use gcounter_sim::report::{
    BOUNDED_HEADER, MARKDOWN_HEADER, bounded_json_line, bounded_row, json_line, markdown_row,
};
use gcounter_sim::scenario::NAMES;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Json,
    Markdown,
}

#[derive(Debug, Parser)]
#[command(
    name = "gcounter-sim",
    about = "Accuracy of gcounter-rls's global counters across regions, simulated on a virtual clock with the real engine"
)]
struct Args {
    /// A scenario name, a comma-separated list, or `all`.
    #[arg(long, default_value = "all")]
    scenario: String,
    /// Same seed, same output.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, value_enum, default_value = "markdown")]
    format: Format,
    /// Override the scenario's publish floor (fraction of the limit).
    #[arg(long)]
    floor: Option<f64>,
    #[arg(long)]
    flush_ms: Option<u64>,
    #[arg(long)]
    sync_ms: Option<u64>,
    #[arg(long)]
    jitter: Option<f64>,
    /// Flush and sync up to this many times as often while shared counters are offered far
    /// over their limit (1: never faster).
    #[arg(long)]
    contended_speedup: Option<u32>,
    /// Speed up from this many denials per admission on shared cells (0: on any denial).
    #[arg(long)]
    contended_overload: Option<f64>,
    /// The fraction of a limit whose growth within a second of a flush makes a cell's onset
    /// (0: no onset cadence).
    #[arg(long)]
    onset_fraction: Option<f64>,
    /// The fewest hits that make an onset.
    #[arg(long)]
    onset_min_hits: Option<u64>,
    /// The fast cadence of cells at their onset.
    #[arg(long)]
    onset_interval_ms: Option<u64>,
    /// Tick this many times as often while a shared onset nears its limit (1: never).
    #[arg(long)]
    urgent_divisor: Option<u32>,
    /// A full sync at least this often (0: every sync is full).
    #[arg(long)]
    full_sync_ms: Option<u64>,
    /// How far before its previous read an incremental sync starts reading.
    #[arg(long)]
    sync_overlap_ms: Option<u64>,
    #[arg(long)]
    write_latency_ms: Option<u64>,
    #[arg(long)]
    read_latency_ms: Option<u64>,
    /// Processes in every region (overrides the scenario's).
    #[arg(long)]
    processes: Option<usize>,
    /// Another limit per window (with --window-ms; loads stay multiples of the limit).
    #[arg(long)]
    limit: Option<u64>,
    /// Another window length in ms (with --limit).
    #[arg(long)]
    window_ms: Option<u64>,
    /// Virtual minutes to run (overrides the scenario's).
    #[arg(long)]
    minutes: Option<u64>,
    /// Run the bounded counter instead of the global counters: rights to shares of each
    /// limit, spent locally; refusals against an ideal single limiter, "never above".
    #[arg(long)]
    bounded: bool,
    /// List the scenarios and exit.
    #[arg(long)]
    list: bool,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if args.list {
        for name in NAMES {
            if let Some(s) = gcounter_sim::named(name, args.seed) {
                println!("{name}: {}", s.about);
            }
        }
        return std::process::ExitCode::SUCCESS;
    }
    let names: Vec<&str> = if args.scenario == "all" {
        NAMES.to_vec()
    } else {
        args.scenario.split(',').map(str::trim).collect()
    };
    if let Format::Markdown = args.format {
        let header = if args.bounded {
            BOUNDED_HEADER
        } else {
            MARKDOWN_HEADER
        };
        println!("{header}");
    }
    for name in names {
        let Some(mut scenario) = gcounter_sim::named(name, args.seed) else {
            eprintln!(
                "unknown scenario {name:?}; one of: all, {}",
                NAMES.join(", ")
            );
            return std::process::ExitCode::from(2);
        };
        let fleet = &mut scenario.fleet;
        // Each flag given replaces the scenario's value.
        for (flag, value) in [
            (args.flush_ms, &mut fleet.flush_ms),
            (args.sync_ms, &mut fleet.sync_ms),
            (args.write_latency_ms, &mut fleet.write_latency_ms),
            (args.read_latency_ms, &mut fleet.read_latency_ms),
            (args.full_sync_ms, &mut fleet.full_sync_ms),
            (args.sync_overlap_ms, &mut fleet.sync_overlap_ms),
            (args.onset_min_hits, &mut fleet.onset_min_hits),
            (args.onset_interval_ms, &mut fleet.onset_interval_ms),
        ] {
            *value = flag.unwrap_or(*value);
        }
        for (flag, value) in [
            (args.floor, &mut fleet.publish_floor),
            (args.jitter, &mut fleet.jitter),
            (args.contended_overload, &mut fleet.contended_overload),
            (args.onset_fraction, &mut fleet.onset_fraction),
        ] {
            *value = flag.unwrap_or(*value);
        }
        fleet.contended_speedup = args.contended_speedup.unwrap_or(fleet.contended_speedup);
        fleet.urgent_divisor = args.urgent_divisor.unwrap_or(fleet.urgent_divisor);
        if let Some(n) = args.processes {
            fleet.processes.iter_mut().for_each(|p| *p = n);
        }
        if args.limit.is_some() || args.window_ms.is_some() {
            let limit = args.limit.unwrap_or(scenario.limit);
            let window_ms = args.window_ms.unwrap_or(scenario.window_ms);
            scenario.rescale(limit, window_ms);
        }
        if let Some(minutes) = args.minutes {
            scenario.run_ms = minutes * 60_000;
        }
        let started = std::time::Instant::now();
        if args.bounded {
            let report = match gcounter_sim::bounded::run(&scenario, args.seed) {
                Ok(report) => report,
                Err(error) => {
                    eprintln!("scenario {name}: {error}");
                    return std::process::ExitCode::FAILURE;
                }
            };
            eprintln!(
                "{name}: {} virtual s in {:.2?}",
                report.virtual_s,
                started.elapsed()
            );
            match args.format {
                Format::Json => println!("{}", bounded_json_line(&report)),
                Format::Markdown => println!("{}", bounded_row(&report)),
            }
            continue;
        }
        let report = match gcounter_sim::run(&scenario, args.seed) {
            Ok(report) => report,
            Err(error) => {
                eprintln!("scenario {name}: {error}");
                return std::process::ExitCode::FAILURE;
            }
        };
        eprintln!(
            "{name}: {} virtual s in {:.2?}",
            report.virtual_s,
            started.elapsed()
        );
        match args.format {
            Format::Json => println!("{}", json_line(&report)),
            Format::Markdown => println!("{}", markdown_row(&report)),
        }
    }
    std::process::ExitCode::SUCCESS
}
