//! A statsd collector for the tests (no statsd server or agent can run here): it listens on
//! TCP and UDP on one free port, as statsd and the DogStatsD agent do, and parses the real line
//! protocol (`name:value|type[|@rate][|#tag:value,...]`, lines separated by `\n`), refusing
//! any line that does not parse. Counters are summed per name and tags, as a collector does.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One parsed line.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub name: String,
    pub value: f64,
    /// `c`, `g`, `ms`, `h`, `s`, `d`.
    pub kind: String,
    pub sample_rate: Option<f64>,
    /// DogStatsD's tags, as sent (`key:value`).
    pub tags: Vec<String>,
    /// Over UDP (else TCP).
    pub udp: bool,
}

/// Parses one line of the statsd (and DogStatsD) protocol.
pub fn parse_line(text: &str) -> Result<Line, String> {
    let (name, rest) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?}: no ':' after the name"))?;
    if name.is_empty() || name.contains(['|', '\n', ' ']) {
        return Err(format!("{text:?}: a bad name"));
    }
    let mut fields = rest.split('|');
    let value = fields
        .next()
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or_else(|| format!("{text:?}: the value is not a number"))?;
    let kind = fields
        .next()
        .filter(|k| matches!(*k, "c" | "g" | "ms" | "h" | "s" | "d"))
        .ok_or_else(|| format!("{text:?}: no known type"))?
        .to_owned();
    let (mut sample_rate, mut tags) = (None, Vec::new());
    for field in fields {
        if let Some(rate) = field.strip_prefix('@') {
            sample_rate = Some(
                rate.parse::<f64>()
                    .map_err(|_| format!("{text:?}: a bad sample rate"))?,
            );
        } else if let Some(list) = field.strip_prefix('#') {
            tags = list.split(',').map(str::to_owned).collect();
            if tags.iter().any(String::is_empty) {
                return Err(format!("{text:?}: an empty tag"));
            }
        } else {
            return Err(format!("{text:?}: an unknown field {field:?}"));
        }
    }
    Ok(Line {
        name: name.to_owned(),
        value,
        kind,
        sample_rate,
        tags,
        udp: false,
    })
}

/// The collector: every line received, and the ones that did not parse.
pub struct Collector {
    pub addr: SocketAddr,
    lines: Arc<Mutex<Vec<Line>>>,
    errors: Arc<Mutex<Vec<String>>>,
}

impl Collector {
    /// Listens on 127.0.0.1, TCP and UDP on the same free port.
    pub fn start() -> Collector {
        let (tcp, udp) = loop {
            let tcp = TcpListener::bind("127.0.0.1:0").expect("bind TCP");
            let addr = tcp.local_addr().expect("addr");
            if let Ok(udp) = UdpSocket::bind(addr) {
                break (tcp, udp);
            }
        };
        let addr = tcp.local_addr().expect("addr");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let take = {
            let (lines, errors) = (Arc::clone(&lines), Arc::clone(&errors));
            move |text: &str, udp: bool| {
                for line in text.split('\n').filter(|l| !l.is_empty()) {
                    match parse_line(line) {
                        Ok(mut parsed) => {
                            parsed.udp = udp;
                            lines.lock().expect("lines").push(parsed);
                        }
                        Err(error) => errors.lock().expect("errors").push(error),
                    }
                }
            }
        };
        let on_udp = take.clone();
        std::thread::spawn(move || {
            let mut buffer = vec![0u8; 65_536];
            while let Ok((n, _)) = udp.recv_from(&mut buffer) {
                on_udp(&String::from_utf8_lossy(&buffer[..n]), true);
            }
        });
        std::thread::spawn(move || {
            for stream in tcp.incoming().flatten() {
                let on_tcp = take.clone();
                std::thread::spawn(move || {
                    for line in BufReader::new(stream).lines() {
                        match line {
                            Ok(line) => on_tcp(&line, false),
                            Err(_) => return,
                        }
                    }
                });
            }
        });
        Collector {
            addr,
            lines,
            errors,
        }
    }

    /// Every line received so far.
    pub fn lines(&self) -> Vec<Line> {
        self.lines.lock().expect("lines").clone()
    }

    /// Lines that did not parse (a test expects none).
    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().expect("errors").clone()
    }

    /// Counters summed by name and tags (tags sorted, joined by `,`).
    pub fn counters(&self) -> BTreeMap<(String, String), f64> {
        let mut sums = BTreeMap::new();
        for line in self.lines().into_iter().filter(|l| l.kind == "c") {
            let mut tags = line.tags.clone();
            tags.sort();
            let rate = line.sample_rate.unwrap_or(1.0);
            *sums.entry((line.name, tags.join(","))).or_insert(0.0) += line.value / rate;
        }
        sums
    }

    /// The sum of the counter `name` (any tags).
    pub fn counter(&self, name: &str) -> f64 {
        self.counters()
            .iter()
            .filter(|((n, _), _)| n == name)
            .map(|(_, v)| v)
            .sum()
    }

    /// Waits until `check` holds on the counters, or fails after `timeout` showing them.
    pub fn wait_for(
        &self,
        timeout: Duration,
        what: &str,
        check: impl Fn(&BTreeMap<(String, String), f64>) -> bool,
    ) {
        let deadline = Instant::now() + timeout;
        loop {
            let counters = self.counters();
            if check(&counters) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not within {timeout:?}: {what}\ncounters: {counters:#?}\nerrors: {:?}",
                self.errors()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_protocol_is_parsed_and_checked() {
        let line = parse_line("a.b:3|c|@0.5|#k:v,x:y").expect("valid");
        assert_eq!(
            (line.name.as_str(), line.value, line.kind.as_str()),
            ("a.b", 3.0, "c")
        );
        assert_eq!(line.sample_rate, Some(0.5));
        assert_eq!(line.tags, ["k:v", "x:y"]);
        for bad in [
            "a.b",
            "a.b:x|c",
            "a.b:1",
            "a.b:1|z",
            "a.b:1|c|q",
            ":1|c",
            "a:1|c|#",
        ] {
            assert!(parse_line(bad).is_err(), "{bad}");
        }
    }
}
