//! The DNS-rebinding guard of a plain-HTTP server on this machine: which `Host` headers it answers.
//!
//! A page on `attacker.example` whose name is made to resolve to 127.0.0.1 can send requests to
//! a server here, and the browser names its own host in them. So a request is answered only when
//! its `Host` names:
//! - `localhost`, or a loopback address (127.0.0.0/8, `[::1]`);
//! - the address the server is bound to;
//! - when the server is bound to every address (0.0.0.0 or `[::]`, as in a Pod): any IP address
//!   (Prometheus scrapes and the kubelet probes by Pod IP), and a cluster Service's name
//!   (`*.svc`, `*.svc.cluster.local`), which public DNS never resolves, so no rebinding page
//!   can bear it. A rebinding page's Host is a public name, never an IP literal.
//!
//! Any other name is refused. The port is not looked at (a rebinding page names its own name,
//! whatever the port). A request without a `Host` (HTTP/1.0) is answered: browsers, which carry
//! rebinding attacks, always send one.
//!
//! Why a crate of its own: the in-memory API (`inmem-apiserver`, served to kubectl by the
//! sandbox) and the controller's own server (`tenant-placer`'s `serve`: health, metrics, the page)
//! both answer plain HTTP on this machine and must refuse the same Hosts. The controller depends
//! on the in-memory API, not the other way round, so the rule cannot live in the controller; and
//! it cannot live in the in-memory API either, or the production server would depend on a fake.
//! Both depend on this crate, which depends on `http` only.

// A guard has no use for unsafe code.
#![forbid(unsafe_code)]

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use http::HeaderValue;

/// A `Host` this server does not answer, and why (the body of its 403).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignHost {
    host: String,
    bound: SocketAddr,
}

impl fmt::Display for ForeignHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let answered = if self.bound.ip().is_unspecified() {
            "localhost, IP addresses and cluster Service names (*.svc) are".to_owned()
        } else {
            format!("localhost, loopback addresses and {} are", self.bound.ip())
        };
        write!(
            f,
            "Host {:?} is not this server: only {answered} answered (DNS rebinding guard)",
            self.host
        )
    }
}

impl std::error::Error for ForeignHost {}

/// Whether a server bound to `bound` answers a request with this `Host` header (see the module
/// docs for the rule).
pub fn check_host(host: Option<&HeaderValue>, bound: SocketAddr) -> Result<(), ForeignHost> {
    let Some(host) = host else {
        return Ok(());
    };
    let text = String::from_utf8_lossy(host.as_bytes());
    let answered = match name_of(&text) {
        Some(Name::Localhost) => true,
        Some(Name::Ip(ip)) => {
            let ip = ip.to_canonical();
            ip.is_loopback() || ip == bound.ip().to_canonical() || bound.ip().is_unspecified()
        }
        Some(Name::Service) => bound.ip().is_unspecified(),
        None => false,
    };
    if answered {
        Ok(())
    } else {
        Err(ForeignHost {
            host: text.into_owned(),
            bound,
        })
    }
}

enum Name {
    Localhost,
    Ip(IpAddr),
    /// A cluster Service's DNS name.
    Service,
}

