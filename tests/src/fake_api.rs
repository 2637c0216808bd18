//! A protocol-faithful fake Kubernetes API server, for the real `kube` client in the agent: list
//! and watch over HTTP with resource versions, label selectors, bookmarks, 410 Gone as an ERROR
//! event inside the watch stream (what a real API server sends), each watch ended after its
//! `timeoutSeconds` (as the API server does), and knobs to drop connections, refuse service,
//! answer slowly, or hang (see [`FakeApi::freeze`]).
//!
//! Serves Pods (`/api/v1/pods`, namespaced too), Nodes (`/api/v1/nodes`), EndpointSlices
//! (`/apis/discovery.k8s.io/v1/...`), `/version` and `/readyz`; and, in a namespace, Services,
//! Leases and external-dns's DNSEndpoints, which clients also write: create (POST; 409
//! AlreadyExists), get, replace (PUT; 409 Conflict when the `resourceVersion` sent is not the
//! stored one, as optimistic concurrency works) and delete, each write recorded
//! ([`FakeApi::writes`]).

use std::{
    collections::BTreeMap,
    convert::Infallible,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    body::Body,
    extract::{Path, Query, Request, State},
    http::{StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::get,
    serve::ListenerExt,
};
use serde_json::{Value, json};
use tokio::sync::{broadcast, oneshot};

use crate::{api_tls::TlsListener, netns::NetNs};

/// The kinds the fake serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Pod,
    Node,
    EndpointSlice,
    Service,
    Lease,
    DnsEndpoint,
}

impl Kind {
    fn list_kind(self) -> &'static str {
        match self {
            Kind::Pod => "PodList",
            Kind::Node => "NodeList",
            Kind::EndpointSlice => "EndpointSliceList",
            Kind::Service => "ServiceList",
            Kind::Lease => "LeaseList",
            Kind::DnsEndpoint => "DNSEndpointList",
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Kind::Pod => "Pod",
            Kind::Node => "Node",
            Kind::EndpointSlice => "EndpointSlice",
            Kind::Service => "Service",
            Kind::Lease => "Lease",
            Kind::DnsEndpoint => "DNSEndpoint",
        }
    }

    fn api_version(self) -> &'static str {
        match self {
            Kind::EndpointSlice => "discovery.k8s.io/v1",
            Kind::Lease => "coordination.k8s.io/v1",
            Kind::DnsEndpoint => "externaldns.k8s.io/v1alpha1",
            _ => "v1",
        }
    }

    /// The resource as an error names it (`leases.coordination.k8s.io`).
    fn qualified_resource(self) -> String {
        let plural = format!("{}s", self.kind().to_ascii_lowercase());
        match self.api_version().rsplit_once('/') {
            Some((group, _)) => format!("{plural}.{group}"),
            None => plural,
        }
    }
}

#[derive(Clone)]
struct Event {
    rv: u64,
    kind: Kind,
    namespace: String,
    kind_of_change: &'static str,
    object: Value,
}

impl ApiState {
    /// Stores `object` as the next revision (an ADDED or MODIFIED event); returns it as stored.
    fn store(&mut self, kind: Kind, object: Value) -> Value {
        self.rv += 1;
        let rv = self.rv;
        let mut object = object;
        object["kind"] = json!(kind.kind());
        object["apiVersion"] = json!(kind.api_version());
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let name = object["metadata"]["name"]
            .as_str()
            .expect("an object with a name")
            .to_owned();
        let existed = self
            .objects
            .insert((kind, namespace.clone(), name), object.clone())
            .is_some();
        let kind_of_change = if existed { "MODIFIED" } else { "ADDED" };
        self.events.push(Event {
            rv,
            kind,
            namespace,
            kind_of_change,
            object: object.clone(),
        });
        object
    }
}

