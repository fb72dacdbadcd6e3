//! Building HTTP responses: JSON bodies, Status failures, and the streaming body of watches.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::status::StatusError;

/// Body type of every response.
pub(crate) type ResponseBody = BoxBody<Bytes, Infallible>;

/// What the connection should do with a request.
pub(crate) enum Outcome {
    /// Send this response.
    Respond(Response<ResponseBody>),
    /// Close the connection without a response.
    Drop,
    /// Never answer.
    Hang,
}

/// A JSON response with the given code.
pub(crate) fn json(code: u16, value: &Value) -> Response<ResponseBody> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())).boxed());
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The Status response of a failure, with `Retry-After` when set.
pub(crate) fn status(error: &StatusError) -> Response<ResponseBody> {
    let mut response = json(error.code, &error.to_status());
    if let Some(value) = error
        .retry_after_header()
        .and_then(|v| HeaderValue::from_str(&v).ok())
    {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

/// A plain-text response (health endpoints).
pub(crate) fn text(code: u16, body: &'static str) -> Response<ResponseBody> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())).boxed());
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// A streaming 200 response whose chunks come from `receiver`; it ends when the sender
/// is dropped.
pub(crate) fn stream(receiver: mpsc::Receiver<Bytes>) -> Response<ResponseBody> {
    let mut response = Response::new(ChannelBody { receiver }.boxed());
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    response
}

/// A body fed by a channel (sent chunked).
struct ChannelBody {
    receiver: mpsc::Receiver<Bytes>,
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.receiver
            .poll_recv(cx)
            .map(|chunk| chunk.map(|bytes| Ok(Frame::data(bytes))))
    }
}
