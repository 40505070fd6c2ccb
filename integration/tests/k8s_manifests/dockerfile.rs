//! A modest structural check of the Dockerfile's text: stages, their base images, the
//! binary's way from the builder, the user, ports and command. (The `container` tests build
//! and run it; this check needs no podman.)

/// One instruction: the keyword (upper case) and its arguments, continuations joined.
#[derive(Debug)]
pub struct Instruction {
    pub keyword: String,
    pub args: String,
}

pub fn instructions(text: &str) -> Vec<Instruction> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        if let Some(part) = trimmed.strip_suffix('\\') {
            current.push_str(part);
            current.push(' ');
            continue;
        }
        current.push_str(trimmed);
        let (keyword, args) = current
            .split_once(char::is_whitespace)
            .unwrap_or((&current, ""));
        out.push(Instruction {
            keyword: keyword.to_ascii_uppercase(),
            args: args.trim().to_string(),
        });
        current.clear();
    }
    out
}

/// The base image of each stage in order, a `${NAME}` resolved with the default of the ARG
/// declared before the first FROM (the only build arguments a FROM line sees).
pub fn stage_bases(text: &str) -> Vec<String> {
    let all = instructions(text);
    let mut defaults = std::collections::HashMap::new();
    let mut bases = Vec::new();
    for i in &all {
        match i.keyword.as_str() {
            "ARG" if bases.is_empty() => {
                if let Some((name, value)) = i.args.split_once('=') {
                    defaults.insert(name.trim().to_string(), value.trim().to_string());
                }
            }
            "FROM" => {
                let image = i.args.split_whitespace().next().unwrap_or("");
                let resolved = image
                    .strip_prefix("${")
                    .and_then(|rest| rest.strip_suffix('}'))
                    .and_then(|name| defaults.get(name).cloned());
                bases.push(resolved.unwrap_or_else(|| image.to_string()));
            }
            _ => {}
        }
    }
    bases
}

/// What the Dockerfile `text` gets wrong (empty if nothing): at least two stages, a
/// builder stage running `cargo build --release --locked`, a final stage that copies
/// `gcounter-rls` from it (also as `/bin/ratelimit`, upstream's command), runs as non-root (USER other than root/0, or a `:nonroot`
/// image), exposes 8081 and 8080, and has ENTRYPOINT ["gcounter-rls"]. The final stage's
/// CMD (exec form) is returned for cross-checks.
pub fn problems(text: &str) -> (Vec<String>, Vec<String>) {
    let all = instructions(text);
    let mut problems = Vec::new();
    let stage_starts: Vec<usize> = all
        .iter()
        .enumerate()
        .filter(|(_, i)| i.keyword == "FROM")
        .map(|(n, _)| n)
        .collect();
    if stage_starts.len() < 2 {
        problems.push(format!(
            "{} FROM: a multi-stage build needs a builder and a runtime stage",
            stage_starts.len()
        ));
        return (problems, Vec::new());
    }
    let last = *stage_starts.last().expect("two stages");
    let (builders, runtime) = all.split_at(last);

    // Builder stages by name (`FROM image AS name`) and whether one builds the release.
    let names: Vec<String> = builders
        .iter()
        .filter(|i| i.keyword == "FROM")
        .filter_map(|i| {
            let words: Vec<&str> = i.args.split_whitespace().collect();
            match words.as_slice() {
                [.., as_, name] if as_.eq_ignore_ascii_case("as") => Some(name.to_string()),
                _ => None,
            }
        })
        .collect();
    if !builders
        .iter()
        .any(|i| i.keyword == "RUN" && i.args.contains("cargo build --release --locked"))
    {
        problems.push("no builder stage runs `cargo build --release --locked`".into());
    }
    let copies_binary = runtime.iter().any(|i| {
        i.keyword == "COPY"
            && names
                .iter()
                .any(|n| i.args.starts_with(&format!("--from={n} ")))
            && i.args
                .split_whitespace()
                .nth(1)
                .is_some_and(|src| src.ends_with("/gcounter-rls"))
    });
    if !copies_binary {
        problems.push("the final stage does not COPY --from=<builder> .../gcounter-rls".into());
    }
    // envoyproxy/ratelimit's image runs /bin/ratelimit: Deployments written for it name it.
    let upstream_name = runtime.iter().any(|i| {
        let words: Vec<&str> = i.args.split_whitespace().collect();
        i.keyword == "COPY"
            && matches!(words.as_slice(), [from, src, "/bin/ratelimit"]
                if names.iter().any(|n| *from == format!("--from={n}"))
                    && src.ends_with("/gcounter-rls"))
    });
    if !upstream_name {
        problems.push(
            "the final stage does not COPY --from=<builder> .../gcounter-rls /bin/ratelimit \
             (upstream's command)"
                .into(),
        );
    }

    let image = runtime[0].args.split_whitespace().next().unwrap_or("");
    let user = runtime
        .iter()
        .rev()
        .find(|i| i.keyword == "USER")
        .map(|i| i.args.as_str());
    let root_user = |u: &str| {
        let name = u.split(':').next().unwrap_or(u);
        name == "root" || name == "0"
    };
    match user {
        Some(u) if root_user(u) => problems.push(format!("the final stage runs as USER {u}")),
        Some(_) => {}
        None if image.ends_with(":nonroot") => {}
        None => problems.push(format!(
            "the final stage ({image}) sets no non-root USER and is not a :nonroot image"
        )),
    }

    let exposed: Vec<&str> = runtime
        .iter()
        .filter(|i| i.keyword == "EXPOSE")
        .flat_map(|i| i.args.split_whitespace())
        .map(|p| p.split('/').next().unwrap_or(p))
        .collect();
    for port in ["8081", "8080"] {
        if !exposed.contains(&port) {
            problems.push(format!("port {port} is not EXPOSEd"));
        }
    }

    let exec_form = |keyword: &str| -> Option<Vec<String>> {
        let i = runtime.iter().rev().find(|i| i.keyword == keyword)?;
        serde_json::from_str(&i.args).ok()
    };
    if exec_form("ENTRYPOINT") != Some(vec!["gcounter-rls".to_string()]) {
        problems.push("ENTRYPOINT must be [\"gcounter-rls\"] (exec form)".into());
    }
    let cmd = exec_form("CMD").unwrap_or_default();
    if cmd.first().map(String::as_str) != Some("serve") {
        problems.push(format!(
            "CMD must be exec form starting with serve, is {cmd:?}"
        ));
    }
    (problems, cmd)
}