#[derive(Default)]
struct ApiState {
    rv: u64,
    /// (kind, namespace, name) → object (with its resourceVersion).
    objects: BTreeMap<(Kind, String, String), Value>,
    events: Vec<Event>,
    /// Watches from a resourceVersion below this get 410 Gone.
    compacted_below: u64,
    /// Everything answers 503 and open watches close.
    outage: bool,
    /// A hung API server (see [`FakeApi::freeze`]).
    frozen: bool,
    /// Lists wait while this is set (see [`FakeApi::hold_lists`]).
    lists_held: bool,
    /// Watches wait before their first event while this is set (see [`FakeApi::hold_watches`]).
    watches_held: bool,
    /// An object applied right after the next list of its kind is answered (see
    /// [`FakeApi::apply_after_next_list`]).
    after_list: Option<(Kind, Value)>,
    /// Kinds whose lists and watches get 403 Forbidden, as RBAC answers (see [`FakeApi::forbid`]).
    forbidden: Vec<Kind>,
    /// Every request line, for checking what the agent asked for.
    requests: Vec<String>,
    /// Requests without the expected bearer token.
    unauthorized: usize,
}

/// How the fake API server lets clients in. The default is plain HTTP, open to all.
#[derive(Default)]
pub struct Access {
    /// Serve HTTPS with this configuration (see [`crate::api_tls::ApiCredentials`]).
    pub tls: Option<tokio_rustls::rustls::ServerConfig>,
    /// Requests must carry `Authorization: Bearer <token>`; others get 401 Unauthorized.
    pub bearer_token: Option<String>,
    /// Where to listen; default 127.0.0.1 on a free port.
    pub bind: Option<SocketAddr>,
}

