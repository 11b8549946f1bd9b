//! One request, from arrival to response, in explicit phases called in one
//! order by [`exchange`]:
//!
//! 1. **admit** (`admit`): its request id, its route (`route`), its client;
//! 2. **plan** (`plan`): one typed choice, [`Plan`]: a WebSocket tunnel
//!    (`tunnel`), a passthrough, chunks (`chunks`: a batch larger than the
//!    provider takes goes out in parts and comes back stitched), or one
//!    inspected call, its body read within `max_request_bytes`;
//! 3. **forward** (`forward`): the response is read whole or relayed live,
//!    as the request asked;
//! 4. **judge** (`inspected`): the route's dialect judges it (`inspect`):
//!    pass, null malformed figures, or reject; a stream event by event as
//!    it passes (`judged_stream`);
//! 5. **respond** (`respond`): what was found stated in headers, the
//!    upstream's status and headers (hop-by-hop removed, `x-request-id`
//!    added) with the body, or an error response;
//! 6. **finish** (`finish`): counted, logged and captured in one place,
//!    whichever path the answer took; the log line when its body ends
//!    (`body`).
//!
//! Every request ends in exactly one response: each fault becomes a
//! [`ProxyError`], answered in one place (`error`); a panic is caught and
//! answered as `internal_error` (`catch`).

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{request, HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;
use tokio::time::Instant;

use super::body::{Payload, ResponseBody};
use super::catch::{catch_panic, injected_panic};
use super::chunks;
use super::head;
use super::held::{Holder, Reserved};
use super::inspected::{self, Inspect};
use super::respond::{cannot_build, error_response, respond};
use super::tunnel;
use super::{Arrival, Shared};
use crate::context::{RequestContext, Waited};
use crate::error::{ProxyError, RequestError};
use crate::forward::{self, ClientFault, Codings, Fetched, Reading, Traced, UpstreamBody};
use crate::request_id::request_id;
use crate::route::{Matched, Route, RouteTable};
use crate::telemetry;
use crate::trace;
use probity_judge::batch;
use probity_judge::inspect::{self, Asked};

/// The proxy's service: every request gets exactly one response.
pub(super) async fn handle(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<ResponseBody>, Infallible> {
    let arrival = request.extensions().get::<Arc<Arrival>>().cloned();
    let delivery = arrival.as_ref().map(|a| a.delivery.clone());
    let peer = arrival.as_ref().map(|a| &a.peer);
    let address = head::client_address(request.headers(), peer, shared.trusted_hops);
    let (head, body) = request.into_parts();
    let span = (shared.tracer.as_ref()).and_then(|t| t.request(&head.headers, &head.method));
    let mut ctx = RequestContext::arrived(request_id(&head.headers), &head, span);
    let mut reserved = None;
    let mut opened = None;
    let outcome = catch_panic(exchange(
        &shared,
        (head, body, address),
        (&mut reserved, &mut opened),
        &mut ctx,
    ))
    .await;
    let response = match outcome {
        Ok(Ok(response)) => response,
        Ok(Err(err)) => error_response(&err, &ctx),
        Err(what) => {
            telemetry::internal_error(ctx.route_label(), &ctx.request_id, &what);
            error_response(&ProxyError::Internal { what }, &ctx)
        }
    };
    ctx.status = response.status();
    if let (Some(pending), StatusCode::SWITCHING_PROTOCOLS) = (opened, response.status()) {
        tokio::spawn(pending.run(ctx, shared.tunnels.clone()));
        return Ok(response.map(|_| ResponseBody::switched()));
    }
    let share = match response.body() {
        Payload::Whole(Some(bytes)) => {
            let holder = Holder::of(ctx.client.as_deref(), address);
            if let Some(reserved) = &reserved {
                reserved.answered(bytes.len() as u64);
            }
            Some(
                shared
                    .held
                    .hold(bytes.len() as u64, holder, delivery.as_ref()),
            )
        }
        _ => None,
    };
    // Given back only now that the answer itself is counted.
    drop(reserved);
    let (head, payload) = response.into_parts();
    let body = ResponseBody::new(payload, ctx, &head, share);
    Ok(Response::from_parts(head, body))
}

/// What probity does with a request once its route is known: one typed
/// choice, made in [`plan`] before anything goes upstream.
enum Plan<'a> {
    /// A WebSocket upgrade to a Realtime endpoint: tunnelled (`tunnel`).
    Tunnel(tunnel::Upgrade<'a>),
    /// An endpoint the dialect does not inspect: streamed through both
    /// ways, never held.
    Passthrough(Incoming),
    /// Inspected: its answer judged (`inspected`), sent as it came or in
    /// chunks.
    Inspected(Inspect<'a>, Sending),
}

/// How an inspected request goes upstream.
enum Sending {
    /// A batch larger than the route's `max_batch_inputs`: as chunks,
    /// their answers stitched (`chunks`).
    Chunked(Vec<Bytes>),
    /// As it came, its answer read whole or judged event by event, as the
    /// request asked.
    One(Reading),
}

/// The phases of one request, in order: admit (its route and client), plan
/// (what is done with it), then forward, judge and respond as the plan
/// says; the last phase, finish, runs when its body ends (`body`). `address`
/// is the client's (`head::client_address`); an inspected request's guess
/// at its answer is left in `reserved`, a WebSocket tunnel to run in
/// `opened`.
async fn exchange(
    shared: &Shared,
    (mut head, body, address): (request::Parts, Incoming, Option<std::net::IpAddr>),
    (reserved, opened): (&mut Option<Reserved>, &mut Option<tunnel::ReadyTunnel>),
    ctx: &mut RequestContext,
) -> Result<Response<Payload>, ProxyError> {
    let upgrade = head::check(&head)?.map(|asked| tunnel::Upgrade::take(asked, &mut head, opened));
    let peer = head.extensions.get::<Arc<Arrival>>().map(|a| &a.peer);
    head::clean(&mut head.headers, peer, shared.trusted_hops);
    // The table in force when the request came: a reload never changes a
    // request (or a stream) in flight.
    let routes = shared.routes.current();
    let matched = admit(ctx, (&routes, head.uri.path()), &mut head.headers)?;
    let (route, rest) = (matched.route, matched.rest);
    ctx.upstream_path = route.upstream.path(rest);
    let asked = (upgrade, body, address, &mut *reserved);
    let (inspect, sending) = match plan(shared, route, (&head, rest), asked, ctx).await? {
        // Each plan's call is boxed where it is awaited: an async fn's
        // future holds room for all its awaits side by side, and this one
        // is boxed for every request (`catch_panic`): with the calls in it,
        // 20 to 35 KB allocated and copied each time; this way one box the
        // size of the call the request makes.
        Plan::Tunnel(asked) => return Box::pin(tunnel::open(route, &head, rest, asked, ctx)).await,
        Plan::Passthrough(body) => {
            return Box::pin(passthrough(route, &head, rest, body, ctx, shared)).await
        }
        Plan::Inspected(inspect, sending) => (inspect, sending),
    };
    let reading = match sending {
        Sending::Chunked(bodies) => {
            return Box::pin(chunks::send((shared, route), &inspect, bodies, ctx)).await
        }
        Sending::One(reading) => reading,
    };
    let body = inspect.body.clone().into();
    let upstream_request = inspect.upstream_request(route, body, &ctx.request_id)?;
    let traced = ctx.span.as_deref().map(Traced::request);
    let waited = &mut ctx.waited.upstream;
    let on = (shared, &**route);
    let fetch = forward::fetch(&route.upstream, upstream_request, reading, traced, waited);
    match Box::pin(fetch).await? {
        Fetched::Whole(upstream, bytes, scanner, decoded) => {
            inspected::whole(on, &inspect, (upstream, bytes, scanner, decoded), ctx)
        }
        Fetched::Stream(upstream, relay) => {
            Ok(inspected::streamed(on, &inspect, (upstream, relay), ctx))
        }
    }
}

/// The plan phase: a tunnel, a passthrough, or an inspected request, whose
/// body is read (and its answer's size reserved in the held budget) to
/// decide between chunks and one call, and how its answer is read.
async fn plan<'a>(
    shared: &Shared,
    route: &Route,
    (parts, rest): (&'a request::Parts, &'a str),
    (upgrade, body, address, reserved): (
        Option<tunnel::Upgrade<'a>>,
        Incoming,
        Option<std::net::IpAddr>,
        &mut Option<Reserved>,
    ),
    ctx: &mut RequestContext,
) -> Result<Plan<'a>, ProxyError> {
    if let Some(asked) = upgrade {
        return Ok(Plan::Tunnel(asked));
    }
    let path = ctx.upstream_path.as_str();
    // The dialect's table decides by method: every POST it names, and the
    // few reads it names (a GET answering the same object as a POST).
    let endpoint = match parts.method {
        Method::POST => route.endpoint(path),
        Method::GET => route.dialect.read(path, parts.uri.query()),
        _ => None,
    };
    injected_panic("exchange", &ctx.request_id);
    let Some(endpoint) = endpoint else {
        // A POST the dialect knows but cannot judge (a Bedrock model of
        // no known family) is counted as such.
        let unjudged = (parts.method == Method::POST)
            .then(|| route.dialect.unjudged(path))
            .flatten();
        if let Some(reason) = unjudged {
            telemetry::uninspected(&route.name, &ctx.request_id, reason);
        }
        return Ok(Plan::Passthrough(body));
    };
    let holder = Holder::of(ctx.client.as_deref(), address);
    *reserved = Some(shared.held.admit(&holder, &route.name)?);
    let body = read_body(body, &parts.headers, shared, &mut ctx.waited).await?;
    if let Some(span) = &ctx.span {
        span.requested(endpoint.operation(), &body, &ctx.upstream_path);
    }
    let split = route
        .max_batch_inputs
        .zip(endpoint.batch().copied())
        .and_then(|(max, spec)| batch::split(&body, &spec, max));
    let reading = match endpoint.asked(&body) {
        Asked::Unknown => Reading::ByMedia,
        Asked::Document => Reading::Document,
        Asked::Stream => Reading::Stream,
    };
    let accepted = Codings::accepted_by(&parts.headers);
    // Only an answer read whole is asked for compressed: a stream's
    // events are judged as they pass.
    let ask = match (reading, route.upstream_compression) {
        (Reading::Document, true) => Codings::ALL,
        (Reading::Document, false) => accepted,
        _ => Codings::NONE,
    };
    let inspect = Inspect {
        endpoint,
        client: parts,
        rest,
        body,
        ask,
        accepted,
    };
    Ok(match split {
        Some(bodies) => Plan::Inspected(inspect, Sending::Chunked(bodies)),
        None => Plan::Inspected(inspect, Sending::One(reading)),
    })
}

/// The admit phase: the request's route, and its client admitted (or
/// refused); its context and span learn both. Only an admitted client
/// learns which prefixes exist when none matches.
fn admit<'t>(
    ctx: &mut RequestContext,
    (routes, path): (&'t RouteTable, &'t str),
    headers: &mut HeaderMap,
) -> Result<Matched<'t>, ProxyError> {
    let clients = &routes.clients;
    let matched = match routes.find(path) {
        Ok(matched) => matched,
        Err(mut no_route) => {
            let specs = inspect::credential_specs();
            if clients.admit(headers, &specs).is_err() {
                no_route.prefixes.clear();
            }
            return Err(no_route.into());
        }
    };
    let route = matched.route;
    ctx.route = Some(route.clone());
    ctx.client = clients
        .admit(headers, &[route.dialect.credential()])
        .map_err(|refused| {
            telemetry::refused(&route.name, &ctx.request_id, &refused);
            RequestError::Unauthenticated {
                header: refused.header,
                prefix: refused.prefix,
            }
        })?;
    routed(ctx, route);
    Ok(matched)
}

