//! A gRPC codec that hands the handler the request message's raw bytes.
//!
//! With tonic's generated server, a body that is not a valid protobuf fails inside tonic,
//! before the handler runs: the client gets `INTERNAL` and nothing is counted (issue 15,
//! break 15). Decoding in the handler instead lets `rls` answer `INVALID_ARGUMENT` (what
//! grpc-go's servers answer for an unparsable message is `INTERNAL` too, but the request is
//! the client's fault, and envoyproxy/ratelimit's own validation errors are client errors)
//! and count the request like every other refusal.

use std::marker::PhantomData;

use bytes::{Buf, Bytes};
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
        // EncodeBuf grows as needed, so encoding cannot run out of room.
        item.encode(dst)
            .map_err(|error| Status::internal(format!("cannot encode the response: {error}")))
    }
}

pub struct RawDecoder;

impl Decoder for RawDecoder {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}
