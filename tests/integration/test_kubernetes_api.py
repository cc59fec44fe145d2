"""The kubernetes scheduler's REST client against a local HTTPS server that
replays the API server's documented answers (create, get, list, pod logs
with follow, 401/403/404/409/422/5xx, slow and cut-off answers), with TLS
from a test CA made by openssl, a bearer token and a client certificate.
No Kubernetes API server can run here; these replies follow
https://kubernetes.io/docs/reference/using-api/api-concepts/."""
import json
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import ROOT, base_env, trun

pytestmark = pytest.mark.once("the Kubernetes objects and client are trun's own; no torch runs")

TOKEN = "test-token"
HANDLE = re.compile(r"^kubernetes://trun/(default:[a-z0-9-]+)$", re.M)


def status_body(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


class Api:
    """Routes: (METHOD, path regex) -> function(handler, match, body) giving
    (code, body object or bytes, extra). Records every request."""

    def __init__(self, certs, client_ca=False):
        self.routes = []
        self.requests = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def handle_one(self, method):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n).decode() if n else ""
                api.requests.append({"method": method, "path": self.path, "body": body,
                                     "auth": self.headers.get("Authorization"),
                                     "type": self.headers.get("Content-Type")})
                for m, pattern, fn in reversed(api.routes):
                    match = re.fullmatch(pattern, self.path)
                    if m == method and match:
                        return fn(self, match, body)
                self.reply(404, status_body(404, "NotFound", f"{self.path} not found"))

            def reply(self, code, obj):
                data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self.handle_one("GET")

            def do_POST(self):
                self.handle_one("POST")

            def do_PATCH(self):
                self.handle_one("PATCH")

            def do_DELETE(self):
                self.handle_one("DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(certs / "server.pem", certs / "server.key")
        if client_ca:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(certs / "ca.pem")
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def route(self, method, pattern, fn):
        self.routes.append((method, pattern, fn))

    def answer(self, method, pattern, code, obj):
        self.route(method, pattern, lambda h, m, b: h.reply(code, obj))

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")

    def ssl_run(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    ssl_run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.pem", "-days", "2", "-subj", "/CN=trun test CA")
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "extendedKeyUsage=clientAuth")):
        ssl_run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                f"{name}.csr", "-subj", f"/CN={name}")
        (d / f"{name}.ext").write_text(ext + "\n")
        ssl_run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext")
    return d


@pytest.fixture
def api(certs):
    a = Api(certs)
    yield a
    a.close()


def kubeconfig(tmp_path, port, certs, user=None, ca=True):
    user = user or {"token": TOKEN}
    cluster = {"server": f"https://127.0.0.1:{port}"}
    if ca:
        cluster["certificate-authority"] = str(certs / "ca.pem")
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "test",
           "clusters": [{"name": "c", "cluster": cluster}],
           "contexts": [{"name": "test", "context": {"cluster": "c", "user": "u"}}],
           "users": [{"name": "u", "user": user}]}
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(cfg))
    return path


def k8s(tmp_path, api, certs, *args, timeout=60, user=None, ca=True, **env):
    e = base_env(HOME=tmp_path, TRUNCONFIG="",
                 KUBECONFIG=kubeconfig(tmp_path, api.port, certs, user, ca), **env)
    return trun(*args, env=e, cwd=tmp_path, timeout=timeout)


def start_stream(h, content_type):
    """A 200 whose body runs until the connection closes (a followed log, a
    watch), written as the test goes."""
    h.send_response(200)
    h.send_header("Content-Type", content_type)
    h.send_header("Connection", "close")
    h.end_headers()


def created(h, m, body):
    obj = json.loads(body)
    obj.setdefault("metadata", {})["uid"] = "u-1"
    h.reply(201, obj)