/// The request's span learns its route.
fn routed(ctx: &RequestContext, route: &Route) {
    if let Some(span) = &ctx.span {
        let (address, port) = route.upstream.address();
        span.routed(&trace::Routed {
            route: &route.name,
            client: ctx.client.as_deref(),
            provider: route.dialect.provider(),
            server_address: address,
            server_port: port,
        });
    }
}

/// An endpoint the route's dialect does not inspect (a file upload, a
/// model list, a download): streamed through both ways as it arrives, as a
/// plain reverse proxy does, never held and bounded by no body limit of
/// probity's (those bound only what it must hold to judge).
async fn passthrough(
    route: &Route,
    client: &request::Parts,
    rest: &str,
    body: Incoming,
    ctx: &mut RequestContext,
    shared: &Shared,
) -> Result<Response<Payload>, ProxyError> {
    let fault = ClientFault::default();
    let body = match route.upstream.signer {
        // A signature covers the body's hash: it is read whole first
        // (within max_request_bytes).
        Some(_) => {
            // Boxed: a SigV4 passthrough is rare, and its read would
            // take room in every passthrough's future.
            let read = read_body(body, &client.headers, shared, &mut ctx.waited);
            let body = Box::pin(read).await?;
            UpstreamBody::from(body)
        }
        None => UpstreamBody::Streaming(body, fault.clone()),
    };
    // Unjudged bytes pass as they came: the client's own Accept-Encoding.
    let head = (client, rest);
    let request = forward::upstream_request(&route.upstream, head, body, None, &ctx.request_id)
        .map_err(cannot_build)?;
    let traced = ctx.span.as_deref().map(Traced::request);
    // A streamed upload goes out within this call: its time is the
    // upstream's and the client's, never probity's.
    let waited = &mut ctx.waited.upstream;
    let fetched = match forward::fetch(
        &route.upstream,
        request,
        Reading::Passthrough,
        traced,
        waited,
    )
    .await
    {
        Ok(fetched) => fetched,
        // The upstream request failed because the client's body did: the
        // upstream got a cut request (hyper aborts it, and that connection
        // is never reused), the client a 400.
        Err(_) if fault.get().is_some() => {
            let cause = fault.get().unwrap_or_default().to_string();
            return Err(RequestError::Unreadable { cause }.into());
        }
        Err(err) => return Err(err.into()),
    };
    let (upstream, payload) = match fetched {
        Fetched::Stream(upstream, relay) => (upstream, Payload::Stream(relay)),
        Fetched::Whole(upstream, bytes, ..) => (upstream, Payload::Whole(Some(bytes))),
    };
    ctx.upstream_status = Some(upstream.status);
    Ok(respond(upstream, &ctx.request_id, payload))
}

