//! What a request passes before a handler sees it: the API key, and a JSON body read whole
//! within `--body-read-timeout` and `--payload-limit`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::api::{ApiError, App};

/// A secret the server compares requests against. Its `Debug` shows no part of it, so it
/// never reaches a log through [`crate::ServeOptions`].
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    /// `key`, refused when empty or when it holds characters an HTTP header cannot carry.
    pub fn new(key: impl Into<String>) -> Result<Self, crate::ServeError> {
        let key = key.into();
        if key.is_empty() {
            return Err(crate::ServeError::ApiKey("is empty"));
        }
        if !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(crate::ServeError::ApiKey("holds a space, a control or a non-ASCII character, which an Authorization header cannot carry"));
        }
        Ok(Self(key))
    }

    /// Whether `Authorization` is `Bearer <this key>`, the key compared in constant time.
    fn admits(&self, authorization: Option<&HeaderValue>) -> bool {
        let Some(value) = authorization.map(HeaderValue::as_bytes) else {
            return false;
        };
        let Some((scheme, token)) = value.split_first_chunk::<7>() else {
            return false;
        };
        scheme.eq_ignore_ascii_case(b"bearer ") && bool::from(token.ct_eq(self.0.as_bytes()))
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// Answer 401 unless the request carries the server's key (`Authorization: Bearer KEY`), when
/// it has one.
pub(crate) async fn authorize(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    match &app.options.api_key {
        Some(key) if !key.admits(request.headers().get(header::AUTHORIZATION)) => {
            let what = if request.headers().contains_key(header::AUTHORIZATION) { "a wrong API key" } else { "no API key" };
            let mut response = ApiError::new(StatusCode::UNAUTHORIZED, "Unauthorized", format!("the request has {what}: send `Authorization: Bearer KEY` with the server's --api-key")).into_response();
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            response
        }
        _ => next.run(request).await,
    }
}

/// Read a JSON request's body whole before its handler runs: 415 for another `Content-Type`
/// (none is taken as JSON), 413 past `--payload-limit` (a chunked body included, read no
/// further), 408 when it has not all arrived within `--body-read-timeout`.
pub(crate) async fn read_body(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    if let Some(kind) = request.headers().get(header::CONTENT_TYPE) {
        let essence = kind.to_str().unwrap_or("").split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        if essence != "application/json" && !essence.ends_with("+json") {
            let shown = String::from_utf8_lossy(kind.as_bytes()).into_owned();
            return ApiError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, "Validation", format!("`Content-Type: {shown}`: the body must be JSON (`application/json`)")).into_response();
        }
    }
    let (parts, body) = request.into_parts();
    let (limit, timeout) = (app.options.payload_limit, app.options.body_read_timeout);
    let bytes = match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) => {
            let e = e.into_inner();
            if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
                return ApiError::body_too_large(limit).into_response();
            }
            return ApiError::new(StatusCode::BAD_REQUEST, "Validation", format!("the request body could not be read: {e}")).into_response();
        }
        Err(_) => {
            let mut response = ApiError::new(StatusCode::REQUEST_TIMEOUT, "Validation", format!("the request body did not arrive within --body-read-timeout {} s", timeout.as_secs_f64())).into_response();
            response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
            return response;
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}