def patched(h, m, body):
    h.reply(200, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": m.group(1)}})


def secrets(api):
    """The job token's Secret: created first, then owned by the app."""
    api.route("POST", r"/api/v1/namespaces/default/secrets(\?dryRun=All)?", created)
    api.route("PATCH", r"/api/v1/namespaces/default/secrets/([a-z0-9-]+)", patched)


def test_run_job_workload_checks_then_creates_service_and_jobs(tmp_path, api, certs):
    secrets(api)
    api.route("POST", r"/api/v1/namespaces/default/services(\?dryRun=All)?", created)
    api.route("POST", r"/apis/batch/v1/namespaces/default/jobs(\?dryRun=All)?", created)
    r = k8s(tmp_path, api, certs, "run", "-s", "kubernetes", "-cfg", "workload=job",
            "utils.echo", "--msg", "hi")
    assert r.returncode == 0, r.err
    m = HANDLE.search(r.out)
    assert m, r.out
    name = m.group(1).split(":")[1]
    calls = [(q["method"], q["path"]) for q in api.requests]
    assert calls == [("POST", "/api/v1/namespaces/default/secrets?dryRun=All"),
                     ("POST", "/api/v1/namespaces/default/services?dryRun=All"),
                     ("POST", "/apis/batch/v1/namespaces/default/jobs?dryRun=All"),
                     ("POST", "/api/v1/namespaces/default/secrets"),
                     ("POST", "/api/v1/namespaces/default/services"),
                     ("POST", "/apis/batch/v1/namespaces/default/jobs"),
                     ("PATCH", f"/api/v1/namespaces/default/secrets/{name}")]
    assert all(q["auth"] == f"Bearer {TOKEN}" for q in api.requests)
    # The Secret belongs to the Service, so Kubernetes deletes it with the app.
    patch = api.requests[-1]
    assert patch["type"] == "application/merge-patch+json"
    assert json.loads(patch["body"]) == {"metadata": {"ownerReferences": [
        {"apiVersion": "v1", "kind": "Service", "name": name, "uid": "u-1"}]}}
    job = json.loads(api.requests[-2]["body"])
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["TORCHX_JOB_ID"] == f"kubernetes://trun/{m.group(1)}"


def test_client_certificate_from_kubeconfig_data(tmp_path, certs):
    import base64
    a = Api(certs, client_ca=True)
    try:
        secrets(a)
        a.route("POST", r"/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs(\?dryRun=All)?", created)
        user = {"client-certificate-data": base64.b64encode((certs / "client.pem").read_bytes()).decode(),
                "client-key-data": base64.b64encode((certs / "client.key").read_bytes()).decode()}
        r = k8s(tmp_path, a, certs, "run", "-s", "kubernetes", "-cfg", "queue=default",
                "utils.echo", user=user)
        assert r.returncode == 0, r.err
        assert a.requests[0]["auth"] is None
    finally:
        a.close()


@pytest.mark.parametrize("code, body, rc, says", [
    (401, status_body(401, "Unauthorized", "Unauthorized"), 3, "did not accept the credentials (401 Unauthorized"),
    (403, status_body(403, "Forbidden", 'jobs.batch is forbidden: User "bob" cannot create'), 3, "forbidden (403"),
    (409, status_body(409, "AlreadyExists", 'jobs.batch "x" already exists'), 2, "already exists"),
    (422, status_body(422, "Invalid", 'Job.batch "x" is invalid: spec.template.spec.containers[0].image: Required value'), 2,
     "spec.template.spec.containers[0].image: Required value"),
    (500, status_body(500, "InternalError", "etcdserver: request timed out"), 4, "answered 500: etcdserver: request timed out"),
    (503, b"upstream connect error", 4, "answered 503: upstream connect error"),
    # API priority and fairness turning a client away: busy, not a mistake.
    (429, status_body(429, "TooManyRequests", "too many requests, please try again later"), 4,
     "answered 429: too many requests, please try again later"),
])
def test_refusals_name_the_problem(tmp_path, api, certs, code, body, rc, says):
    secrets(api)
    api.route("POST", r"/api/v1/namespaces/default/services(\?dryRun=All)?", created)
    api.answer("POST", r"/apis/batch/v1/namespaces/default/jobs.*", code, body)
    r = k8s(tmp_path, api, certs, "run", "-s", "kubernetes", "-cfg", "workload=job,validate_spec=false",
            "utils.echo")
    assert r.returncode == rc, r.err
    assert says in r.err, r.err
    # The Secret and the Service created before the refused Job are deleted
    # again; nothing is patched.
    name = json.loads(api.requests[0]["body"])["metadata"]["name"]
    deletes = [q["path"] for q in api.requests if q["method"] == "DELETE"]
    assert deletes == [f"/api/v1/namespaces/default/secrets/{name}",
                       f"/api/v1/namespaces/default/services/{name}"], api.requests
    assert api.requests[-1]["method"] == "DELETE", api.requests
    assert not any(q["method"] == "PATCH" for q in api.requests)


def test_a_cluster_without_volcano_says_what_to_do(tmp_path, api, certs):
    secrets(api)
    r = k8s(tmp_path, api, certs, "run", "-s", "kubernetes", "-cfg", "queue=default", "utils.echo")
    assert r.returncode == 2, r.err
    assert "the cluster has no Job (batch.volcano.sh/v1alpha1): install Volcano" in r.err, r.err
    assert "workload=job" in r.err


def test_slow_and_cut_off_answers_are_unavailable(tmp_path, api, certs):
    def slow(h, m, body):
        time.sleep(3)
        h.reply(200, {"items": []})

    def cut(h, m, body):
        h.send_response(200)
        h.send_header("Content-Length", "1000")
        h.end_headers()
        h.wfile.write(b'{"items": [')
        h.wfile.flush()
        h.connection.shutdown(socket.SHUT_RDWR)

    api.route("GET", r"/apis/batch.volcano.sh/.*", slow)
    r = k8s(tmp_path, api, certs, "list", "-s", "kubernetes", TRUN_KUBE_TIMEOUT="1")
    assert r.returncode == 4, r.err
    assert "no complete answer within 1 s" in r.err, r.err
    api.route("GET", r"/apis/batch.volcano.sh/.*", cut)
    r = k8s(tmp_path, api, certs, "list", "-s", "kubernetes")
    assert r.returncode == 4, r.err
    assert "cannot be reached" in r.err, r.err


def test_tls_without_the_ca_fails_naming_tls(tmp_path, api, certs):
    r = k8s(tmp_path, api, certs, "list", "-s", "kubernetes", ca=False)
    assert r.returncode == 3, r.err
    assert "TLS failed" in r.err, r.err


def volcano_job(name, phase):
    app = {"name": "echo", "roles": [{"name": "echo", "image": "alpine", "entrypoint": "echo",
                                      "num_replicas": 2}]}
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": "default", "creationTimestamp": "2026-11-25T04:00:00Z",
                         "labels": {"app.kubernetes.io/instance": name, "torchx.pytorch.org/app-name": "echo"},
                         "annotations": {"trun.pytorch.org/app-def": json.dumps(app)}},
            "status": {"state": {"phase": phase}, "retryCount": 1}}