/// Reads the client's body, refusing it (before reading, when the length is
/// declared) once it exceeds `limit`. Held whole because model requests are
/// small JSON documents that inspection needs (`n`, the inputs, the schema).
/// The read is time waited on the client (a slow uploader's is not
/// probity's overhead).
async fn read_body(
    body: Incoming,
    headers: &HeaderMap,
    shared: &Shared,
    waited: &mut Waited,
) -> Result<Bytes, RequestError> {
    let limit = shared.max_request_bytes;
    if forward::content_length(headers).is_some_and(|len| len > limit) {
        return Err(RequestError::TooLarge { limit });
    }
    let limited = Limited::new(body, usize::try_from(limit).unwrap_or(usize::MAX));
    let reading = Instant::now();
    // A head then a trickled body must not hold a connection forever.
    let collected = tokio::time::timeout(shared.body_read_timeout, limited.collect()).await;
    waited.client += reading.elapsed();
    let collected = collected.map_err(|_| RequestError::BodyTimeout {
        after_ms: u64::try_from(shared.body_read_timeout.as_millis()).unwrap_or(u64::MAX),
    })?;
    match collected {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(err) if err.is::<LengthLimitError>() => Err(RequestError::TooLarge { limit }),
        Err(err) => Err(RequestError::Unreadable {
            cause: err.to_string(),
        }),
    }
}
