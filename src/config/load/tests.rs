use super::super::test_files::{mkdir, symlink, temp_dir, write};
use super::*;

fn rendered(result: Result<LimitsConfig, ConfigErrors>) -> Vec<String> {
    match result {
        Ok(_) => panic!("config accepted"),
        Err(e) => e.errors().iter().map(ToString::to_string).collect(),
    }
}

/// The config at `path`, which must load.
fn loaded(path: &Path, options: &LoadOptions) -> LimitsConfig {
    load_path(path, options).unwrap_or_else(|e| panic!("{e}"))
}

/// Loads `yaml` as the file `name`, which must be refused with a first error that starts
/// with `start`; all the errors.
fn refused_with(name: &str, yaml: &str, start: &str) -> Vec<String> {
    let errors = rendered(load_str(name, yaml));
    assert!(
        errors.first().is_some_and(|e| e.starts_with(start)),
        "{errors:?}"
    );
    errors
}

fn domain(name: &str) -> String {
    format!(
        "domain: {name}\ndescriptors:\n  - key: k\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
    )
}

/// Makes the subdirectory `sub` of `dir`, holding `file`, which declares domain `name`.
fn subdir_with_domain(dir: &Path, sub: &str, file: &str, name: &str) {
    let sub = dir.join(sub);
    mkdir(&sub);
    write(&sub, file, &domain(name));
}

/// A temporary directory holding, for each `(file, name)`, a file declaring domain `name`.
fn dir_of_domains(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = temp_dir();
    for (file, name) in files {
        write(dir.path(), file, &domain(name));
    }
    dir
}

#[test]
fn yaml_syntax_error() {
    let errors = refused_with(
        "bad.yaml",
        "domain: d\ndescriptors:\n  - key: a\n   value: [\n",
        "bad.yaml:4: invalid YAML (column 4): ",
    );
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].contains("did not find expected '-' indicator"),
        "{errors:?}"
    );
}

/// Refused files: the file's name, its YAML, the start of the first error, and whether
/// that error must be the only one.
const REFUSED: &[(&str, &str, &str, bool)] = &[
    // An unknown field, at any depth, is named with its place.
    (
        "bad.yaml",
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      burst: 5\n",
        "bad.yaml:7: descriptors[0].rate_limit.burst: unknown field `burst`, expected one of",
        true,
    ),
    (
        "top.yaml",
        "domain: d\nversion: 2\n",
        "top.yaml:2: version: unknown field `version`",
        false,
    ),
    (
        "r.yaml",
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{nam: x}]}\n",
        "r.yaml:4: descriptors[0].rate_limit.replaces[0].nam: unknown field `nam`",
        false,
    ),
    // So is a value of the wrong type.
    (
        "bad.yaml",
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: -5\n",
        "bad.yaml:6: descriptors[0].rate_limit.requests_per_unit: ",
        true,
    ),
    (
        "bad.yaml",
        "domain: d\ndescriptors: nope\n",
        "bad.yaml:2: descriptors: ",
        false,
    ),
    ("bad.yaml", "- domain: d\n", "bad.yaml:1: ", false),
    // And a key given twice.
    (
        "bad.yaml",
        "domain: d\ndomain: e\n",
        "bad.yaml:2: domain: duplicate mapping key",
        false,
    ),
];

#[test]
fn unknown_fields_wrong_types_and_duplicate_keys_name_the_place() {
    for &(name, yaml, start, alone) in REFUSED {
        let errors = refused_with(name, yaml, start);
        if alone {
            assert_eq!(errors.len(), 1, "{errors:?}");
        }
    }
}