def pod(name, replica, phase, message=None, created="2026-11-25T04:00:01Z",
        finished="2026-11-25T04:01:00Z"):
    p = {"metadata": {"name": name, "creationTimestamp": created,
                      "labels": {"torchx.pytorch.org/role-index": "0",
                                 "torchx.pytorch.org/role-name": "echo",
                                 "torchx.pytorch.org/replica-id": str(replica)}},
         "spec": {"containers": [{"name": f"echo-{replica}"}], "hostname": name, "subdomain": "echo-x"},
         "status": {"phase": phase}}
    if message is not None:
        p["status"]["containerStatuses"] = [{"name": f"echo-{replica}", "state": {"terminated": {
            "exitCode": 1, "reason": "Error", "message": message, "finishedAt": finished}}}]
    return p


ERROR = json.dumps({"message": {"message": "RuntimeError: boom", "extraInfo": {"py_callstack": "..."}},
                    "errorCode": 1, "timestamp": 1764043260})


def test_status_maps_phases_replicas_and_root_cause(tmp_path, api, certs):
    api.answer("GET", r"/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs/echo-x", 200,
               volcano_job("echo-x", "Failed"))
    api.answer("GET", r"/api/v1/namespaces/default/pods\?labelSelector=.*", 200, {"items": [
        pod("echo-x-echo-0-0", 0, "Failed", ERROR),
        pod("echo-x-echo-1-0-old", 1, "Failed", "old", created="2026-11-25T03:00:00Z"),
        pod("echo-x-echo-1-0", 1, "Running")]})
    r = k8s(tmp_path, api, certs, "status", "--json", "kubernetes://trun/default:echo-x")
    assert r.returncode == 0, r.err
    st = json.loads(r.out)
    assert st["state"] == "FAILED"
    assert st["num_restarts"] == 1
    assert "RuntimeError: boom" in st["structured_error_msg"]
    replicas = st["roles"][0]["replicas"]
    assert [x["state"] for x in replicas] == [5, 3]
    assert replicas[1]["hostname"] == "echo-x-echo-1-0.echo-x"
    r = k8s(tmp_path, api, certs, "describe", "kubernetes://trun/default:echo-x")
    assert r.returncode == 0 and "entrypoint: echo" in r.out, r.out + r.err
    r = k8s(tmp_path, api, certs, "status", "kubernetes://trun/default:nope")
    assert r.returncode == 2 and "has no Volcano Job, JobSet or Jobs of that name" in r.err, r.err


def test_root_cause_is_the_rule_every_scheduler_uses(tmp_path, api, certs):
    """failure::RootCause over the failed pods: the earliest; within one
    second a pod whose termination message is trun's error file, which says
    why, comes before one that left only its log's last lines."""
    api.answer("GET", r"/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs/echo-x", 200,
               volcano_job("echo-x", "Failed"))
    api.answer("GET", r"/api/v1/namespaces/default/pods\?labelSelector=.*", 200, {"items": [
        pod("echo-x-echo-0-0", 0, "Failed", "Terminated: last log lines",
            finished="2026-11-25T04:01:00Z"),
        pod("echo-x-echo-1-0", 1, "Failed", ERROR, finished="2026-11-25T04:01:00Z")]})
    st = json.loads(k8s(tmp_path, api, certs, "status", "--json",
                        "kubernetes://trun/default:echo-x").out)
    assert "RuntimeError: boom" in st["structured_error_msg"], st
    # A second earlier, the plain failure is the first one.
    api.answer("GET", r"/api/v1/namespaces/default/pods\?labelSelector=.*", 200, {"items": [
        pod("echo-x-echo-0-0", 0, "Failed", "Terminated: last log lines",
            finished="2026-11-25T04:00:59Z"),
        pod("echo-x-echo-1-0", 1, "Failed", ERROR,
            finished="2026-11-25T04:01:01Z")]})
    st = json.loads(k8s(tmp_path, api, certs, "status", "--json",
                        "kubernetes://trun/default:echo-x").out)
    assert st["structured_error_msg"] == "Terminated: last log lines", st


