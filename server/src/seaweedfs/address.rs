//! A filer's address the way SeaweedFS writes it: `host:port` (gRPC at port
//! + 10000) or `host:port.grpcPort`.

use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FilerAddress {
    /// As given (`host:port[.grpcPort]`): the filer's name in status and
    /// stored events.
    pub given: String,
    /// Where its gRPC API listens (`host:grpcPort`).
    pub grpc: String,
}

impl FilerAddress {
    pub fn parse(given: &str) -> Result<FilerAddress, String> {
        let explain = |why: &str| {
            format!(
                "filer address {given:?}: {why} (write it as SeaweedFS does: host:port, gRPC at \
                 port + 10000, or host:port.grpcPort)"
            )
        };
        let (host, ports) = given.rsplit_once(':').ok_or_else(|| explain("no port"))?;
        if host.is_empty() {
            return Err(explain("no host"));
        }
        let port = |text: &str| {
            text.parse::<u16>()
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| explain(&format!("{text:?} is not a port")))
        };
        let grpc = match ports.split_once('.') {
            Some((http, grpc)) => {
                port(http)?;
                port(grpc)?
            }
            None => {
                let http = port(ports)?;
                http.checked_add(10000)
                    .ok_or_else(|| explain("port + 10000 is past 65535: name the gRPC port"))?
            }
        };
        Ok(FilerAddress {
            given: given.to_owned(),
            grpc: format!("{host}:{grpc}"),
        })
    }

    /// The filer's producer id in the engine: stable for the same address,
    /// never 0.
    pub fn producer_id(&self) -> u64 {
        // FNV-1a: stable across builds and platforms (std's hasher is not).
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in b"seaweedfs-filer:".iter().chain(self.given.as_bytes()) {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        hash.max(1)
    }
}

impl fmt::Display for FilerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.given)
    }
}

#[cfg(test)]
mod tests {
    use super::FilerAddress;

    #[test]
    fn addresses_are_read_the_seaweedfs_way() {
        let a = FilerAddress::parse("127.0.0.1:8888").unwrap();
        assert_eq!(a.grpc, "127.0.0.1:18888");
        let b = FilerAddress::parse("filer.local:8888.19000").unwrap();
        assert_eq!(b.grpc, "filer.local:19000");
        assert_ne!(a.producer_id(), b.producer_id());
        assert_eq!(
            a.producer_id(),
            FilerAddress::parse("127.0.0.1:8888").unwrap().producer_id()
        );
        for bad in ["127.0.0.1", ":8888", "h:0", "h:x", "h:60000", "h:1.x"] {
            let e = FilerAddress::parse(bad).unwrap_err();
            assert!(e.contains("host:port"), "{bad}: {e}");
        }
    }
}
