//! One precedence rule for every switch upstream also reads: our flag, else our `RLS_*`
//! variable, else upstream's variable, else the default; "set" means present.

use super::*;
use crate::environment::Origin;
use crate::serve::SWITCHES;

/// The switch `id` as the settings apply it.
fn value_of(settings: &ServeSettings, id: &str) -> bool {
    match id {
        "shadow_mode" => settings.rls.shadow_mode,
        "quota_mode" => settings.rls.quota_mode,
        "all_or_nothing" => settings.rls.all_or_nothing,
        "response_dynamic_metadata" => settings.rls.response_dynamic_metadata,
        "ignore_dot_files" => settings.limits.load.ignore_dot_files,
        "merge_domain_config" => settings.limits.load.merge_domains,
        "healthy_with_at_least_one_config_loaded" => {
            settings.limits.healthy_with_at_least_one_config_loaded
        }
        other => panic!("no switch {other}"),
    }
}

/// Our variable of the flag `id`, as clap reads it.
fn ours(id: &str) -> String {
    Cli::command()
        .get_arguments()
        .find(|a| a.get_id() == id)
        .and_then(|a| a.get_env())
        .map(|v| v.to_string_lossy().into_owned())
        .unwrap_or_else(|| panic!("{id} has no RLS_* variable"))
}

fn with_env(
    (args, origins): (ServeArgs, Origins),
    env: &[(&str, &str)],
) -> anyhow::Result<ServeSettings> {
    ServeSettings::from_args(args, origins, &Environment::from_pairs(env.iter().copied()))
}

#[test]
fn upstreams_variable_applies_when_ours_is_unset() {
    for switch in SWITCHES {
        let got = with_env(args(&[]), &[(switch.upstream, "true")]).expect(switch.upstream);
        assert!(value_of(&got, switch.id), "{} alone", switch.upstream);
        let source = format!("{}=true from upstream's {}", switch.flag, switch.upstream);
        assert!(got.report.settings.contains(&source), "{:?}", got.report);
        assert!(got.report.warnings.is_empty(), "{:?}", got.report);

        let off = with_env(args(&[]), &[(switch.upstream, "false")]).expect(switch.upstream);
        assert!(!value_of(&off, switch.id), "{}=false", switch.upstream);
        let unset = with_env(args(&[]), &[]).expect("no variable");
        assert!(!value_of(&unset, switch.id), "default");
        assert!(
            !unset
                .report
                .settings
                .iter()
                .any(|l| l.contains(switch.flag)),
            "{:?}",
            unset.report
        );
    }
}

#[test]
fn our_variable_set_to_false_beats_upstreams_true() {
    for switch in SWITCHES {
        // clap found RLS_…=false: the flag's value is false, its origin our variable.
        let (parsed, mut origins) = args(&[]);
        let rls = ours(switch.id);
        origins.set_switch(switch.id, switch.flag, false, Origin::Ours(rls.clone()));
        let got = with_env((parsed, origins), &[(switch.upstream, "true")]).expect(switch.id);
        assert!(
            !value_of(&got, switch.id),
            "{rls}=false {}=true",
            switch.upstream
        );
        assert!(
            got.report
                .warnings
                .iter()
                .any(|w| w.contains(&rls) && w.contains(&format!("{}=true", switch.upstream))),
            "{:?}",
            got.report
        );
    }
}

#[test]
fn the_flag_beats_both_variables() {
    for switch in SWITCHES {
        let got = with_env(args(&[switch.flag]), &[(switch.upstream, "false")]).expect(switch.id);
        assert!(
            value_of(&got, switch.id),
            "{} {}=false",
            switch.flag,
            switch.upstream
        );
        let line = format!("{}=true from flag", switch.flag);
        assert!(got.report.settings.contains(&line), "{:?}", got.report);
        assert_eq!(got.report.warnings.len(), 1, "{:?}", got.report);
    }
}

#[test]
fn an_unreadable_upstream_value_is_refused_even_when_ours_is_set() {
    for switch in SWITCHES {
        let error =
            with_env(args(&[switch.flag]), &[(switch.upstream, "yes")]).expect_err(switch.upstream);
        assert!(error.to_string().contains(switch.upstream), "{error}");
    }
}

#[test]
fn grpc_tls_ours_win_over_upstreams_with_a_warning() {
    let upstream = [
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", "/theirs/cert.pem"),
        ("GRPC_SERVER_TLS_KEY", "/theirs/key.pem"),
    ];
    let ours = [
        "--grpc-tls-cert",
        "/ours/cert.pem",
        "--grpc-tls-key",
        "/ours/key.pem",
    ];
    let got = with_env(args(&ours), &upstream).expect("valid");
    let tls = got.tls.as_ref().map(|t| t.files.cert.clone());
    assert_eq!(tls, Some("/ours/cert.pem".into()));
    assert!(
        got.report
            .warnings
            .iter()
            .any(|w| w.contains("GRPC_SERVER_USE_TLS")),
        "{:?}",
        got.report
    );
    let theirs = with_env(args(&[]), &upstream).expect("valid");
    let tls = theirs.tls.as_ref().map(|t| t.files.cert.clone());
    assert_eq!(tls, Some("/theirs/cert.pem".into()));
}

#[test]
fn the_start_report_redacts_secrets_and_names_sources() {
    let got = with_env(
        args(&[
            "--redis-url",
            "redis://app:s3cret@127.0.0.1:6379",
            "--near-limit-ratio",
            "0.5",
        ]),
        &[],
    )
    .expect("valid");
    let all = got.report.settings.join("\n");
    assert!(!all.contains("s3cret"), "{all}");
    assert!(
        all.contains("--redis-url=redis://***@127.0.0.1:6379 from flag"),
        "{all}"
    );
    assert!(all.contains("--near-limit-ratio=0.5 from flag"), "{all}");
    assert!(all.contains("--config=x.yaml from flag"), "{all}");
    assert!(
        got.report.switches.contains("shadow_mode=false"),
        "{:?}",
        got.report
    );
}
