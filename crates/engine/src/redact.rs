//! Secrets out of logs: a backend URL carries its password (`mysql://user:pw@host/db`), and
//! libraries quote a URL they cannot parse whole in their errors. Everything that logs or
//! returns an error about a URL goes through here first.

/// The URL with any `user:password@` replaced by `***@`, and a `pass=` query parameter's
/// value (Redis over a Unix socket: `redis+unix:///path?pass=…`) by `***`.
pub fn redact_url(url: &str) -> String {
    let url = redact_authority(url);
    match url.split_once('?') {
        Some((head, query)) if query.split('&').any(|p| p.starts_with("pass=")) => {
            let query: Vec<&str> = query
                .split('&')
                .map(|p| {
                    if p.starts_with("pass=") {
                        "pass=***"
                    } else {
                        p
                    }
                })
                .collect();
            format!("{head}?{}", query.join("&"))
        }
        _ => url,
    }
}

fn redact_authority(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    match scheme {
        Some(scheme) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => format!("***@{}", &rest[at + 1..]),
    }
}

/// `text` (an error message about `url`) with the URL redacted and its password gone, even
/// where the message quotes the password alone or a URL mangled by a parser.
pub fn redact_in(text: &str, url: &str) -> String {
    let mut clean = text.replace(url, &redact_url(url));
    if let Some(password) = password(url) {
        clean = clean.replace(password, "***");
    }
    clean
}

/// The password of a `scheme://user:password@host` URL (or its `pass=` parameter), as
/// written.
fn password(url: &str) -> Option<&str> {
    if let Some((_, query)) = url.split_once('?')
        && let Some(pass) = query.split('&').find_map(|p| p.strip_prefix("pass="))
    {
        let pass = pass.split('#').next().unwrap_or(pass);
        return (!pass.is_empty()).then_some(pass);
    }
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    // The password may hold '/', '?' or '#' when not percent-encoded: take up to the last '@'.
    let userinfo = &rest[..rest.rfind('@')?];
    let (_, password) = userinfo.split_once(':')?;
    (!password.is_empty()).then_some(password)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_credentials() {
        assert_eq!(
            redact_url("mysql://root:s3cret@db:3306/rls"),
            "mysql://***@db:3306/rls"
        );
        assert_eq!(redact_url("redis://:pw@r:6379"), "redis://***@r:6379");
        assert_eq!(redact_url("sqlite::memory:"), "sqlite::memory:");
        assert_eq!(redact_url("postgres://db/x"), "postgres://db/x");
        assert_eq!(
            redact_url("redis+unix:///run/redis.sock?user=u&pass=s3cret"),
            "redis+unix:///run/redis.sock?user=u&pass=***"
        );
        assert_eq!(
            redact_in(
                "cannot open redis+unix:///s?pass=s3cret (s3cret)",
                "redis+unix:///s?pass=s3cret"
            ),
            "cannot open redis+unix:///s?pass=*** (***)"
        );
    }

    #[test]
    fn messages_lose_the_url_and_the_password() {
        let url = "postgres://u:s3cr/et@[::1/x";
        let message = format!("The connection string '{url}' cannot be parsed; s3cr/et");
        let clean = redact_in(&message, url);
        assert!(!clean.contains("s3cr"), "{clean}");
        assert!(clean.contains("cannot be parsed"), "{clean}");
    }
}