/// A running fake API server, stopped on drop.
pub struct FakeApi {
    pub addr: SocketAddr,
    https: bool,
    /// TLS handshakes the server refused (no or untrusted client certificate).
    refused_handshakes: Arc<AtomicUsize>,
    state: Arc<Mutex<ApiState>>,
    changes: broadcast::Sender<()>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeApi {
    /// Starts the server on 127.0.0.1 (inside `ns` if given) on a free port, plain HTTP.
    pub fn start(ns: Option<&NetNs>) -> Self {
        Self::start_with(ns, Access::default())
    }

    /// Starts the server with the given access rules.
    pub fn start_with(ns: Option<&NetNs>, access: Access) -> Self {
        let https = access.tls.is_some();
        let refused_handshakes = Arc::new(AtomicUsize::new(0));
        let refused = refused_handshakes.clone();
        let state = Arc::new(Mutex::new(ApiState {
            rv: 1,
            ..ApiState::default()
        }));
        let (changes, _) = broadcast::channel(1024);
        let (stop_tx, stop_rx) = oneshot::channel();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let app_state = (state.clone(), changes.clone());
        let ns_path = ns.map(|n| format!("/run/netns/{}", n.name));
        let thread = std::thread::spawn(move || {
            if let Some(path) = ns_path {
                let file = std::fs::File::open(&path).expect("open the namespace");
                // SAFETY: setns on this thread only.
                let rc = unsafe {
                    libc::setns(std::os::fd::AsRawFd::as_raw_fd(&file), libc::CLONE_NEWNET)
                };
                assert_eq!(rc, 0, "setns");
            }
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let bind = access
                    .bind
                    .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
                let listener = tokio::net::TcpListener::bind(bind).await.expect("bind");
                addr_tx
                    .send(listener.local_addr().expect("an address"))
                    .expect("report the address");
                let app = router(app_state, access.bearer_token);
                let stopped = async {
                    let _ = stop_rx.await;
                };
                match access.tls {
                    Some(config) => {
                        let listener = TlsListener::new(listener, config, refused);
                        let _ = axum::serve(listener, app)
                            .with_graceful_shutdown(stopped)
                            .await;
                    }
                    None => {
                        // Go's net/http (the real API server) sets TCP_NODELAY; without it a
                        // watch event written in two pieces waits for a delayed ACK (~40 ms).
                        let listener = listener.tap_io(|tcp| {
                            let _ = tcp.set_nodelay(true);
                        });
                        let _ = axum::serve(listener, app)
                            .with_graceful_shutdown(stopped)
                            .await;
                    }
                }
            });
            runtime.shutdown_timeout(Duration::from_millis(100));
        });
        let addr = addr_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the fake API server started");
        Self {
            addr,
            https,
            refused_handshakes,
            state,
            changes,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// TLS handshakes refused so far (no or untrusted client certificate).
    pub fn refused_handshakes(&self) -> usize {
        self.refused_handshakes.load(Ordering::Relaxed)
    }

    /// Requests turned away with 401 Unauthorized so far.
    pub fn unauthorized_requests(&self) -> usize {
        self.lock().unauthorized
    }

    /// Creates or replaces an object (a k8s-openapi value serialized to JSON).
    pub fn apply(&self, kind: Kind, object: Value) {
        self.lock().store(kind, object);
        let _ = self.changes.send(());
    }

    /// Applies `object` right after the next list of `kind` (a full list, not a `limit=1`
    /// revision probe) has been read: a change the list does not show, with the revision after
    /// the list's, as when a pod changes while a list is on its way.
    pub fn apply_after_next_list(&self, kind: Kind, object: Value) {
        self.lock().after_list = Some((kind, object));
    }

    /// Whether an object waits for the next list of its kind.
    pub fn applies_after_a_list(&self) -> bool {
        self.lock().after_list.is_some()
    }

    /// Makes every watch wait before sending anything until [`FakeApi::release_watches`].
    pub fn hold_watches(&self) {
        self.lock().watches_held = true;
    }

    pub fn release_watches(&self) {
        self.lock().watches_held = false;
        let _ = self.changes.send(());
    }

    /// The stored object, if there is one.
    pub fn object(&self, kind: Kind, namespace: &str, name: &str) -> Option<Value> {
        self.lock()
            .objects
            .get(&(kind, namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// The stored objects of `kind` in `namespace`, by name.
    pub fn objects(&self, kind: Kind, namespace: &str) -> BTreeMap<String, Value> {
        self.lock()
            .objects
            .iter()
            .filter(|((k, ns, _), _)| *k == kind && ns == namespace)
            .map(|((_, _, name), object)| (name.clone(), object.clone()))
            .collect()
    }

    /// The write requests seen so far, in order: "POST Service ns", "PUT Lease ns/name",
    /// "DELETE Service ns/name" (refused ones included).
    pub fn writes(&self) -> Vec<String> {
        self.lock()
            .requests
            .iter()
            .filter(|r| !r.starts_with("GET "))
            .cloned()
            .collect()
    }

    pub fn delete(&self, kind: Kind, namespace: &str, name: &str) {
        let mut s = self.lock();
        s.rv += 1;
        let rv = s.rv;
        if let Some(mut object) = s
            .objects
            .remove(&(kind, namespace.to_owned(), name.to_owned()))
        {
            object["metadata"]["resourceVersion"] = json!(rv.to_string());
            s.events.push(Event {
                rv,
                kind,
                namespace: namespace.to_owned(),
                kind_of_change: "DELETED",
                object,
            });
        }
        drop(s);
        let _ = self.changes.send(());
    }

    /// Forgets the event history: every watch from an older resource version gets 410 Gone, and
    /// open watches are closed so that they find out.
    pub fn compact(&self) {
        let mut s = self.lock();
        s.compacted_below = s.rv + 1;
        s.events.clear();
        drop(s);
        let _ = self.changes.send(());
    }

    /// Starts or ends an outage: 503 for every request, open watches closed.
    pub fn set_outage(&self, outage: bool) {
        self.lock().outage = outage;
        let _ = self.changes.send(());
    }

    /// Refuses (403 Forbidden, the Status an RBAC denial carries) or allows again every list and
    /// watch of `kind`; open watches of it close, as a revoked permission ends them. `/version`
    /// and the other kinds keep answering.
    pub fn forbid(&self, kind: Kind, forbidden: bool) {
        let mut s = self.lock();
        s.forbidden.retain(|k| *k != kind);
        if forbidden {
            s.forbidden.push(kind);
        }
        drop(s);
        let _ = self.changes.send(());
    }

    /// Freezes the server as a half-open connection or an API server whose storage hangs would:
    /// open watches stay open but carry nothing (no event, no bookmark, no end at their
    /// timeout), and every new request is accepted and read but not answered. Unfrozen, held
    /// requests are answered and open watches go on. An outage or the server's end closes them.
    pub fn freeze(&self, frozen: bool) {
        self.lock().frozen = frozen;
        let _ = self.changes.send(());
    }

    /// Makes every list (not watches) wait until [`FakeApi::release_lists`]: a slow API server
    /// whose first answer comes exactly when the test says.
    pub fn hold_lists(&self) {
        self.lock().lists_held = true;
    }

    pub fn release_lists(&self) {
        self.lock().lists_held = false;
    }

    /// Lists asked for so far (watches not counted).
    pub fn list_requests(&self) -> usize {
        self.lock()
            .requests
            .iter()
            .filter(|r| !r.contains("watch=true") && !r.contains("watch=1"))
            .count()
    }

    /// The requests seen so far ("GET /api/v1/pods?...").
    pub fn requests(&self) -> Vec<String> {
        self.lock().requests.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ApiState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.freeze(false);
        self.set_outage(true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

type AppState = (Arc<Mutex<ApiState>>, broadcast::Sender<()>);

fn router(state: AppState, bearer_token: Option<String>) -> Router {
    let guarded = state.0.clone();
    let routes = routes(state);
    match bearer_token {
        None => routes,
        Some(token) => routes.layer(middleware::from_fn(move |request, next| {
            authenticate(guarded.clone(), token.clone(), request, next)
        })),
    }
}

/// Lets a request through only with `Authorization: Bearer <token>`, as the API server's token
/// authenticator does; 401 with a Status otherwise.
async fn authenticate(
    state: Arc<Mutex<ApiState>>,
    token: String,
    request: Request,
    next: Next,
) -> Response {
    let expected = format!("Bearer {token}");
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if presented == Some(expected.as_str()) {
        return next.run(request).await;
    }
    state.lock().unwrap_or_else(|p| p.into_inner()).unauthorized += 1;
    let status = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Unauthorized", "reason": "Unauthorized", "code": 401,
    });
    (
        StatusCode::UNAUTHORIZED,
        [(header::CONTENT_TYPE, "application/json")],
        status.to_string(),
    )
        .into_response()
}

fn routes(state: AppState) -> Router {
    Router::new()
        .route("/version", get(version))
        .route("/readyz", get(readyz))
        .route(
            "/api/v1/pods",
            get(|s, q| list_or_watch(s, q, Kind::Pod, None)),
        )
        .route(
            "/api/v1/namespaces/{ns}/pods",
            get(|s, q, Path(ns): Path<String>| list_or_watch(s, q, Kind::Pod, Some(ns))),
        )
        .route(
            "/api/v1/nodes",
            get(|s, q| list_or_watch(s, q, Kind::Node, None)),
        )
        .route(
            "/apis/discovery.k8s.io/v1/endpointslices",
            get(|s, q| list_or_watch(s, q, Kind::EndpointSlice, None)),
        )
        .route(
            "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
            get(|s, q, Path(ns): Path<String>| list_or_watch(s, q, Kind::EndpointSlice, Some(ns))),
        )
        .merge(writable("/api/v1/namespaces/{ns}/services", Kind::Service))
        .merge(writable(
            "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
            Kind::Lease,
        ))
        .merge(writable(
            "/apis/externaldns.k8s.io/v1alpha1/namespaces/{ns}/dnsendpoints",
            Kind::DnsEndpoint,
        ))
        .with_state(state)
}

/// A namespaced collection clients write: list and watch, create; get, replace and delete an
/// object.
fn writable(collection: &str, kind: Kind) -> Router<AppState> {
    Router::new()
        .route(
            collection,
            get(move |s, q, Path(ns): Path<String>| list_or_watch(s, q, kind, Some(ns)))
                .post(move |s, Path(ns): Path<String>, body: String| create(s, kind, ns, body)),
        )
        .route(
            &format!("{collection}/{{name}}"),
            get(move |s, Path((ns, name)): Path<(String, String)>| get_one(s, kind, ns, name))
                .put(
                    move |s, Path((ns, name)): Path<(String, String)>, body: String| {
                        replace(s, kind, ns, name, body)
                    },
                )
                .delete(move |s, Path((ns, name)): Path<(String, String)>| {
                    delete_one(s, kind, ns, name)
                }),
        )
}

/// A Status answer, as the API server words its failures.
fn status(code: StatusCode, reason: &str, message: String, kind: Kind, name: &str) -> Response {
    let plural = format!("{}s", kind.kind().to_ascii_lowercase());
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason,
        "details": {"name": name, "group": kind.api_version().rsplit_once('/').map_or("", |(g, _)| g), "kind": plural},
        "code": code.as_u16(),
    });
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Records a request and answers what every request gets first: held while frozen, 503 during
/// an outage, 403 for a forbidden kind.
async fn admit(state: &Mutex<ApiState>, line: String, kind: Kind) -> Option<Response> {
    state
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .requests
        .push(line);
    wait_while_frozen(state).await;
    let s = state.lock().unwrap_or_else(|p| p.into_inner());
    if s.outage {
        return Some((StatusCode::SERVICE_UNAVAILABLE, "outage").into_response());
    }
    if s.forbidden.contains(&kind) {
        let resource = kind.qualified_resource();
        return Some(status(
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!(
                "{resource} is forbidden: User \"system:serviceaccount:hostport-dns:hostport-dns\" cannot write resource \"{resource}\""
            ),
            kind,
            "",
        ));
    }
    None
}

fn not_found(kind: Kind, name: &str) -> Response {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("{} \"{name}\" not found", kind.qualified_resource()),
        kind,
        name,
    )
}

/// The body as an object of `kind` in `namespace`, or the 400/422 a real API server gives.
fn parse_body(kind: Kind, namespace: &str, body: &str) -> Result<Value, Box<Response>> {
    let mut object: Value = serde_json::from_str(body).map_err(|e| {
        Box::new(status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!("the body of the request was in an unknown format: {e}"),
            kind,
            "",
        ))
    })?;
    let name = object["metadata"]["name"].as_str().unwrap_or("").to_owned();
    let invalid = |message: String| {
        Box::new(status(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            format!("{} \"{name}\" is invalid: {message}", kind.kind()),
            kind,
            &name,
        ))
    };
    if name.is_empty() {
        return Err(invalid(
            "metadata.name: Required value: name is required".into(),
        ));
    }
    match object["metadata"]["namespace"].as_str() {
        None => object["metadata"]["namespace"] = json!(namespace),
        Some(ns) if ns == namespace => {}
        Some(ns) => {
            return Err(Box::new(status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!(
                    "the namespace of the provided object ({ns}) does not match the namespace sent on the request ({namespace})"
                ),
                kind,
                &name,
            )));
        }
    }
    if kind == Kind::Service {
        let spec = &mut object["spec"];
        if spec["type"].is_null() {
            spec["type"] = json!("ClusterIP");
        }
        let headless = spec["clusterIP"] == json!("None");
        let no_ports = spec["ports"].as_array().is_none_or(|p| p.is_empty());
        if no_ports && !headless {
            return Err(invalid("spec.ports: Required value".into()));
        }
        // What the API server allocates and defaults.
        if spec["clusterIP"].is_null() {
            spec["clusterIP"] = json!("198.18.255.1");
        }
        spec["clusterIPs"] = json!([spec["clusterIP"].clone()]);
        spec["sessionAffinity"] = json!("None");
        spec["internalTrafficPolicy"] = json!("Cluster");
    }
    Ok(object)
}

async fn create(
    State((state, changes)): State<AppState>,
    kind: Kind,
    namespace: String,
    body: String,
) -> Response {
    if let Some(refused) = admit(&state, format!("POST {} {namespace}", kind.kind()), kind).await {
        return refused;
    }
    let mut object = match parse_body(kind, &namespace, &body) {
        Ok(object) => object,
        Err(response) => return *response,
    };
    let name = object["metadata"]["name"].as_str().unwrap_or("").to_owned();
    let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
    if s.objects
        .contains_key(&(kind, namespace.clone(), name.clone()))
    {
        return status(
            StatusCode::CONFLICT,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", kind.qualified_resource()),
            kind,
            &name,
        );
    }
    let rv = s.rv + 1;
    object["metadata"]["uid"] = json!(format!("uid-{}-{rv}", kind.kind().to_ascii_lowercase()));
    object["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
    let stored = s.store(kind, object);
    drop(s);
    let _ = changes.send(());
    (
        StatusCode::CREATED,
        [(header::CONTENT_TYPE, "application/json")],
        stored.to_string(),
    )
        .into_response()
}

async fn get_one(
    State((state, _)): State<AppState>,
    kind: Kind,
    namespace: String,
    name: String,
) -> Response {
    if let Some(refused) = admit(
        &state,
        format!("GET {} {namespace}/{name}", kind.kind()),
        kind,
    )
    .await
    {
        return refused;
    }
    let s = state.lock().unwrap_or_else(|p| p.into_inner());
    match s.objects.get(&(kind, namespace, name.clone())) {
        Some(object) => json_response(object.clone()),
        None => not_found(kind, &name),
    }
}

async fn replace(
    State((state, changes)): State<AppState>,
    kind: Kind,
    namespace: String,
    name: String,
    body: String,
) -> Response {
    if let Some(refused) = admit(
        &state,
        format!("PUT {} {namespace}/{name}", kind.kind()),
        kind,
    )
    .await
    {
        return refused;
    }
    let mut object = match parse_body(kind, &namespace, &body) {
        Ok(object) => object,
        Err(response) => return *response,
    };
    if object["metadata"]["name"].as_str() != Some(name.as_str()) {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the name of the object does not match the name on the URL".into(),
            kind,
            &name,
        );
    }
    let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
    let Some(stored) = s
        .objects
        .get(&(kind, namespace.clone(), name.clone()))
        .cloned()
    else {
        return not_found(kind, &name);
    };
    let sent = object["metadata"]["resourceVersion"].as_str().unwrap_or("");
    // Services refuse an unconditional update; every kind refuses a stale one.
    if sent.is_empty() && kind == Kind::Service {
        return status(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            format!(
                "Service \"{name}\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
            ),
            kind,
            &name,
        );
    }
    if !sent.is_empty() && sent != stored["metadata"]["resourceVersion"].as_str().unwrap_or("") {
        return status(
            StatusCode::CONFLICT,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                kind.qualified_resource()
            ),
            kind,
            &name,
        );
    }
    if kind == Kind::Service && object["spec"]["clusterIP"] != stored["spec"]["clusterIP"] {
        return status(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            format!(
                "Service \"{name}\" is invalid: spec.clusterIP: Invalid value: {}: field is immutable",
                object["spec"]["clusterIP"]
            ),
            kind,
            &name,
        );
    }
    // Set by the server, kept whatever the client sends.
    object["metadata"]["uid"] = stored["metadata"]["uid"].clone();
    object["metadata"]["creationTimestamp"] = stored["metadata"]["creationTimestamp"].clone();
    let unchanged = {
        let mut a = object.clone();
        let mut b = stored.clone();
        for v in [&mut a, &mut b] {
            v["metadata"]["resourceVersion"] = Value::Null;
            v["kind"] = Value::Null;
            v["apiVersion"] = Value::Null;
        }
        a == b
    };
    if unchanged {
        // A no-op update: the API server keeps the revision and sends no event.
        return json_response(stored);
    }
    let stored = s.store(kind, object);
    drop(s);
    let _ = changes.send(());
    json_response(stored)
}