def test_log_follows_the_pod_log_stream(tmp_path, api, certs):
    state = {"phase": "Running"}
    api.route("GET", r"/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs/echo-x",
              lambda h, m, b: h.reply(200, volcano_job("echo-x", state["phase"])))
    api.route("GET", r"/api/v1/namespaces/default/pods\?labelSelector=.*",
              lambda h, m, b: h.reply(200, {"items": [
                  pod("echo-x-echo-0-0", 0, "Succeeded" if state["phase"] == "Completed" else "Running"),
                  pod("echo-x-echo-1-0", 1, "Running")]}))

    def follow(h, m, body):
        assert "follow=true" in h.path and "container=echo-0" in h.path
        start_stream(h, "text/plain")
        for i in range(3):
            h.wfile.write(f"line {i}\n".encode())
            h.wfile.flush()
            time.sleep(0.3)
        state["phase"] = "Completed"
        h.close_connection = True

    api.route("GET", r"/api/v1/namespaces/default/pods/echo-x-echo-0-0/log\?.*", follow)
    r = k8s(tmp_path, api, certs, "log", "--tail", "kubernetes://trun/default:echo-x/echo/0")
    assert r.returncode == 0, r.err
    assert [l.split(" ", 1)[1] for l in r.out.splitlines()] == ["line 0", "line 1", "line 2"], r.out
    r = k8s(tmp_path, api, certs, "log", "--streams", "stderr", "kubernetes://trun/default:echo-x/echo/0")
    assert r.returncode == 2 and "one log per container" in r.err, r.err


def test_log_of_a_pod_that_is_gone_is_404(tmp_path, api, certs):
    api.answer("GET", r"/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs/echo-x", 200,
               volcano_job("echo-x", "Running"))
    api.answer("GET", r"/api/v1/namespaces/default/pods\?labelSelector=.*", 200,
               {"items": [pod("echo-x-echo-0-0", 0, "Running")]})
    api.answer("GET", r"/api/v1/namespaces/default/pods/echo-x-echo-0-0/log\?.*", 404,
               status_body(404, "NotFound", 'pods "echo-x-echo-0-0" not found'))
    r = k8s(tmp_path, api, certs, "log", "kubernetes://trun/default:echo-x/echo/0")
    assert r.returncode == 2, r.err
    assert 'pods "echo-x-echo-0-0" not found' in r.err, r.err


def test_cancel_aborts_and_delete_deletes_a_volcano_job_as_torchx(tmp_path, api, certs):
    job = r"/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs/echo-x"
    api.answer("GET", job, 200, volcano_job("echo-x", "Running"))
    api.answer("GET", r"/api/v1/namespaces/default/pods\?labelSelector=.*", 200, {"items": []})
    api.route("PATCH", job + "/status",
              lambda h, m, b: h.reply(200, volcano_job("echo-x", "Aborted")))
    r = k8s(tmp_path, api, certs, "cancel", "kubernetes://trun/default:echo-x")
    assert r.returncode == 0, r.err
    patch = [q for q in api.requests if q["method"] == "PATCH"][0]
    assert patch["type"] == "application/merge-patch+json"
    assert json.loads(patch["body"]) == {"status": {"state": {"phase": "Aborted"}}}
    assert not any(q["method"] == "DELETE" for q in api.requests)

    # TorchX's delete: the (aborted) Volcano Job itself goes, its pods with
    # it, and the job token's Secret; then no scheduler call knows the app.
    def deleted(h, m, b):
        api.answer("GET", job, 404,
                   status_body(404, "NotFound", 'jobs.batch.volcano.sh "echo-x" not found'))
        h.reply(200, {"kind": "Status", "status": "Success"})
    api.answer("GET", job, 200, volcano_job("echo-x", "Aborted"))
    api.route("DELETE", job, deleted)
    api.answer("DELETE", r"/api/v1/namespaces/default/secrets/echo-x", 200, {"kind": "Status"})
    r = k8s(tmp_path, api, certs, "delete", "kubernetes://trun/default:echo-x")
    assert r.returncode == 0, r.err
    deletes = [q for q in api.requests if q["method"] == "DELETE"]
    assert [d["path"] for d in deletes] == [job, "/api/v1/namespaces/default/secrets/echo-x"]
    assert json.loads(deletes[0]["body"])["propagationPolicy"] == "Foreground"
    r = k8s(tmp_path, api, certs, "status", "kubernetes://trun/default:echo-x")
    assert r.returncode == 2 and "echo-x" in r.err, r.err


def test_cancel_deletes_plain_jobs_with_their_pods(tmp_path, api, certs):
    job = {"metadata": {"name": "echo-x-echo", "labels": {"app.kubernetes.io/instance": "echo-x"}},
           "status": {"ready": 1}}
    api.answer("GET", r"/apis/batch/v1/namespaces/default/jobs\?labelSelector=.*", 200, {"items": [job]})
    api.answer("DELETE", r"/apis/batch/v1/namespaces/default/jobs/echo-x-echo", 200, {"kind": "Status"})
    api.answer("DELETE", r"/api/v1/namespaces/default/services/echo-x", 200, {"kind": "Status"})
    api.answer("DELETE", r"/api/v1/namespaces/default/secrets/echo-x", 200, {"kind": "Status"})
    r = k8s(tmp_path, api, certs, "cancel", "kubernetes://trun/default:echo-x")
    assert r.returncode == 0, r.err
    deletes = [q for q in api.requests if q["method"] == "DELETE"]
    assert [d["path"] for d in deletes] == ["/apis/batch/v1/namespaces/default/jobs/echo-x-echo",
                                            "/api/v1/namespaces/default/services/echo-x",
                                            "/api/v1/namespaces/default/secrets/echo-x"]
    assert json.loads(deletes[0]["body"])["propagationPolicy"] == "Foreground"