#[test]
fn empty_file_and_several_documents() {
    for empty in ["", "# nothing\n", "---\n", "~\n"] {
        let errors = rendered(load_str("empty.yaml", empty));
        assert_eq!(
            errors,
            ["empty.yaml: the file declares nothing; expected `domain` and `descriptors`"],
            "{empty:?}"
        );
    }
    let errors = rendered(load_str("list.yaml", "[]\n"));
    assert_eq!(errors, ["list.yaml:1: expected mapping start"]);
    let errors = rendered(load_str("multi.yaml", "domain: a\n---\ndomain: b\n"));
    assert_eq!(
        errors,
        [
            "multi.yaml:3: several YAML documents with content (`---`) in one file; put each \
                 domain in its own file"
        ]
    );
}

#[test]
fn errors_of_all_sources_are_reported() {
    let errors = rendered(load_sources(&[
        ("a.yaml", "domain: a\ndescriptors:\n  - key: ''\n"),
        ("b.yaml", "domain: [\n"),
        ("c.yaml", domain("c").as_str()),
        ("d.yaml", "domain: ''\n"),
    ]));
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(errors[0].starts_with("a.yaml:3: "), "{errors:?}");
    assert!(errors[1].starts_with("b.yaml:"), "{errors:?}");
    assert!(errors[2].starts_with("d.yaml:1: "), "{errors:?}");
}

#[test]
fn duplicate_domain_names_both_sources() {
    let errors = rendered(load_sources(&[
        ("one.yaml".to_owned(), domain("shared")),
        ("two.yaml".to_owned(), domain("other")),
        (
            "three.yaml".to_owned(),
            format!("# comment\n{}", domain("shared")),
        ),
    ]));
    assert_eq!(
        errors,
        ["three.yaml:2: domain: duplicate domain `shared`: already declared in one.yaml"]
    );
}

#[test]
fn directory_with_two_domains() {
    let dir = dir_of_domains(&[("b.yml", "beta"), ("a.yaml", "alpha")]);
    // Any extension, and subdirectories: as upstream's runtime.
    subdir_with_domain(dir.path(), "team", "gamma.conf", "gamma");
    let config = loaded(dir.path(), &LoadOptions::default());
    let names: Vec<&str> = config.domains().map(|d| &**d.name()).collect();
    assert_eq!(names, ["alpha", "beta", "gamma"]);
    assert_eq!(config.rule_count(), 3);
    // A file that is not a limits file is an error, as upstream.
    write(dir.path(), "notes.txt", "not yaml at all: [");
    assert!(load_path(dir.path(), &LoadOptions::default()).is_err());
}

#[test]
fn directory_duplicate_domain_names_both_files() {
    let dir = temp_dir();
    let first = write(dir.path(), "a.yaml", &domain("same"));
    let second = write(dir.path(), "b.yaml", &domain("same"));
    let errors = rendered(load_path(dir.path(), &LoadOptions::default()));
    assert_eq!(
        errors,
        [format!(
            "{}:1: domain: duplicate domain `same`: already declared in {}",
            second.display(),
            first.display()
        )]
    );
}

#[test]
fn dot_files_load_unless_ignored_and_a_configmap_volume_loads_once() {
    let dir = dir_of_domains(&[("a.yaml", "alpha"), (".hidden.yaml", "hidden")]);
    // A ConfigMap volume: `..<timestamp>/` holds the files, `..data` links to it and
    // each top-level name links through `..data`.
    subdir_with_domain(dir.path(), "..2026_01_01_00_00_00.1", "b.yaml", "beta");
    for (target, name) in [
        ("..2026_01_01_00_00_00.1", "..data"),
        ("..data/b.yaml", "b.yaml"),
    ] {
        symlink(target, &dir.path().join(name));
    }
    let names = |options: &LoadOptions| -> Vec<String> {
        let config = loaded(dir.path(), options);
        config.domains().map(|d| d.name().to_string()).collect()
    };
    assert_eq!(names(&LoadOptions::default()), ["alpha", "beta", "hidden"]);
    let ignoring = LoadOptions {
        ignore_dot_files: true,
        ..LoadOptions::default()
    };
    assert_eq!(names(&ignoring), ["alpha", "beta"]);
}

