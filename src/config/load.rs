//! Reading configuration files and directories.

use std::borrow::Cow;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fs;
use std::path::Path;
use std::sync::Arc;

use serde_saphyr::{
    Error as YamlError, Localizer, Location, MessageFormatter, SnippetMode, UserMessageFormatter,
};

use super::compile::compile_file;
use super::error::{ConfigError, ConfigErrors};
use super::limits::{DomainLimits, LimitsConfig};
use super::locate::path_at;
use super::raw::RawFile;
use super::read::{ReadLimits, read_text, yaml_options};

/// Loads a file, or every `*.yaml` / `*.yml` file directly inside a directory
/// (sorted by name; hidden files such as Kubernetes' `..data` are skipped).
/// Each file declares one domain; a domain may appear only once. Only regular files are read,
/// and at most `limits` of them (see [`ReadLimits`]).
pub fn load_path(path: &Path, limits: &ReadLimits) -> Result<LimitsConfig, ConfigErrors> {
    let shown = path.display().to_string();
    let metadata = fs::metadata(path).map_err(|e| {
        single(ConfigError::new(
            &shown,
            None,
            "",
            format!("cannot read: {e}"),
        ))
    })?;
    if !metadata.is_dir() {
        let mut loader = Loader::new(limits);
        loader.read(path);
        return loader.finish();
    }

    let entries = fs::read_dir(path).map_err(|e| {
        single(ConfigError::new(
            &shown,
            None,
            "",
            format!("cannot list directory: {e}"),
        ))
    })?;
    let mut loader = Loader::new(limits);
    let mut files = Vec::new();
    for entry in entries {
        match entry {
            Ok(entry) => {
                if !is_config_file_name(&entry.file_name().to_string_lossy()) {
                    continue;
                }
                if files.len() == limits.max_files {
                    return Err(single(ConfigError::new(
                        &shown,
                        None,
                        "",
                        format!(
                            "more than {} *.yaml or *.yml files in this directory",
                            limits.max_files
                        ),
                    )));
                }
                files.push(entry.path());
            }
            Err(e) => loader.errors.push(ConfigError::new(
                &shown,
                None,
                "",
                format!("cannot list directory: {e}"),
            )),
        }
    }
    files.sort();
    // Follows symlinks (ConfigMap mounts link each file into `..data`);
    // skips directories that happen to be named `x.yaml`.
    files.retain(|file| !fs::metadata(file).is_ok_and(|m| m.is_dir()));
    if files.is_empty() && loader.errors.is_empty() {
        return Err(single(ConfigError::new(
            &shown,
            None,
            "",
            "no *.yaml or *.yml files in this directory",
        )));
    }
    for file in &files {
        loader.read(file);
    }
    loader.finish()
}

fn is_config_file_name(name: &str) -> bool {
    !name.starts_with('.') && (name.ends_with(".yaml") || name.ends_with(".yml"))
}

/// Loads one YAML text; `file_name` only names it in errors.
pub fn load_str(file_name: &str, yaml: &str) -> Result<LimitsConfig, ConfigErrors> {
    load_sources(&[(file_name, yaml)])
}

/// Loads several `(file name, YAML text)` sources into one configuration,
/// reporting the problems of all of them.
pub fn load_sources<N, T>(sources: &[(N, T)]) -> Result<LimitsConfig, ConfigErrors>
where
    N: AsRef<str>,
    T: AsRef<str>,
{
    let mut loader = Loader::new(&ReadLimits::default());
    for (name, text) in sources {
        loader.add(name.as_ref(), text.as_ref());
    }
    loader.finish()
}

fn single(error: ConfigError) -> ConfigErrors {
    ConfigErrors::new(vec![error])
}

struct Loader {
    errors: Vec<ConfigError>,
    domains: Vec<DomainLimits>,
    /// Domain name → the file that declared it first.
    declared_in: HashMap<Arc<str>, String>,
    /// Bytes this load may still read (the cap is for all files together).
    bytes_left: u64,
}

impl Loader {
    fn new(limits: &ReadLimits) -> Self {
        Self {
            errors: Vec::new(),
            domains: Vec::new(),
            declared_in: HashMap::new(),
            bytes_left: limits.max_bytes,
        }
    }

    fn read(&mut self, path: &Path) {
        let shown = path.display().to_string();
        match read_text(path, self.bytes_left) {
            Ok(text) => {
                self.bytes_left = self.bytes_left.saturating_sub(text.len() as u64);
                self.add(&shown, &text);
            }
            Err(e) => self
                .errors
                .push(ConfigError::new(shown, None, "", e.to_string())),
        }
    }

