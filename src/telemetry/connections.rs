//! Connection metrics of the listeners: how close each is to its cap, and what the transport
//! closed or could not accept.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::register::series_set;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ListenerLabels {
    listener: &'static str,
}

series_set! {
    /// The families, registered once with the service's registry.
    #[derive(Debug, Default)]
    pub struct ConnectionMetricFamilies {
        open: Family<ListenerLabels, Gauge> => "connections_open",
            "Open connections per listener (grpc, admin); capped by --max-connections and \
             --max-admin-connections";
        accepted: Family<ListenerLabels, Counter> => "connections_accepted",
            "Connections accepted per listener";
        preface_timeouts: Family<ListenerLabels, Counter> => "connections_preface_timeouts",
            "Connections closed for sending nothing (no HTTP/2 preface) within --preface-timeout";
        accept_errors: Family<ListenerLabels, Counter> => "accept_errors",
            "Accept errors (EMFILE, ENFILE, ...) per listener; each pauses the accept loop";
        tls_handshake_failures: Family<ListenerLabels, Counter> => "tls_handshake_failures",
            "TLS handshakes that failed (no or an untrusted client certificate, a bad \
             ClientHello); those that timed out count as preface timeouts";
    }
}

impl ConnectionMetricFamilies {
    /// The series of one listener, resolved once.
    pub fn listener(&self, listener: &'static str) -> ConnectionMetrics {
        let labels = ListenerLabels { listener };
        ConnectionMetrics {
            open: self.open.get_or_create(&labels).clone(),
            accepted: self.accepted.get_or_create(&labels).clone(),
            preface_timeouts: self.preface_timeouts.get_or_create(&labels).clone(),
            accept_errors: self.accept_errors.get_or_create(&labels).clone(),
            tls_handshake_failures: self.tls_handshake_failures.get_or_create(&labels).clone(),
        }
    }
}

/// One listener's connection series (cheap to clone: shared atomics).
#[derive(Debug, Clone, Default)]
pub struct ConnectionMetrics {
    pub open: Gauge,
    pub accepted: Counter,
    pub preface_timeouts: Counter,
    pub accept_errors: Counter,
    pub tls_handshake_failures: Counter,
}
