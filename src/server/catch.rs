//! probity's own faults: a panic while serving a request is caught here and
//! answered (a `500 internal_error`, or mid-stream the stream's own error
//! event), never a dropped connection, and never counted against a
//! provider.

use std::any::Any;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::task::Poll;

/// Runs `future`, its panic becoming `Err` with the panic's message.
///
/// The future is boxed: hyper keeps the room for a connection's request
/// future for the connection's life, so what it holds inline is paid by
/// every open connection (a thousand streams), and a box is paid only while
/// a request is in flight. The exchange keeps itself small for that
/// (`exchange`'s boxed calls).
pub(super) async fn catch_panic<F: Future>(future: F) -> Result<F::Output, String> {
    let mut future = Box::pin(future);
    std::future::poll_fn(move |cx| {
        match catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Err(payload) => Poll::Ready(Err(panic_message(payload.as_ref()))),
        }
    })
    .await
}

/// Runs `f`, turning a panic into `Err` with its message.
pub(super) fn catching<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| panic_message(payload.as_ref()))
}

/// A panic's message: what `panic!` or a failed bound check said.
fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_string()
    }
}

/// Fault injection for the tests of this module's guarantees, compiled
/// into debug builds only: with `PROBITY_TEST_PANIC=<point>`, a request
/// whose `x-request-id` is `panic-test` panics at that point (`exchange`,
/// or `stream` while a checked stream judges an event).
#[cfg(debug_assertions)]
pub(super) fn injected_panic(point: &str, request_id: &http::HeaderValue) {
    if request_id == "panic-test" && std::env::var("PROBITY_TEST_PANIC").is_ok_and(|p| p == point) {
        #[expect(clippy::panic, reason = "the fault the tests inject")]
        {
            panic!("injected by PROBITY_TEST_PANIC={point}");
        }
    }
}

#[cfg(not(debug_assertions))]
#[inline(always)]
pub(super) fn injected_panic(_point: &str, _request_id: &http::HeaderValue) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_future_becomes_an_error_with_its_message() {
        let caught = catch_panic(async {
            let items: Vec<u8> = Vec::new();
            let at = items.len() + 3;
            items[at]
        })
        .await;
        assert!(caught.unwrap_err().contains("index out of bounds"));
        assert_eq!(catch_panic(async { 7 }).await, Ok(7));
        assert_eq!(catching(|| 1), Ok(1));
        assert_eq!(catching(|| -> u8 { panic!("boom") }), Err("boom".into()));
    }
}
