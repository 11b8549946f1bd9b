//! Captures in a bucket, against real object-store servers started by each
//! test on its own port (moto's S3 server for `s3://`, Microsoft's Azurite
//! for `az://`) and the real binary: a capture survives a restart byte for
//! byte; two instances sharing a bucket each see the other's; a bucket that
//! goes down changes no answer, its drops are counted and writes resume
//! when it is back. The credentials given to probity never appear in its
//! logs or metrics. A binary built without a bucket's feature refuses its
//! URL, naming the feature. The bucket is read back with the store's own
//! listing (S3's XML, Azure's SDK), never with probity's code.

use crate::support::*;

/// A scheme of `[capture] store`, the feature that builds it, and whether
/// this test binary's probity was built with it.
const SCHEMES: &[(&str, &str, bool)] = &[
    ("s3", "s3", cfg!(feature = "s3")),
    ("gs", "gcs", cfg!(feature = "gcs")),
    ("az", "azure", cfg!(feature = "azure")),
];

#[test]
fn a_bucket_whose_backend_is_not_built_is_refused_naming_its_feature() {
    let Some((scheme, feature, _)) = SCHEMES.iter().find(|(_, _, built)| !built) else {
        eprintln!("every bucket backend is built: nothing to refuse");
        return;
    };
    let path = temp_path(".toml");
    let text = config(
        "",
        &format!("[capture]\nstore = \"{scheme}://bucket/captures\"\n"),
    );
    std::fs::write(&path, text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_probity"))
        .args(["--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("capture.store"), "{said}");
    assert!(
        said.contains(&format!("`{feature}` cargo feature")),
        "{said}"
    );
}

/// The three tests, once per bucket backend this binary's probity has.
macro_rules! bucket_tests {
    ($module:ident, $feature:literal, $kind:expr) => {
        #[cfg(feature = $feature)]
        mod $module {
            #[tokio::test]
            async fn a_capture_in_a_bucket_survives_a_restart_byte_for_byte() {
                super::bucket::survives_a_restart($kind).await;
            }

            #[tokio::test]
            async fn two_instances_sharing_a_bucket_each_see_the_others_captures() {
                super::bucket::shared_by_two_instances($kind).await;
            }

            #[tokio::test]
            async fn a_bucket_that_goes_down_changes_no_answer_and_writes_resume() {
                super::bucket::down_then_back($kind).await;
            }

            #[tokio::test]
            async fn a_bucket_down_at_start_is_indexed_once_it_answers() {
                super::bucket::down_at_start_then_back($kind).await;
            }

            #[tokio::test]
            async fn a_stalled_bucket_changes_no_answer_and_holds_no_listing() {
                super::bucket::stalled_then_back($kind).await;
            }
        }
    };
}

bucket_tests!(s3, "s3", super::bucket::Kind::S3);
bucket_tests!(azure, "azure", super::bucket::Kind::Azure);

#[cfg(any(feature = "s3", feature = "azure"))]
mod bucket {
    use super::*;
    use std::path::PathBuf;
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    const EMBEDDINGS_REQUEST: &str = r#"{"model": "m", "input": ["a"]}"#;
    /// The bucket (S3) or container (Azure): valid in both.
    const BUCKET: &str = "probity-captures";
    /// Given to probity as its S3 key: it must never be shown.
    const S3_SECRET: &str = "s3cr3t-never-logged-0f9a8b";
    /// Azurite's one account key (public, but a key all the same: probity
    /// must not show it).
    const AZURITE_KEY: &str =
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

    /// Which object store a test runs against.
    #[derive(Clone, Copy, Debug)]
    pub(super) enum Kind {
        /// moto's S3-API server (`s3://`).
        #[cfg_attr(not(feature = "s3"), allow(dead_code))]
        S3,
        /// Azurite's Blob service (`az://`).
        #[cfg_attr(not(feature = "azure"), allow(dead_code))]
        Azure,
    }

    fn embeddings_body(prompt_tokens: &str) -> String {
        format!(
            r#"{{"object": "list", "data": [{{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}}], "model": "m", "usage": {{"prompt_tokens": {prompt_tokens}, "total_tokens": 4}}}}"#
        )
    }

    /// tests/azurite, where `npm ci` puts Azurite and Azure's SDK.
    fn azurite_dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/azurite")
    }

    /// An object-store server on a port of its own, with one bucket;
    /// killed on drop.
    struct Server {
        kind: Kind,
        child: Option<Child>,
        port: u16,
        /// S3 over HTTPS: the folder of a private CA and the server's
        /// certificate it signed (`ca.pem`, `cert.pem`, `key.pem`).
        tls: Option<PathBuf>,
    }

    impl Server {
        /// `None` (the test then passes, saying so) without the server,
        /// except in CI.
        async fn start(kind: Kind) -> Option<Self> {
            let (missing, install) = match kind {
                Kind::S3 => {
                    let has_moto = Command::new("python3")
                        .args(["-c", "import moto.server, flask_cors"])
                        .status()
                        .is_ok_and(|s| s.success());
                    let missing: &[&str] = if has_moto { &[] } else { &["moto[server]"] };
                    (missing, "python3 -m pip install 'moto[server]'")
                }
                Kind::Azure => {
                    let has_azurite = azurite_dir()
                        .join("node_modules/.bin/azurite-blob")
                        .exists();
                    let missing: &[&str] = if has_azurite { &[] } else { &["azurite"] };
                    (missing, "npm ci --prefix tests/azurite")
                }
            };
            if !can_run("captures_buckets", missing, install) {
                return None;
            }
            let mut server = Self {
                kind,
                child: None,
                port: closed_port(),
                tls: None,
            };
            server.restart().await;
            Some(server)
        }

        /// moto over HTTPS, its certificate signed by a CA of the test's
        /// own (as a private MinIO's would be).
        async fn start_tls() -> Option<Self> {
            let has_openssl = Command::new("openssl")
                .arg("version")
                .output()
                .is_ok_and(|out| out.status.success());
            let missing: &[&str] = if has_openssl { &[] } else { &["openssl"] };
            if !can_run("captures_buckets", missing, "apt-get install openssl") {
                return None;
            }
            let dir = temp_path("-tls");
            std::fs::create_dir_all(&dir).unwrap();
            private_ca(&dir);
            let mut server = Self::start(Kind::S3).await?;
            server.stop();
            server.tls = Some(dir);
            server.restart().await;
            Some(server)
        }

        /// Starts the server (again: empty) on the same port, and the bucket.
        async fn restart(&mut self) {
            let port = self.port.to_string();
            let mut command = match self.kind {
                Kind::S3 => {
                    let mut command = Command::new("python3");
                    command.args(["-m", "moto.server", "-H", "127.0.0.1", "-p", &port]);
                    if let Some(dir) = &self.tls {
                        command.arg("-c").arg(dir.join("cert.pem"));
                        command.arg("-k").arg(dir.join("key.pem"));
                    }
                    command
                }
                Kind::Azure => {
                    let mut command =
                        Command::new(azurite_dir().join("node_modules/.bin/azurite-blob"));
                    command
                        .args(["--blobHost", "127.0.0.1", "--blobPort", &port])
                        .args(["--inMemoryPersistence", "--skipApiVersionCheck", "--silent"])
                        // Azurite writes its debug log and extent files here.
                        .current_dir(std::env::temp_dir());
                    command
                }
            };
            let child = command
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            self.child = Some(child);
            // A server's start (Python's or Node's) on a loaded 2-core CI
            // machine, with the other tests' servers starting too, can take
            // longer than one STEP.
            let started = tokio::time::timeout(Duration::from_secs(30), async {
                while !self.create_bucket().await {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
            .await;
            assert!(started.is_ok(), "{:?} did not start within 30 s", self.kind);
        }

        /// Whether the bucket now exists (false while the server starts).
        async fn create_bucket(&self) -> bool {
            match self.kind {
                Kind::S3 if self.tls.is_some() => self.create_bucket_over_tls().await,
                Kind::S3 => {
                    let url = format!("{}/{BUCKET}", self.url());
                    let request = http::Request::put(&url)
                        .body(http_body_util::Full::default())
                        .unwrap();
                    match tokio::time::timeout(Duration::from_secs(1), client().request(request))
                        .await
                    {
                        Ok(Ok(response)) => {
                            assert_eq!(response.status(), 200, "bucket not created");
                            true
                        }
                        _ => false,
                    }
                }
                Kind::Azure => self.azure_blobs().await.is_some(),
            }
        }

        /// Python's HTTP client, trusting the test's CA, creates the bucket.
        async fn create_bucket_over_tls(&self) -> bool {
            let ca = self.tls.as_ref().unwrap().join("ca.pem");
            let url = format!("{}/{BUCKET}", self.url());
            let script = "import ssl, sys, urllib.request\n\
                context = ssl.create_default_context(cafile=sys.argv[1])\n\
                request = urllib.request.Request(sys.argv[2], method='PUT')\n\
                urllib.request.urlopen(request, context=context, timeout=1)";
            tokio::task::spawn_blocking(move || {
                Command::new("python3")
                    .args(["-c", script])
                    .arg(ca)
                    .arg(url)
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|status| status.success())
            })
            .await
            .unwrap()
        }

        /// The container's blob names through Azure's SDK, creating the
        /// container first if missing; `None` while Azurite is not up.
        async fn azure_blobs(&self) -> Option<Vec<String>> {
            let dir = azurite_dir();
            let url = self.url();
            let out = tokio::task::spawn_blocking(move || {
                Command::new("node")
                    .arg(dir.join("container.js"))
                    .args([&url, BUCKET])
                    .output()
                    .unwrap()
            })
            .await
            .unwrap();
            out.status
                .success()
                .then(|| serde_json::from_slice(&out.stdout).unwrap())
        }

        /// Stops (`STOP`) or resumes (`CONT`) the server's process: its
        /// port still accepts connections, but nothing answers.
        fn signal(&self, signal: &str) {
            let pid = self.child.as_ref().unwrap().id().to_string();
            let status = Command::new("kill")
                .args([&format!("-{signal}"), &pid])
                .status()
                .unwrap();
            assert!(status.success(), "kill -{signal} {pid}");
        }

        fn stop(&mut self) {
            if let Some(mut child) = self.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }

        fn url(&self) -> String {
            let scheme = if self.tls.is_some() { "https" } else { "http" };
            format!("{scheme}://127.0.0.1:{}", self.port)
        }

        /// The keys of the bucket's objects, as the store lists them.
        async fn keys(&self) -> Vec<String> {
            match self.kind {
                Kind::S3 => {
                    let listing = get(&format!("{}/{BUCKET}?list-type=2", self.url()))
                        .await
                        .text();
                    listing
                        .split("<Key>")
                        .skip(1)
                        .filter_map(|rest| {
                            rest.split_once("</Key>").map(|(key, _)| key.to_string())
                        })
                        .collect()
                }
                Kind::Azure => self
                    .azure_blobs()
                    .await
                    .expect("Azurite lists the container"),
            }
        }

        /// The store URL of `[capture] store`.
        fn store(&self) -> String {
            let scheme = match self.kind {
                Kind::S3 => "s3",
                Kind::Azure => "az",
            };
            format!("{scheme}://{BUCKET}/captures")
        }

        /// The credential probity is given, which it must never show.
        fn secret(&self) -> &'static str {
            match self.kind {
                Kind::S3 => S3_SECRET,
                Kind::Azure => AZURITE_KEY,
            }
        }

        /// The cloud's standard variables, as an operator sets them.
        fn env(&self) -> Vec<(&'static str, String)> {
            match self.kind {
                Kind::S3 => vec![
                    ("AWS_ENDPOINT_URL", self.url()),
                    ("AWS_ACCESS_KEY_ID", "probity-test-key-id".into()),
                    ("AWS_SECRET_ACCESS_KEY", S3_SECRET.into()),
                    ("AWS_REGION", "us-east-1".into()),
                ],
                Kind::Azure => vec![
                    ("AZURE_STORAGE_USE_EMULATOR", "true".into()),
                    ("AZURITE_BLOB_STORAGE_URL", self.url()),
                    ("AZURE_STORAGE_ACCOUNT_NAME", "devstoreaccount1".into()),
                    ("AZURE_STORAGE_ACCOUNT_KEY", AZURITE_KEY.into()),
                ],
            }
        }

        /// probity on `config`, as instance `name`, writing to this bucket.
        fn probity(&self, config: &str, name: &str) -> Probity {
            self.probity_through(config, name, &self.url())
        }

        /// probity writing to this bucket through `url` (a [`Relay`]).
        fn probity_through(&self, config: &str, name: &str, url: &str) -> Probity {
            let own = self.url();
            let mut env: Vec<(&str, String)> = self
                .env()
                .into_iter()
                .map(|(k, v)| (k, if v == own { url.to_string() } else { v }))
                .collect();
            env.push(("HOSTNAME", name.into()));
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            Probity::start_with_env(config, &env)
        }

        /// Writes time out after a second unless `capture` says otherwise.
        fn config(&self, upstream: &Upstream, capture: &str) -> String {
            let routes = route("openai", "/openai", &upstream.url(), "openai", "");
            let timeout = if capture.contains("write_timeout_ms") {
                ""
            } else {
                "write_timeout_ms = 1000"
            };
            let store = self.store();
            config(
                "",
                &format!("{routes}\n[capture]\nstore = \"{store}\"\n{timeout}\n{capture}\n"),
            )
        }

        fn no_secret_shown(&self, probity: &Probity, metrics: &str) {
            let secret = self.secret();
            assert!(
                !probity.log_text().contains(secret),
                "the secret was logged"
            );
            assert!(!metrics.contains(secret), "the secret is in /metrics");
        }
    }

    impl Drop for Server {
        fn drop(&mut self) {
            self.stop();
            if let Some(dir) = &self.tls {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }

    /// A TCP relay in front of a bucket server, which the test can take
    /// down (connection refused, live connections cut) and bring back on
    /// the same port while the server keeps what it holds.
    struct Relay {
        port: u16,
        target: u16,
        task: Option<tokio::task::JoinHandle<()>>,
    }

    impl Relay {
        async fn start(target: u16) -> Self {
            let mut relay = Self {
                port: closed_port(),
                target,
                task: None,
            };
            relay.up().await;
            relay
        }

        async fn up(&mut self) {
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
                .await
                .unwrap();
            let target = self.target;
            self.task = Some(tokio::spawn(async move {
                // Dropped with the task: every relayed connection is cut.
                let mut relayed = tokio::task::JoinSet::new();
                while let Ok((mut inbound, _)) = listener.accept().await {
                    relayed.spawn(async move {
                        let Ok(mut outbound) =
                            tokio::net::TcpStream::connect(("127.0.0.1", target)).await
                        else {
                            return;
                        };
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    });
                }
            }));
        }

        async fn down(&mut self) {
            if let Some(task) = self.task.take() {
                task.abort();
                let _ = task.await;
            }
        }

        fn url(&self) -> String {
            format!("http://127.0.0.1:{}", self.port)
        }
    }

    /// A bucket unreachable when probity starts: what was captured before
    /// is not said to be gone (503, not 404) and is indexed once the bucket
    /// answers, without a restart.
    pub(super) async fn down_at_start_then_back(kind: Kind) {
        let Some(server) = Server::start(kind).await else {
            return;
        };
        let mut relay = Relay::start(server.port).await;
        let upstream = normalizing_upstream().await;
        let config = server.config(&upstream, "");
        let mut before = server.probity_through(&config, "before", &relay.url());
        let got = post(&before.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await;
        let id = got.header("x-request-id").unwrap().to_string();
        until_written(&before, 1.0).await;
        before.signal("TERM");
        assert_eq!(before.exit_code().await, Some(0));

        relay.down().await;
        let after = server.probity_through(&config, "after", &relay.url());
        within("the failed first listing logged", async {
            while !after.log_text().contains("could not be listed") {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        let capture = after.admin_get(&format!("/captures/{id}")).await;
        assert_eq!(capture.status, 503, "{}", capture.text());

        relay.up().await;
        within("indexed once the bucket answers", async {
            while !after.log_text().contains("indexed once it answered") {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        let listing = after.admin_get("/captures").await.json();
        assert_eq!(
            capture_ids(&listing),
            std::slice::from_ref(&id),
            "{listing}"
        );
        let capture = after.admin_get(&format!("/captures/{id}")).await;
        assert_eq!(capture.status, 200, "{}", capture.text());
        assert_eq!(capture.body, embeddings_body(r#""4""#).as_bytes());
    }

    async fn normalizing_upstream() -> Upstream {
        let body = embeddings_body(r#""4""#);
        Upstream::start(move |_| Reply::json(200, body.clone()).header("x-upstream", "kept")).await
    }

    /// S3 and Azure keep an object's time to the second: captures of two
    /// instances are ordered by it, so the test leaves a second between them.
    async fn next_second() {
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }

    /// Waits until `probity_capture_writes_total{result="ok"}` is `n`.
    async fn until_written(probity: &Probity, n: f64) {
        let sample = r#"probity_capture_writes_total{result="ok"}"#;
        within("captures written", async {
            while probity.metric(sample).await != Some(n) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
    }

    /// A bucket behind a private CA is reached when `SSL_CERT_FILE` names
    /// the CA, as for the clouds' own SDKs, and refused otherwise: the
    /// certificate is checked, not waved through.
    #[cfg(feature = "s3")]
    #[tokio::test]
    async fn a_bucket_over_https_is_trusted_through_the_systems_roots() {
        let Some(server) = Server::start_tls().await else {
            return;
        };
        let upstream = normalizing_upstream().await;
        let config = server.config(&upstream, "");
        let ca = server.tls.as_ref().unwrap().join("ca.pem");
        let mut env = server.env();
        env.push(("SSL_CERT_FILE", ca.to_str().unwrap().into()));
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let trusting = Probity::start_with_env(&config, &env);
        let got = post(&trusting.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await;
        let id = got.header("x-request-id").unwrap().to_string();
        until_written(&trusting, 1.0).await;
        let capture = trusting.admin_get(&format!("/captures/{id}")).await;
        assert_eq!(capture.status, 200);
        assert_eq!(capture.body, embeddings_body(r#""4""#).as_bytes());

        // Without the CA, the same bucket is not trusted: the capture is
        // dropped, the answer is the same.
        let env = server.env();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let doubting = Probity::start_with_env(&config, &env);
        let again = post(&doubting.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await;
        assert_eq!(again.body, got.body);
        let sample = r#"probity_capture_dropped_total{reason="store_error"}"#;
        within("the untrusted write dropped", async {
            while doubting.metric(sample).await != Some(1.0) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert_eq!(
            doubting
                .metric(r#"probity_capture_writes_total{result="ok"}"#)
                .await,
            None
        );
    }

    /// Server-side encryption is asked as object_store reads it from the
    /// standard variables (`AWS_SERVER_SIDE_ENCRYPTION`, `AWS_SSE_KMS_KEY_ID`):
    /// every object probity writes is stored under SSE-KMS with that key, as
    /// the bucket itself reports, and is read back as it was.
    #[cfg(feature = "s3")]
    #[tokio::test]
    async fn captures_in_s3_are_encrypted_with_the_configured_kms_key() {
        const KEY_ID: &str = "arn:aws:kms:us-east-1:123456789012:key/probity-test-key";
        let Some(server) = Server::start(Kind::S3).await else {
            return;
        };
        let upstream = normalizing_upstream().await;
        let config = server.config(&upstream, "");
        let mut env = server.env();
        env.push(("AWS_SERVER_SIDE_ENCRYPTION", "aws:kms".into()));
        env.push(("AWS_SSE_KMS_KEY_ID", KEY_ID.into()));
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let probity = Probity::start_with_env(&config, &env);
        let got = post(&probity.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await;
        let id = got.header("x-request-id").unwrap().to_string();
        until_written(&probity, 1.0).await;
        let keys = server.keys().await;
        assert_eq!(keys.len(), 2, "{keys:?}");
        // Read back with AWS's own SDK (boto3, which moto brings): S3 answers
        // SSE-KMS objects to SigV4-signed requests only.
        let script = "import boto3, json, sys\n\
            s3 = boto3.client('s3', endpoint_url=sys.argv[1], region_name='us-east-1',\n\
                aws_access_key_id='probity-test-key-id', aws_secret_access_key=sys.argv[2])\n\
            print(json.dumps([s3.head_object(Bucket=sys.argv[3], Key=k) for k in sys.argv[4:]], default=str))";
        let output = std::process::Command::new("python3")
            .args(["-c", script, &server.url(), S3_SECRET, BUCKET])
            .args(&keys)
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        let heads: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        for (key, head) in keys.iter().zip(heads.as_array().unwrap()) {
            assert_eq!(head["ServerSideEncryption"], "aws:kms", "{key}: {head}");
            assert_eq!(head["SSEKMSKeyId"], KEY_ID, "{key}: {head}");
        }
        let capture = probity.admin_get(&format!("/captures/{id}")).await;
        assert_eq!(capture.status, 200);
        assert_eq!(capture.body, embeddings_body(r#""4""#).as_bytes());
    }

    pub(super) async fn survives_a_restart(kind: Kind) {
        let Some(server) = Server::start(kind).await else {
            return;
        };
        let upstream = normalizing_upstream().await;
        let config = server.config(&upstream, "");
        let mut probity = server.probity(&config, "first");
        let got = post(&probity.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await;
        assert_eq!(
            got.header("probity-normalized"),
            Some("/usage/prompt_tokens")
        );
        let id = got.header("x-request-id").unwrap().to_string();
        assert_eq!(got.header("probity-capture"), Some(id.as_str()));
        let retention = probity.logs().into_iter().any(|l| {
            l["message"]
                .as_str()
                .unwrap_or("")
                .contains("lifecycle rule")
        });
        assert!(retention, "no log line says who deletes from the bucket");
        probity.signal("TERM");
        assert_eq!(probity.exit_code().await, Some(0));
        server.no_secret_shown(&probity, "");

        let keys = server.keys().await;
        let json = keys.iter().find(|k| k.ends_with(".json")).unwrap();
        assert!(
            json.starts_with("captures/dt=")
                && json.contains("/hour=")
                && json.ends_with(&format!("/first/{id}.json")),
            "{keys:?}"
        );
        assert_eq!(keys.len(), 2, "{keys:?}");

        let probity = server.probity(&config, "second");
        let capture = probity.admin_get(&format!("/captures/{id}")).await;
        assert_eq!(capture.status, 200);
        assert_eq!(
            capture.body,
            embeddings_body(r#""4""#).as_bytes(),
            "byte-identical"
        );
        assert_eq!(capture.header("probity-upstream-x-upstream"), Some("kept"));
        let listing = probity.admin_get("/captures").await.json();
        assert_eq!(capture_ids(&listing), [id]);
        assert_eq!(
            listing["captures"][0]["body_sha256"]
                .as_str()
                .unwrap()
                .len(),
            64
        );
        let metrics = get(&probity.admin_url("/metrics")).await.text();
        server.no_secret_shown(&probity, &metrics);
    }

    pub(super) async fn shared_by_two_instances(kind: Kind) {
        let Some(server) = Server::start(kind).await else {
            return;
        };
        let upstream = normalizing_upstream().await;
        let config = server.config(&upstream, "");
        let a = server.probity(&config, "pod-a");
        let b = server.probity(&config, "pod-b");
        // Both are indexed (an empty bucket) before either writes.
        for probity in [&a, &b] {
            let listing = probity.admin_get("/captures").await.json();
            assert_eq!(capture_ids(&listing).len(), 0);
        }
        let from_a = post(&a.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await;
        let id_a = from_a.header("x-request-id").unwrap().to_string();
        until_written(&a, 1.0).await;
        next_second().await;
        let from_b = post(&b.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await;
        let id_b = from_b.header("x-request-id").unwrap().to_string();
        until_written(&b, 1.0).await;

        for (probity, other) in [(&a, &id_b), (&b, &id_a)] {
            let capture = probity.admin_get(&format!("/captures/{other}")).await;
            assert_eq!(capture.status, 200, "{}", capture.text());
            assert_eq!(capture.body, embeddings_body(r#""4""#).as_bytes());
            let listing = probity.admin_get("/captures").await.json();
            assert_eq!(
                capture_ids(&listing),
                [id_b.clone(), id_a.clone()],
                "newest first"
            );
            let instances: Vec<&str> = listing["captures"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["instance"].as_str().unwrap())
                .collect();
            assert_eq!(instances, ["pod-b", "pod-a"]);
        }
        // The listing alone finds another instance's newer capture too.
        next_second().await;
        let third = post(&b.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await;
        let id_third = third.header("x-request-id").unwrap().to_string();
        until_written(&b, 2.0).await;
        let listing = a.admin_get("/captures?limit=1").await.json();
        assert_eq!(capture_ids(&listing), [id_third]);
    }

    /// A bucket that accepts connections and answers nothing (a stalled
    /// server, a black-holed route): the answers are as with capture off,
    /// the writes time out and are counted, and the listing answers from
    /// the index within its wait instead of the bucket client's 30 s.
    pub(super) async fn stalled_then_back(kind: Kind) {
        let Some(server) = Server::start(kind).await else {
            return;
        };
        let upstream = normalizing_upstream().await;
        let probity = server.probity(&server.config(&upstream, "write_timeout_ms = 500"), "pod");
        let first = post(&probity.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await;
        let first = first.header("x-request-id").unwrap().to_string();
        until_written(&probity, 1.0).await;

        server.signal("STOP");
        let started = Instant::now();
        for _ in 0..3 {
            let got = post(&probity.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await;
            assert_eq!(got.status, 200);
            assert_eq!(got.body, embeddings_body("null").as_bytes());
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        let listed = Instant::now();
        let listing = probity.admin_get("/captures").await;
        let waited = listed.elapsed();
        assert_eq!(listing.status, 200);
        assert!(
            waited < Duration::from_secs(8),
            "the listing waited {waited:?}"
        );
        // The capture written before is in the index, but its metadata is
        // in the stalled bucket: left out, counted, not forgotten.
        let listing = listing.json();
        assert_eq!(capture_ids(&listing), Vec::<String>::new(), "{listing}");
        assert_eq!(listing["unread"], 1, "{listing}");
        // The admin page's status answers too, and says why it lists less.
        let status = probity.admin_get("/status.json").await.json();
        assert!(status["captures_note"].is_string(), "{status}");
        let timeouts = r#"probity_capture_dropped_total{reason="timeout"}"#;
        within("stalled writes dropped", async {
            while probity.metric(timeouts).await != Some(3.0) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        assert_eq!(get(&probity.admin_url("/readyz")).await.status, 200);
        assert!(probity.log_text().contains("capture bucket slow to list"));

        server.signal("CONT");
        let again = post(&probity.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await;
        let id = again.header("x-request-id").unwrap().to_string();
        until_written(&probity, 2.0).await;
        let capture = probity.admin_get(&format!("/captures/{id}")).await;
        assert_eq!(capture.status, 200);
        assert_eq!(capture.body, embeddings_body(r#""4""#).as_bytes());
        // Back, the capture left out while the bucket stalled is listed.
        let listing = probity.admin_get("/captures").await.json();
        assert!(capture_ids(&listing).contains(&first), "{listing}");
        assert_eq!(listing["unread"], 0, "{listing}");
    }

    pub(super) async fn down_then_back(kind: Kind) {
        let Some(mut server) = Server::start(kind).await else {
            return;
        };
        let upstream = normalizing_upstream().await;
        let probity = server.probity(&server.config(&upstream, "write_timeout_ms = 500"), "pod");
        let off_config = server.config(&upstream, "enabled = false");
        let off = server.probity(&off_config, "off");
        let reference = post(&off.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await;
        let first = post(&probity.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await;
        until_written(&probity, 1.0).await;

        server.stop();
        let started = Instant::now();
        for _ in 0..5 {
            let got = post(&probity.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await;
            assert_eq!(got.status, reference.status);
            assert_eq!(got.body, reference.body, "answered as with capture off");
            assert_eq!(
                got.header("probity-normalized"),
                reference.header("probity-normalized")
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        let dropped = within("drops counted", async {
            loop {
                let mut dropped = 0.0;
                for reason in ["store_error", "timeout"] {
                    let sample = format!(r#"probity_capture_dropped_total{{reason="{reason}"}}"#);
                    dropped += probity.metric(&sample).await.unwrap_or(0.0);
                }
                if dropped >= 5.0 {
                    return dropped;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        assert_eq!(dropped, 5.0);
        assert_eq!(get(&probity.admin_url("/readyz")).await.status, 200);
        // The listing still answers while the bucket is down, leaving out
        // (and counting) the capture whose metadata it cannot read.
        let listing = probity.admin_get("/captures").await;
        assert_eq!(listing.status, 200);
        assert_eq!(listing.json()["unread"], 1, "{}", listing.text());
        // Nor is that capture said to be gone: the store failed, so 503.
        let first_id = first.header("x-request-id").unwrap();
        let capture = probity.admin_get(&format!("/captures/{first_id}")).await;
        assert_eq!(capture.status, 503, "{}", capture.text());
        assert_eq!(capture.header("retry-after"), Some("5"));
        assert!(capture.text().contains("retry"), "{}", capture.text());
        let view = probity
            .admin_get(&format!("/view.json?id={first_id}"))
            .await;
        assert_eq!(view.status, 503, "{}", view.text());

        // Back (empty: neither server keeps anything), and the next capture lands.
        server.restart().await;
        let again = post(&probity.url("/openai/v1/embeddings"), EMBEDDINGS_REQUEST).await;
        let id = again.header("x-request-id").unwrap().to_string();
        until_written(&probity, 2.0).await;
        let keys = server.keys().await;
        assert!(
            keys.iter().any(|k| k.ends_with(&format!("/{id}.json"))),
            "{keys:?}"
        );
        assert!(
            keys.iter().any(|k| k.ends_with(&format!("/{id}.body"))),
            "{keys:?}"
        );
        let capture = probity.admin_get(&format!("/captures/{id}")).await;
        assert_eq!(capture.status, 200);
        assert_eq!(capture.body, embeddings_body(r#""4""#).as_bytes());
        assert_ne!(first.header("x-request-id"), Some(id.as_str()));
        let metrics = get(&probity.admin_url("/metrics")).await.text();
        server.no_secret_shown(&probity, &metrics);
    }
}
