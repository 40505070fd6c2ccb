//! Compressed request messages (`grpc-encoding`): the encodings the server accepts, and a
//! message decompressed within a bound.
//!
//! tonic decompresses the calls it frames (told [`Compression::ALL`], bounded by
//! `max_decoding_message_size`); the services that read the wire themselves (RLQS) call
//! [`decompress`]. Either way a message's *decompressed* size is bounded by
//! `--max-request-bytes`: a few KiB of gzip can inflate a thousandfold, so the length on the
//! wire bounds nothing. Answers are never compressed, which gRPC allows whatever the client's
//! `grpc-accept-encoding` says.

use std::io::Read;

use bytes::Bytes;
use tonic::Status;
use tonic::codec::CompressionEncoding;
use tonic::metadata::MetadataValue;

pub const GRPC_ENCODING: http::HeaderName = http::HeaderName::from_static("grpc-encoding");
const GRPC_ACCEPT_ENCODING: &str = "grpc-accept-encoding";
/// What a refusal of another encoding lists, as tonic lists the same encodings.
const ACCEPTED: &str = "gzip,deflate,identity";

/// A compression the server decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    Gzip,
    /// gRPC's `deflate`: the zlib format (RFC 1950), as grpc-go and tonic read it.
    Deflate,
}

impl Compression {
    /// Every encoding accepted.
    pub const ALL: [Compression; 2] = [Compression::Gzip, Compression::Deflate];

    /// The request's `grpc-encoding`: `None` when it names none or `identity`. Any other is
    /// `UNIMPLEMENTED` with `grpc-accept-encoding` listing those accepted, as gRPC's
    /// compression spec asks.
    pub fn of_request(headers: &http::HeaderMap) -> Result<Option<Self>, Status> {
        let Some(value) = headers.get(&GRPC_ENCODING) else {
            return Ok(None);
        };
        match value.as_bytes() {
            b"identity" => Ok(None),
            b"gzip" => Ok(Some(Self::Gzip)),
            b"deflate" => Ok(Some(Self::Deflate)),
            other => {
                let mut status = Status::unimplemented(format!(
                    "messages compressed with `{}` are not accepted (accepted: {ACCEPTED})",
                    String::from_utf8_lossy(other)
                ));
                status
                    .metadata_mut()
                    .insert(GRPC_ACCEPT_ENCODING, MetadataValue::from_static(ACCEPTED));
                Err(status)
            }
        }
    }

    /// tonic's name for it.
    pub fn tonic(self) -> CompressionEncoding {
        match self {
            Self::Gzip => CompressionEncoding::Gzip,
            Self::Deflate => CompressionEncoding::Deflate,
        }
    }
}

/// `compressed` (one message, without its prefix) decompressed. More than `max` bytes is
/// `RESOURCE_EXHAUSTED`, found after reading at most one byte past `max`; bytes that are not
/// `encoding` are `INVALID_ARGUMENT`.
pub fn decompress(encoding: Compression, compressed: &[u8], max: usize) -> Result<Bytes, Status> {
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    // Most messages inflate a few times; the bound keeps a bomb's first guess small too.
    let mut out = Vec::with_capacity(compressed.len().saturating_mul(4).min(max));
    let read = match encoding {
        Compression::Gzip => flate2::read::GzDecoder::new(compressed)
            .take(limit)
            .read_to_end(&mut out),
        Compression::Deflate => flate2::read::ZlibDecoder::new(compressed)
            .take(limit)
            .read_to_end(&mut out),
    };
    if let Err(error) = read {
        return Err(Status::invalid_argument(format!(
            "a message that does not decompress as {encoding:?}: {error}"
        )));
    }
    if out.len() > max {
        return Err(Status::resource_exhausted(format!(
            "request message larger than the server's limit of {max} bytes once decompressed"
        )));
    }
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests;
