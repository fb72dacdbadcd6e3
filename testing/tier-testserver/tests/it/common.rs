//! Helpers shared by the integration tests: a server factory, a plain HTTP client, a raw
//! watch reader, and a real kube client.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::api::{Api, ApiResource, DynamicObject};
use serde_json::Value;
use tier_testserver::{ServerConfig, TestApiServer};

pub const ADMIN: &str = "admin";
pub const ADMIN_TOKEN: &str = "admin-token";
pub const CONTROLLER: &str = "system:serviceaccount:kube-system:antrea-controller";
pub const CONTROLLER_TOKEN: &str = "controller-token";
pub const TIERS: &str = "/apis/crd.antrea.io/v1beta1/tiers";

/// A server with an admin and a controller user.
pub async fn server(config: ServerConfig) -> TestApiServer {
    TestApiServer::start(
        config
            .user(ADMIN_TOKEN, ADMIN)
            .user(CONTROLLER_TOKEN, CONTROLLER),
    )
    .await
    .unwrap()
}

/// One answered request.
#[derive(Debug)]
pub struct Reply {
    pub code: u16,
    pub headers: HeaderMap,
    pub body: Value,
}

/// A plain HTTP/1.1 client for the server.
pub struct Http {
    client: Client<HttpConnector, Full<Bytes>>,
    base: String,
    token: Option<String>,
}

impl Http {
    pub fn new(server: &TestApiServer, token: Option<&str>) -> Self {
        Self {
            client: Client::builder(TokioExecutor::new()).build_http(),
            base: server.url(),
            token: token.map(str::to_owned),
        }
    }

    pub fn admin(server: &TestApiServer) -> Self {
        Self::new(server, Some(ADMIN_TOKEN))
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Option<String>,
    ) -> Request<Full<Bytes>> {
        let mut builder = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        if let Some(ct) = content_type {
            builder = builder.header("content-type", ct);
        }
        builder
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .unwrap()
    }

    /// Sends and returns the raw response (for streams) or the client error.
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Option<String>,
    ) -> Result<http::Response<Incoming>, hyper_util::client::legacy::Error> {
        self.client
            .request(self.request(method, path, content_type, body))
            .await
    }

    /// Sends and reads the whole answer; `Err` when no response arrived.
    pub async fn try_send(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Option<String>,
    ) -> Result<Reply, String> {
        let response = self
            .raw(method, path, content_type, body)
            .await
            .map_err(|e| format!("{e:?}"))?;
        let code = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Ok(Reply {
            code,
            headers,
            body,
        })
    }

    pub async fn send(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Option<String>,
    ) -> Reply {
        self.try_send(method, path, content_type, body)
            .await
            .unwrap()
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send(Method::GET, path, None, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Reply {
        self.send(
            Method::POST,
            path,
            Some("application/json"),
            Some(body.to_string()),
        )
        .await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Reply {
        self.send(
            Method::PUT,
            path,
            Some("application/json"),
            Some(body.to_string()),
        )
        .await
    }

    pub async fn merge_patch(&self, path: &str, body: &Value) -> Reply {
        self.send(
            Method::PATCH,
            path,
            Some("application/merge-patch+json"),
            Some(body.to_string()),
        )
        .await
    }

    pub async fn delete(&self, path: &str, options: Option<&Value>) -> Reply {
        self.send(
            Method::DELETE,
            path,
            options.map(|_| "application/json"),
            options.map(Value::to_string),
        )
        .await
    }
}

/// Reads a watch response line by line.
pub struct WatchReader {
    body: Incoming,
    buffer: Vec<u8>,
}

impl WatchReader {
    pub async fn open(http: &Http, query: &str) -> Self {
        Self::open_at(http, TIERS, query).await
    }

    /// A watch of the collection at `path`.
    pub async fn open_at(http: &Http, path: &str, query: &str) -> Self {
        let response = http
            .raw(
                Method::GET,
                &format!("{path}?watch=true&{query}"),
                None,
                None,
            )
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        Self {
            body: response.into_body(),
            buffer: Vec::new(),
        }
    }

    /// The next event, `None` at the end of the stream; panics after `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> Option<Value> {
        tokio::time::timeout(timeout, self.next_inner())
            .await
            .expect("watch event in time")
    }

    async fn next_inner(&mut self) -> Option<Value> {
        loop {
            if let Some(pos) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=pos).collect();
                return Some(serde_json::from_slice(&line).unwrap());
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => panic!("watch body error: {e}"),
                None => return None,
            }
        }
    }

    /// The next non-BOOKMARK event.
    pub async fn next_change(&mut self, timeout: Duration) -> Option<Value> {
        loop {
            let event = self.next(timeout).await?;
            if event["type"] != "BOOKMARK" {
                return Some(event);
            }
        }
    }
}

/// A real kube client for `user`, with kube's own retries of 429/503/504 switched off.
pub async fn kube_client(server: &TestApiServer, user: &str) -> kube::Client {
    let yaml = server.kubeconfig_yaml(user, "test").unwrap();
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

pub fn tier_resource() -> ApiResource {
    ApiResource {
        group: "crd.antrea.io".into(),
        version: "v1beta1".into(),
        api_version: "crd.antrea.io/v1beta1".into(),
        kind: "Tier".into(),
        plural: "tiers".into(),
    }
}

pub fn tiers_api(client: kube::Client) -> Api<DynamicObject> {
    Api::all_with(client, &tier_resource())
}

/// A Tier as a `DynamicObject`.
pub fn dynamic_tier(name: &str, priority: i64) -> DynamicObject {
    serde_json::from_value(tier_testserver::tier::tier(name, priority, None)).unwrap()
}

pub const SHORT: Duration = Duration::from_secs(5);