def test_list_shows_every_workload_and_skips_missing_add_ons(tmp_path, api, certs):
    api.answer("GET", r"/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs", 200,
               {"items": [volcano_job("echo-a", "Completed")]})
    job = {"metadata": {"name": "ddp-b-trainer", "creationTimestamp": "2026-11-25T05:00:00Z",
                        "labels": {"app.kubernetes.io/instance": "ddp-b", "torchx.pytorch.org/app-name": "ddp"}},
           "status": {"conditions": [{"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"}]}}
    api.answer("GET", r"/apis/batch/v1/namespaces/default/jobs\?labelSelector=.*", 200, {"items": [job]})
    r = k8s(tmp_path, api, certs, "list", "-s", "kubernetes")
    assert r.returncode == 0, r.err
    rows = [l.split() for l in r.out.splitlines()[1:] if l.strip() and not l.startswith("-")]
    assert rows[0][:3] == ["kubernetes://trun/default:echo-a", "echo", "SUCCEEDED"], r.out
    assert rows[1][:3] == ["kubernetes://trun/default:ddp-b", "ddp", "FAILED"], r.out


def test_status_of_a_jobset_and_of_plain_jobs(tmp_path, api, certs):
    app = {"name": "ddp", "roles": [{"name": "trainer", "image": "i", "entrypoint": "e",
                                     "num_replicas": 2}]}
    meta = {"name": "ddp-x", "creationTimestamp": "2026-11-25T04:00:00Z",
            "labels": {"app.kubernetes.io/instance": "ddp-x"},
            "annotations": {"trun.pytorch.org/app-def": json.dumps(app)}}
    jobset = {"kind": "JobSet", "metadata": meta,
              "status": {"restarts": 2, "replicatedJobsStatus": [{"name": "trainer", "ready": 2}]}}
    api.answer("GET", r"/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/ddp-x", 200, jobset)

    def jpod(k, phase):
        return {"metadata": {"name": f"ddp-x-trainer-0-{k}-abcde", "creationTimestamp": "2026-11-25T04:00:01Z",
                             "labels": {"torchx.pytorch.org/role-index": "0",
                                        "batch.kubernetes.io/job-completion-index": str(k)}},
                "spec": {"containers": [{"name": "trainer"}], "hostname": f"ddp-x-trainer-0-{k}",
                         "subdomain": "ddp-x"},
                "status": {"phase": phase}}

    api.answer("GET", r"/api/v1/namespaces/default/pods\?labelSelector=.*", 200,
               {"items": [jpod(0, "Running"), jpod(1, "Pending")]})
    r = k8s(tmp_path, api, certs, "status", "--json", "kubernetes://trun/default:ddp-x")
    assert r.returncode == 0, r.err
    st = json.loads(r.out)
    assert st["state"] == "RUNNING" and st["num_restarts"] == 2, st
    assert [x["state"] for x in st["roles"][0]["replicas"]] == [3, 2]
    assert st["roles"][0]["replicas"][0]["hostname"] == "ddp-x-trainer-0-0.ddp-x"

    jobset["status"]["conditions"] = [{"type": "Completed", "status": "True", "message": "jobs done"}]
    r = k8s(tmp_path, api, certs, "status", "--json", "kubernetes://trun/default:ddp-x")
    assert json.loads(r.out)["state"] == "SUCCEEDED", r.out + r.err


def test_submitting_a_jobset_where_there_is_none_says_what_to_do(tmp_path, api, certs):
    secrets(api)
    r = k8s(tmp_path, api, certs, "run", "-s", "kubernetes", "-cfg", "workload=jobset", "utils.echo")
    assert r.returncode == 2, r.err
    assert "the cluster has no JobSet (jobset.x-k8s.io/v1alpha2): install JobSet" in r.err, r.err


def test_log_tail_watches_for_the_pod_to_start(tmp_path, api, certs):
    state = {"pod": "Pending", "app": "Pending"}
    api.route("GET", r"/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs/echo-x",
              lambda h, m, b: h.reply(200, volcano_job("echo-x", state["app"])))
    api.route("GET", r"/api/v1/namespaces/default/pods\?labelSelector=[^&]*",
              lambda h, m, b: h.reply(200, {"metadata": {"resourceVersion": "100"},
                                            "items": [pod("echo-x-echo-0-0", 0, state["pod"])]}))

    def watch(h, m, body):
        assert "watch=true" in h.path and "resourceVersion=100" in h.path
        start_stream(h, "application/json")
        # An unrelated replica first, then this one starting.
        for event in ({"type": "MODIFIED", "object": pod("echo-x-echo-1-0", 1, "Running")},
                      {"type": "MODIFIED", "object": pod("echo-x-echo-0-0", 0, "Running")}):
            time.sleep(0.3)
            if event["object"]["metadata"]["name"] == "echo-x-echo-0-0":
                state["pod"] = state["app"] = "Running"
            h.wfile.write((json.dumps(event) + "\n").encode())
            h.wfile.flush()
        time.sleep(0.5)
        h.close_connection = True

    def logs(h, m, body):
        state["app"] = "Completed"
        h.reply(200, b"started\n")

    api.route("GET", r"/api/v1/namespaces/default/pods\?labelSelector=.*&watch=true.*", watch)
    api.route("GET", r"/api/v1/namespaces/default/pods/echo-x-echo-0-0/log\?.*", logs)
    r = k8s(tmp_path, api, certs, "log", "--tail", "kubernetes://trun/default:echo-x/echo/0")
    assert r.returncode == 0, r.err
    assert r.out.splitlines() == ["echo/0 started"], r.out
    assert any("watch=true" in q["path"] for q in api.requests)


