//! The command-line reference, generated from the clap definition: `docs/cli.md`, and the
//! sets of flags and variables the documentation's checks compare against.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use clap::ArgAction;

use super::command;

/// The header of `docs/cli.md`: what it is, how to regenerate it, the exit codes.
const HEADER: &str = "\
# Command-line reference

Every subcommand and flag of `gcounter-rls`, with its variable, default and range. This file
is generated from the binary's own definitions (`gcounter_rls::cli::reference_markdown()`);
do not edit it by hand. After changing a flag, regenerate it with:

```sh
UPDATE_CLI_REFERENCE=1 cargo test -p gcounter-rls --lib cli::tests::reference_is_up_to_date
```

(the same test, without the variable, fails while this file is out of date).

A flag's variable (`RLS_*`) is read when the flag is not given; the flag wins. Sizes take a
plain number of bytes or a unit (`1048576`, `256KiB`, `1MiB`; `KB` and `MB` are powers of
1000). Durations take a unit (`100ms`, `5s`, `1h`). Started with no arguments, the binary
runs `serve` configured from envoyproxy/ratelimit's variables: the descriptions name the
upstream variable each flag is then set from.

## Exit codes

| Code | Meaning |
|------|---------|
| 0 | Done (`serve`: stopped by SIGTERM or SIGINT; `check-config`: the config is valid, and with `--envoy` the pair has no error, warnings aside; `explain`: the explanation is printed). |
| 1 | A failure after the settings were valid: a listener cannot bind, the limits config is refused at start, the database cannot be reached (`migrate`, `cleanup`), a file or the service cannot be read (`explain`). `check-config`: the config has errors, each listed on stderr, or with `--envoy` the pair has errors, listed on stdout with the warnings. |
| 2 | An invalid setting: a flag or variable (ours or upstream's) that is malformed, out of range or contradicts another. One line on stderr starting with `error:` names it. |
";

/// The Markdown reference of the whole command line (`docs/cli.md`).
pub fn reference_markdown() -> String {
    let mut cmd = command();
    cmd.build();
    let mut out = String::from(HEADER);
    let globals: Vec<&clap::Arg> = cmd.get_arguments().filter(|a| a.is_global_set()).collect();
    let _ = write!(
        out,
        "\n## Global options\n\nAccepted before or after the subcommand.\n\n"
    );
    table(&mut out, &globals);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = sub.get_name();
        if name == "help" {
            continue;
        }
        let _ = write!(out, "## `gcounter-rls {name}`\n\n");
        if let Some(about) = sub.get_long_about().or(sub.get_about()) {
            let _ = writeln!(out, "{}\n", sentence(&about.to_string()));
        }
        let args: Vec<&clap::Arg> = sub
            .get_arguments()
            .filter(|a| documented(a) && !a.is_global_set())
            .collect();
        let positionals: Vec<&clap::Arg> =
            args.iter().copied().filter(|a| a.is_positional()).collect();
        if !positionals.is_empty() {
            let _ = write!(out, "### Arguments\n\n");
            table(&mut out, &positionals);
        }
        // Headings in the order of their first flag, as `--help` shows them.
        let mut headings: Vec<Option<&str>> = Vec::new();
        for arg in args.iter().filter(|a| !a.is_positional()) {
            if !headings.contains(&arg.get_help_heading()) {
                headings.push(arg.get_help_heading());
            }
        }
        for heading in headings {
            let group: Vec<&clap::Arg> = args
                .iter()
                .copied()
                .filter(|a| !a.is_positional() && a.get_help_heading() == heading)
                .collect();
            let _ = write!(out, "### {}\n\n", heading.unwrap_or("Options"));
            table(&mut out, &group);
        }
    }
    out
}

/// Every `--flag` of the command line, every subcommand's included (`--help` too).
pub fn all_long_flags() -> BTreeSet<String> {
    every_arg()
        .iter()
        .filter_map(|arg| arg.get_long().map(|long| format!("--{long}")))
        .collect()
}

/// Every variable a flag reads (`env = "RLS_..."`), of every subcommand.
pub fn all_env_variables() -> BTreeSet<String> {
    every_arg()
        .iter()
        .filter_map(|arg| arg.get_env().map(|env| env.to_string_lossy().into_owned()))
        .collect()
}

/// The arguments of the command and of every subcommand, after clap built them.
fn every_arg() -> Vec<clap::Arg> {
    let mut cmd = command();
    cmd.build();
    let mut args: Vec<clap::Arg> = cmd.get_arguments().cloned().collect();
    for sub in cmd.get_subcommands() {
        args.extend(sub.get_arguments().cloned());
    }
    args
}

/// Not `--help` and `--version`: every command has them.
fn documented(arg: &clap::Arg) -> bool {
    !matches!(
        arg.get_action(),
        ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version
    )
}

/// One table row per argument: flag, variable, default, description.
fn table(out: &mut String, args: &[&clap::Arg]) {
    out.push_str("| Flag | Variable | Default | Description |\n");
    out.push_str("|------|----------|---------|-------------|\n");
    for arg in args {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            flag(arg),
            arg.get_env()
                .map(|env| format!("`{}`", env.to_string_lossy()))
                .unwrap_or_default(),
            default(arg),
            cell(&if arg.is_hide_set() {
                format!("*Expert* (`serve --help-all`). {}", description(arg))
            } else {
                description(arg)
            }),
        );
    }
    out.push('\n');
}

/// `` `--flag <VALUE>` ``, or `` `<PATH>` `` for a positional argument.
fn flag(arg: &clap::Arg) -> String {
    let value = arg
        .get_value_names()
        .and_then(|names| names.first())
        .map(ToString::to_string)
        .unwrap_or_else(|| arg.get_id().as_str().to_ascii_uppercase());
    let takes_value = matches!(arg.get_action(), ArgAction::Set | ArgAction::Append);
    match arg.get_long() {
        None => format!("`<{value}>`"),
        Some(long) if takes_value => format!("`--{long} <{value}>`"),
        Some(long) => format!("`--{long}`"),
    }
}

/// The default as `--help` shows it; nothing for a switch (off unless given).
fn default(arg: &clap::Arg) -> String {
    if !matches!(arg.get_action(), ArgAction::Set | ArgAction::Append) {
        return String::new();
    }
    let values: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    match values.as_slice() {
        [] => String::new(),
        [one] if one.is_empty() => "(empty)".to_owned(),
        _ => format!("`{}`", values.join(",")),
    }
}

/// The long help (else the short one), its paragraphs joined, with the accepted values of
/// an enumeration.
fn description(arg: &clap::Arg) -> String {
    let help = arg
        .get_long_help()
        .or(arg.get_help())
        .map(ToString::to_string)
        .unwrap_or_default();
    let mut text = help
        .split("\n\n")
        .map(|paragraph| sentence(&paragraph.replace('\n', " ")))
        .collect::<Vec<_>>()
        .join(" ");
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| match v.get_help() {
            Some(help) => format!("`{}` ({help})", v.get_name()),
            None => format!("`{}`", v.get_name()),
        })
        .collect();
    if !values.is_empty() && matches!(arg.get_action(), ArgAction::Set | ArgAction::Append) {
        let _ = write!(text, " Values: {}.", values.join(", "));
    }
    text
}

/// Ends `text` with a full stop unless it ends with punctuation already.
fn sentence(text: &str) -> String {
    let text = text.trim();
    if text.is_empty() || text.ends_with(['.', '!', '?', ':']) {
        text.to_owned()
    } else {
        format!("{text}.")
    }
}

/// Text safe inside a Markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}
