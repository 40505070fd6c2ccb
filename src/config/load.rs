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

use super::compile::{compile_file, line_of};
use super::error::{ConfigError, ConfigErrors};
use super::limits::{DomainLimits, LimitsConfig};
use super::locate::path_at;
use super::raw::RawFile;
use super::read::{ReadLimits, read_text, yaml_options};
use super::shape;
use super::walk::{self, WalkOptions};

/// How a config path is loaded: the bounds, and upstream's switches for directories and
/// domains.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadOptions {
    pub limits: ReadLimits,
    /// Skip dot-files in a directory (upstream's `RUNTIME_IGNOREDOTFILES`).
    pub ignore_dot_files: bool,
    /// The same domain in several files merges (upstream's `MERGE_DOMAIN_CONFIG`); its
    /// top-level descriptors must still be distinct.
    pub merge_domains: bool,
    /// `--clock-skew` where `never_above` decisions spend rights (Redis or the global
    /// counters): a `never_above` limit whose window is not longer than twice it is refused.
    /// Zero (the embedded default, or no skew): no such check.
    pub never_above_clock_skew: std::time::Duration,
}

impl From<ReadLimits> for LoadOptions {
    fn from(limits: ReadLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }
}

/// Loads a file, or every file of a directory and its subdirectories as upstream's runtime
/// does (see `walk`). Each file declares one domain; a domain may appear only once unless
/// `merge_domains`. Only regular files are read, and at most `limits` of them.
pub fn load_path(path: &Path, options: &LoadOptions) -> Result<LimitsConfig, ConfigErrors> {
    let shown = path.display().to_string();
    let metadata = fs::metadata(path).map_err(|e| {
        single(ConfigError::new(
            &shown,
            None,
            "",
            format!("cannot read: {e}"),
        ))
    })?;
    let mut loader = Loader::new(options);
    if !metadata.is_dir() {
        loader.read(path);
        return loader.finish();
    }
    let walk = WalkOptions {
        ignore_dot_files: options.ignore_dot_files,
        max_entries: options.limits.max_files,
    };
    let files = walk::files(path, walk).map_err(|(at, e)| {
        single(ConfigError::new(
            at.display().to_string(),
            None,
            "",
            e.to_string(),
        ))
    })?;
    if files.is_empty() {
        return Err(single(ConfigError::new(
            &shown,
            None,
            "",
            "no files in this directory or its subdirectories",
        )));
    }
    for file in &files {
        loader.read(file);
    }
    loader.finish()
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
    let mut loader = Loader::new(&LoadOptions::default());
    for (name, text) in sources {
        loader.add(name.as_ref(), text.as_ref());
    }
    loader.finish()
}

/// Loads sources already in the model (a control plane's resources, each named for errors)
/// with the same validation, compilation and domain rules as files.
pub(crate) fn load_raw<'a>(
    sources: impl IntoIterator<Item = (&'a str, &'a RawFile)>,
    options: &LoadOptions,
) -> Result<LimitsConfig, ConfigErrors> {
    let mut loader = Loader::new(options);
    for (name, raw) in sources {
        loader.add_raw(name, raw);
    }
    loader.finish()
}

fn single(error: ConfigError) -> ConfigErrors {
    ConfigErrors::new(vec![error])
}

struct Loader {
    errors: Vec<ConfigError>,
    domains: Vec<DomainLimits>,
    /// Domain name → where it was declared first, and its index in `domains`.
    declared: HashMap<Arc<str>, Declared>,
    /// Bytes this load may still read (the cap is for all files together).
    bytes_left: u64,
    merge_domains: bool,
    never_above_clock_skew: std::time::Duration,
}

/// A domain as loaded so far.
struct Declared {
    file: String,
    index: usize,
    /// Its top-level descriptors (`key`, `value`) → the file and line declaring them, to
    /// name both files when a merged file declares one again.
    top_level: HashMap<(String, Option<String>), (String, Option<usize>)>,
}