def test_run_wait_follows_the_app_to_its_end(tmp_path, api, certs):
    """`run --wait` submits, then polls status until the Volcano Job completes."""
    polls = {"n": 0}

    def job(h, m, body):
        polls["n"] += 1
        name = m.group(1)
        h.reply(200, volcano_job(name, "Running" if polls["n"] < 3 else "Completed"))

    secrets(api)
    api.route("POST", r"/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs(\?dryRun=All)?", created)
    api.route("GET", r"/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs/([a-z0-9-]+)", job)
    api.answer("GET", r"/api/v1/namespaces/default/pods\?labelSelector=.*", 200, {"items": []})
    r = k8s(tmp_path, api, certs, "run", "-s", "kubernetes", "--wait", "-cfg", "queue=default",
            "utils.echo", "--msg", "hi")
    assert r.returncode == 0, r.err
    assert HANDLE.search(r.out), r.out
    assert polls["n"] >= 3


@pytest.mark.parametrize("has_jobset", [True, False])
def test_workload_auto_is_a_jobset_where_the_cluster_has_one(tmp_path, api, certs, has_jobset):
    if has_jobset:
        api.answer("GET", r"/apis/jobset.x-k8s.io/v1alpha2", 200,
                   {"kind": "APIResourceList", "groupVersion": "jobset.x-k8s.io/v1alpha2"})
        api.route("POST", r"/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets(\?dryRun=All)?", created)
    secrets(api)
    api.route("POST", r"/api/v1/namespaces/default/services(\?dryRun=All)?", created)
    api.route("POST", r"/apis/batch/v1/namespaces/default/jobs(\?dryRun=All)?", created)
    r = k8s(tmp_path, api, certs, "run", "-s", "kubernetes", "-cfg", "workload=auto,validate_spec=false",
            "utils.echo")
    assert r.returncode == 0, r.err
    posts = [q["path"] for q in api.requests if q["method"] == "POST"]
    name = HANDLE.search(r.out).group(1).split(":")[1]
    owner = json.loads(api.requests[-1]["body"])["metadata"]["ownerReferences"][0]
    if has_jobset:
        assert posts == ["/api/v1/namespaces/default/secrets",
                         "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"]
        assert (owner["apiVersion"], owner["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    else:
        assert posts == ["/api/v1/namespaces/default/secrets", "/api/v1/namespaces/default/services",
                         "/apis/batch/v1/namespaces/default/jobs"]
        assert json.loads(api.requests[-2]["body"])["metadata"]["name"] == f"{name}-echo"
        assert (owner["apiVersion"], owner["kind"]) == ("v1", "Service")
    assert owner["name"] == name


JOB_TOKEN = "f" * 24 + "0123456789abcdef0123456789abcdef0123456789"


def test_the_job_token_reaches_the_pods_only_through_a_secret(tmp_path, api, certs):
    """The submitter's TRUN_JOB_TOKEN is the Secret's, and in no other
    request, no pod spec and no output; the pods read it from the Secret."""
    secrets(api)
    api.route("POST", r"/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets(\?dryRun=All)?", created)
    r = k8s(tmp_path, api, certs, "run", "-s", "kubernetes", "-cfg", "workload=jobset",
            "dist.ddp", "-j", "2x1", "--script", "train.py", TRUN_JOB_TOKEN=JOB_TOKEN)
    assert r.returncode == 0, r.err
    name = HANDLE.search(r.out).group(1).split(":")[1]
    posted = [q for q in api.requests if q["path"].startswith("/api/v1/namespaces/default/secrets")
              and q["method"] == "POST"]
    assert len(posted) == 2  # the check (dryRun=All) and the create
    for q in posted:
        secret = json.loads(q["body"])
        assert secret["metadata"]["name"] == name
        assert secret["stringData"] == {"job-token": JOB_TOKEN}
    others = [q for q in api.requests if q not in posted]
    assert others and all(JOB_TOKEN not in q["body"] and JOB_TOKEN not in q["path"] for q in others)
    jobset = json.loads(others[-2]["body"])
    assert jobset["kind"] == "JobSet"
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    env = pod["spec"]["containers"][0]["env"]
    assert {"name": "TRUN_JOB_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": name, "key": "job-token"}}} in env
    assert JOB_TOKEN not in r.out + r.err


