//! The body sent upstream: the client's bytes held whole (an inspected
//! request, which probity reads to judge the answer), or the client's own
//! body streamed through as it arrives (an endpoint probity does not
//! inspect: an upload of any size passes with back-pressure, never held).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;

/// A request body on its way upstream.
pub(crate) enum UpstreamBody {
    /// Read whole before forwarding.
    Whole(Full<Bytes>),
    /// The client's body, relayed frame by frame.
    Streaming(Incoming),
}

impl From<Bytes> for UpstreamBody {
    fn from(bytes: Bytes) -> Self {
        UpstreamBody::Whole(Full::new(bytes))
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            UpstreamBody::Whole(full) => Pin::new(full)
                .poll_frame(cx)
                .map_err(|never| match never {}),
            UpstreamBody::Streaming(incoming) => Pin::new(incoming).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::Whole(full) => full.is_end_stream(),
            UpstreamBody::Streaming(incoming) => incoming.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpstreamBody::Whole(full) => full.size_hint(),
            UpstreamBody::Streaming(incoming) => incoming.size_hint(),
        }
    }
}
