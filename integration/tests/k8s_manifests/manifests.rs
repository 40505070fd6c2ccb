//! The YAML documents under `deploy/kubernetes/`, parsed into JSON values.

use std::path::{Path, PathBuf};

use serde_json::Value;

use gcounter_rls_integration::repo_path;

/// Where the manifests live, relative to the repository root.
pub const K8S_DIR: &str = "deploy/kubernetes";

/// One document of a manifest file.
#[derive(Debug, Clone)]
pub struct Doc {
    /// Relative to the repository root, as the validator prints it.
    pub file: String,
    pub value: Value,
}

impl Doc {
    pub fn api_version(&self) -> &str {
        str_at(&self.value, "apiVersion").unwrap_or("")
    }

    pub fn kind(&self) -> &str {
        str_at(&self.value, "kind").unwrap_or("")
    }

    pub fn name(&self) -> &str {
        str_at(&self.value, "metadata.name").unwrap_or("")
    }

    pub fn namespace(&self) -> &str {
        str_at(&self.value, "metadata.namespace").unwrap_or("")
    }

    /// Istio's custom resources (EnvoyFilter, Gateway, VirtualService, ...) are not in
    /// the Kubernetes schemas; they are checked separately.
    pub fn is_istio(&self) -> bool {
        self.api_version()
            .split_once('/')
            .is_some_and(|(group, _)| group == "istio.io" || group.ends_with(".istio.io"))
    }

    /// `Kind namespace/name (file)`, for messages.
    pub fn describe(&self) -> String {
        format!(
            "{} {}/{} ({})",
            self.kind(),
            self.namespace(),
            self.name(),
            self.file
        )
    }
}

/// Every `*.yaml` file under [`K8S_DIR`], recursively, sorted; relative paths.
pub fn manifest_files() -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let entries =
            std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read dir {}: {e}", dir.display()));
        for entry in entries {
            let path = entry
                .unwrap_or_else(|e| panic!("read dir {}: {e}", dir.display()))
                .path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                out.push(path);
            }
        }
    }
    let root = repo_path("");
    let mut files = Vec::new();
    walk(&repo_path(K8S_DIR), &mut files);
    let mut files: Vec<String> = files
        .iter()
        .map(|p| {
            p.strip_prefix(&root)
                .expect("manifest under the repository root")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no *.yaml files under {K8S_DIR}");
    files
}

/// All documents of all manifest files (empty documents skipped).
pub fn manifests() -> Vec<Doc> {
    manifest_files()
        .into_iter()
        .flat_map(|file| {
            let text = std::fs::read_to_string(repo_path(&file))
                .unwrap_or_else(|e| panic!("read {file}: {e}"));
            parse_documents(&text)
                .unwrap_or_else(|e| panic!("{file}: {e}"))
                .into_iter()
                .map(move |value| Doc {
                    file: file.clone(),
                    value,
                })
        })
        .collect()
}

/// The documents of a multi-document YAML text, as JSON values.
pub fn parse_documents(text: &str) -> Result<Vec<Value>, String> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| e.to_string())?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// The one document of `kind` named `name`; panics if there is not exactly one.
pub fn find<'a>(docs: &'a [Doc], kind: &str, name: &str) -> &'a Doc {
    let found: Vec<&Doc> = docs
        .iter()
        .filter(|d| d.kind() == kind && d.name() == name)
        .collect();
    match found.as_slice() {
        [one] => one,
        _ => panic!(
            "expected exactly one {kind} named {name:?} under {K8S_DIR}, found {}",
            found.len()
        ),
    }
}

/// The documents of `kind`.
pub fn of_kind<'a>(docs: &'a [Doc], kind: &str) -> Vec<&'a Doc> {
    docs.iter().filter(|d| d.kind() == kind).collect()
}

/// The value at a dotted path: object keys, or indexes into arrays (`spec.ports.0.port`);
/// `""` is `value` itself.
pub fn at<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    if path.is_empty() {
        return Some(value);
    }
    path.split('.').try_fold(value, |v, part| match v {
        Value::Object(map) => map.get(part),
        Value::Array(items) => part.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
}

pub fn str_at<'a>(value: &'a Value, path: &str) -> Option<&'a str> {
    at(value, path).and_then(Value::as_str)
}

pub fn u64_at(value: &Value, path: &str) -> Option<u64> {
    at(value, path).and_then(Value::as_u64)
}

/// The array at `path`, empty when absent.
pub fn items<'a>(value: &'a Value, path: &str) -> &'a [Value] {
    at(value, path)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}
