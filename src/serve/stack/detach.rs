//! The layer that answers a request on a task of its own: a client that
//! leaves stops waiting, not the request, whose record is then finished
//! (at the latest with the route's first byte) as the client's leaving.

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;

use super::super::reply::error;

pub(super) async fn own_task(request: Request, next: Next) -> Response {
    tokio::spawn(next.run(request)).await.unwrap_or_else(|_| {
        error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            None,
            "serve failed while answering the request",
        )
    })
}