    fn add(&mut self, file: &str, text: &str) {
        // A null document (`---` alone) reads as an empty file.
        let raw: RawFile =
            match serde_saphyr::from_str_with_options::<Option<RawFile>>(text, yaml_options()) {
                Ok(raw) => raw.unwrap_or_default(),
                Err(e) => {
                    self.errors.push(yaml_error(file, text, &e));
                    return;
                }
            };
        let Some(compiled) = compile_file(file, &raw, &mut self.errors) else {
            return;
        };
        match self.declared_in.entry(compiled.limits.name().clone()) {
            Entry::Occupied(first) => {
                let problem = format!(
                    "duplicate domain `{}`: already declared in {}",
                    first.key(),
                    first.get()
                );
                self.errors
                    .push(ConfigError::new(file, compiled.line, "domain", problem));
            }
            Entry::Vacant(slot) => {
                slot.insert(file.to_owned());
                self.domains.push(compiled.limits);
            }
        }
    }

    fn finish(self) -> Result<LimitsConfig, ConfigErrors> {
        if self.errors.is_empty() {
            Ok(LimitsConfig::new(self.domains))
        } else {
            Err(ConfigErrors::new(self.errors))
        }
    }
}

/// A serde-saphyr error as a `ConfigError`, with the document path of its
/// position when the text is at least valid YAML.
fn yaml_error(file: &str, text: &str, error: &YamlError) -> ConfigError {
    let location = error.location().filter(|l| l.line() > 0);
    let line = location.and_then(|l| usize::try_from(l.line()).ok());
    if let YamlError::MultipleDocuments { .. } = error.without_snippet() {
        let problem = "several YAML documents (`---`) in one file; put each domain in its own file";
        return ConfigError::new(file, line, "", problem);
    }
    let problem = error.render_with_options(serde_saphyr::render_options! {
        formatter: &MessageOnly,
        snippets: SnippetMode::Off,
    });
    match location.and_then(|l| path_at(text, l.line(), l.column())) {
        Some(place) => ConfigError::new(file, line, place, problem),
        None => {
            let column = location.map(|l| format!(" (column {})", l.column()));
            ConfigError::new(
                file,
                line,
                "",
                format!("invalid YAML{}: {problem}", column.unwrap_or_default()),
            )
        }
    }
}

/// serde-saphyr's user-facing messages without the `at line L, column C`
/// suffix: `ConfigError` carries the line itself.
struct MessageOnly;

impl MessageFormatter for MessageOnly {
    fn localizer(&self) -> &dyn Localizer {
        self
    }

    fn format_message<'a>(&self, err: &'a YamlError) -> Cow<'a, str> {
        UserMessageFormatter.format_message(err)
    }
}