def test_without_a_token_each_app_gets_its_own(tmp_path, api, certs):
    secrets(api)
    api.route("POST", r"/apis/batch/v1/namespaces/default/jobs(\?dryRun=All)?", created)
    api.route("POST", r"/api/v1/namespaces/default/services(\?dryRun=All)?", created)
    e = base_env(HOME=tmp_path, TRUNCONFIG="", KUBECONFIG=kubeconfig(tmp_path, api.port, certs))
    e.pop("TRUN_JOB_TOKEN", None)
    tokens = []
    for _ in range(2):
        r = trun("run", "-s", "kubernetes", "-cfg", "workload=job,validate_spec=false", "utils.echo",
                 env=e, cwd=tmp_path)
        assert r.returncode == 0, r.err
        secret = json.loads([q for q in api.requests if q["method"] == "POST"][-3]["body"])
        assert secret["kind"] == "Secret"
        tokens.append(secret["stringData"]["job-token"])
        assert tokens[-1] not in r.out + r.err
    assert all(re.fullmatch(r"[0-9a-f]{64}", t) for t in tokens) and tokens[0] != tokens[1], tokens


def test_an_unowned_secret_is_a_warning_not_a_failure(tmp_path, api, certs):
    api.route("POST", r"/api/v1/namespaces/default/secrets(\?dryRun=All)?", created)
    api.answer("PATCH", r"/api/v1/namespaces/default/secrets/.*", 403,
               status_body(403, "Forbidden", 'secrets "x" is forbidden: User "bob" cannot patch'))
    api.route("POST", r"/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs(\?dryRun=All)?", created)
    r = k8s(tmp_path, api, certs, "run", "-s", "kubernetes", "-cfg", "queue=default", "utils.echo",
            TRUN_JOB_TOKEN=JOB_TOKEN)
    assert r.returncode == 0, r.err
    name = HANDLE.search(r.out).group(1).split(":")[1]
    assert f"the Secret {name} (the job token) could not be made a part of Job {name}" in r.err, r.err
    assert f"kubectl -n default delete secret {name}" in r.err and "forbidden" in r.err, r.err
    assert JOB_TOKEN not in r.out + r.err
    assert not any(q["method"] == "DELETE" for q in api.requests)


def test_dryrun_never_shows_the_submitters_token(tmp_path):
    e = base_env(HOME=tmp_path, KUBECONFIG="", TRUNCONFIG="", TRUN_JOB_TOKEN=JOB_TOKEN)
    for workload in ("volcano", "jobset", "job"):
        for json_out in ([], ["--json"]):
            r = trun("run", "-s", "kubernetes", "--dryrun", *json_out, "-cfg",
                     f"queue=default,workload={workload}", "dist.ddp", "-j", "2x1", "--script",
                     "train.py", env=e, cwd=tmp_path)
            assert r.returncode == 0, r.err
            assert JOB_TOKEN not in r.out + r.err
            # A stand-in of its own, so that `kubectl apply -f -` works.
            assert re.search(r"job-token.{1,4}[0-9a-f]{64}", r.out), r.out


PLUGIN = ROOT / "tests" / "fixtures" / "kube_exec_plugin.py"
EXEC_V1 = "client.authentication.k8s.io/v1"


def exec_user(log, **plugin_env):
    """A kubeconfig user whose credential comes from the stand-in plug-in."""
    env = [{"name": "PLUGIN_LOG", "value": str(log)}]
    env += [{"name": k, "value": v} for k, v in plugin_env.items()]
    return {"exec": {"apiVersion": plugin_env.get("PLUGIN_API_VERSION", EXEC_V1),
                     "command": sys.executable, "args": [str(PLUGIN), "--region", "lab"],
                     "env": env, "interactiveMode": "Never", "provideClusterInfo": True,
                     "installHint": "install the stand-in from tests/fixtures"}}


def plugin_runs(log):
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def job_routes(api):
    secrets(api)
    api.route("POST", r"/api/v1/namespaces/default/services(\?dryRun=All)?", created)
    api.route("POST", r"/apis/batch/v1/namespaces/default/jobs(\?dryRun=All)?", created)


@pytest.mark.parametrize("expires, runs", [("2999-01-01T00:00:00Z", 1),
                                           ("2000-01-01T00:00:00+02:00", 7)])
def test_exec_plugin_token_is_kept_until_it_expires(tmp_path, api, certs, expires, runs):
    import base64
    job_routes(api)
    log = tmp_path / "plugin.log"
    r = k8s(tmp_path, api, certs, "run", "-s", "kubernetes", "-cfg", "workload=job", "utils.echo",
            user=exec_user(log, PLUGIN_TOKEN="from-plugin", PLUGIN_EXPIRES=expires))
    assert r.returncode == 0, r.err
    assert len(api.requests) == 7, api.requests
    assert all(q["auth"] == "Bearer from-plugin" for q in api.requests), api.requests
    # Run once and kept, or (expired when given) once per request.
    seen = plugin_runs(log)
    assert len(seen) == runs, seen
    assert seen[0]["args"] == ["--region", "lab"]
    ca = base64.b64encode((certs / "ca.pem").read_bytes()).decode()
    assert seen[0]["info"] == {"kind": "ExecCredential", "apiVersion": EXEC_V1, "spec": {
        "cluster": {"server": f"https://127.0.0.1:{api.port}", "certificate-authority-data": ca,
                    "config": None},
        "interactive": False}}


