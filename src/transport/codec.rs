//! A gRPC codec that hands the handler the request message's raw bytes.
//!
//! With tonic's generated server, a body that is not a valid protobuf fails inside tonic,
//! before the handler runs: the client gets `INTERNAL` and nothing is counted, so garbage sent
//! by a client leaves no trace in the metrics. Decoding in the handler instead lets `rls`
//! answer `INVALID_ARGUMENT` (what grpc-go's servers answer for an unparsable message is
//! `INTERNAL` too, but the request is the client's fault, and envoyproxy/ratelimit's own
//! validation errors are client errors) and count the request like every other refusal.

use std::marker::PhantomData;

use bytes::{Buf, BufMut, Bytes};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

/// Decodes nothing (the message's bytes as they came); encodes responses of type `R` with
/// prost.
pub struct RawRequestCodec<R>(PhantomData<fn(R)>);

impl<R> Default for RawRequestCodec<R> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<R> Codec for RawRequestCodec<R>
where
    R: prost::Message + Send + 'static,
{
    type Encode = R;
    type Decode = Bytes;
    type Encoder = ProstEncoder<R>;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawDecoder
    }
}

pub struct ProstEncoder<R>(PhantomData<fn(R)>);

impl<R: prost::Message> Encoder for ProstEncoder<R> {
    type Item = R;
    type Error = Status;

    fn encode(&mut self, item: R, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        encode_via_stack(&item, dst)
            .map_err(|error| Status::internal(format!("cannot encode the response: {error}")))
    }
}

/// Encodes `item` into `dst`, a small one (one descriptor: ~40 bytes) on the stack first and
/// copied out once: written straight into tonic's `EncodeBuf`, each varint byte is a
/// `put_slice` call and a `memcpy` (~30 per answer, ~1,800 instructions per request by
/// callgrind, BENCHMARKS.md "The cost of a request").
fn encode_via_stack<R: prost::Message>(
    item: &R,
    dst: &mut impl BufMut,
) -> Result<(), prost::EncodeError> {
    let mut stack = [0u8; STACK_ANSWER_BYTES];
    let mut room = &mut stack[..];
    // prost checks the room against the answer's length before writing anything: a larger
    // answer fails here untouched and goes straight into `dst`.
    if item.encode(&mut room).is_ok() {
        let left = room.len();
        if let Some(written) = stack.get(..STACK_ANSWER_BYTES - left) {
            dst.put_slice(written);
            return Ok(());
        }
    }
    // EncodeBuf grows as needed, so encoding cannot run out of room.
    item.encode(dst)
}

/// The largest answer [`ProstEncoder`] encodes on the stack before copying it out.
const STACK_ANSWER_BYTES: usize = 256;

pub struct RawDecoder;

impl Decoder for RawDecoder {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

#[cfg(test)]
mod tests;
