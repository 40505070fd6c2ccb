//! An HTTP request as Envoy's rate limit actions see it: its pseudo-headers, headers (names
//! lower-case), query and the client's address.

use std::net::IpAddr;

/// Headers and their bytes accepted in one request given on the command line.
const MAX_HEADERS: usize = 100;
const MAX_HEADER_BYTES: usize = 16 * 1024;

/// One request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    pub method: String,
    /// `:path`, with its query.
    pub path: String,
    pub authority: String,
    pub scheme: String,
    /// Lower-case names, in the order given; pseudo-headers are the fields above.
    headers: Vec<(String, String)>,
    /// The address of the connection's peer.
    pub peer: IpAddr,
}

impl HttpRequest {
    /// `GET /path`-style request line, `name: value` headers, the authority (`:authority`,
    /// or the `host` header when given) and the peer's address.
    pub fn new(
        request_line: &str,
        headers: &[String],
        authority: Option<&str>,
        peer: IpAddr,
    ) -> Result<Self, String> {
        let mut words = request_line.split_whitespace();
        let (method, path) = match (words.next(), words.next(), words.next()) {
            (Some(method), Some(path), None) => (method, path),
            (Some(path), None, None) if path.starts_with('/') => ("GET", path),
            _ => {
                return Err(format!(
                    "request `{request_line}`: expected `METHOD /path` (e.g. `GET /api?x=1`)"
                ));
            }
        };
        if !path.starts_with('/') {
            return Err(format!(
                "request `{request_line}`: the path must start with `/`"
            ));
        }
        if headers.len() > MAX_HEADERS {
            return Err(format!("more than {MAX_HEADERS} headers"));
        }
        let mut parsed = Vec::with_capacity(headers.len());
        let mut bytes = 0;
        let mut host = None;
        for header in headers {
            bytes += header.len();
            if bytes > MAX_HEADER_BYTES {
                return Err(format!("headers longer than {MAX_HEADER_BYTES} bytes"));
            }
            let Some((name, value)) = header.split_once(':') else {
                return Err(format!("header `{header}`: expected `name: value`"));
            };
            let name = name.trim().to_ascii_lowercase();
            if name.is_empty() || name.starts_with(':') {
                return Err(format!(
                    "header `{header}`: a header name (pseudo-headers come from the request \
                     line and --authority)"
                ));
            }
            let value = value.trim().to_owned();
            if name == "host" {
                host = Some(value);
                continue;
            }
            parsed.push((name, value));
        }
        Ok(Self {
            method: method.to_owned(),
            path: path.to_owned(),
            authority: authority
                .map(str::to_owned)
                .or(host)
                .unwrap_or_else(|| "localhost".to_owned()),
            scheme: "http".to_owned(),
            headers: parsed,
            peer,
        })
    }

    /// The first value of a header (pseudo-headers included), as `headers.get(name)[0]`.
    pub fn header(&self, name: &str) -> Option<&str> {
        match name {
            ":path" => Some(&self.path),
            ":method" => Some(&self.method),
            ":authority" | "host" => Some(&self.authority),
            ":scheme" => Some(&self.scheme),
            _ => self
                .headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str()),
        }
    }

    /// Every value of a header joined with `,`, as Envoy's header matchers read it.
    pub fn header_joined(&self, name: &str) -> Option<String> {
        if name.starts_with(':') || name == "host" {
            return self.header(name).map(str::to_owned);
        }
        let values: Vec<&str> = self
            .headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect();
        (!values.is_empty()).then(|| values.join(","))
    }

    /// Appends a value to a header (Envoy's `x-forwarded-for` append).
    pub fn append_header(&mut self, name: &str, value: &str) {
        match self.headers.iter_mut().find(|(n, _)| n == name) {
            Some((_, existing)) => {
                existing.push(',');
                existing.push_str(value);
            }
            None => self.headers.push((name.to_owned(), value.to_owned())),
        }
    }

    /// The path without its query (and fragment): what routes match.
    pub fn path_without_query(&self) -> &str {
        let end = self.path.find(['?', '#']).unwrap_or(self.path.len());
        self.path.get(..end).unwrap_or(&self.path)
    }

    /// The first value of a query parameter, decoded.
    pub fn query_first(&self, name: &str) -> Option<String> {
        let query = self.path.split_once('?')?.1;
        let query = query.split('#').next().unwrap_or_default();
        form_urlencoded::parse(query.as_bytes())
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
    }

    /// Envoy's trusted client address (what `remote_address` reads): with
    /// `use_remote_address`, the peer, or with `xff_num_trusted_hops` N the Nth address of
    /// `x-forwarded-for` from the right; without it, the address `xff_num_trusted_hops`
    /// entries from the right end of `x-forwarded-for`, or the peer when there is none.
    pub fn client_address(&self, use_remote_address: bool, trusted_hops: u32) -> IpAddr {
        let from_xff = |skip: u32| -> Option<IpAddr> {
            let xff = self.header_joined("x-forwarded-for")?;
            let entries: Vec<&str> = xff.split(',').collect();
            let index = entries.len().checked_sub(1 + usize::try_from(skip).ok()?)?;
            entries.get(index)?.trim().parse().ok()
        };
        if use_remote_address {
            match trusted_hops.checked_sub(1) {
                Some(skip) => from_xff(skip).unwrap_or(self.peer),
                None => self.peer,
            }
        } else {
            from_xff(trusted_hops).unwrap_or(self.peer)
        }
    }
}

#[cfg(test)]
mod tests;