async fn delete_one(
    State((state, changes)): State<AppState>,
    kind: Kind,
    namespace: String,
    name: String,
) -> Response {
    if let Some(refused) = admit(
        &state,
        format!("DELETE {} {namespace}/{name}", kind.kind()),
        kind,
    )
    .await
    {
        return refused;
    }
    let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut object) = s.objects.remove(&(kind, namespace.clone(), name.clone())) else {
        return not_found(kind, &name);
    };
    s.rv += 1;
    let rv = s.rv;
    object["metadata"]["resourceVersion"] = json!(rv.to_string());
    s.events.push(Event {
        rv,
        kind,
        namespace,
        kind_of_change: "DELETED",
        object: object.clone(),
    });
    drop(s);
    let _ = changes.send(());
    json_response(object)
}

/// Holds a request while the server is frozen (not during an outage, which answers at once).
async fn wait_while_frozen(state: &Mutex<ApiState>) {
    loop {
        {
            let s = state.lock().unwrap_or_else(|p| p.into_inner());
            if !s.frozen || s.outage {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn version(State((state, _)): State<AppState>) -> Response {
    state
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .requests
        .push("GET /version".into());
    wait_while_frozen(&state).await;
    if state.lock().unwrap_or_else(|p| p.into_inner()).outage {
        return (StatusCode::SERVICE_UNAVAILABLE, "outage").into_response();
    }
    json_response(json!({
        "major": "1", "minor": "33", "gitVersion": "v1.33.0-fake", "gitCommit": "0", "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24", "compiler": "gc", "platform": "linux/amd64",
    }))
}

/// The API server's readiness, as `/readyz` answers it: `ok`, or 503 during an outage.
async fn readyz(State((state, _)): State<AppState>) -> Response {
    state
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .requests
        .push("GET /readyz".into());
    wait_while_frozen(&state).await;
    if state.lock().unwrap_or_else(|p| p.into_inner()).outage {
        return (StatusCode::SERVICE_UNAVAILABLE, "[-]etcd failed").into_response();
    }
    (StatusCode::OK, "ok").into_response()
}

fn json_response(value: Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

async fn list_or_watch(
    State((state, changes)): State<AppState>,
    Query(query): Query<BTreeMap<String, String>>,
    kind: Kind,
    namespace: Option<String>,
) -> Response {
    let selector = Selector::parse(query.get("labelSelector").map(String::as_str).unwrap_or(""));
    let (outage, forbidden) = {
        let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
        let query_text: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
        s.requests.push(format!(
            "GET {} {}?{}",
            kind.kind(),
            namespace.as_deref().unwrap_or("*"),
            query_text.join("&")
        ));
        (s.outage, s.forbidden.contains(&kind))
    };
    wait_while_frozen(&state).await;
    let outage = outage || state.lock().unwrap_or_else(|p| p.into_inner()).outage;
    if outage {
        return (StatusCode::SERVICE_UNAVAILABLE, "outage").into_response();
    }
    if forbidden {
        let resource = format!("{}s", kind.kind().to_ascii_lowercase());
        let status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("{resource} is forbidden: User \"system:serviceaccount:kube-system:hostport-dns\" cannot list resource \"{resource}\""),
            "reason": "Forbidden", "details": {"kind": resource}, "code": 403});
        return (
            StatusCode::FORBIDDEN,
            [(header::CONTENT_TYPE, "application/json")],
            status.to_string(),
        )
            .into_response();
    }
    if query.get("watch").is_some_and(|w| w == "true" || w == "1") {
        let from: u64 = query
            .get("resourceVersion")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let bookmarks = query
            .get("allowWatchBookmarks")
            .is_some_and(|b| b == "true");
        let timeout = query
            .get("timeoutSeconds")
            .and_then(|t| t.parse().ok())
            .unwrap_or(290u64);
        return watch(
            state,
            changes,
            kind,
            namespace,
            selector,
            from,
            bookmarks,
            Duration::from_secs(timeout),
        );
    }
    while state.lock().unwrap_or_else(|p| p.into_inner()).lists_held {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
    let items: Vec<&Value> = s
        .objects
        .iter()
        .filter(|((k, ns, _), object)| {
            *k == kind && namespace.as_ref().is_none_or(|n| n == ns) && selector.matches(object)
        })
        .map(|(_, object)| object)
        .collect();
    // Pagination as the API server does it: `limit` items, and a `continue` token for the rest.
    let offset: usize = query
        .get("continue")
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let limit: usize = query
        .get("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let page: Vec<&Value> = items.iter().skip(offset).take(limit).copied().collect();
    let mut metadata = json!({"resourceVersion": s.rv.to_string()});
    if offset.saturating_add(limit) < items.len() {
        metadata["continue"] = json!((offset + limit).to_string());
    }
    let list = json!({
        "kind": kind.list_kind(),
        "apiVersion": kind.api_version(),
        "metadata": metadata,
        "items": page,
    });
    drop(items);
    if limit != 1
        && let Some((kind, object)) = s.after_list.take_if(|(k, _)| *k == kind)
    {
        s.store(kind, object);
        let _ = changes.send(());
    }
    json_response(list)
}

#[allow(clippy::too_many_arguments)]
fn watch(
    state: Arc<Mutex<ApiState>>,
    changes: broadcast::Sender<()>,
    kind: Kind,
    namespace: Option<String>,
    selector: Selector,
    from: u64,
    bookmarks: bool,
    timeout: Duration,
) -> Response {
    let deadline = tokio::time::Instant::now() + timeout;
    // (last resource version sent, stream ended)
    let stream = futures::stream::unfold((from, false), move |(sent, ended)| {
        let state = state.clone();
        let namespace = namespace.clone();
        let selector = selector.clone();
        // Subscribed before the state is read: no change can slip between the two.
        let mut wakeups = changes.subscribe();
        async move {
            if ended {
                return None;
            }
            loop {
                let (out, closed, current, frozen) = {
                    let s = state.lock().unwrap_or_else(|p| p.into_inner());
                    if sent < s.compacted_below.saturating_sub(1) && s.compacted_below > 0 {
                        let gone = json!({"type": "ERROR", "object": {
                            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": "too old resource version", "reason": "Expired", "code": 410}});
                        return Some((Ok::<_, Infallible>(format!("{gone}\n")), (sent, true)));
                    }
                    let out: Vec<String> = s
                        .events
                        .iter()
                        .filter(|e| {
                            e.rv > sent
                                && e.kind == kind
                                && namespace.as_ref().is_none_or(|n| *n == e.namespace)
                        })
                        .filter(|e| selector.matches(&e.object) || e.kind_of_change == "DELETED")
                        .map(|e| {
                            json!({"type": e.kind_of_change, "object": e.object}).to_string() + "\n"
                        })
                        .collect();
                    (
                        out,
                        s.outage || s.forbidden.contains(&kind),
                        s.rv,
                        s.frozen || s.watches_held,
                    )
                };
                if closed {
                    return None;
                }
                if frozen {
                    // Hung or held: nothing goes out, not even the end at the timeout.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                if tokio::time::Instant::now() >= deadline {
                    return None;
                }
                if !out.is_empty() {
                    return Some((Ok(out.concat()), (current, false)));
                }
                tokio::select! {
                    _ = wakeups.recv() => {}
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {
                        if bookmarks && current > sent {
                            let bookmark = json!({"type": "BOOKMARK", "object": {
                                "kind": kind.kind(), "apiVersion": kind.api_version(),
                                "metadata": {"resourceVersion": current.to_string()}}});
                            return Some((Ok(format!("{bookmark}\n")), (current, false)));
                        }
                    }
                    _ = tokio::time::sleep_until(deadline) => return None,
                }
            }
        }
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// Equality-based label selectors: `key`, `!key`, `key=value`, `key==value`, `key!=value`.
#[derive(Clone, Debug, Default)]
struct Selector(Vec<(String, Op)>);

#[derive(Clone, Debug)]
enum Op {
    Exists,
    Absent,
    Equals(String),
    NotEquals(String),
}

impl Selector {
    fn parse(text: &str) -> Self {
        Self(
            text.split(',')
                .filter(|r| !r.trim().is_empty())
                .map(|r| {
                    let r = r.trim();
                    if let Some((k, v)) = r.split_once("!=") {
                        (k.to_owned(), Op::NotEquals(v.to_owned()))
                    } else if let Some((k, v)) = r.split_once("==").or_else(|| r.split_once('=')) {
                        (k.to_owned(), Op::Equals(v.to_owned()))
                    } else if let Some(k) = r.strip_prefix('!') {
                        (k.to_owned(), Op::Absent)
                    } else {
                        (r.to_owned(), Op::Exists)
                    }
                })
                .collect(),
        )
    }

    fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        self.0.iter().all(|(key, op)| {
            let value = labels.get(key).and_then(Value::as_str);
            match op {
                Op::Exists => value.is_some(),
                Op::Absent => value.is_none(),
                Op::Equals(v) => value == Some(v.as_str()),
                Op::NotEquals(v) => value != Some(v.as_str()),
            }
        })
    }
}