#[test]
fn trailing_empty_documents_load_and_several_with_content_do_not() {
    for text in [
        format!("{}---\n", domain("d")),
        format!("{}---\n# nothing here\n---\n", domain("d")),
        format!("---\n{}---\n~\n", domain("d")),
    ] {
        assert!(
            load_str("t.yaml", &text).is_ok_and(|c| c.domain("d").is_some()),
            "{text:?}"
        );
    }
    let errors = rendered(load_str(
        "two.yaml",
        &format!("{}---\n{}", domain("a"), domain("b")),
    ));
    assert!(
        errors[0].contains("several YAML documents with content"),
        "{errors:?}"
    );
}

#[test]
fn merged_domains_join_and_a_repeated_descriptor_names_both_files() {
    let dir = temp_dir();
    let first = write(
        dir.path(),
        "a.yaml",
        "domain: m\ndescriptors:\n  - key: x\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    write(
        dir.path(),
        "b.yaml",
        "domain: m\ndescriptors:\n  - key: y\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
    );
    let merging = LoadOptions {
        merge_domains: true,
        ..LoadOptions::default()
    };
    let config = loaded(dir.path(), &merging);
    assert_eq!(config.domains().count(), 1);
    assert_eq!(config.rule_count(), 2);
    let m = config.domain("m");
    assert!(m.and_then(|d| d.find([("x", "1")].into_iter())).is_some());
    assert!(m.and_then(|d| d.find([("y", "1")].into_iter())).is_some());
    // Without the switch: a duplicate domain.
    assert!(load_path(dir.path(), &LoadOptions::default()).is_err());

    let third = write(
        dir.path(),
        "c.yaml",
        "domain: m\ndescriptors:\n  - key: z\n  - key: x\n    rate_limit: {unit: hour, requests_per_unit: 3}\n",
    );
    let errors = rendered(load_path(dir.path(), &merging));
    assert_eq!(
        errors,
        [format!(
            "{}:4: descriptors: duplicate descriptor in merged domain `m`: key `x` without \
                 value is already declared in {}:3",
            third.display(),
            first.display()
        )]
    );
}

#[test]
fn empty_directory_is_an_error() {
    let dir = temp_dir();
    write(dir.path(), ".hidden", "hello");
    let ignoring = LoadOptions {
        ignore_dot_files: true,
        ..LoadOptions::default()
    };
    let errors = rendered(load_path(dir.path(), &ignoring));
    assert_eq!(
        errors,
        [format!(
            "{}: no files in this directory or its subdirectories",
            dir.path().display()
        )]
    );
}

#[test]
fn single_file_of_any_name_and_unreadable_files() {
    let dir = temp_dir();
    let file = write(dir.path(), "limits.conf", &domain("plain"));
    assert!(load_path(&file, &LoadOptions::default()).is_ok_and(|c| c.domain("plain").is_some()));

    let missing = dir.path().join("missing.yaml");
    let errors = rendered(load_path(&missing, &LoadOptions::default()));
    assert_eq!(errors.len(), 1);
    assert!(errors[0].starts_with(&format!("{}: cannot read: ", missing.display())));

    let binary = dir.path().join("binary.yaml");
    if let Err(e) = fs::write(&binary, [0xff, 0xfe, b'\n']) {
        panic!("{e}");
    }
    let errors = rendered(load_path(dir.path(), &LoadOptions::default()));
    assert!(
        errors[0].starts_with(&format!("{}: cannot read: ", binary.display())),
        "{errors:?}"
    );
}