def test_exec_plugin_client_certificate_v1beta1(tmp_path, certs):
    a = Api(certs, client_ca=True)
    try:
        secrets(a)
        a.route("POST", r"/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs(\?dryRun=All)?",
                created)
        log = tmp_path / "plugin.log"
        user = exec_user(log, PLUGIN_API_VERSION="client.authentication.k8s.io/v1beta1",
                         PLUGIN_GIVES="cert", PLUGIN_CERT=str(certs / "client.pem"),
                         PLUGIN_KEY=str(certs / "client.key"))
        del user["exec"]["interactiveMode"]  # v1beta1 may leave it out
        r = k8s(tmp_path, a, certs, "run", "-s", "kubernetes", "-cfg", "queue=default",
                "utils.echo", user=user)
        assert r.returncode == 0, r.err
        assert a.requests and all(q["auth"] is None for q in a.requests), a.requests
        assert len(plugin_runs(log)) == 1
    finally:
        a.close()


def test_exec_plugin_is_asked_again_after_a_401(tmp_path, api, certs):
    """A cached token the server no longer takes: the plug-in runs again and
    the request is sent once more with the new one."""
    def only_second(h, m, body):
        if h.headers.get("Authorization") != "Bearer tok-2":
            return h.reply(401, status_body(401, "Unauthorized", "Unauthorized"))
        return created(h, m, body)
    job_routes(api)
    api.route("POST", r"/api/v1/namespaces/default/secrets\?dryRun=All", only_second)
    log = tmp_path / "plugin.log"
    r = k8s(tmp_path, api, certs, "run", "-s", "kubernetes", "-cfg", "workload=job", "utils.echo",
            user=exec_user(log, PLUGIN_TOKEN="tok", PLUGIN_NUMBERED="1"))
    assert r.returncode == 0, r.err
    assert [q["auth"] for q in api.requests[:2]] == ["Bearer tok-1", "Bearer tok-2"]
    assert all(q["auth"] == "Bearer tok-2" for q in api.requests[1:]), api.requests
    assert len(plugin_runs(log)) == 2


@pytest.mark.parametrize("change, rc, says", [
    (lambda u: u["exec"].update(interactiveMode="Always"), 2,
     "interactiveMode is Always, but trun runs the plug-in without a terminal; set "
     "interactiveMode: IfAvailable (or Never)"),
    (lambda u: u["exec"].update(command="/nonexistent/login", args=[]), 3,
     "cannot be run: /nonexistent/login is not an executable file\n"
     "trun: error: install the stand-in from tests/fixtures"),
    (lambda u: u["exec"]["env"].append({"name": "PLUGIN_EXIT", "value": "5"}), 3,
     "failed (exit code 5); run it by hand"),
    (lambda u: u["exec"]["env"].append({"name": "PLUGIN_API_VERSION",
                                        "value": "client.authentication.k8s.io/v1beta1"}), 3,
     "but the kubeconfig asks for an ExecCredential of client.authentication.k8s.io/v1"),
])
def test_exec_plugin_problems_name_the_fix(tmp_path, api, certs, change, rc, says):
    job_routes(api)
    user = exec_user(tmp_path / "plugin.log", PLUGIN_TOKEN="t")
    change(user)
    r = k8s(tmp_path, api, certs, "run", "-s", "kubernetes", "-cfg", "workload=job", "utils.echo",
            user=user)
    assert r.returncode == rc, r.err
    assert says in r.err, r.err
    assert not api.requests


def test_manifests_only_pass_a_server_side_dry_run(tmp_path, api, certs):
    """What `--dryrun --manifests | kubectl apply --dry-run=server -f -` does:
    each object POSTed to its collection with dryRun=All, every one accepted."""
    import http.client
    import yaml
    collections = {("v1", "Secret"): "/api/v1/namespaces/default/secrets",
                   ("v1", "Service"): "/api/v1/namespaces/default/services",
                   ("batch/v1", "Job"): "/apis/batch/v1/namespaces/default/jobs"}
    for path in collections.values():
        api.route("POST", re.escape(path) + r"\?dryRun=All", created)
    r = trun("run", "-s", "kubernetes", "--dryrun", "--manifests", "-cfg", "workload=job",
             "dist.ddp", "-j", "2x1", "--script", "train.py",
             env=base_env(HOME=tmp_path, KUBECONFIG="", TRUNCONFIG=""), cwd=tmp_path)
    assert r.returncode == 0, r.err
    objects = list(yaml.safe_load_all(r.out))
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    for obj in objects:
        path = collections[(obj["apiVersion"], obj["kind"])] + "?dryRun=All"
        conn = http.client.HTTPSConnection("127.0.0.1", api.port, context=ctx, timeout=30)
        conn.request("POST", path, json.dumps(obj), {"Content-Type": "application/json",
                                                     "Authorization": f"Bearer {TOKEN}"})
        reply = conn.getresponse()
        assert reply.status == 201, (path, reply.read())
        assert json.loads(reply.read())["metadata"]["name"] == obj["metadata"]["name"]
        conn.close()
    assert [q["path"] for q in api.requests] == [
        collections[(o["apiVersion"], o["kind"])] + "?dryRun=All" for o in objects]
    assert [o["kind"] for o in objects] == ["Secret", "Service", "Job"]