impl Localizer for MessageOnly {
    fn attach_location<'a>(&self, base: Cow<'a, str>, _: Location) -> Cow<'a, str> {
        base
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn rendered(result: Result<LimitsConfig, ConfigErrors>) -> Vec<String> {
        match result {
            Ok(_) => panic!("config accepted"),
            Err(e) => e.errors().iter().map(ToString::to_string).collect(),
        }
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        if let Err(e) = fs::write(&path, text) {
            panic!("writing {}: {e}", path.display());
        }
        path
    }

    fn temp_dir() -> tempfile::TempDir {
        match tempfile::tempdir() {
            Ok(dir) => dir,
            Err(e) => panic!("tempdir: {e}"),
        }
    }

    fn domain(name: &str) -> String {
        format!(
            "domain: {name}\ndescriptors:\n  - key: k\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
        )
    }

    #[test]
    fn yaml_syntax_error() {
        let errors = rendered(load_str(
            "bad.yaml",
            "domain: d\ndescriptors:\n  - key: a\n   value: [\n",
        ));
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with("bad.yaml:4: invalid YAML (column 4): "),
            "{errors:?}"
        );
        assert!(
            errors[0].contains("did not find expected '-' indicator"),
            "{errors:?}"
        );
    }

    #[test]
    fn unknown_field_names_the_place() {
        let errors = rendered(load_str(
            "bad.yaml",
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      burst: 5\n",
        ));
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with(
                "bad.yaml:7: descriptors[0].rate_limit.burst: unknown field `burst`, expected one of"
            ),
            "{errors:?}"
        );
        let errors = rendered(load_str("top.yaml", "domain: d\nversion: 2\n"));
        assert!(
            errors[0].starts_with("top.yaml:2: version: unknown field `version`"),
            "{errors:?}"
        );
        let errors = rendered(load_str(
            "r.yaml",
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{nam: x}]}\n",
        ));
        assert!(
            errors[0].starts_with(
                "r.yaml:4: descriptors[0].rate_limit.replaces[0].nam: unknown field `nam`"
            ),
            "{errors:?}"
        );
    }

    #[test]
    fn wrong_types_name_the_place() {
        let errors = rendered(load_str(
            "bad.yaml",
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: -5\n",
        ));
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with("bad.yaml:6: descriptors[0].rate_limit.requests_per_unit: "),
            "{errors:?}"
        );
        let errors = rendered(load_str("bad.yaml", "domain: d\ndescriptors: nope\n"));
        assert!(
            errors[0].starts_with("bad.yaml:2: descriptors: "),
            "{errors:?}"
        );
        let errors = rendered(load_str("bad.yaml", "- domain: d\n"));
        assert!(errors[0].starts_with("bad.yaml:1: "), "{errors:?}");
    }

    #[test]
    fn duplicate_yaml_key() {
        let errors = rendered(load_str("bad.yaml", "domain: d\ndomain: e\n"));
        assert!(
            errors[0].starts_with("bad.yaml:2: domain: duplicate mapping key"),
            "{errors:?}"
        );
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
                "multi.yaml:3: several YAML documents (`---`) in one file; put each domain in its own file"
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
        let dir = temp_dir();
        write(dir.path(), "b.yml", &domain("beta"));
        write(dir.path(), "a.yaml", &domain("alpha"));
        write(dir.path(), "notes.txt", "not yaml at all: [");
        let config = match load_path(dir.path(), &ReadLimits::default()) {
            Ok(config) => config,
            Err(e) => panic!("{e}"),
        };
        let names: Vec<&str> = config.domains().map(|d| &**d.name()).collect();
        assert_eq!(names, ["alpha", "beta"]);
        assert_eq!(config.rule_count(), 2);
    }

    #[test]
    fn directory_duplicate_domain_names_both_files() {
        let dir = temp_dir();
        let first = write(dir.path(), "a.yaml", &domain("same"));
        let second = write(dir.path(), "b.yaml", &domain("same"));
        let errors = rendered(load_path(dir.path(), &ReadLimits::default()));
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
    fn directory_ignores_hidden_files_and_subdirectories() {
        let dir = temp_dir();
        write(dir.path(), "a.yaml", &domain("alpha"));
        // A ConfigMap mount: `..data` and hidden files hold the same domain.
        write(dir.path(), ".hidden.yaml", &domain("alpha"));
        let data = dir.path().join("..data");
        let nested = dir.path().join("nested.yaml");
        for sub in [&data, &nested] {
            if let Err(e) = fs::create_dir(sub) {
                panic!("mkdir: {e}");
            }
        }
        write(&data, "a.yaml", &domain("alpha"));
        write(&nested, "x.yaml", &domain("alpha"));
        let config = match load_path(dir.path(), &ReadLimits::default()) {
            Ok(config) => config,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(config.domains().count(), 1);
    }

    #[test]
    fn empty_directory_is_an_error() {
        let dir = temp_dir();
        write(dir.path(), "readme.md", "hello");
        let errors = rendered(load_path(dir.path(), &ReadLimits::default()));
        assert_eq!(
            errors,
            [format!(
                "{}: no *.yaml or *.yml files in this directory",
                dir.path().display()
            )]
        );
    }

    #[test]
    fn single_file_of_any_name_and_unreadable_files() {
        let dir = temp_dir();
        let file = write(dir.path(), "limits.conf", &domain("plain"));
        assert!(
            load_path(&file, &ReadLimits::default()).is_ok_and(|c| c.domain("plain").is_some())
        );

        let missing = dir.path().join("missing.yaml");
        let errors = rendered(load_path(&missing, &ReadLimits::default()));
        assert_eq!(errors.len(), 1);
        assert!(errors[0].starts_with(&format!("{}: cannot read: ", missing.display())));

        let binary = dir.path().join("binary.yaml");
        if let Err(e) = fs::write(&binary, [0xff, 0xfe, b'\n']) {
            panic!("{e}");
        }
        let errors = rendered(load_path(dir.path(), &ReadLimits::default()));
        assert!(
            errors[0].starts_with(&format!("{}: cannot read: ", binary.display())),
            "{errors:?}"
        );
    }

    #[test]
    fn a_directory_is_read_within_its_byte_and_file_limits() {
        let dir = temp_dir();
        write(dir.path(), "a.yaml", &domain("a"));
        write(dir.path(), "b.yaml", &domain("b"));
        let one_file = fs::metadata(dir.path().join("a.yaml")).map_or(0, |m| m.len());
        let both = ReadLimits {
            max_bytes: 2 * one_file,
            ..ReadLimits::default()
        };
        assert!(load_path(dir.path(), &both).is_ok());

        // The cap is for the whole load: the second file finds one byte too few left.
        let short = ReadLimits {
            max_bytes: 2 * one_file - 1,
            ..ReadLimits::default()
        };
        let errors = rendered(load_path(dir.path(), &short));
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
        let errors = rendered(load_path(dir.path(), &one));
        assert!(
            errors[0].contains("more than 1 *.yaml or *.yml files"),
            "{errors:?}"
        );
    }

    #[test]
    fn a_yaml_name_on_a_device_or_fifo_is_refused_and_names_the_file() {
        let dir = temp_dir();
        write(dir.path(), "a.yaml", &domain("a"));
        let zero = dir.path().join("zero.yaml");
        if let Err(e) = std::os::unix::fs::symlink("/dev/zero", &zero) {
            panic!("{e}");
        }
        let fifo = dir.path().join("fifo.yml");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(
            made.as_ref().is_ok_and(|s| s.success()),
            "mkfifo failed: {made:?}"
        );
        let errors = rendered(load_path(dir.path(), &ReadLimits::default()));
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
        let config = match load_path(&path, &ReadLimits::default()) {
            Ok(config) => config,
            Err(e) => panic!("{e}"),
        };
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
}