#[test]
fn a_directory_is_read_within_its_byte_and_file_limits() {
    let dir = dir_of_domains(&[("a.yaml", "a"), ("b.yaml", "b")]);
    let one_file = fs::metadata(dir.path().join("a.yaml")).map_or(0, |m| m.len());
    let both = ReadLimits {
        max_bytes: 2 * one_file,
        ..ReadLimits::default()
    };
    assert!(load_path(dir.path(), &both.into()).is_ok());

    // The cap is for the whole load: the second file finds one byte too few left.
    let short = ReadLimits {
        max_bytes: 2 * one_file - 1,
        ..ReadLimits::default()
    };
    let errors = rendered(load_path(dir.path(), &short.into()));
    let b = dir.path().join("b.yaml");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with(&format!("{}: cannot read: larger than", b.display())),
        "{errors:?}"
    );

    let one = ReadLimits {
        max_files: 1,
        ..ReadLimits::default()
    };
    let errors = rendered(load_path(dir.path(), &one.into()));
    assert!(
        errors[0].contains("more than 1 files in this directory and its subdirectories"),
        "{errors:?}"
    );
}

#[test]
fn a_yaml_name_on_a_device_or_fifo_is_refused_and_names_the_file() {
    let dir = dir_of_domains(&[("a.yaml", "a")]);
    let zero = dir.path().join("zero.yaml");
    symlink("/dev/zero", &zero);
    let fifo = dir.path().join("fifo.yml");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(
        made.as_ref().is_ok_and(|s| s.success()),
        "mkfifo failed: {made:?}"
    );
    let errors = rendered(load_path(dir.path(), &LoadOptions::default()));
    assert_eq!(
        errors,
        [
            format!(
                "{}: cannot read: not a regular file (a FIFO); a config file must be a plain file",
                fifo.display()
            ),
            format!(
                "{}: cannot read: not a regular file (a character device); a config file must be a plain file",
                zero.display()
            ),
        ]
    );
}

/// `levels` nested descriptors, the innermost limited.
fn nested(levels: usize) -> String {
    let mut yaml = String::from("domain: deep\ndescriptors:\n");
    for level in 0..levels {
        let pad = "    ".repeat(level);
        yaml.push_str(&format!("{pad}  - key: k{level}\n{pad}    descriptors:\n"));
    }
    let pad = "    ".repeat(levels);
    yaml.push_str(&format!(
        "{pad}  - key: last\n{pad}    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
    ));
    yaml
}

/// A reload runs on a blocking thread (2 MiB of stack): a deeply nested file must be
/// refused by the parser's depth budget, not overflow the stack and abort the process.
#[test]
fn deep_nesting_is_refused_within_a_two_mib_stack() {
    let loaded = std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(|| {
            let shallow = load_str("deep.yaml", &nested(14)).map(|c| c.rule_count());
            let deep = rendered(load_str("deep.yaml", &nested(200)));
            (shallow, deep)
        })
        .map(|thread| thread.join());
    let Ok(Ok((shallow, deep))) = loaded else {
        panic!("the loader thread died (stack overflow?)");
    };
    assert_eq!(shallow, Ok(1));
    assert_eq!(deep.len(), 1, "{deep:?}");
    assert!(deep[0].contains("too large or too complex"), "{deep:?}");
}

#[test]
fn example_config_of_the_repository_loads() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/example.yaml");
    let config = loaded(&path, &LoadOptions::default());
    let example = config.domain("example");
    let find = |entries: &[(&str, &str)]| {
        example
            .and_then(|d| d.find(entries.iter().copied()))
            .cloned()
    };
    let per_ip = find(&[("remote_address", "203.0.113.7")]);
    assert_eq!(per_ip.as_ref().and_then(|r| r.duration_ms()), Some(60_000));
    assert!(find(&[("api_key", "k1"), ("path", "/v1/orders")]).is_some());
    assert!(find(&[("path", "/static/app.js")]).is_some_and(|r| r.is_unlimited()));
    assert!(find(&[("path", "/api/v1/search")]).is_some());
    assert!(find(&[("path", "/api/v2/exports")]).is_some_and(|r| r.shadow_mode));
    assert!(
        find(&[("tenant", "acme")])
            .and_then(|r| r.duration_ms())
            .is_some_and(|ms| ms == 5 * 60_000)
    );
}
