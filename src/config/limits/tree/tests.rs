use super::super::super::load::load_str;
use super::*;

const YAML: &str = "\
domain: d
descriptors:
  - key: tenant
    value: acme
    rate_limit: {unit: minute, requests_per_unit: 5, name: acme}
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: tenant
    value: \"ac*\"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 9}
  - key: tenant
    descriptors:
      - key: path
        value: /search
        rate_limit: {unit: minute, requests_per_unit: 1}
";

fn domain() -> DomainLimits {
    let config = load_str("limits.yaml", YAML).expect("test config");
    let mut domains: Vec<_> = config.domains;
    domains.remove(0)
}

#[test]
fn nodes_are_listed_in_declaration_order_with_their_places() {
    let d = domain();
    let top: Vec<(String, String)> = d
        .top_level()
        .iter()
        .map(|n| (n.label(), n.place().to_string()))
        .collect();
    assert_eq!(
        top,
        [
            ("tenant=acme".to_owned(), "limits.yaml:3".to_owned()),
            ("tenant=ac*".to_owned(), "limits.yaml:9".to_owned()),
            ("tenant".to_owned(), "limits.yaml:13".to_owned()),
        ]
    );
    let acme = d.top_level()[0];
    assert_eq!(
        acme.rule().map(|r| r.place.to_string()).as_deref(),
        Some("limits.yaml:3")
    );
    let children: Vec<String> = acme.children().iter().map(NodeView::label).collect();
    assert_eq!(children, ["path"]);
    assert_eq!(d.places(), [Place::new("limits.yaml".into(), Some(1))]);
}

#[test]
fn a_trace_says_how_each_entry_matched() {
    let d = domain();
    let kinds = |entries: &[(&str, &str)]| {
        let trace = d.trace(entries.iter().copied());
        let steps: Vec<(String, MatchKind)> = trace
            .steps
            .iter()
            .map(|s| (s.node.label(), s.how))
            .collect();
        (steps, trace.end)
    };

    let (steps, end) = kinds(&[("tenant", "acme"), ("path", "/x")]);
    assert_eq!(
        steps,
        [
            ("tenant=acme".to_owned(), MatchKind::Exact),
            ("path".to_owned(), MatchKind::AnyValue)
        ]
    );
    assert!(matches!(end, TraceEnd::Rule(rule) if rule.path.as_ref() == "d.tenant_acme.path"));

    let (steps, end) = kinds(&[("tenant", "acorn")]);
    assert_eq!(steps, [("tenant=ac*".to_owned(), MatchKind::Wildcard)]);
    assert!(matches!(end, TraceEnd::Rule(_)));
    assert!(steps.len() == 1 && d.top_level()[1].shared());

    // A value-less node without a rule of its own.
    let (steps, end) = kinds(&[("tenant", "globex")]);
    assert_eq!(steps, [("tenant".to_owned(), MatchKind::AnyValue)]);
    assert!(matches!(end, TraceEnd::NoRuleAtLast));

    // A typo'd key: the level's nodes are the candidates.
    let (steps, end) = kinds(&[("tenant", "globex"), ("pth", "/search")]);
    assert_eq!(steps.len(), 1);
    match end {
        TraceEnd::NoNode { index, candidates } => {
            assert_eq!(index, 1);
            let labels: Vec<String> = candidates.iter().map(NodeView::label).collect();
            assert_eq!(labels, ["path=/search"]);
        }
        other => panic!("{other:?}"),
    }

    // Deeper than the tree.
    let (_, end) = kinds(&[("tenant", "acorn"), ("path", "/")]);
    assert!(matches!(end, TraceEnd::TooDeep { index: 1 }), "{end:?}");
    let (_, end) = kinds(&[]);
    assert!(matches!(end, TraceEnd::Empty));
}

#[test]
fn a_trace_ends_where_find_does() {
    let d = domain();
    let cases: &[&[(&str, &str)]] = &[
        &[("tenant", "acme")],
        &[("tenant", "acme"), ("path", "/a")],
        &[("tenant", "acxyz")],
        &[("tenant", "zed"), ("path", "/search")],
        &[("tenant", "zed"), ("path", "/other")],
        &[("other", "x")],
    ];
    for entries in cases {
        let found = d.find(entries.iter().copied()).map(|r| r.path.clone());
        let traced = match d.trace(entries.iter().copied()).end {
            TraceEnd::Rule(rule) => Some(rule.path.clone()),
            _ => None,
        };
        assert_eq!(found, traced, "{entries:?}");
    }
}