/// The host of `host[:port]` or `[ipv6][:port]`, if it is `localhost`, an IP literal or a
/// cluster Service's name.
fn name_of(host: &str) -> Option<Name> {
    let bracketed = host.strip_prefix('[');
    let (name, port) = match bracketed {
        Some(rest) => rest.split_once(']')?,
        None => host.split_at(host.find(':').unwrap_or(host.len())),
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_ok());
    if !port_ok {
        return None;
    }
    if bracketed.is_some() {
        return name.parse::<Ipv6Addr>().ok().map(|ip| Name::Ip(ip.into()));
    }
    if name.eq_ignore_ascii_case("localhost") {
        return Some(Name::Localhost);
    }
    if let Ok(ip) = name.parse::<Ipv4Addr>() {
        return Some(Name::Ip(ip.into()));
    }
    let name = name.to_ascii_lowercase();
    // `<service>.<namespace>.svc`, `.svc.` not being a suffix of the service's name.
    let service = [".svc", ".svc.cluster.local"]
        .iter()
        .filter_map(|suffix| name.strip_suffix(suffix))
        .any(|rest| rest.split('.').count() == 2 && rest.split('.').all(|l| !l.is_empty()));
    service.then_some(Name::Service)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_localhost_loopback_and_the_bound_address_are_answered() {
        let loopback: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let pod_ip: SocketAddr = "10.1.2.3:8080".parse().unwrap();
        let any_v4: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        let any_v6: SocketAddr = "[::]:8080".parse().unwrap();
        // (Host, bound to, answered)
        let cases = [
            // What kubectl and kube-rs send, and a browser on the sandbox's own URL.
            (Some("127.0.0.1:8080"), loopback, true),
            (Some("localhost:8080"), loopback, true),
            (Some("LocalHost"), loopback, true),
            // Any port and any address of 127.0.0.0/8 or ::1: all loopback.
            (Some("127.0.0.2:1"), loopback, true),
            (Some("[::1]:8080"), loopback, true),
            (Some("[::ffff:127.0.0.1]"), loopback, true),
            // A rebinding page names itself, with or without a port.
            (Some("attacker.example"), loopback, false),
            (Some("attacker.example:8080"), loopback, false),
            (Some("localhost.attacker.example"), loopback, false),
            (Some("127.0.0.1.attacker.example"), loopback, false),
            // Bound to a Pod IP: that IP and loopback, no other address or name.
            (Some("10.1.2.3:8080"), pod_ip, true),
            (Some("10.1.2.4:8080"), pod_ip, false),
            (Some("tenant-placer-metrics.ns.svc:8080"), pod_ip, false),
            // Bound to every address: any IP literal (the Pod IP Prometheus and the kubelet use)
            // and a Service's name, still no other name.
            (Some("10.1.2.3:8080"), any_v4, true),
            (Some("[fd00::3]:8080"), any_v6, true),
            (Some("tenant-placer-metrics.ns.svc:8080"), any_v4, true),
            (
                Some("Tenant-Placer-Metrics.NS.svc.cluster.local"),
                any_v6,
                true,
            ),
            (Some("attacker.example"), any_v4, false),
            (Some("tenant-placer-metrics.svc"), any_v4, false),
            (Some("a.b.c.svc"), any_v4, false),
            (Some("x.ns.svc.attacker.example"), any_v4, false),
            (
                Some("x.ns.svc.cluster.local.attacker.example"),
                any_v4,
                false,
            ),
            (Some("tenant-placer-metrics.ns.svc"), loopback, false),
            // Not a host at all.
            (Some("127.0.0.1:"), loopback, false),
            (Some("127.0.0.1:http"), loopback, false),
            (Some("[::1"), loopback, false),
            (Some("::1"), loopback, false),
            (Some(""), loopback, false),
            // No Host (HTTP/1.0): not a browser, so not a rebinding page.
            (None, loopback, true),
        ];
        for (host, bound, answered) in cases {
            let header = host.map(|h| HeaderValue::from_str(h).unwrap());
            assert_eq!(
                check_host(header.as_ref(), bound).is_ok(),
                answered,
                "Host {host:?} on a server bound to {bound}"
            );
        }
    }

    #[test]
    fn a_refusal_names_the_host_and_what_is_answered() {
        let header = HeaderValue::from_static("attacker.example");
        let bound: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        assert_eq!(
            check_host(Some(&header), bound).unwrap_err().to_string(),
            "Host \"attacker.example\" is not this server: only localhost, loopback addresses and \
             127.0.0.1 are answered (DNS rebinding guard)"
        );
        let any: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        assert_eq!(
            check_host(Some(&header), any).unwrap_err().to_string(),
            "Host \"attacker.example\" is not this server: only localhost, IP addresses and \
             cluster Service names (*.svc) are answered (DNS rebinding guard)"
        );
    }
}
