//! When the API server last accepted each watch: a layer in the Kubernetes client's service
//! stack notes every successful watch request, by path and label selector. kube's watcher
//! re-watches silently after a failure (no event comes out of it until an object changes), so
//! this is how a failing watcher is known to work again without waiting for a change.

use std::{
    collections::HashMap,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
    time::Instant,
};

use http::{Request, Response};
use tower::{Layer, Service};

/// Watches accepted, by [`watch_key`].
#[derive(Clone, Default)]
pub struct ContactLog {
    accepted: Arc<Mutex<HashMap<String, Instant>>>,
}

impl ContactLog {
    /// When the API server last accepted a watch of `key`.
    pub fn watch_accepted(&self, key: &str) -> Option<Instant> {
        self.accepted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .copied()
    }

    fn note(&self, key: String) {
        self.accepted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, Instant::now());
    }
}

/// The key of a watch: its path and label selector as the request carries them
/// (`/api/v1/namespaces/edge/pods?labelSelector=app%3Dweb`).
pub fn watch_key(path: &str, selector: Option<&str>) -> String {
    match selector {
        Some(selector) => format!("{path}?labelSelector={}", encode(selector)),
        None => path.to_owned(),
    }
}

/// Percent-encoding as kube writes a label selector into the query string.
fn encode(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The key of a request, if it is a watch.
fn request_key<B>(request: &Request<B>) -> Option<String> {
    let query = request.uri().query()?;
    let mut watch = false;
    let mut selector = None;
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("watch", "true" | "1")) => watch = true,
            Some(("labelSelector", value)) => selector = Some(value),
            _ => {}
        }
    }
    watch.then(|| match selector {
        Some(selector) => format!("{}?labelSelector={selector}", request.uri().path()),
        None => request.uri().path().to_owned(),
    })
}

/// The layer that fills a [`ContactLog`].
#[derive(Clone)]
pub struct ContactLayer(pub ContactLog);

impl<S> Layer<S> for ContactLayer {
    type Service = ContactService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        ContactService {
            inner,
            log: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct ContactService<S> {
    inner: S,
    log: ContactLog,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for ContactService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let key = request_key(&request);
        let log = self.log.clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await;
            if let (Some(key), Ok(response)) = (key, &response)
                && response.status().is_success()
            {
                log.note(key);
            }
            response
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_request_and_its_watcher_have_the_same_key() {
        let request = Request::get(
            "/api/v1/namespaces/edge/pods?&watch=true&timeoutSeconds=290&labelSelector=ingress.cluster%2Fname%3Dpublic&allowWatchBookmarks=true&resourceVersion=4",
        )
        .body(())
        .unwrap();
        assert_eq!(
            request_key(&request).as_deref(),
            Some(
                watch_key(
                    "/api/v1/namespaces/edge/pods",
                    Some("ingress.cluster/name=public")
                )
                .as_str()
            )
        );
        let list = Request::get("/api/v1/pods?labelSelector=a")
            .body(())
            .unwrap();
        assert_eq!(request_key(&list), None, "a list is not a watch");
        let nodes = Request::get("/api/v1/nodes?watch=true&resourceVersion=1")
            .body(())
            .unwrap();
        assert_eq!(request_key(&nodes).as_deref(), Some("/api/v1/nodes"));
    }
}
