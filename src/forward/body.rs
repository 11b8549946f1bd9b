//! The body sent upstream: the client's bytes held whole (an inspected
//! request, which probity reads to judge the answer), or the client's own
//! body streamed through as it arrives (an endpoint probity does not
//! inspect: an upload of any size passes with back-pressure, never held).

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;

/// A request body on its way upstream.
pub(crate) enum UpstreamBody {
    /// Read whole before forwarding (kept readable, so that a signer
    /// signs the very bytes sent).
    Whole(Full<Bytes>, Bytes),
    /// The client's body, relayed frame by frame.
    Streaming(Incoming, ClientFault),
}

/// Why the client's streamed body broke, if it did: hyper then reports a
/// failed upstream request, and only this tells that the fault was the
/// client's (a broken chunked framing, a client gone mid-upload), so it is
/// neither answered nor counted as the upstream's.
#[derive(Clone, Default)]
pub(crate) struct ClientFault(Arc<OnceLock<String>>);

impl ClientFault {
    pub(crate) fn get(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }
}

impl UpstreamBody {
    /// The bytes of a body held whole.
    pub(crate) fn whole(&self) -> Option<&Bytes> {
        match self {
            UpstreamBody::Whole(_, bytes) => Some(bytes),
            UpstreamBody::Streaming(..) => None,
        }
    }
}

impl From<Bytes> for UpstreamBody {
    fn from(bytes: Bytes) -> Self {
        UpstreamBody::Whole(Full::new(bytes.clone()), bytes)
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
            UpstreamBody::Whole(full, _) => Pin::new(full)
                .poll_frame(cx)
                .map_err(|never| match never {}),
            UpstreamBody::Streaming(incoming, fault) => {
                let polled = Pin::new(incoming).poll_frame(cx);
                if let Poll::Ready(Some(Err(err))) = &polled {
                    let _ = fault.0.set(err.to_string());
                }
                polled
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::Whole(full, _) => full.is_end_stream(),
            UpstreamBody::Streaming(incoming, _) => incoming.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpstreamBody::Whole(full, _) => full.size_hint(),
            UpstreamBody::Streaming(incoming, _) => incoming.size_hint(),
        }
    }
}
