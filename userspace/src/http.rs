//! The health and metrics endpoint: `/metrics` (OpenMetrics or the classic Prometheus text,
//! as asked), `/healthz` (every serving thread runs), `/readyz` (the table is loaded and its sources are fresh).

use std::{net::SocketAddr, sync::Arc};

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use prometheus_client::{encoding::text::encode, registry::Registry};
use tokio::net::TcpListener;

use crate::{exposition, health::Health, liveness::Liveness};

struct AppState {
    registry: Registry,
    health: Arc<Health>,
    liveness: Liveness,
}

/// Binds the endpoint. SO_REUSEPORT, like the DNS sockets, so that a new agent can start beside
/// the one it replaces (a zero-downtime upgrade runs both for a moment).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.set_reuseport(true)?;
    socket.bind(addr)?;
    socket.listen(128)
}

pub async fn serve(
    listener: TcpListener,
    registry: Registry,
    health: Arc<Health>,
    liveness: Liveness,
) -> std::io::Result<()> {
    let state = Arc::new(AppState {
        registry,
        health,
        liveness,
    });
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state);
    axum::serve(listener, app).await
}

/// OpenMetrics to whoever asks for it (Prometheus), the classic text format to everyone else.
async fn metrics(
    State(state): State<Arc<AppState>>,
    headers: axum::http::HeaderMap,
) -> impl IntoResponse {
    let mut body = String::new();
    let accept = headers
        .get(axum::http::header::ACCEPT)
        .and_then(|a| a.to_str().ok());
    match encode(&mut body, &state.registry) {
        Ok(()) if exposition::wants_openmetrics(accept) => (
            StatusCode::OK,
            [("content-type", exposition::OPENMETRICS_CONTENT_TYPE)],
            body,
        ),
        Ok(()) => (
            StatusCode::OK,
            [("content-type", exposition::CLASSIC_CONTENT_TYPE)],
            exposition::classic(&body),
        ),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [("content-type", "text/plain")],
            String::new(),
        ),
    }
}

/// Fails once a serving thread or task has stopped (a panic): the kubelet restarts the agent.
async fn healthz(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    let stopped = state.liveness.stopped();
    if stopped.is_empty() {
        (StatusCode::OK, "ok\n".to_owned())
    } else {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("stopped: {}\n", stopped.join(", ")),
        )
    }
}

async fn readyz(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    match state.health.not_ready_reason() {
        None => (StatusCode::OK, "ready\n".to_owned()),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        ),
    }
}