impl Loader {
    fn new(options: &LoadOptions) -> Self {
        Self {
            errors: Vec::new(),
            domains: Vec::new(),
            declared: HashMap::new(),
            bytes_left: options.limits.max_bytes,
            merge_domains: options.merge_domains,
            never_above_clock_skew: options.never_above_clock_skew,
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
        let Some(raw) = self.parse(file, text) else {
            return;
        };
        self.add_raw(file, &raw);
    }

    /// Validates, compiles and adds one parsed source, whatever it was read from.
    fn add_raw(&mut self, file: &str, raw: &RawFile) {
        let top_level = top_level_descriptors(file, raw);
        let Some(compiled) = compile_file(file, raw, &mut self.errors) else {
            return;
        };
        match self.declared.entry(compiled.limits.name().clone()) {
            Entry::Occupied(mut first) if self.merge_domains => {
                let declared = first.get_mut();
                let mut clash = false;
                for (descriptor, (_, line)) in &top_level {
                    let Some((first_file, first_line)) = declared.top_level.get(descriptor) else {
                        continue;
                    };
                    let what = match &descriptor.1 {
                        Some(value) => format!("key `{}` with value `{value}`", descriptor.0),
                        None => format!("key `{}` without value", descriptor.0),
                    };
                    let at = match first_line {
                        Some(l) => format!("{first_file}:{l}"),
                        None => first_file.clone(),
                    };
                    let problem = format!(
                        "duplicate descriptor in merged domain `{}`: {what} is already declared \
                         in {at}",
                        compiled.limits.name()
                    );
                    self.errors
                        .push(ConfigError::new(file, *line, "descriptors", problem));
                    clash = true;
                }
                if clash {
                    return;
                }
                declared.top_level.extend(top_level);
                if let Some(domain) = self.domains.get_mut(declared.index) {
                    domain.merge(compiled.limits);
                }
            }
            Entry::Occupied(first) => {
                let problem = format!(
                    "duplicate domain `{}`: already declared in {}",
                    first.key(),
                    first.get().file
                );
                self.errors
                    .push(ConfigError::new(file, compiled.line, "domain", problem));
            }
            Entry::Vacant(slot) => {
                slot.insert(Declared {
                    file: file.to_owned(),
                    index: self.domains.len(),
                    top_level,
                });
                self.domains.push(compiled.limits);
            }
        }
    }

    /// The file's one document. Extra documents that are empty or comments only (a lone
    /// trailing `---` of a templated file) are ignored; several documents with content
    /// are an error (upstream silently reads the first one only).
    fn parse(&mut self, file: &str, text: &str) -> Option<RawFile> {
        // Every misplaced field and value of the wrong type, before the model's reader
        // (which stops at the first).
        if let Some(problems) = shape::problems(file, text)
            && !problems.is_empty()
        {
            self.errors.extend(problems);
            return None;
        }
        // A null document (`---` alone) reads as an empty file.
        let error =
            match serde_saphyr::from_str_with_options::<Option<RawFile>>(text, yaml_options()) {
                Ok(raw) => return Some(raw.unwrap_or_default()),
                Err(e) => e,
            };
        if !matches!(error.without_snippet(), YamlError::MultipleDocuments { .. }) {
            self.errors.push(yaml_error(file, text, &error));
            return None;
        }
        // Empty and null documents are skipped by the multi-document reader.
        match serde_saphyr::from_multiple_with_options::<RawFile>(text, yaml_options()) {
            Ok(mut documents) if documents.len() <= 1 => Some(documents.pop().unwrap_or_default()),
            Ok(_) => {
                self.errors.push(yaml_error(file, text, &error));
                None
            }
            Err(e) => {
                self.errors.push(yaml_error(file, text, &e));
                None
            }
        }
    }

    fn finish(mut self) -> Result<LimitsConfig, ConfigErrors> {
        self.errors
            .extend(super::guarantee::windows_within_the_clock_margin(
                &self.domains,
                self.never_above_clock_skew,
            ));
        if self.errors.is_empty() {
            Ok(LimitsConfig::new(self.domains))
        } else {
            Err(ConfigErrors::new(self.errors))
        }
    }
}

/// The top-level `(key, value)` pairs of a file (an empty value is no value, as the
/// compiler reads it), each with the file and line declaring it.
fn top_level_descriptors(
    file: &str,
    raw: &RawFile,
) -> HashMap<(String, Option<String>), (String, Option<usize>)> {
    raw.descriptors
        .iter()
        .flatten()
        .filter_map(|d| {
            let key = d.value.key.as_ref()?.value.clone();
            let value = d
                .value
                .value
                .as_ref()
                .map(|v| v.value.clone())
                .filter(|v| !v.is_empty());
            Some(((key, value), (file.to_owned(), line_of(d))))
        })
        .collect()
}

/// A serde-saphyr error as a `ConfigError`, with the document path of its
/// position when the text is at least valid YAML.
fn yaml_error(file: &str, text: &str, error: &YamlError) -> ConfigError {
    let location = error.location().filter(|l| l.line() > 0);
    let line = location.and_then(|l| usize::try_from(l.line()).ok());
    if let YamlError::MultipleDocuments { .. } = error.without_snippet() {
        let problem = "several YAML documents with content (`---`) in one file; put each domain \
                       in its own file";
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
mod tests;
